// The baseline to beat: oneDNN's matmul on the shapes of BM_GemmBf16 (K = N = 2048), run on
// one thread like the kernels it is compared with. BF16 weights first, as mxserve stores
// them; where oneDNN has no BF16 matmul for the CPU (it needs AVX-512) that row says so and
// the FP32 matmul, the fastest path oneDNN offers there, stands in.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

namespace mx {
namespace {

void BM_OnednnMatmul(benchmark::State& state, dnnl::memory::data_type dt) {
  omp_set_num_threads(1);
  using dnnl::memory;
  const int64_t m = state.range(0), k = 2048, n = 2048;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const memory::desc a({m, k}, dt, memory::format_tag::ab);
  const memory::desc b({k, n}, dt, memory::format_tag::any);
  const memory::desc c({m, n}, memory::data_type::f32, memory::format_tag::ab);
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), eng);
  } catch (const dnnl::error&) {
    state.SkipWithError("oneDNN has no matmul for this data type on this CPU");
    return;
  }
  memory src(pd.src_desc(), eng), wei(pd.weights_desc(), eng), dst(pd.dst_desc(), eng);
  const dnnl::matmul mm(pd);
  for (auto _ : state) {
    mm.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
    strm.wait();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(static_cast<double>(2 * m * n * k),
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.SetLabel(pd.impl_info_str());
}
BENCHMARK_CAPTURE(BM_OnednnMatmul, bf16, dnnl::memory::data_type::bf16)
    ->Arg(1)
    ->Arg(4)
    ->Arg(8)
    ->Arg(64);
BENCHMARK_CAPTURE(BM_OnednnMatmul, f32, dnnl::memory::data_type::f32)
    ->Arg(1)
    ->Arg(4)
    ->Arg(8)
    ->Arg(64);

}  // namespace
}  // namespace mx

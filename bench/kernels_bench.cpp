// Kernel microbenchmarks per ISA variant: the BF16 GEMM at decode and prefill row counts
// (GFLOP/s) and attention over a paged cache (positions/s), each variant beside the scalar
// reference in the same run.
#include <benchmark/benchmark.h>

#include <vector>

#include "formats/half.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"

namespace mx {
namespace {

std::vector<float> values(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = (static_cast<float>(seed >> 8) / 16777216.0f - 0.5f);
  }
  return v;
}

void BM_GemmBf16(benchmark::State& state, IsaLevel isa) {
  const GemmKernels* k = gemm_kernels_for(isa);
  if (k == nullptr) {
    state.SkipWithError("ISA not available");
    return;
  }
  const int64_t m = state.range(0), kd = 2048, n = 2048;
  const auto x = values(static_cast<size_t>(m * kd), 1);
  const auto wf = values(static_cast<size_t>(n * kd), 2);
  std::vector<uint16_t> w(wf.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = float_to_bf16(wf[i]);
  std::vector<uint16_t> packed(static_cast<size_t>(bf16_panel_elems(n, kd)));
  pack_bf16_panels(w.data(), n, kd, kd, packed.data());
  std::vector<float> y(static_cast<size_t>(m * n));
  const GemmBf16Args a{x.data(), packed.data(), y.data(), m, kd, kd, n};
  for (auto _ : state) {
    k->bf16(a, 0, n);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(static_cast<double>(2 * m * n * kd),
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.SetBytesProcessed(state.iterations() * n * kd * 2);
}
BENCHMARK_CAPTURE(BM_GemmBf16, scalar, IsaLevel::kScalar)->Arg(1)->Arg(8);
BENCHMARK_CAPTURE(BM_GemmBf16, avx2, IsaLevel::kAvx2)->Arg(1)->Arg(4)->Arg(8)->Arg(64);

void BM_AttentionHead(benchmark::State& state, IsaLevel isa) {
  const AttentionKernels* k = attention_kernels_for(isa);
  if (k == nullptr) {
    state.SkipWithError("ISA not available");
    return;
  }
  const int64_t len = state.range(0), d = 128, bs = 16, ld = 4 * d;
  const int64_t nblk = (len + bs - 1) / bs;
  const auto kv = values(static_cast<size_t>(2 * nblk * bs * ld), 3);
  const auto q = values(static_cast<size_t>(d), 4);
  std::vector<const float*> kb(static_cast<size_t>(nblk)), vb(kb.size());
  for (int64_t b = 0; b < nblk; ++b) {
    kb[static_cast<size_t>(b)] = kv.data() + (2 * b) * bs * ld;
    vb[static_cast<size_t>(b)] = kv.data() + (2 * b + 1) * bs * ld;
  }
  std::vector<float> scores(static_cast<size_t>(len)), out(static_cast<size_t>(d));
  for (auto _ : state) {
    k->head_paged(q.data(), kb.data(), vb.data(), bs, len, ld, d, 0.088f, scores.data(),
                  out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * len);
}
BENCHMARK_CAPTURE(BM_AttentionHead, scalar, IsaLevel::kScalar)->Arg(160)->Arg(2048);
BENCHMARK_CAPTURE(BM_AttentionHead, avx2, IsaLevel::kAvx2)->Arg(160)->Arg(2048);

}  // namespace
}  // namespace mx

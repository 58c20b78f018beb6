// The integer GEMM over ggml blocks (kernels/ggml_dot.h) on one thread: rows as stored against
// the table's panels (where it has them), at decode and prefill row counts, in GOP/s (two
// operations a product). The shape is a Qwen3-30B-A3B expert's gate and up (1536 x 2048).
// BM_GgmlGemvDram: one activation row against an lm_head's panels on two threads, beside a
// two-thread read of the same bytes, as kernels_bench.cpp's BM_GemvDram does for MX weights.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/thread_pool.h"
#include "formats/half.h"
#include "kernels/ggml_dot.h"

namespace mx {
namespace {

constexpr int64_t kK = 2048;

// Random blocks with small finite FP16 scales at the offsets ggml's structs keep them.
std::vector<uint8_t> random_rows(GgmlType t, int64_t n, int64_t k) {
  std::mt19937 rng(3);
  std::vector<uint8_t> w(static_cast<size_t>(n * ggml_row_bytes(t, k)));
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  const int64_t bb = ggml_type_info(t).block_bytes;
  const std::vector<int64_t> fp16_at = t == GgmlType::kQ4_K    ? std::vector<int64_t>{0, 2}
                                       : t == GgmlType::kQ6_K  ? std::vector<int64_t>{208}
                                       : t == GgmlType::kMXFP4 ? std::vector<int64_t>{}
                                                               : std::vector<int64_t>{0};
  for (size_t b = 0; b + static_cast<size_t>(bb) <= w.size(); b += static_cast<size_t>(bb)) {
    for (int64_t off : fp16_at) {
      const uint16_t h = float_to_fp16(0.001f * static_cast<float>(rng() % 100 + 1));
      std::memcpy(&w[b + static_cast<size_t>(off)], &h, 2);
    }
  }
  return w;
}

void BM_GgmlDot(benchmark::State& state, GgmlType t, bool panels) {
  const GgmlDotKernels& kern = ggml_dot_kernels();
  const int panel = panels ? kern.panel_rows(t) : 0;
  if (panels && panel == 0) {
    state.SkipWithError("no panels for this type in this table");
    return;
  }
  const int64_t m = state.range(0), kN = state.range(1);
  const std::vector<uint8_t> rows = random_rows(t, kN, kK);
  std::vector<uint8_t> w = rows;
  if (panel != 0) {
    w.resize(static_cast<size_t>(ggml_panel_bytes(t, panel, kN, kK)));
    kern.repack(t, rows.data(), ggml_row_bytes(t, kK), kN, kK, w.data());
  }
  const GgmlActType at = ggml_act_type(t);
  const int64_t stride = ggml_act_row_bytes(at, kK);
  std::vector<uint8_t> xq(static_cast<size_t>(m * stride));
  std::mt19937 rng(5);
  std::vector<float> x(static_cast<size_t>(kK));
  for (int64_t i = 0; i < m; ++i) {
    for (auto& v : x) v = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
    kern.quantize(at, x.data(), kK, xq.data() + i * stride);
  }
  std::vector<float> y(static_cast<size_t>(m * kN));
  GgmlDotArgs a{t, w.data(), ggml_row_bytes(t, kK), xq.data(), stride, y.data(), m, kK, kN};
  a.panel = panel;
  for (auto _ : state) {
    kern.gemm(a, 0, kN);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GOP/s"] = benchmark::Counter(static_cast<double>(2 * m * kN * kK),
                                               benchmark::Counter::kIsIterationInvariantRate,
                                               benchmark::Counter::kIs1000);
}

// `of_read`: the GEMV's rate over the plain read's, the kernel's share of its own bandwidth
// roofline (a decode step's lm_head reads these bytes once).
void BM_GgmlGemvDram(benchmark::State& state, GgmlType t) {
  const GgmlDotKernels& kern = ggml_dot_kernels();
  const int panel = kern.panel_rows(t);
  if (panel == 0) {
    state.SkipWithError("no panels for this type in this table");
    return;
  }
  const int64_t n = state.range(0);
  std::vector<uint8_t> w(static_cast<size_t>(ggml_panel_bytes(t, panel, n, kK)));
  {
    const std::vector<uint8_t> rows = random_rows(t, n, kK);
    kern.repack(t, rows.data(), ggml_row_bytes(t, kK), n, kK, w.data());
  }
  const GgmlActType at = ggml_act_type(t);
  std::vector<uint8_t> xq(static_cast<size_t>(ggml_act_row_bytes(at, kK)));
  std::vector<float> x(static_cast<size_t>(kK), 0.25f), y(static_cast<size_t>(n));
  kern.quantize(at, x.data(), kK, xq.data());
  GgmlDotArgs a{
      t,  w.data(), ggml_row_bytes(t, kK), xq.data(), static_cast<int64_t>(xq.size()), y.data(), 1,
      kK, n};
  a.panel = panel;
  ThreadPool pool(2);
  const int64_t units = n / panel, unit_bytes = static_cast<int64_t>(w.size()) / units;
  uint64_t sink[2] = {0, 0};
  const auto [read_s, gemv_s] = time_alternating(
      state, pool, units,
      [&](int64_t b, int64_t e, int th) {
        sink[th] +=
            read_words(w.data() + b * unit_bytes, static_cast<size_t>((e - b) * unit_bytes));
      },
      [&](int64_t b, int64_t e, int) { kern.gemm(a, b * panel, e * panel); });
  benchmark::DoNotOptimize(sink);
  benchmark::DoNotOptimize(y.data());
  const double bytes = static_cast<double>(w.size()) * static_cast<double>(state.iterations());
  state.counters["gemv_GB/s"] = bytes / gemv_s / 1e9;
  state.counters["read_GB/s"] = bytes / read_s / 1e9;
  state.counters["of_read"] = read_s / gemv_s;
}
BENCHMARK_CAPTURE(BM_GgmlGemvDram, q8_0, GgmlType::kQ8_0)
    ->Arg(151936)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GgmlGemvDram, q6_k, GgmlType::kQ6_K)
    ->Arg(151936)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GgmlGemvDram, q4_k, GgmlType::kQ4_K)
    ->Arg(151936)
    ->Unit(benchmark::kMillisecond);

void args(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 8, 32, 128}) b->Args({m, 1536});
  // Decode against a vocabulary's lm_head: the weights stream from memory, not cache.
  b->Args({1, 151936});
  b->Unit(benchmark::kMicrosecond);
}

BENCHMARK_CAPTURE(BM_GgmlDot, q4_k_rows, GgmlType::kQ4_K, false)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q4_k_panels, GgmlType::kQ4_K, true)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, iq4_xs_rows, GgmlType::kIQ4_XS, false)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, iq4_xs_panels, GgmlType::kIQ4_XS, true)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q4_0_rows, GgmlType::kQ4_0, false)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q4_0_panels, GgmlType::kQ4_0, true)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q4_1_rows, GgmlType::kQ4_1, false)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q4_1_panels, GgmlType::kQ4_1, true)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q5_0_rows, GgmlType::kQ5_0, false)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q5_0_panels, GgmlType::kQ5_0, true)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q5_1_rows, GgmlType::kQ5_1, false)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q5_1_panels, GgmlType::kQ5_1, true)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, iq4_nl_rows, GgmlType::kIQ4_NL, false)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, iq4_nl_panels, GgmlType::kIQ4_NL, true)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q2_k_rows, GgmlType::kQ2_K, false)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q2_k_panels, GgmlType::kQ2_K, true)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q3_k_rows, GgmlType::kQ3_K, false)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q3_k_panels, GgmlType::kQ3_K, true)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q5_k_rows, GgmlType::kQ5_K, false)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q5_k_panels, GgmlType::kQ5_K, true)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q6_k_rows, GgmlType::kQ6_K, false)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q6_k_panels, GgmlType::kQ6_K, true)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q8_0_rows, GgmlType::kQ8_0, false)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q8_0_panels, GgmlType::kQ8_0, true)->Apply(args);

}  // namespace
}  // namespace mx

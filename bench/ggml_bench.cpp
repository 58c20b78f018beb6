// The integer GEMM over ggml blocks (kernels/ggml_dot.h) on one thread: rows as stored against
// the table's panels (where it has them), at decode and prefill row counts, in GOP/s (two
// operations a product). The shape is a Qwen3-30B-A3B expert's gate and up (1536 x 2048).
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

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
BENCHMARK_CAPTURE(BM_GgmlDot, q6_k_rows, GgmlType::kQ6_K, false)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q6_k_panels, GgmlType::kQ6_K, true)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q8_0_rows, GgmlType::kQ8_0, false)->Apply(args);
BENCHMARK_CAPTURE(BM_GgmlDot, q8_0_panels, GgmlType::kQ8_0, true)->Apply(args);

}  // namespace
}  // namespace mx

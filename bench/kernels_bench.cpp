// Kernel microbenchmarks per ISA variant: the BF16 GEMM at decode and prefill row counts
// (GFLOP/s) and attention over a paged cache (positions/s), each variant beside the scalar
// reference in the same run.
#include <benchmark/benchmark.h>

#include <vector>

#include "formats/half.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/mx_gemm.h"
#include "quant/scheme.h"

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
  k->pack(w.data(), n, kd, kd, packed.data());
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
BENCHMARK_CAPTURE(BM_GemmBf16, avx512, IsaLevel::kAvx512)->Arg(1)->Arg(4)->Arg(8)->Arg(64);

// MX GEMM over packed weights, from decoded activations (W4A4: integer activations, the
// int8 kernel); GB/s counts the weight bytes (codes and scales) a decode step streams.
void BM_GemmMx(benchmark::State& state, IsaLevel isa, Scheme scheme) {
  const MxGemmKernels* k = mx_gemm_kernels_for(isa);
  if (k == nullptr) {
    state.SkipWithError("ISA not available");
    return;
  }
  const SchemeInfo& info = scheme_info(scheme);
  const int64_t m = state.range(0), kd = 2048, n = 2048;
  const auto wf = values(static_cast<size_t>(n * kd), 2);
  Tensor wt = Tensor::empty(DType::kF32, {n, kd});
  std::copy(wf.begin(), wf.end(), wt.mutable_data_as<float>());
  auto q = quantize_weight(wt, scheme, ScaleRule::kFloor, "w");
  if (!q.is_ok()) {
    state.SkipWithError("quantization failed");
    return;
  }
  const MxMatrixView wv{info.weight,
                        q->codes.data_as<uint8_t>(),
                        q->scales.data_as<uint8_t>(),
                        info.dual ? q->chunk_scales.data_as<float>() : nullptr,
                        n,
                        kd,
                        q->row_bytes()};
  const MxPanelWeights packed = k->pack(wv);
  const MxPanelView& pv = packed.view;
  const auto x = values(static_cast<size_t>(m * kd), 1);
  std::vector<float> y(static_cast<size_t>(m * n));
  MxGemmArgs a{x.data(), &pv, y.data(), m, kd, n};
  // W4A4 runs its integer kernel on activations quantized to E2M1.
  const bool w4a4 = info.activation == ElemFormat::kE2M1;
  ActRows acts;
  act_rows_init(scheme, kd, ScaleRule::kFloor, &acts);
  acts.resize(m);
  for (int64_t r = 0; r < m; ++r) act_rows_quantize(x.data() + r * kd, r, ScaleRule::kFloor, &acts);
  std::vector<int8_t> xq(static_cast<size_t>(m * kd));
  std::vector<int32_t> xsum(static_cast<size_t>(m * kd / 32));
  std::vector<float> xscale(xsum.size());
  if (w4a4) {
    const MxMatrixView av{acts.format,
                          acts.codes.data(),
                          acts.scales.data(),
                          acts.dual ? acts.chunk_scales.data() : nullptr,
                          m,
                          kd,
                          acts.row_bytes};
    mx_prepare_fp4_activations(av, xq.data(), xsum.data(), xscale.data());
    a = {nullptr, &pv, y.data(), m, kd, n, xq.data(), xsum.data(), xscale.data()};
  }
  // W4A8 runs its integer kernel on 14-bit activations, prepared by its own table.
  const bool w4a8 = !w4a4 && info.weight == ElemFormat::kE2M1;
  std::vector<int16_t> xh(static_cast<size_t>(m * kd));
  std::vector<int8_t> planes(static_cast<size_t>(2 * m * kd));
  if (w4a8) {
    const MxMatrixView av{acts.format, acts.codes.data(), acts.scales.data(), nullptr, m,
                          kd,          acts.row_bytes};
    k->prepare_w4a8(av, xh.data(), planes.data(), xsum.data(), xscale.data());
    a.x = nullptr;
    a.xh = xh.data();
    a.xhb = planes.data();
    a.xsum = xsum.data();
    a.xscale = xscale.data();
  }
  auto* fn = w4a4 ? k->gemm_w4a4 : w4a8 ? k->gemm_w4a8 : k->gemm;
  for (auto _ : state) {
    fn(a, 0, n);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(static_cast<double>(2 * m * n * kd),
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(packed.bytes()));
}
BENCHMARK_CAPTURE(BM_GemmMx, scalar_mxfp8, IsaLevel::kScalar, Scheme::kW8A8Mxfp8)->Arg(1);
BENCHMARK_CAPTURE(BM_GemmMx, avx2_mxfp8, IsaLevel::kAvx2, Scheme::kW8A8Mxfp8)
    ->Arg(1)
    ->Arg(4)
    ->Arg(8)
    ->Arg(64);
BENCHMARK_CAPTURE(BM_GemmMx, avx2_w4a8, IsaLevel::kAvx2, Scheme::kW4A8Mxfp4)
    ->Arg(1)
    ->Arg(4)
    ->Arg(8)
    ->Arg(64);
BENCHMARK_CAPTURE(BM_GemmMx, avx2_w4a4, IsaLevel::kAvx2, Scheme::kW4A4Mxfp4)
    ->Arg(1)
    ->Arg(4)
    ->Arg(8)
    ->Arg(64);
BENCHMARK_CAPTURE(BM_GemmMx, avx2_mxfp4_dual, IsaLevel::kAvx2, Scheme::kW4A4Mxfp4Dual)->Arg(1);
// Skipped, saying so, where the processor lacks AVX-512.
BENCHMARK_CAPTURE(BM_GemmMx, avx512_mxfp8, IsaLevel::kAvx512, Scheme::kW8A8Mxfp8)
    ->Arg(1)
    ->Arg(4)
    ->Arg(8)
    ->Arg(64);
BENCHMARK_CAPTURE(BM_GemmMx, avx512_w4a8, IsaLevel::kAvx512, Scheme::kW4A8Mxfp4)
    ->Arg(1)
    ->Arg(4)
    ->Arg(8)
    ->Arg(64);
BENCHMARK_CAPTURE(BM_GemmMx, avx512_w4a4, IsaLevel::kAvx512, Scheme::kW4A4Mxfp4)
    ->Arg(1)
    ->Arg(4)
    ->Arg(8)
    ->Arg(64);
BENCHMARK_CAPTURE(BM_GemmMx, avx512_mxfp4_dual, IsaLevel::kAvx512, Scheme::kW4A4Mxfp4Dual)->Arg(1);

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
BENCHMARK_CAPTURE(BM_AttentionHead, avx512, IsaLevel::kAvx512)->Arg(160)->Arg(2048);

// The bundled model's grouped-query shape (two query heads of 64 per KV head, two KV heads
// per cached row): one (row, KV head) item of a decode step, over an FP32 or a BF16 cache.
void BM_AttentionGroup(benchmark::State& state, IsaLevel isa, bool bf16) {
  const AttentionKernels* k = attention_kernels_for(isa);
  if (k == nullptr) {
    state.SkipWithError("ISA not available");
    return;
  }
  const int64_t len = state.range(0), d = 64, group = 2, bs = 16, ld = 2 * d;
  const int64_t nblk = (len + bs - 1) / bs;
  const auto kv = values(static_cast<size_t>(2 * nblk * bs * ld), 3);
  std::vector<uint16_t> kv16(kv.size());
  for (size_t i = 0; i < kv.size(); ++i) kv16[i] = float_to_bf16(kv[i]);
  const auto q = values(static_cast<size_t>(group * d), 4);
  std::vector<const float*> kb(static_cast<size_t>(nblk)), vb(kb.size());
  std::vector<const uint16_t*> kb16(kb.size()), vb16(kb.size());
  for (int64_t b = 0; b < nblk; ++b) {
    kb[static_cast<size_t>(b)] = kv.data() + (2 * b) * bs * ld;
    vb[static_cast<size_t>(b)] = kv.data() + (2 * b + 1) * bs * ld;
    kb16[static_cast<size_t>(b)] = kv16.data() + (2 * b) * bs * ld;
    vb16[static_cast<size_t>(b)] = kv16.data() + (2 * b + 1) * bs * ld;
  }
  std::vector<float> scores(static_cast<size_t>(group * len)), out(static_cast<size_t>(group * d));
  for (auto _ : state) {
    if (bf16) {
      k->group_paged_bf16(q.data(), group, kb16.data(), vb16.data(), bs, len, ld, d, 0.125f,
                          scores.data(), out.data());
    } else {
      k->group_paged(q.data(), group, kb.data(), vb.data(), bs, len, ld, d, 0.125f, scores.data(),
                     out.data());
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * len);
}
BENCHMARK_CAPTURE(BM_AttentionGroup, scalar, IsaLevel::kScalar, false)->Arg(192);
BENCHMARK_CAPTURE(BM_AttentionGroup, avx2, IsaLevel::kAvx2, false)->Arg(192)->Arg(2048);
BENCHMARK_CAPTURE(BM_AttentionGroup, avx2_bf16, IsaLevel::kAvx2, true)->Arg(192)->Arg(2048);
BENCHMARK_CAPTURE(BM_AttentionGroup, avx512, IsaLevel::kAvx512, false)->Arg(192)->Arg(2048);
BENCHMARK_CAPTURE(BM_AttentionGroup, avx512_bf16, IsaLevel::kAvx512, true)->Arg(192)->Arg(2048);

}  // namespace
}  // namespace mx

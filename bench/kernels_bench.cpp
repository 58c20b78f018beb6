// Kernel microbenchmarks per ISA variant: the BF16 GEMM at decode and prefill row counts
// (GFLOP/s) and attention over a paged cache (positions/s), each variant beside the scalar
// reference in the same run.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <chrono>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "core/thread_pool.h"
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

// Random [n, kd] weights in BF16, packed as table k's kernels read them.
std::vector<uint16_t> bf16_weights(const GemmKernels& k, int64_t n, int64_t kd) {
  const auto wf = values(static_cast<size_t>(n * kd), 2);
  std::vector<uint16_t> w(wf.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = float_to_bf16(wf[i]);
  std::vector<uint16_t> packed(static_cast<size_t>(bf16_panel_elems(n, kd)));
  k.pack(w.data(), n, kd, kd, packed.data());
  return packed;
}

void BM_GemmBf16(benchmark::State& state, IsaLevel isa) {
  const GemmKernels* k = gemm_kernels_for(isa);
  if (k == nullptr) {
    state.SkipWithError("ISA not available");
    return;
  }
  const int64_t m = state.range(0), kd = 2048, n = 2048;
  const auto x = values(static_cast<size_t>(m * kd), 1);
  const std::vector<uint16_t> packed = bf16_weights(*k, n, kd);
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
BENCHMARK_CAPTURE(BM_GemmBf16, avx2, IsaLevel::kAvx2)->Arg(1)->Arg(4)->Arg(8)->Arg(64)->Arg(512);
BENCHMARK_CAPTURE(BM_GemmBf16, avx512, IsaLevel::kAvx512)->Arg(1)->Arg(4)->Arg(8)->Arg(64);

// One MX GEMM problem: packed weights of an [n, 2048] matrix and m rows of activations in the
// form the scheme's kernel reads (W4A4: E2M1 integers; W4A8: its table's 14-bit planes).
struct MxProblem {
  MxPanelWeights packed;
  std::vector<float> x, xd, y;
  std::vector<int8_t> xq, planes;
  std::vector<int16_t> xh;
  std::vector<int32_t> xsum;
  std::vector<float> xscale;
  MxGemmArgs a{};
  void (*fn)(const MxGemmArgs&, int64_t, int64_t) = nullptr;

  // False (with the reason in state) where the ISA is missing or quantization fails.
  bool init(benchmark::State& state, const MxGemmKernels* k, Scheme scheme, int64_t m, int64_t n,
            int64_t kd = 2048) {
    if (k == nullptr) {
      state.SkipWithError("ISA not available");
      return false;
    }
    const SchemeInfo& info = scheme_info(scheme);
    Tensor wt = Tensor::empty(DType::kF32, {n, kd});
    {
      const auto wf = values(static_cast<size_t>(n * kd), 2);
      std::copy(wf.begin(), wf.end(), wt.mutable_data_as<float>());
    }
    auto q = quantize_weight(wt, scheme, ScaleRule::kFloor, "w");
    if (!q.is_ok()) {
      state.SkipWithError("quantization failed");
      return false;
    }
    const MxMatrixView wv{info.weight,
                          q->codes.data_as<uint8_t>(),
                          q->scales.data_as<uint8_t>(),
                          info.dual ? q->chunk_scales.data_as<float>() : nullptr,
                          n,
                          kd,
                          q->row_bytes()};
    packed = k->pack(wv);
    x = values(static_cast<size_t>(m * kd), 1);
    y.assign(static_cast<size_t>(m * n), 0.0f);
    a = {x.data(), &packed.view, y.data(), m, kd, n};
    ActRows acts;
    act_rows_init(RowFormat::mx(scheme), kd, ScaleRule::kFloor, &acts);
    acts.resize(m);
    for (int64_t r = 0; r < m; ++r)
      act_rows_quantize(x.data() + r * kd, r, ScaleRule::kFloor, &acts);
    xsum.resize(static_cast<size_t>(m * kd / 32));
    xscale.resize(xsum.size());
    const int64_t kp = mx_decoded_stride(kd);
    const MxMatrixView av{acts.format,
                          acts.codes.data(),
                          acts.scales.data(),
                          acts.dual ? acts.chunk_scales.data() : nullptr,
                          m,
                          kd,
                          acts.row_bytes};
    if (info.activation == ElemFormat::kE2M1) {
      xq.resize(static_cast<size_t>(m * kp));
      mx_prepare_fp4_activations(av, xq.data(), xsum.data(), xscale.data());
      a = {nullptr, &packed.view, y.data(), m, kp, n, xq.data(), xsum.data(), xscale.data()};
      fn = k->gemm_w4a4;
    } else if (info.weight == ElemFormat::kE2M1) {
      a.ldx = kp;
      xh.resize(static_cast<size_t>(m * kp));
      planes.resize(static_cast<size_t>(2 * m * kp));
      k->prepare_w4a8(av, xh.data(), planes.data(), xsum.data(), xscale.data());
      a.x = nullptr;
      a.xh = xh.data();
      a.xhb = planes.data();
      a.xsum = xsum.data();
      a.xscale = xscale.data();
      fn = k->gemm_w4a8;
    } else {
      // The FP32 path's activations as the product hands them over: decoded E4M3 times the
      // input scale, not arbitrary FP32 values.
      a.ldx = kp;
      xd.resize(static_cast<size_t>(m * kp));
      mx_decode_activations(av, xd.data(), kMxGemmInputScale);
      a.x = xd.data();
      fn = k->gemm;
    }
    return true;
  }
};

// MX GEMM over packed weights on one thread; GB/s counts the weight bytes (codes and scales)
// a decode step streams. A second argument sets the columns: 256 keeps the weights in L2.
void run_gemm_mx(benchmark::State& state, const MxGemmKernels* table, Scheme scheme) {
  MxProblem p;
  const int64_t m = state.range(0), n = state.range(1);
  if (!p.init(state, table, scheme, m, n)) return;
  for (auto _ : state) {
    p.fn(p.a, 0, n);
    benchmark::DoNotOptimize(p.y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(static_cast<double>(2 * m * n * 2048),
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(p.packed.bytes()));
}

void BM_GemmMx(benchmark::State& state, IsaLevel isa, Scheme scheme) {
  run_gemm_mx(state, mx_gemm_kernels_for(isa), scheme);
}

// A table by name, the variant its level passes over included (both AVX-512 E4M3 GEMMs).
void BM_GemmMxVariant(benchmark::State& state, const char* name, Scheme scheme) {
  const MxGemmKernels* table = nullptr;
  for (const MxGemmKernels* t : mx_gemm_kernel_variants()) {
    if (std::string_view(t->name) == name) table = t;
  }
  run_gemm_mx(state, table, scheme);
}

// A one-row GEMV too large for the caches (n x 2048: 65,536, or Qwen3.5's 248,320-row lm_head)
// on two threads, as decode runs lm_head, beside a two-thread read of the same packed bytes in
// every iteration: `of_read` is the GEMV's share of the read rate, the kernel's own bandwidth
// roofline.
void BM_GemvDram(benchmark::State& state, Scheme scheme) {
  MxProblem p;
  const int64_t n = state.range(0);
  if (!p.init(state, &mx_gemm_kernels(), scheme, 1, n)) return;
  ThreadPool pool(2);
  const int64_t panels = mx_panels(n);
  const uint8_t* codes = p.packed.codes.data();
  const size_t per_panel = p.packed.codes.size() / static_cast<size_t>(panels);
  uint64_t sink[2] = {0, 0};
  const auto [read_s, gemv_s] = time_alternating(
      state, pool, panels,
      [&](int64_t b, int64_t e, int t) {
        sink[t] += read_words(codes + b * per_panel, static_cast<size_t>(e - b) * per_panel);
      },
      [&](int64_t b, int64_t e, int) {
        p.fn(p.a, b * kMxPanelCols, std::min(n, e * kMxPanelCols));
      });
  benchmark::DoNotOptimize(sink);
  benchmark::DoNotOptimize(p.y.data());
  const double iters = static_cast<double>(state.iterations());
  const double bytes = static_cast<double>(p.packed.bytes()) * iters;
  state.counters["gemv_GB/s"] = bytes / gemv_s / 1e9;
  state.counters["read_GB/s"] = static_cast<double>(p.packed.codes.size()) * iters / read_s / 1e9;
  state.counters["of_read"] = state.counters["gemv_GB/s"] / state.counters["read_GB/s"];
}

// A prefill-shaped GEMM (512 rows, k x n weights: a 30B-A3B layer's qkv, 2048 x 5120, or its
// o_proj, 4096 x 2048) on two threads through the pool, BF16 and MXFP8 alternating in every
// iteration: `mx_over_bf16` is the ratio of their rates in the same run, which the machine's
// noise moves far less than either rate.
void BM_PrefillGemmPair(benchmark::State& state) {
  const GemmKernels* bk = &gemm_kernels();
  MxProblem p;
  const int64_t m = 512, n = state.range(0), kd = state.range(1);
  if (!p.init(state, &mx_gemm_kernels(), Scheme::kW8A8Mxfp8, m, n, kd)) return;
  const std::vector<uint16_t> packed = bf16_weights(*bk, n, kd);
  std::vector<float> y(static_cast<size_t>(m * n));
  const GemmBf16Args a{p.x.data(), packed.data(), y.data(), m, kd, kd, n};
  ThreadPool pool(2);
  const int64_t panels = mx_panels(n);
  const auto [bf16_s, mx_s] = time_alternating(
      state, pool, panels,
      [&](int64_t b, int64_t e, int) {
        bk->bf16(a, b * kMxPanelCols, std::min(n, e * kMxPanelCols));
      },
      [&](int64_t b, int64_t e, int) {
        p.fn(p.a, b * kMxPanelCols, std::min(n, e * kMxPanelCols));
      });
  benchmark::DoNotOptimize(y.data());
  benchmark::DoNotOptimize(p.y.data());
  const double flops = 2.0 * m * n * kd * static_cast<double>(state.iterations());
  state.counters["bf16_GFLOP/s"] = flops / bf16_s / 1e9;
  state.counters["mxfp8_GFLOP/s"] = flops / mx_s / 1e9;
  state.counters["mx_over_bf16"] = bf16_s / mx_s;
}
BENCHMARK(BM_PrefillGemmPair)
    ->Args({5120, 2048})
    ->Args({2048, 4096})
    ->Unit(benchmark::kMillisecond);

// BM_GemvDram's sizes: n = 65,536, and Qwen3.5's lm_head.
void gemv_dram_sizes(benchmark::internal::Benchmark* b) {
  b->Arg(65536)->Arg(248320)->Unit(benchmark::kMillisecond);
}
BENCHMARK_CAPTURE(BM_GemvDram, mxfp8, Scheme::kW8A8Mxfp8)->Apply(gemv_dram_sizes);
BENCHMARK_CAPTURE(BM_GemvDram, w4a8, Scheme::kW4A8Mxfp4)->Apply(gemv_dram_sizes);
BENCHMARK_CAPTURE(BM_GemvDram, w4a4, Scheme::kW4A4Mxfp4)->Apply(gemv_dram_sizes);
BENCHMARK_CAPTURE(BM_GemvDram, mxfp4_dual, Scheme::kW4A4Mxfp4Dual)->Apply(gemv_dram_sizes);

BENCHMARK_CAPTURE(BM_GemmMx, scalar_mxfp8, IsaLevel::kScalar, Scheme::kW8A8Mxfp8)->Args({1, 2048});
BENCHMARK_CAPTURE(BM_GemmMx, avx2_mxfp8, IsaLevel::kAvx2, Scheme::kW8A8Mxfp8)
    ->Args({1, 256})
    ->Args({1, 2048})
    ->Args({4, 2048})
    ->Args({8, 2048})
    ->Args({64, 2048})
    ->Args({512, 2048});
BENCHMARK_CAPTURE(BM_GemmMx, avx2_w4a8, IsaLevel::kAvx2, Scheme::kW4A8Mxfp4)
    ->Args({1, 256})
    ->Args({1, 2048})
    ->Args({4, 2048})
    ->Args({8, 2048})
    ->Args({64, 2048});
BENCHMARK_CAPTURE(BM_GemmMx, avx2_w4a4, IsaLevel::kAvx2, Scheme::kW4A4Mxfp4)
    ->Args({1, 256})
    ->Args({1, 2048})
    ->Args({4, 2048})
    ->Args({8, 2048})
    ->Args({64, 2048});
BENCHMARK_CAPTURE(BM_GemmMx, avx2_mxfp4_dual, IsaLevel::kAvx2, Scheme::kW4A4Mxfp4Dual)
    ->Args({1, 2048});
// Skipped, saying so, where the processor lacks AVX-512.
// Both E4M3 GEMMs: on FMAs and on BF16 dot products.
BENCHMARK_CAPTURE(BM_GemmMxVariant, avx512_mxfp8, "avx512", Scheme::kW8A8Mxfp8)
    ->Args({1, 2048})
    ->Args({4, 2048})
    ->Args({8, 2048})
    ->Args({64, 2048});
BENCHMARK_CAPTURE(BM_GemmMxVariant, avx512_bf16_mxfp8, "avx512-bf16", Scheme::kW8A8Mxfp8)
    ->Args({1, 2048})
    ->Args({4, 2048})
    ->Args({8, 2048})
    ->Args({64, 2048});
// The integer GEMMs' row counts: one row, the tile sizes around the AMX threshold (twelve),
// an expert's prefill and a dense one.
void integer_gemm_rows(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 4, 8, 12, 16, 64, 512}) b->Args({m, 2048});
}
BENCHMARK_CAPTURE(BM_GemmMx, avx512_w4a8, IsaLevel::kAvx512, Scheme::kW4A8Mxfp4)
    ->Apply(integer_gemm_rows);
BENCHMARK_CAPTURE(BM_GemmMx, avx512_w4a4, IsaLevel::kAvx512, Scheme::kW4A4Mxfp4)
    ->Apply(integer_gemm_rows);
BENCHMARK_CAPTURE(BM_GemmMx, avx512_mxfp4_dual, IsaLevel::kAvx512, Scheme::kW4A4Mxfp4Dual)
    ->Args({1, 2048});
// The integer GEMMs on AMX tiles (fewer than twelve rows run the AVX-512 kernels); skipped,
// saying so, where the processor or OS offers no AMX.
BENCHMARK_CAPTURE(BM_GemmMx, amx_w4a8, IsaLevel::kAmx, Scheme::kW4A8Mxfp4)
    ->Apply(integer_gemm_rows);
BENCHMARK_CAPTURE(BM_GemmMx, amx_w4a4, IsaLevel::kAmx, Scheme::kW4A4Mxfp4)
    ->Apply(integer_gemm_rows);

// One row of one query head at head_dim 128 (Qwen3's), a decode step's item.
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
  std::vector<float> scratch(static_cast<size_t>(attention_scratch_floats(1, 1, len, d)));
  std::vector<float> out(static_cast<size_t>(d));
  const AttentionRows a{q.data(), d, out.data(), d, 1, 1, len, bs, ld, d, 0.088f, scratch.data()};
  for (auto _ : state) {
    k->group_paged(a, kb.data(), vb.data());
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
  std::vector<float> scratch(static_cast<size_t>(attention_scratch_floats(1, group, len, d)));
  std::vector<float> out(static_cast<size_t>(group * d));
  const AttentionRows a{q.data(), group * d, out.data(), group * d, 1,      group,
                        len,      bs,        ld,         d,         0.125f, scratch.data()};
  for (auto _ : state) {
    if (bf16) {
      k->group_paged_bf16(a, kb16.data(), vb16.data());
    } else {
      k->group_paged(a, kb.data(), vb.data());
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

// Prefill's items: sixteen rows at consecutive positions ending at the argument, of the
// Qwen3-30B-A3B shape (eight query heads of 128 per KV head), in one call (rows = 16) or one
// call per row (rows = 1), over an FP32 cache of 16-position blocks.
void BM_AttentionRows(benchmark::State& state, IsaLevel isa, int64_t rows) {
  const AttentionKernels* k = attention_kernels_for(isa);
  if (k == nullptr) {
    state.SkipWithError("ISA not available");
    return;
  }
  const int64_t len = state.range(0), d = 128, group = 8, bs = 16, ld = d, n = 16;
  const int64_t nblk = (len + bs - 1) / bs, len0 = len - n + 1;
  const auto kv = values(static_cast<size_t>(2 * nblk * bs * ld), 3);
  const auto q = values(static_cast<size_t>(n * group * d), 4);
  std::vector<const float*> kb(static_cast<size_t>(nblk)), vb(kb.size());
  for (int64_t b = 0; b < nblk; ++b) {
    kb[static_cast<size_t>(b)] = kv.data() + b * bs * ld;
    vb[static_cast<size_t>(b)] = kv.data() + (nblk + b) * bs * ld;
  }
  std::vector<float> scratch(static_cast<size_t>(attention_scratch_floats(rows, group, len, d)));
  std::vector<float> out(static_cast<size_t>(n * group * d));
  for (auto _ : state) {
    for (int64_t r = 0; r < n; r += rows) {
      const AttentionRows a{q.data() + r * group * d,
                            group * d,
                            out.data() + r * group * d,
                            group * d,
                            rows,
                            group,
                            len0 + r,
                            bs,
                            ld,
                            d,
                            0.088f,
                            scratch.data()};
      k->group_paged(a, kb.data(), vb.data());
    }
    benchmark::DoNotOptimize(out.data());
  }
  // Multiply-adds: scores and values, every head of every row over its positions.
  state.counters["GFLOP/s"] = benchmark::Counter(
      static_cast<double>(4 * group * d * (n * len0 + n * (n - 1) / 2)),
      benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK_CAPTURE(BM_AttentionRows, avx2_one, IsaLevel::kAvx2, 1)->Arg(512)->Arg(2048);
BENCHMARK_CAPTURE(BM_AttentionRows, avx2_sixteen, IsaLevel::kAvx2, 16)->Arg(512)->Arg(2048);
BENCHMARK_CAPTURE(BM_AttentionRows, avx512_one, IsaLevel::kAvx512, 1)->Arg(512)->Arg(2048);
BENCHMARK_CAPTURE(BM_AttentionRows, avx512_sixteen, IsaLevel::kAvx512, 16)->Arg(512)->Arg(2048);

// A decode step's item as the model meets it: one row of eight query heads over a KV head
// whose keys and values come from memory. 48 KV heads' caches (96 MB at 2048 positions, past
// any L3 here), blocks of 16 positions laid out as the paged cache lays them (one block of
// every head, then the next), one call per head in turn. Bytes: the keys and values read.
void BM_AttentionDecode(benchmark::State& state, IsaLevel isa) {
  const AttentionKernels* k = attention_kernels_for(isa);
  if (k == nullptr) {
    state.SkipWithError("ISA not available");
    return;
  }
  const int64_t len = state.range(0), d = 128, group = 8, bs = 16, heads = 48;
  const int64_t nblk = (len + bs - 1) / bs, head_block = bs * d;
  const auto kv = values(static_cast<size_t>(2 * nblk * heads * head_block), 3);
  const auto q = values(static_cast<size_t>(group * d), 4);
  std::vector<const float*> kb(static_cast<size_t>(heads * nblk)), vb(kb.size());
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t b = 0; b < nblk; ++b) {
      const auto i = static_cast<size_t>(h * nblk + b);
      kb[i] = kv.data() + (b * heads + h) * head_block;
      vb[i] = kv.data() + ((nblk + b) * heads + h) * head_block;
    }
  }
  std::vector<float> scratch(static_cast<size_t>(attention_scratch_floats(1, group, len, d)));
  std::vector<float> out(static_cast<size_t>(group * d));
  const AttentionRows a{q.data(), group * d, out.data(), group * d, 1,      group,
                        len,      bs,        d,          d,         0.088f, scratch.data()};
  int64_t h = 0;
  for (auto _ : state) {
    k->group_paged(a, kb.data() + h * nblk, vb.data() + h * nblk);
    benchmark::DoNotOptimize(out.data());
    h = (h + 1) % heads;
  }
  state.SetBytesProcessed(state.iterations() * 2 * len * d * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK_CAPTURE(BM_AttentionDecode, avx2, IsaLevel::kAvx2)->Arg(576)->Arg(2048);
BENCHMARK_CAPTURE(BM_AttentionDecode, avx512, IsaLevel::kAvx512)->Arg(576)->Arg(2048);

}  // namespace
}  // namespace mx

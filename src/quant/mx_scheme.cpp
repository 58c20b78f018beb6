// The MX schemes (w8a8_mxfp8, w4a8_mxfp4, w4a4_mxfp4, w4a4_mxfp4_dual) for dense linears and
// expert banks: activations quantized per row to the scheme's input format, then the MX GEMM
// over weights that stay quantized.
#include <algorithm>
#include <vector>

#include "kernels/mx_gemm.h"
#include "kernels/ops.h"
#include "quant/linear.h"

namespace mx {
namespace {

MxMatrixView weight_view(const MxWeights& w, int64_t row0, int64_t rows) {
  const SchemeInfo& info = scheme_info(w.scheme);
  const int64_t nb = mx_num_blocks(w.k), nc = mx_num_chunks(w.k);
  return {info.weight,
          w.codes.data_as<uint8_t>() + row0 * w.row_bytes(),
          w.scales.data_as<uint8_t>() + row0 * nb,
          info.dual ? w.chunk_scales.data_as<float>() + row0 * nc : nullptr,
          rows,
          w.k,
          w.row_bytes()};
}

MxMatrixView act_view(const ActRows& a, int64_t row0, int64_t rows) {
  return {a.format,
          a.codes.data() + row0 * a.row_bytes,
          a.scales.data() + row0 * mx_num_blocks(a.k),
          a.dual ? a.chunk_scales.data() + row0 * mx_num_chunks(a.k) : nullptr,
          rows,
          a.k,
          a.row_bytes};
}

// y[m, w.rows] from quantized activation rows [row0, row0 + m) of `a`.
void gemm_rows(const ActRows& a, int64_t row0, int64_t m, const MxMatrixView& w, float* y,
               ThreadPool* pool) {
  if (m == 0) return;
  const MxMatrixView av = act_view(a, row0, m);
  std::vector<float> af(static_cast<size_t>(m * mx_decoded_stride(a.k)));
  mx_decode_activations(av, af.data());
  const int64_t n = w.rows;
  auto body = [&](int64_t b, int64_t e, int) {
    // 32-byte aligned accumulators for the vector kernels.
    std::vector<float> acc_store(static_cast<size_t>(kMxGemmAccPerRow * m + 8));
    auto* acc = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(acc_store.data()) + 31) &
                                         ~uintptr_t{31});
    mx_gemm_kernels().gemm(af.data(), av.chunk_scales, m, w, y, n, b * 16, std::min(n, e * 16),
                           acc);
  };
  const int64_t blocks = (n + 15) / 16;
  if (pool == nullptr || m * n * a.k < (1 << 15)) {
    body(0, blocks, 0);
  } else {
    pool->parallel_for(blocks, body);
  }
}

class MxLinear final : public Linear {
 public:
  MxLinear(MxWeights w, ScaleRule rule) : Linear(w.k, w.n), w_(std::move(w)), rule_(rule) {}
  std::string scheme_name() const override { return std::string(scheme_info(w_.scheme).name); }
  uint64_t weight_bytes() const override { return w_.bytes(); }
  void forward(const float* x, int64_t m, float* y, ThreadPool* pool) const override {
    ActRows a;
    act_rows_init(w_.scheme, w_.k, rule_, &a);
    a.resize(m);
    for (int64_t r = 0; r < m; ++r) act_rows_quantize(x + r * w_.k, r, rule_, &a);
    gemm_rows(a, 0, m, weight_view(w_, 0, w_.n), y, pool);
  }

 private:
  MxWeights w_;
  ScaleRule rule_;
};

class MxExpertBank final : public ExpertBank {
 public:
  MxExpertBank(MxWeights w13, MxWeights w2, int64_t experts, ScaleRule rule)
      : ExpertBank(experts, w13.k, w2.k), w13_(std::move(w13)), w2_(std::move(w2)), rule_(rule) {}
  std::string scheme_name() const override { return std::string(scheme_info(w13_.scheme).name); }
  uint64_t weight_bytes() const override { return w13_.bytes() + w2_.bytes(); }
  Scheme input_scheme(DispatchMode mode) const override {
    switch (mode) {
      case DispatchMode::kLocal:
        return w13_.scheme;
      case DispatchMode::kEpLowLatency:
        return Scheme::kW8A8Mxfp8;  // MXFP8 on the wire
      case DispatchMode::kEpNormal:
        return Scheme::kBf16;  // gmm1 quantizes on arrival
    }
    return w13_.scheme;
  }

  void run(const ActRows& rows, const int64_t* offsets, float* out, ThreadPool* pool,
           ExpertTimes* times) const override {
    const int64_t h = hidden(), i = inter();
    SplitClock clock(times);
    const int64_t total = offsets[num_experts()];
    // Rows not in gmm1's format (FP32, or another MX format off the wire) are quantized here.
    const ActRows* in = &rows;
    ActRows converted;
    const SchemeInfo& info = scheme_info(w13_.scheme);
    if (!rows.quantized || rows.format != info.activation || rows.dual != info.dual) {
      act_rows_init(w13_.scheme, h, rule_, &converted);
      converted.resize(total);
      std::vector<float> f(static_cast<size_t>(h));
      for (int64_t r = 0; r < total; ++r) {
        const float* src = rows.f32.data() + r * h;
        if (rows.quantized) {
          mx_decode_activations(act_view(rows, r, 1), f.data());
          src = f.data();
        }
        act_rows_quantize(src, r, rule_, &converted);
      }
      gmm1_quant_passes_ += static_cast<uint64_t>(total);
      in = &converted;
    }
    int64_t max_rows = 0;
    const std::vector<int64_t> active = active_experts(offsets, num_experts(), &max_rows);
    if (active.empty()) return;
    // Per-thread accumulators, 32-byte aligned, sized for the largest expert group.
    const int threads = pool ? pool->num_threads() : 1;
    const int64_t acc_stride = (kMxGemmAccPerRow * max_rows + 7) / 8 * 8;
    std::vector<float> acc_store(static_cast<size_t>(threads * acc_stride + 8));
    float* acc0 = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(acc_store.data()) + 31) &
                                           ~uintptr_t{31});
    const auto& kern = mx_gemm_kernels();
    // One grouped GEMM over every active expert: activations decoded once for all rows.
    auto grouped = [&](const ActRows& a, const MxWeights& w, int64_t cols, float* y) {
      const int64_t k = a.k, stride = mx_decoded_stride(k), nc = mx_num_chunks(k);
      std::vector<float> af(static_cast<size_t>(total * stride));
      const MxMatrixView view = act_view(a, 0, total);
      mx_decode_activations(view, af.data());
      for_each_expert_block(active, cols, pool, total * cols * k,
                            [&](int64_t e, int64_t c0, int64_t c1, int thread) {
                              const int64_t r0 = offsets[e];
                              kern.gemm(af.data() + r0 * stride,
                                        view.chunk_scales ? view.chunk_scales + r0 * nc : nullptr,
                                        offsets[e + 1] - r0, weight_view(w, e * cols, cols),
                                        y + r0 * cols, cols, c0, c1, acc0 + thread * acc_stride);
                            });
    };
    std::vector<float> gu(static_cast<size_t>(total * 2 * i));
    grouped(*in, w13_, 2 * i, gu.data());
    // gmm1 epilogue: SwiGLU and requantization row by row while the row is in cache.
    ActRows act;
    act_rows_init(w2_.scheme, i, rule_, &act);
    act.resize(total);
    std::vector<float> tmp(static_cast<size_t>(i));
    for (int64_t r = 0; r < total; ++r) {
      swiglu(gu.data() + r * 2 * i, gu.data() + r * 2 * i + i, i, tmp.data());
      act_rows_quantize(tmp.data(), r, rule_, &act);
    }
    clock.lap(times ? &times->gmm1 : nullptr);
    grouped(act, w2_, h, out);
    clock.lap(times ? &times->gmm2 : nullptr);
  }

 private:
  MxWeights w13_;  // [E * 2I, H]
  MxWeights w2_;   // [E * H, I]
  ScaleRule rule_;
};

}  // namespace

std::unique_ptr<Linear> make_mx_linear(MxWeights w, ScaleRule rule) {
  return std::unique_ptr<Linear>(new MxLinear(std::move(w), rule));
}

Result<std::unique_ptr<ExpertBank>> make_mx_expert_bank(std::vector<MxWeights> w13,
                                                        std::vector<MxWeights> w2, ScaleRule rule,
                                                        const std::string& name) {
  if (w13.empty() || w13.size() != w2.size())
    return invalid_argument(name + ": expert counts differ");
  const int64_t e = static_cast<int64_t>(w13.size());
  const int64_t h = w13[0].k, i2 = w13[0].n;
  for (int64_t x = 0; x < e; ++x) {
    if (w13[x].n != i2 || w13[x].k != h || w2[x].n != h || w2[x].k * 2 != i2 ||
        w13[x].scheme != w13[0].scheme || w2[x].scheme != w13[0].scheme) {
      return invalid_argument(name + ".experts." + std::to_string(x) +
                              ": shape or scheme differs from expert 0");
    }
  }
  MX_ASSIGN_OR_RETURN(MxWeights s13, stack_mx_weights(w13, name + ".w13"));
  MX_ASSIGN_OR_RETURN(MxWeights s2, stack_mx_weights(w2, name + ".w2"));
  return std::unique_ptr<ExpertBank>(new MxExpertBank(std::move(s13), std::move(s2), e, rule));
}

}  // namespace mx

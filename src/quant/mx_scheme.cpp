// The MX schemes (w8a8_mxfp8, w4a8_mxfp4, w4a4_mxfp4, w4a4_mxfp4_dual) for dense linears and
// expert banks: activations quantized per row to the scheme's input format, then the MX GEMM
// over weights that stay quantized.
#include <algorithm>
#include <cstring>
#include <vector>

#include "formats/hadamard.h"
#include "kernels/mx_gemm.h"
#include "kernels/ops.h"
#include "quant/linear.h"

namespace mx {
namespace {

MxMatrixView act_view(const ActRows& a, int64_t row0, int64_t rows) {
  return {a.format,
          a.codes.data() + row0 * a.row_bytes,
          a.scales.data() + row0 * mx_num_blocks(a.k),
          a.dual ? a.chunk_scales.data() + row0 * mx_num_chunks(a.k) : nullptr,
          rows,
          a.k,
          a.row_bytes};
}

// `parts` stacked [n, k] matrices of one MX weight, each packed into the GEMM's panels.
class PackedMx {
 public:
  PackedMx(const MxWeights& w, int64_t parts)
      : kern_(mx_gemm_kernels()),
        scheme_(w.scheme),
        n_(w.n / parts),
        k_(w.k),
        rotation_(w.rotation) {
    for (int64_t p = 0; p < parts; ++p) add(w, p * n_);
  }
  // Filled part by part with add().
  PackedMx(Scheme scheme, int64_t n, int64_t k, int64_t rotation)
      : kern_(mx_gemm_kernels()), scheme_(scheme), n_(n), k_(k), rotation_(rotation) {}
  // Packs rows [row0, row0 + n) of w as the next part.
  void add(const MxWeights& w, int64_t row0) {
    const SchemeInfo& info = scheme_info(w.scheme);
    const int64_t nb = mx_num_blocks(k_), nc = mx_num_chunks(k_);
    parts_.push_back(kern_.pack({info.weight, w.codes.data_as<uint8_t>() + row0 * w.row_bytes(),
                                 w.scales.data_as<uint8_t>() + row0 * nb,
                                 info.dual ? w.chunk_scales.data_as<float>() + row0 * nc : nullptr,
                                 n_, k_, w.row_bytes()}));
  }
  // The table whose layout the parts are in: the one that multiplies them.
  const MxGemmKernels& kernels() const { return kern_; }
  Scheme scheme() const { return scheme_; }
  // The rows the weights take: the scheme's activation format, rotated as they were.
  RowFormat input_format() const { return RowFormat::mx(scheme_, rotation_); }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  const MxPanelView& view(int64_t part) const { return parts_[static_cast<size_t>(part)].view; }
  uint64_t bytes() const {
    uint64_t b = 0;
    for (const MxPanelWeights& p : parts_) b += p.bytes();
    return b;
  }

 private:
  const MxGemmKernels& kern_;
  Scheme scheme_;
  int64_t n_, k_, rotation_;
  std::vector<MxPanelWeights> parts_;
};

std::string table_name(const MxGemmKernels& kern) { return "mx_gemm:" + std::string(kern.name); }

// fn(r0, r1, thread) over rows [0, m) of width k: on the pool when there is enough work.
template <typename Fn>
void for_rows(int64_t m, int64_t k, ThreadPool* pool, Fn&& fn) {
  if (pool == nullptr || m < 2 || m * k < (1 << 16)) {
    fn(0, m, 0);
  } else {
    pool->parallel_for(m, fn);
  }
}

// Int8 rows for the W4A4 kernels: the codes as they are (the kernels hold 2 * value + 12 per
// weight code), each block's sum of codes and its scale d / 2.
void prepare_int8(const ActRows& a, int64_t row0, int64_t m, int8_t* q, int32_t* sums,
                  float* scales) {
  const int64_t stride = mx_decoded_stride(a.k), nb = mx_num_blocks(a.k);
  for (int64_t r = 0; r < m; ++r) {
    const auto* codes = reinterpret_cast<const int8_t*>(a.codes.data() + (row0 + r) * a.row_bytes);
    const float* d = a.int8_scales.data() + (row0 + r) * nb;
    int8_t* dst = q + r * stride;
    std::memcpy(dst, codes, static_cast<size_t>(nb * kMxBlock));
    std::memset(dst + nb * kMxBlock, 0, static_cast<size_t>(stride - nb * kMxBlock));
    for (int64_t b = 0; b < nb; ++b) {
      int32_t sum = 0;
      for (int64_t j = 0; j < kMxBlock; ++j) sum += codes[b * kMxBlock + j];
      sums[r * nb + b] = sum;
      scales[r * nb + b] = 0.5f * d[b];
    }
  }
}

// Quantized activation rows in the form the GEMM over `weight` consumes: decoded to FP32
// (E4M3 weights); for E2M1 weights, integers for an exact per-block dot, with block sums and
// scales for E2M1 activations (W4A4) or 14-bit fixed point for E4M3 ones (W4A8). Held in the
// context's slots kWsMxActs..: one GemmActs in use per context at a time, so that the dozens
// of small GEMM calls of a decode step neither allocate nor zero-fill once warm.
class GemmActs {
 public:
  enum class Kind { kF32, kW4a4, kW4a8, kW4Int8 };
  GemmActs(const MxGemmKernels& kern, const ActRows& a, ElemFormat weight, int64_t row0, int64_t m,
           ExecContext& ctx)
      : kern_(kern),
        kind_(a.int8                                                         ? Kind::kW4Int8
              : a.format == ElemFormat::kE2M1                                ? Kind::kW4a4
              : a.format == ElemFormat::kE4M3 && weight == ElemFormat::kE2M1 ? Kind::kW4a8
                                                                             : Kind::kF32),
        stride_(mx_decoded_stride(a.k)),
        nb_(mx_num_blocks(a.k)) {
    Workspace& ws = ctx.workspace();
    switch (kind_) {
      case Kind::kW4a4:
      case Kind::kW4Int8:
        q_ = ws.get<int8_t>(kWsMxActs + kQ, m * stride_);
        sums_ = ws.get<int32_t>(kWsMxActs + kSums, m * nb_);
        scales_ = ws.get<float>(kWsMxActs + kScales, m * nb_);
        break;
      case Kind::kW4a8:
        h_ = ws.get<int16_t>(kWsMxActs + kH, m * stride_);
        planes_ = ws.get<int8_t>(kWsMxActs + kPlanes, m * 2 * stride_);
        sums_ = ws.get<int32_t>(kWsMxActs + kSums, m * nb_);
        scales_ = ws.get<float>(kWsMxActs + kScales, m * nb_);
        break;
      case Kind::kF32:
        f_ = ws.get<float>(kWsMxActs + kF, m * stride_);
        break;
    }
    auto body = [&](int64_t r0, int64_t r1, int) {
      const MxMatrixView v = act_view(a, row0 + r0, r1 - r0);
      switch (kind_) {
        case Kind::kW4a4:
          mx_prepare_fp4_activations(v, q_ + r0 * stride_, sums_ + r0 * nb_, scales_ + r0 * nb_);
          break;
        case Kind::kW4Int8:
          prepare_int8(a, row0 + r0, r1 - r0, q_ + r0 * stride_, sums_ + r0 * nb_,
                       scales_ + r0 * nb_);
          break;
        case Kind::kW4a8:
          kern_.prepare_w4a8(v, h_ + r0 * stride_, planes_ + r0 * 2 * stride_, sums_ + r0 * nb_,
                             scales_ + r0 * nb_);
          break;
        case Kind::kF32:
          kern_.decode(v, f_ + r0 * stride_, kMxGemmInputScale);
          break;
      }
    };
    for_rows(m, a.k, ctx.pool(), body);
  }
  // Arguments for rows [r0, r0 + m) of these activations.
  MxGemmArgs args(int64_t r0, int64_t m, const MxPanelView& w, float* y, int64_t ldy) const {
    MxGemmArgs g{nullptr, &w, y, m, stride_, ldy};
    switch (kind_) {
      case Kind::kW4a4:
      case Kind::kW4Int8:
        g.xq = q_ + r0 * stride_;
        g.xsum = sums_ + r0 * nb_;
        g.xscale = scales_ + r0 * nb_;
        break;
      case Kind::kW4a8:
        g.xh = h_ + r0 * stride_;
        g.xhb = planes_ + r0 * 2 * stride_;
        g.xsum = sums_ + r0 * nb_;
        g.xscale = scales_ + r0 * nb_;
        break;
      case Kind::kF32:
        g.x = f_ + r0 * stride_;
        break;
    }
    return g;
  }
  void run(const MxGemmArgs& a, int64_t n_begin, int64_t n_end) const {
    const MxGemmKernels& kern = kern_;
    switch (kind_) {
      case Kind::kW4a4:
      case Kind::kW4Int8:
        return kern.gemm_w4a4(a, n_begin, n_end);
      case Kind::kW4a8:
        return kern.gemm_w4a8(a, n_begin, n_end);
      case Kind::kF32:
        return kern.gemm(a, n_begin, n_end);
    }
  }

 private:
  // Offsets of the buffers from kWsMxActs (six slots, linear.h).
  static constexpr int kF = 0, kQ = 1, kH = 2, kPlanes = 3, kSums = 4, kScales = 5;
  const MxGemmKernels& kern_;  // the weights' table: activations prepared for its kernels
  Kind kind_;
  int64_t stride_, nb_;
  float* f_ = nullptr;
  int8_t* q_ = nullptr;
  int16_t* h_ = nullptr;
  int8_t* planes_ = nullptr;
  int32_t* sums_ = nullptr;
  float* scales_ = nullptr;
};

// y[m, w.n] from quantized activation rows [row0, row0 + m) of `a`.
void gemm_rows(const ActRows& a, int64_t row0, int64_t m, const PackedMx& packed, float* y,
               ExecContext& ctx) {
  if (m == 0) return;
  ThreadPool* pool = ctx.pool();
  const MxPanelView& w = packed.view(0);
  const GemmActs acts(packed.kernels(), a, w.format, row0, m, ctx);
  const int64_t n = w.n;
  const MxGemmArgs args = acts.args(0, m, w, y, n);
  auto body = [&](int64_t b, int64_t e, int) {
    acts.run(args, b * kMxPanelCols, std::min(n, e * kMxPanelCols));
  };
  const int64_t panels = mx_panels(n);
  if (pool == nullptr || m * n * a.k < (1 << 15)) {
    body(0, panels, 0);
  } else {
    pool->parallel_for(panels, body);
  }
}

class MxLinear final : public Linear {
 public:
  MxLinear(const MxWeights& w, ScaleRule rule) : Linear(w.k, w.n), w_(w, 1), rule_(rule) {}
  std::string scheme_name() const override { return std::string(scheme_info(w_.scheme()).name); }
  std::string kernel_table() const override { return table_name(w_.kernels()); }
  uint64_t weight_bytes() const override { return w_.bytes(); }
  void forward(const float* x, int64_t m, float* y, ExecContext& ctx) const override {
    ActRows& a = ctx.workspace().object<ActRows>(kObjMxLinearRows);
    act_rows_init(w_.input_format(), w_.k(), rule_, &a);
    a.resize(m);
    for_rows(m, w_.k(), ctx.pool(), [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) act_rows_quantize(x + r * w_.k(), r, rule_, &a);
    });
    gemm_rows(a, 0, m, w_, y, ctx);
  }

 private:
  PackedMx w_;
  ScaleRule rule_;
};

class MxExpertBank final : public ExpertBank {
 public:
  // Empty; filled expert by expert with add().
  MxExpertBank(Scheme scheme, int64_t rotation, int64_t experts, int64_t hidden, int64_t inter,
               ScaleRule rule)
      : ExpertBank(experts, hidden, inter),
        w13_(scheme, 2 * inter, hidden, rotation),
        w2_(scheme, hidden, inter, rotation),
        rule_(rule) {}
  void add(const MxWeights& w13, const MxWeights& w2) {
    w13_.add(w13, 0);
    w2_.add(w2, 0);
  }
  std::string scheme_name() const override { return std::string(scheme_info(w13_.scheme()).name); }
  std::string kernel_table() const override { return table_name(w13_.kernels()); }
  uint64_t weight_bytes() const override { return w13_.bytes() + w2_.bytes(); }
  RowFormat input_format(DispatchMode mode) const override {
    const RowFormat local = w13_.input_format();
    switch (mode) {
      case DispatchMode::kLocal:
        return local;
      case DispatchMode::kEpLowLatency:
        // The local fused format: MXFP8 for W8A8 and W4A8, MXFP4 for W4A4 (SGLang's DeepEP
        // dtypes), quantized once by the sender. The wire carries no int8 rows: those go as
        // BF16 and are quantized on arrival.
        return scheme_info(w13_.scheme()).int8_act ? RowFormat::f32() : local;
      case DispatchMode::kEpNormal:
        return RowFormat::f32();  // gmm1 quantizes on arrival
    }
    return local;
  }

  // Low latency returns the local FP32 rows: with the local fused rows on the way out, one
  // process and any number of ranks then compute the same bits. BF16 outputs would not: a
  // 2^-9 change moves later MX roundings, and the offline fake-quant fixture goes from 23 to
  // 304 of 304 positions off by more than 1e-3.
  RowFloat combine_format(DispatchMode mode) const override {
    return mode == DispatchMode::kEpNormal ? RowFloat::kBf16 : RowFloat::kF32;
  }

  void run(const ActRows& rows, const int64_t* offsets, float* out, ExecContext& ctx,
           ExpertTimes* times) const override {
    const int64_t h = hidden(), i = inter();
    SplitClock clock(times);
    const int64_t total = offsets[num_experts()];
    // Rows not in gmm1's format (FP32, or another MX format off the wire) are quantized here.
    const ActRows* in = &rows;
    if (!rows.in_format(w13_.input_format())) in = convert(rows, total, ctx);
    int64_t max_rows = 0;
    const std::span<const int64_t> active = active_experts(offsets, num_experts(), ctx, &max_rows);
    if (active.empty()) return;
    ActRows& act = ctx.workspace().object<ActRows>(kObjMxAct);
    act_rows_init(w2_.input_format(), i, rule_, &act);
    act.resize(total);
    {
      const GemmActs in_acts(w13_.kernels(), *in, scheme_info(w13_.scheme()).weight, 0, total, ctx);
      fused_gmm1(in_acts, active, offsets, total, &act, ctx);
    }
    clock.lap(times ? &times->gmm1 : nullptr);
    // gmm2: one grouped GEMM over every active expert, activations prepared once for all rows.
    const GemmActs acts(w2_.kernels(), act, scheme_info(w2_.scheme()).weight, 0, total, ctx);
    for_each_expert_block(
        active, h, ctx.pool(), total * h * i, [&](int64_t e, int64_t c0, int64_t c1, int) {
          const int64_t r0 = offsets[e];
          acts.run(acts.args(r0, offsets[e + 1] - r0, w2_.view(e), out + r0 * h, h), c0, c1);
        });
    clock.lap(times ? &times->gmm2 : nullptr);
  }

 private:
  // `rows` requantized into gmm1's format, in ctx's object slot kObjMxConverted.
  const ActRows* convert(const ActRows& rows, int64_t total, ExecContext& ctx) const {
    const int64_t h = hidden();
    ActRows& converted = ctx.workspace().object<ActRows>(kObjMxConverted);
    act_rows_init(w13_.input_format(), h, rule_, &converted);
    converted.resize(total);
    float* f = ctx.workspace().floats(kWsMxRow, h);
    for (int64_t r = 0; r < total; ++r) {
      const float* src = rows.f32.data() + r * h;
      if (rows.int8) {
        const auto* c = reinterpret_cast<const int8_t*>(rows.codes.data() + r * rows.row_bytes);
        const float* d = rows.int8_scales.data() + r * mx_num_blocks(h);
        for (int64_t j = 0; j < h; ++j) f[j] = c[j] * d[j / kMxBlock];
        src = f;
      } else if (rows.quantized) {
        mx_decode_activations(act_view(rows, r, 1), f);
        if (rows.rotation > 0) hadamard_kernels().rotate(f, h, rows.rotation);  // back
        src = f;
      }
      act_rows_quantize(src, r, rule_, &converted);
    }
    gmm1_quant_passes_ += static_cast<uint64_t>(total);
    return &converted;
  }

  // gmm1 fused: per expert and slice of intermediate columns, the gate and up GEMM into a
  // small tile, SwiGLU, and requantization straight into gmm2's input rows. Slices start on
  // whole blocks (whole 512-chunks when dual-level), which the requantization treats alone,
  // and every GEMM output sees the same operations whatever columns or rows it is computed
  // with, so the result is the unfused pipeline's bit for bit with no [rows, 2I] buffer.
  void fused_gmm1(const GemmActs& acts, std::span<const int64_t> active, const int64_t* offsets,
                  int64_t total, ActRows* act, ExecContext& ctx) const {
    const int64_t h = hidden(), i = inter();
    const int64_t unit = act_rows_unit(*act);
    // 128 columns, the AVX2 kernel's widest panel group, unless a dual-level chunk is wider.
    const int64_t slice = std::max<int64_t>(unit, 128);
    constexpr int64_t kTileRows = 192;
    // Gate columns [cs, ce) and up columns from the panel holding i + cs: its first `pad`
    // columns belong to the gate slice before and are ignored.
    const int64_t ld = slice + kMxPanelCols, tile_floats = kTileRows * (slice + ld) + slice;
    ctx.reserve_arenas<float>(kArenaMxTile, tile_floats);
    auto body = [&](int64_t e, int64_t c0, int64_t c1, int thread) {
      float* tile = ctx.arena(thread).floats(kArenaMxTile, tile_floats);
      float* gate = tile;
      float* up = tile + kTileRows * slice;
      float* swi = up + kTileRows * ld;
      for (int64_t r0 = offsets[e]; r0 < offsets[e + 1]; r0 += kTileRows) {
        const int64_t m = std::min(kTileRows, offsets[e + 1] - r0);
        for (int64_t cs = c0; cs < c1; cs += slice) {
          const int64_t ce = std::min(c1, cs + slice);
          const int64_t ub = (i + cs) / kMxPanelCols * kMxPanelCols, pad = i + cs - ub;
          MxGemmArgs g = acts.args(r0, m, w13_.view(e), gate, slice);
          g.y_col0 = cs;
          acts.run(g, cs, ce);
          MxGemmArgs u = acts.args(r0, m, w13_.view(e), up, ld);
          u.y_col0 = ub;
          acts.run(u, ub, i + ce);
          for (int64_t r = 0; r < m; ++r) {
            swiglu(gate + r * slice, up + r * ld + pad, ce - cs, swi);
            act_rows_quantize_cols(swi, r0 + r, cs, ce - cs, rule_, act);
          }
        }
      }
    };
    for_each_expert_block(active, i, ctx.pool(), total * 2 * i * h, body, unit);
  }

  PackedMx w13_;  // E parts of [2I, H]
  PackedMx w2_;   // E parts of [H, I]
  ScaleRule rule_;
};

}  // namespace

std::unique_ptr<Linear> make_mx_linear(MxWeights w, ScaleRule rule) {
  return std::unique_ptr<Linear>(new MxLinear(w, rule));
}

Result<std::unique_ptr<ExpertBank>> make_mx_expert_bank(std::vector<MxWeights> w13,
                                                        std::vector<MxWeights> w2, ScaleRule rule,
                                                        const std::string& name) {
  if (w13.empty() || w13.size() != w2.size())
    return invalid_argument(name + ": expert counts differ");
  return make_mx_expert_bank(
      static_cast<int64_t>(w13.size()),
      [&](int64_t e) -> Result<std::pair<MxWeights, MxWeights>> {
        const auto x = static_cast<size_t>(e);
        return std::make_pair(std::move(w13[x]), std::move(w2[x]));
      },
      rule, name);
}

Result<std::unique_ptr<ExpertBank>> make_mx_expert_bank(int64_t experts, const MxExpertSource& next,
                                                        ScaleRule rule, const std::string& name) {
  if (experts < 1) return invalid_argument(name + ": no experts");
  std::unique_ptr<MxExpertBank> bank;
  Scheme scheme = Scheme::kW8A8Mxfp8;
  int64_t h = 0, i2 = 0, rotation = 0;
  for (int64_t x = 0; x < experts; ++x) {
    MX_ASSIGN_OR_RETURN(auto w, next(x));
    const MxWeights& w13 = w.first;
    const MxWeights& w2 = w.second;
    if (x == 0) {
      scheme = w13.scheme;
      rotation = w13.rotation;
      h = w13.k;
      i2 = w13.n;
      if (i2 % 2 != 0) return invalid_argument(name + ": gate_up has an odd number of rows");
      bank = std::make_unique<MxExpertBank>(scheme, rotation, experts, h, i2 / 2, rule);
    }
    if (w13.n != i2 || w13.k != h || w2.n != h || w2.k * 2 != i2 || w13.scheme != scheme ||
        w2.scheme != scheme || w13.rotation != rotation || w2.rotation != rotation) {
      return invalid_argument(name + ".experts." + std::to_string(x) +
                              ": shape, scheme or rotation differs from expert 0");
    }
    bank->add(w13, w2);
  }
  return std::unique_ptr<ExpertBank>(std::move(bank));
}

}  // namespace mx

// The GGUF scheme: weights stay in their ggml blocks, as llama.cpp keeps them. By default each
// activation row is quantized once to the type's dot-product type and read by every segment
// and expert that needs it (kernels/ggml_dot.h); with FP32 activations the GEMM dequantizes a
// few rows at a time into L1 (kernels/ggml_gemm.h). A packed module may mix
// types (llama.cpp's Q4_K_M files store attn_q in Q4_K and attn_k in Q8_0): each part is a
// segment of output columns with its own type.
#include <algorithm>
#include <cstring>

#include "formats/ggml_types.h"
#include "formats/mx_layout.h"
#include "kernels/ggml_dot.h"
#include "kernels/ggml_gemm.h"
#include "kernels/ops.h"
#include "quant/linear.h"

namespace mx {
namespace {

// A thread's scratch for kGgmlGemmRows rows of k floats, from its arena.
float* gemm_scratch(Workspace& arena, int64_t k) {
  return arena.floats(kArenaGgmlGemm, kGgmlGemmRows * k);
}

// Activation rows as the segments read them: FP32, and quantized to each dot-product type a
// segment needs.
struct Acts {
  const float* x = nullptr;
  int64_t ldx = 0;
  const uint8_t* q[2] = {nullptr, nullptr};  // by GgmlActType
  int64_t qstride[2] = {0, 0};
  Acts from_row(int64_t r) const {
    Acts a = *this;
    a.x += r * ldx;
    for (int t = 0; t < 2; ++t) {
      if (q[t] != nullptr) a.q[t] += r * qstride[t];
    }
    return a;
  }
};

// Room in the context for m rows of k values in every type in `needs` (a bit per
// GgmlActType), in slots `slot` and `slot + 1`; x as the FP32 rows.
Acts act_buffers(const float* x, int64_t m, int64_t k, int64_t ldx, unsigned needs, int slot,
                 ExecContext& ctx) {
  Acts a;
  a.x = x;
  a.ldx = ldx;
  for (int t = 0; t < 2; ++t) {
    if (!(needs & (1u << t))) continue;
    const int64_t stride = ggml_act_row_bytes(static_cast<GgmlActType>(t), k);
    a.q[t] = ctx.workspace().get<uint8_t>(kWsGgmlActs + slot + t, m * stride);
    a.qstride[t] = stride;
  }
  return a;
}

// m rows of x (k values, ldx apart) quantized once by `dot` to every type in `needs`.
Acts prepare(const GgmlDotKernels& dot, const float* x, int64_t m, int64_t k, int64_t ldx,
             unsigned needs, int slot, ExecContext& ctx) {
  ThreadPool* pool = ctx.pool();
  const Acts a = act_buffers(x, m, k, ldx, needs, slot, ctx);
  for (int t = 0; t < 2; ++t) {
    if (a.q[t] == nullptr) continue;
    const auto at = static_cast<GgmlActType>(t);
    auto* buf = const_cast<uint8_t*>(a.q[t]);
    auto body = [&](int64_t b, int64_t e, int) {
      for (int64_t r = b; r < e; ++r) dot.quantize(at, x + r * ldx, k, buf + r * a.qstride[t]);
    };
    if (pool != nullptr && pool->num_threads() > 1 && m >= 16) {
      pool->parallel_for(m, body);
    } else {
      body(0, m, 0);
    }
  }
  return a;
}

// Values [c0, c1) of a row of k (whole blocks of its type) quantized into their places in
// `row`, a row laid out for all k (ggml_dot.h): a block's codes and scales depend on that block
// alone, so the pieces equal the whole row's. `tmp` holds ggml_act_row_bytes(a, c1 - c0).
void quantize_range(const GgmlDotKernels& dot, GgmlActType a, const float* x, int64_t k, int64_t c0,
                    int64_t c1, uint8_t* row, uint8_t* tmp) {
  const int64_t n = c1 - c0, blk = ggml_act_block(a);
  dot.quantize(a, x, n, tmp);
  std::memcpy(row + c0, tmp, static_cast<size_t>(n));
  std::memcpy(row + k + 4 * (c0 / blk), tmp + n, static_cast<size_t>(4 * (n / blk)));
  if (a == GgmlActType::kQ8_0) {  // s per 32 after the scales
    std::memcpy(row + k + 4 * (k / 32) + 4 * (c0 / 32), tmp + n + 4 * (n / 32),
                static_cast<size_t>(4 * (n / 32)));
  } else {  // int16 sums per 16 after the scales
    std::memcpy(row + k + 4 * (k / 256) + 2 * (c0 / 16), tmp + n + 4 * (n / 256),
                static_cast<size_t>(2 * (n / 16)));
  }
}

struct Segment {
  GgmlType type;
  const uint8_t* w;
  int64_t row_bytes;
  int64_t col0, cols;         // output columns [col0, col0 + cols)
  bool int_dot;               // quantized activations against integer dot products
  int panel;                  // GgmlWeight::panel
  const GgmlDotKernels* dot;  // the table that laid the rows out, for int_dot
};

// Columns per parallel work item: whole groups of the kernel's rows.
constexpr int64_t kUnit = 4 * kGgmlGemmRows;

// y[:, seg cols c0..c1) for m rows of activations, on the calling thread with its arena.
void run_segment(const Segment& s, const Acts& x, int64_t m, int64_t k, float* y, int64_t ldy,
                 int64_t c0, int64_t c1, Workspace& arena) {
  if (s.int_dot) {
    const auto t = static_cast<int>(ggml_act_type(s.type));
    GgmlDotArgs a{s.type, s.w, s.row_bytes, x.q[t], x.qstride[t], y + s.col0, m, k, ldy};
    a.panel = s.panel;
    s.dot->gemm(a, c0, c1);
    return;
  }
  const GgmlGemmArgs a{s.type, s.w, s.row_bytes, x.x, y + s.col0, m, k, x.ldx, ldy};
  ggml_gemm_kernels().gemm(a, c0, c1, gemm_scratch(arena, k));
}

// One parallel loop over (segment, column unit) pairs.
void run_segments(const std::vector<Segment>& segs, const Acts& x, int64_t m, int64_t k, float* y,
                  int64_t ldy, ExecContext& ctx) {
  const size_t ns = segs.size();
  ctx.reserve_arenas<float>(kArenaGgmlGemm, kGgmlGemmRows * k);
  int64_t* first = ctx.workspace().get<int64_t>(kWsGgmlUnits, static_cast<int64_t>(ns) + 1);
  first[0] = 0;
  for (size_t i = 0; i < ns; ++i) first[i + 1] = first[i] + (segs[i].cols + kUnit - 1) / kUnit;
  auto body = [&](int64_t b, int64_t e, int thread) {
    Workspace& arena = ctx.arena(thread);
    // Each segment's run of units in one call, so that a kernel can block its columns.
    for (int64_t u = b; u < e;) {
      const auto si = static_cast<size_t>(std::upper_bound(first, first + ns + 1, u) - first - 1);
      const int64_t u1 = std::min(e, first[si + 1]);
      const int64_t c0 = (u - first[si]) * kUnit;
      const int64_t c1 = std::min(segs[si].cols, (u1 - first[si]) * kUnit);
      run_segment(segs[si], x, m, k, y, ldy, c0, c1, arena);
      u = u1;
    }
  };
  const int64_t work = m * k * (segs.back().col0 + segs.back().cols);
  ThreadPool* pool = ctx.pool();
  if (pool == nullptr || pool->num_threads() == 1 || work < (1 << 15)) {
    body(0, first[ns], 0);
  } else {
    pool->parallel_for(first[ns], body);
  }
}

std::vector<Segment> segments_of(const std::vector<GgmlWeight>& parts, GgmlActivations act,
                                 const GgmlDotKernels& dot) {
  std::vector<Segment> segs;
  int64_t col = 0;
  for (const GgmlWeight& p : parts) {
    const bool int_dot = act == GgmlActivations::kNative && ggml_has_int_dot(p.type);
    segs.push_back({p.type, p.rows.data_as<uint8_t>(), ggml_row_bytes(p.type, p.in), col, p.out,
                    int_dot, p.panel, &dot});
    col += p.out;
  }
  return segs;
}

// The dot-product types the segments read (a bit per GgmlActType).
unsigned needs_of(const std::vector<Segment>& segs) {
  unsigned n = 0;
  for (const Segment& s : segs) {
    if (s.int_dot) n |= 1u << static_cast<int>(ggml_act_type(s.type));
  }
  return n;
}

uint64_t bytes_of(const std::vector<GgmlWeight>& parts) {
  uint64_t b = 0;
  for (const GgmlWeight& p : parts) b += p.rows.nbytes();
  return b;
}

std::string type_names(const std::vector<GgmlWeight>& parts) {
  std::string s;
  for (const GgmlWeight& p : parts) {
    const std::string n(ggml_type_info(p.type).name);
    if (s.find(n) == std::string::npos) s += (s.empty() ? "" : "+") + n;
  }
  return s;
}

std::string act_suffix(GgmlActivations act) { return act == GgmlActivations::kF32 ? ",f32" : ""; }

// With FP32 activations the dequantizing GEMM reads the rows as stored; otherwise the dot
// table chose each type's layout (its panels, or the rows as stored).
std::string table_name(const GgmlDotKernels& dot, GgmlActivations act) {
  if (act == GgmlActivations::kF32)
    return "ggml_gemm:" + std::string(isa_name(ggml_gemm_kernels().isa));
  return "ggml_dot:" + std::string(isa_name(dot.isa));
}

// The kernel table's panels in place of the stored rows, where it reads this type's rows
// interleaved; the mapped rows' pages are released, so the weights are held once.
std::vector<GgmlWeight> for_kernels(std::vector<GgmlWeight> parts, GgmlActivations act,
                                    const GgmlDotKernels& kern, ThreadPool* pool) {
  for (GgmlWeight& p : parts) {
    if (act != GgmlActivations::kNative || !ggml_has_int_dot(p.type) || p.panel != 0) continue;
    const int panel = kern.panel_rows(p.type);
    const int64_t rb = ggml_row_bytes(p.type, p.in);
    if (panel == 0) {
      // Rows read as stored still leave the file's 4 KiB pages for huge ones, where a decode
      // step streams them (the AVX2 table's row kernels on Q4_K_M, before Q6_K had panels
      // there: lm_head 11.5-13.9 -> 10.4-10.6 ms a step).
      Tensor copy = Tensor::empty(DType::kU8, {p.out, rb}, Placement::kHugePages);
      const uint8_t* src = p.rows.data_as<uint8_t>();
      uint8_t* dst = copy.mutable_data_as<uint8_t>();
      const int64_t stride = p.rows.dim(1);
      for_ranges(pool, p.out, [&](int64_t r0, int64_t r1, int) {
        for (int64_t r = r0; r < r1; ++r) std::memcpy(dst + r * rb, src + r * stride, rb);
      });
      p.rows.release_mapped_pages();
      p.rows = std::move(copy);
      continue;
    }
    // On huge pages, as every packed weight: a decode step streams them whole (core/huge_pages.h).
    Tensor packed = Tensor::empty(
        DType::kU8, {ggml_panel_bytes(p.type, panel, p.out, p.in) / rb, rb}, Placement::kHugePages);
    // Whole panels per thread: the threads also share the first touch of the new pages, which
    // in a virtual machine costs about as much as the repack itself.
    const uint8_t* src = p.rows.data_as<uint8_t>();
    uint8_t* dst = packed.mutable_data_as<uint8_t>();
    const int64_t stride = p.rows.dim(1), panels = (p.out + panel - 1) / panel;
    for_ranges(pool, panels, [&](int64_t q0, int64_t q1, int) {
      const int64_t r0 = q0 * panel, r1 = std::min(q1 * panel, p.out);
      kern.repack(p.type, src + r0 * stride, stride, r1 - r0, p.in, dst + r0 * rb);
    });
    p.rows.release_mapped_pages();
    p.rows = std::move(packed);
    p.panel = panel;
  }
  return parts;
}

class GgmlLinear final : public Linear {
 public:
  GgmlLinear(std::vector<GgmlWeight> parts, int64_t in, int64_t out, GgmlActivations act,
             ThreadPool* pool)
      : Linear(in, out),
        dot_(ggml_dot_kernels()),
        parts_(for_kernels(std::move(parts), act, dot_, pool)),
        segs_(segments_of(parts_, act, dot_)),
        needs_(needs_of(segs_)),
        act_(act) {}
  std::string scheme_name() const override {
    return "gguf:" + type_names(parts_) + act_suffix(act_);
  }
  std::string kernel_table() const override { return table_name(dot_, act_); }
  uint64_t weight_bytes() const override { return bytes_of(parts_); }
  void forward(const float* x, int64_t m, float* y, ExecContext& ctx) const override {
    const int64_t k = in_features();
    const Acts a = prepare(dot_, x, m, k, k, needs_, 0, ctx);
    run_segments(segs_, a, m, k, y, out_features(), ctx);
  }

 private:
  const GgmlDotKernels& dot_;
  std::vector<GgmlWeight> parts_;  // keeps the mapped blocks alive
  std::vector<Segment> segs_;
  unsigned needs_;
  GgmlActivations act_;
};

class GgmlExpertBank final : public ExpertBank {
 public:
  GgmlExpertBank(std::vector<std::vector<GgmlWeight>> w13, std::vector<GgmlWeight> w2,
                 int64_t hidden, int64_t inter, GgmlActivations act, ThreadPool* pool)
      : ExpertBank(static_cast<int64_t>(w13.size()), hidden, inter),
        dot_(ggml_dot_kernels()),
        w13_(std::move(w13)),
        w2_(std::move(w2)),
        act_(act) {
    for (size_t e = 0; e < w13_.size(); ++e) {
      w13_[e] = for_kernels(std::move(w13_[e]), act, dot_, pool);
      w2_[e] = std::move(for_kernels({std::move(w2_[e])}, act, dot_, pool)[0]);
      seg13_.push_back(segments_of(w13_[e], act, dot_));
      seg2_.push_back(segments_of({w2_[e]}, act, dot_)[0]);
      needs13_ |= needs_of(seg13_.back());
      needs2_ |= needs_of({seg2_.back()});
    }
  }
  std::string scheme_name() const override {
    return "gguf:" + type_names(w13_[0]) + "/" + type_names({w2_[0]}) + act_suffix(act_);
  }
  std::string kernel_table() const override { return table_name(dot_, act_); }
  uint64_t weight_bytes() const override {
    uint64_t b = 0;
    for (size_t e = 0; e < w13_.size(); ++e) b += bytes_of(w13_[e]) + w2_[e].rows.nbytes();
    return b;
  }
  // FP32 rows in; gmm1 quantizes them once for every expert when its types ask for it.
  RowFormat input_format(DispatchMode) const override { return RowFormat::f32(); }
  void run(const ActRows& rows, const int64_t* offsets, float* out, ExecContext& ctx,
           ExpertTimes* times) const override;

 private:
  const GgmlDotKernels& dot_;
  std::vector<std::vector<GgmlWeight>> w13_;
  std::vector<GgmlWeight> w2_;
  std::vector<std::vector<Segment>> seg13_;
  std::vector<Segment> seg2_;
  unsigned needs13_ = 0, needs2_ = 0;
  GgmlActivations act_;
};

void GgmlExpertBank::run(const ActRows& rows, const int64_t* offsets, float* out, ExecContext& ctx,
                         ExpertTimes* times) const {
  const int64_t h = hidden(), i = inter(), total = offsets[num_experts()];
  SplitClock clock(times);
  ThreadPool* pool = ctx.pool();
  int64_t max_rows = 0;
  const std::span<const int64_t> active = active_experts(offsets, num_experts(), ctx, &max_rows);
  float* gu = ctx.workspace().floats(kWsGgmlGateUp, total * 2 * i);
  const Acts x = prepare(dot_, rows.f32.data(), total, h, h, needs13_, 0, ctx);
  const Acts g = act_buffers(gu, total, i, 2 * i, needs2_, 2, ctx);
  // gmm1 with its epilogue, a unit of intermediate columns at a time (whole blocks of gmm2's
  // dot-product types): gate and up for those columns, SwiGLU, and gmm2's activations
  // quantized from them while they are in cache, where a pass over all rows would follow.
  const int64_t unit = i % 256 == 0 ? 256 : 32;
  int64_t tmp_bytes = 64;
  for (int t = 0; t < 2; ++t) {
    if (g.q[t] != nullptr) {
      tmp_bytes = std::max(tmp_bytes, ggml_act_row_bytes(static_cast<GgmlActType>(t), i));
    }
  }
  ctx.reserve_arenas<uint8_t>(kArenaGgmlChunk, tmp_bytes);
  ctx.reserve_arenas<float>(kArenaGgmlGemm, kGgmlGemmRows * std::max(h, i));
  for_each_expert_block(
      active, i, pool, total * 2 * i * h,
      [&](int64_t e, int64_t c0, int64_t c1, int thread) {
        const int64_t r0 = offsets[e], m = offsets[e + 1] - r0;
        const Acts xe = x.from_row(r0);
        for (const Segment& s : seg13_[static_cast<size_t>(e)]) {
          for (const int64_t off : {int64_t{0}, i}) {
            const int64_t a = std::max(off + c0, s.col0), b = std::min(off + c1, s.col0 + s.cols);
            if (a < b) {
              run_segment(s, xe, m, h, gu + r0 * 2 * i, 2 * i, a - s.col0, b - s.col0,
                          ctx.arena(thread));
            }
          }
        }
        uint8_t* tmp = ctx.arena(thread).get<uint8_t>(kArenaGgmlChunk, tmp_bytes);
        for (int64_t r = r0; r < r0 + m; ++r) {
          float* gr = gu + r * 2 * i;
          swiglu(gr + c0, gr + i + c0, c1 - c0, gr + c0);
          for (int t = 0; t < 2; ++t) {
            if (g.q[t] == nullptr) continue;
            quantize_range(dot_, static_cast<GgmlActType>(t), gr + c0, i, c0, c1,
                           const_cast<uint8_t*>(g.q[t]) + r * g.qstride[t], tmp);
          }
        }
      },
      unit);
  clock.lap(times ? &times->gmm1 : nullptr);
  for_each_expert_block(
      active, h, pool, total * h * i,
      [&](int64_t e, int64_t c0, int64_t c1, int thread) {
        const int64_t r0 = offsets[e], m = offsets[e + 1] - r0;
        const Segment& s = seg2_[static_cast<size_t>(e)];
        run_segment(s, g.from_row(r0), m, i, out + r0 * h, h, c0, c1, ctx.arena(thread));
      },
      kUnit);
  clock.lap(times ? &times->gmm2 : nullptr);
}

Status check_part(const GgmlWeight& p, const std::string& name) {
  if (p.rows.rank() != 2 || p.rows.dim(0) != p.out ||
      p.rows.dim(1) != ggml_row_bytes(p.type, p.in)) {
    return invalid_argument(name + ": ggml rows " + p.rows.describe() + " do not hold [" +
                            std::to_string(p.out) + ", " + std::to_string(p.in) + "] " +
                            std::string(ggml_type_info(p.type).name) + " values");
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Linear>> make_ggml_linear(std::vector<GgmlWeight> parts,
                                                 const std::string& name, GgmlActivations act,
                                                 ThreadPool* pool) {
  if (parts.empty()) return invalid_argument(name + ": no weight parts");
  int64_t out = 0;
  for (const GgmlWeight& p : parts) {
    MX_RETURN_IF_ERROR(check_part(p, name));
    if (p.in != parts[0].in) return invalid_argument(name + ": parts disagree on the input width");
    out += p.out;
  }
  const int64_t in = parts[0].in;
  return std::unique_ptr<Linear>(new GgmlLinear(std::move(parts), in, out, act, pool));
}

Result<std::unique_ptr<ExpertBank>> make_ggml_expert_bank(
    std::vector<std::vector<GgmlWeight>> gate_up, std::vector<GgmlWeight> down,
    const std::string& name, GgmlActivations act, ThreadPool* pool) {
  if (gate_up.empty() || gate_up.size() != down.size() || gate_up[0].size() != 2) {
    return invalid_argument(name + ": expert tensor counts differ");
  }
  const int64_t h = gate_up[0][0].in, i = gate_up[0][0].out;
  for (size_t e = 0; e < gate_up.size(); ++e) {
    const std::string en = name + ".experts." + std::to_string(e);
    for (const GgmlWeight& p : gate_up[e]) MX_RETURN_IF_ERROR(check_part(p, en));
    MX_RETURN_IF_ERROR(check_part(down[e], en));
    if (gate_up[e].size() != 2 || gate_up[e][0].out != i || gate_up[e][1].out != i ||
        gate_up[e][0].in != h || gate_up[e][1].in != h || down[e].out != h || down[e].in != i) {
      return invalid_argument(en + ": expert shapes differ from expert 0");
    }
  }
  return std::unique_ptr<ExpertBank>(
      new GgmlExpertBank(std::move(gate_up), std::move(down), h, i, act, pool));
}

Tensor dequantize_ggml(const GgmlWeight& w) {
  Tensor out = Tensor::empty(DType::kF32, {w.out, w.in});
  const GgmlDequantFn f = ggml_kernels().dequant[static_cast<uint32_t>(w.type)];
  const auto* src = w.rows.data_as<uint8_t>();
  const int64_t rb = w.rows.dim(1);
  for (int64_t r = 0; r < w.out; ++r) {
    f(src + r * rb, out.mutable_data_as<float>() + r * w.in, w.in);
  }
  return out;
}

Result<MxWeights> ggml_mxfp4_to_mx(const GgmlWeight& w, Scheme scheme, const std::string& name,
                                   ThreadPool* pool) {
  const SchemeInfo& info = scheme_info(scheme);
  if (w.type != GgmlType::kMXFP4 || info.weight != ElemFormat::kE2M1 || info.dual) {
    return invalid_argument(name + ": only MXFP4 blocks move into a single-level E2M1 scheme");
  }
  MxWeights q;
  q.scheme = scheme;
  q.n = w.out;
  q.k = w.in;
  const int64_t nb = mx_num_blocks(w.in), rb = fp4_packed_bytes(w.in);
  q.codes = Tensor::empty(DType::kU8, {q.n, rb});
  q.scales = Tensor::empty(DType::kU8, {q.n, nb});
  const auto* src = w.rows.data_as<uint8_t>();
  uint8_t* codes = q.codes.mutable_data_as<uint8_t>();
  uint8_t* scales = q.scales.mutable_data_as<uint8_t>();
  // The first row that cannot move, if any (each thread keeps its own lowest).
  std::vector<int64_t> bad(static_cast<size_t>(pool != nullptr ? pool->num_threads() : 1), q.n);
  for_ranges(pool, q.n, [&](int64_t r0, int64_t r1, int t) {
    for (int64_t r = r0; r < r1; ++r) {
      if (!ggml_mxfp4_row_to_ocp(src + r * w.rows.dim(1), w.in, codes + r * rb, scales + r * nb)) {
        bad[static_cast<size_t>(t)] = std::min(bad[static_cast<size_t>(t)], r);
        return;
      }
    }
  });
  const int64_t first = *std::min_element(bad.begin(), bad.end());
  if (first < q.n) {
    return invalid_argument(name + ": row " + std::to_string(first) +
                            " has the MXFP4 exponent byte 255 (2^127), which an OCP E8M0 "
                            "scale cannot hold");
  }
  return q;
}

}  // namespace mx

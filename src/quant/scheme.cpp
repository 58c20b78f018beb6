#include "quant/scheme.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/thread_pool.h"
#include "formats/act_quant.h"
#include "formats/hadamard.h"
#include "formats/half.h"
#include "formats/mx_layout.h"
#include "kernels/ggml_dot.h"

namespace mx {
namespace {

constexpr std::array<SchemeInfo, 6> kSchemes = {{
    {Scheme::kBf16, "bf16", "FLOAT", ElemFormat::kE4M3, ElemFormat::kE4M3, false},
    {Scheme::kW8A8Mxfp8, "w8a8_mxfp8", "W8A8_MXFP8", ElemFormat::kE4M3, ElemFormat::kE4M3, false},
    {Scheme::kW4A8Mxfp4, "w4a8_mxfp4", "W4A8_MXFP", ElemFormat::kE2M1, ElemFormat::kE4M3, false},
    {Scheme::kW4A4Mxfp4, "w4a4_mxfp4", "W4A4_MXFP4", ElemFormat::kE2M1, ElemFormat::kE2M1, false},
    {Scheme::kW4A4Mxfp4Dual, "w4a4_mxfp4_dual", "W4A4_MXFP4_DUALSCALE", ElemFormat::kE2M1,
     ElemFormat::kE2M1, true},
    {Scheme::kW4A8Mxfp4Int8, "w4a8_mxfp4_int8", "W4A8_MXFP", ElemFormat::kE2M1, ElemFormat::kE4M3,
     false, true},
}};

// One row of a contiguous BF16, F16 or F32 weight as FP32.
void row_to_f32(const Tensor& t, int64_t r, float* out) {
  const int64_t k = t.dim(1);
  switch (t.dtype()) {
    case DType::kBF16:
      for (int64_t i = 0; i < k; ++i) out[i] = bf16_to_float(t.data_as<uint16_t>()[r * k + i]);
      break;
    case DType::kF16:
      for (int64_t i = 0; i < k; ++i) out[i] = fp16_to_float(t.data_as<uint16_t>()[r * k + i]);
      break;
    default:
      std::memcpy(out, t.data_as<float>() + r * k, static_cast<size_t>(k) * sizeof(float));
  }
}

int64_t codes_per_row(ElemFormat f, int64_t k) {
  return f == ElemFormat::kE2M1 ? fp4_packed_bytes(k) : k;
}

// n values as int8 blocks of 32 (the last zero-padded) with ggml's Q8_0 numerics, through the
// active table's quantizer (ggml_dot.h), so that these codes are those the GGUF kernels see.
void quantize_int8_blocks(const float* x, int64_t n, int8_t* codes, float* scales) {
  const GgmlDotKernels& kern = ggml_dot_kernels();
  constexpr int64_t kStep = 8 * kMxBlock;
  alignas(64) uint8_t row[8 * kMxBlock + 128];
  float padded[kMxBlock];
  for (int64_t c0 = 0; c0 < n; c0 += kStep) {
    const int64_t len = std::min(kStep, n - c0), whole = len / kMxBlock * kMxBlock;
    const float* src = x + c0;
    int64_t m = whole;
    if (whole < len) {
      // The ragged last block: its values, then zeros.
      std::fill(padded, padded + kMxBlock, 0.0f);
      std::copy(x + c0 + whole, x + c0 + len, padded);
    }
    if (m > 0) {
      kern.quantize(GgmlActType::kQ8_0, src, m, row);
      std::memcpy(codes + c0, row, static_cast<size_t>(m));
      std::memcpy(scales + c0 / kMxBlock, row + m, static_cast<size_t>(m / kMxBlock) * 4);
    }
    if (whole < len) {
      kern.quantize(GgmlActType::kQ8_0, padded, kMxBlock, row);
      std::memcpy(codes + c0 + whole, row, kMxBlock);
      std::memcpy(scales + (c0 + whole) / kMxBlock, row + kMxBlock, 4);
    }
  }
}

}  // namespace

const SchemeInfo& scheme_info(Scheme s) { return kSchemes[static_cast<size_t>(s)]; }

std::optional<Scheme> scheme_from_name(std::string_view name) {
  for (const auto& s : kSchemes) {
    if (s.name == name) return s.scheme;
  }
  return std::nullopt;
}

std::optional<Scheme> scheme_from_quantization_flag(std::string_view flag) {
  if (flag == "mxfp8") return Scheme::kW8A8Mxfp8;
  if (flag == "mxfp_w4a8") return Scheme::kW4A8Mxfp4;
  if (flag == "mxfp4") return Scheme::kW4A4Mxfp4Dual;
  return scheme_from_name(flag);
}

std::optional<Scheme> scheme_from_offline_type(std::string_view type) {
  for (const auto& s : kSchemes) {
    if (s.offline_type == type) return s.scheme;
  }
  return std::nullopt;
}

int64_t MxWeights::row_bytes() const { return codes_per_row(scheme_info(scheme).weight, k); }
uint64_t MxWeights::bytes() const {
  return codes.nbytes() + scales.nbytes() + (chunk_scales.defined() ? chunk_scales.nbytes() : 0);
}

Status check_rotation(int64_t rotation, const std::string& name) {
  if (rotation == 0 || hadamard_block_ok(rotation)) return Status::ok();
  return invalid_argument(name + ": a rotation block of " + std::to_string(rotation) +
                          " is not one of 32 or 128");
}

Result<MxWeights> quantize_weight(const Tensor& w, Scheme scheme, ScaleRule rule,
                                  const std::string& name, ThreadPool* pool, int64_t rotation) {
  if (scheme == Scheme::kBf16) return invalid_argument(name + ": bf16 is not an MX scheme");
  if (w.rank() != 2) return invalid_argument(name + ": expected a 2-D weight, got " + w.describe());
  if (w.dtype() != DType::kBF16 && w.dtype() != DType::kF16 && w.dtype() != DType::kF32) {
    return invalid_argument(name + ": cannot quantize a " + w.describe() + " weight");
  }
  const SchemeInfo& info = scheme_info(scheme);
  MxWeights q;
  q.scheme = scheme;
  q.n = w.dim(0);
  q.k = w.dim(1);
  q.rotation = rotation;
  MX_RETURN_IF_ERROR(check_rotation(rotation, name));
  const int64_t nb = mx_num_blocks(q.k), rb = q.row_bytes();
  q.codes = Tensor::empty(DType::kU8, {q.n, rb});
  q.scales = Tensor::empty(DType::kU8, {q.n, nb});
  if (info.dual) q.chunk_scales = Tensor::empty(DType::kF32, {q.n, mx_num_chunks(q.k)});
  const Tensor c = w.is_contiguous() ? w : w.contiguous_copy();
  // E4M3 and E2M1 rows go through the vector codecs (bit for bit the reference's codes; BF16
  // read as stored); dual-level rows and other formats through the reference.
  const ActQuantKernels& aq = act_quant_kernels();
  const bool vec =
      !info.dual && (info.weight == ElemFormat::kE4M3 || info.weight == ElemFormat::kE2M1);
  const bool fp4 = info.weight == ElemFormat::kE2M1;
  auto rows = [&](int64_t r0, int64_t r1, int) {
    std::vector<float> f(static_cast<size_t>(q.k));
    std::vector<uint8_t> codes(static_cast<size_t>(q.k));
    for (int64_t r = r0; r < r1; ++r) {
      uint8_t* sc = q.scales.mutable_data_as<uint8_t>() + r * nb;
      uint8_t* dst = q.codes.mutable_data_as<uint8_t>() + r * rb;
      if (vec && c.dtype() == DType::kBF16 && rotation == 0) {
        const uint16_t* x = c.data_as<uint16_t>() + r * q.k;
        (fp4 ? aq.bf16_to_mxfp4 : aq.bf16_to_mxfp8)(x, q.k, rule, dst, sc);
        continue;
      }
      row_to_f32(c, r, f.data());
      if (rotation > 0) hadamard_kernels().rotate(f.data(), q.k, rotation);
      if (vec) {
        (fp4 ? aq.f32_to_mxfp4 : aq.f32_to_mxfp8)(f.data(), q.k, rule, dst, sc);
      } else if (info.dual) {
        mxfp4_dual_quantize_row(f.data(), q.k, codes.data(), sc,
                                q.chunk_scales.mutable_data_as<float>() + r * mx_num_chunks(q.k));
        fp4_pack(codes.data(), q.k, Fp4Order::kAdjacent, dst);
      } else {
        mx_quantize_row(f.data(), q.k, info.weight, rule, codes.data(), sc);
        if (fp4) {
          fp4_pack(codes.data(), q.k, Fp4Order::kAdjacent, dst);
        } else {
          std::memcpy(dst, codes.data(), static_cast<size_t>(q.k));
        }
      }
    }
  };
  if (pool == nullptr || q.n < 64) {
    rows(0, q.n, 0);
  } else {
    pool->parallel_for(q.n, rows);
  }
  return q;
}

Result<MxWeights> stack_mx_weights(const std::vector<MxWeights>& parts, const std::string& name) {
  if (parts.empty()) return invalid_argument(name + ": nothing to stack");
  if (parts.size() == 1) return parts[0];
  MxWeights out;
  out.scheme = parts[0].scheme;
  out.k = parts[0].k;
  out.rotation = parts[0].rotation;
  for (const MxWeights& p : parts) {
    if (p.scheme != out.scheme || p.k != out.k || p.rotation != parts[0].rotation) {
      return invalid_argument(name + ": packed parts differ in scheme, input width or rotation");
    }
    out.n += p.n;
  }
  const bool dual = scheme_info(out.scheme).dual;
  out.codes = Tensor::empty(DType::kU8, {out.n, out.row_bytes()});
  out.scales = Tensor::empty(DType::kU8, {out.n, mx_num_blocks(out.k)});
  if (dual) out.chunk_scales = Tensor::empty(DType::kF32, {out.n, mx_num_chunks(out.k)});
  size_t oc = 0, os = 0, o0 = 0;
  for (const MxWeights& p : parts) {
    std::memcpy(out.codes.mutable_data_as<uint8_t>() + oc, p.codes.data(), p.codes.nbytes());
    std::memcpy(out.scales.mutable_data_as<uint8_t>() + os, p.scales.data(), p.scales.nbytes());
    oc += p.codes.nbytes();
    os += p.scales.nbytes();
    if (dual) {
      std::memcpy(reinterpret_cast<uint8_t*>(out.chunk_scales.mutable_data()) + o0,
                  p.chunk_scales.data(), p.chunk_scales.nbytes());
      o0 += p.chunk_scales.nbytes();
    }
  }
  return out;
}

Tensor dequantize_weight(const MxWeights& w) {
  const SchemeInfo& info = scheme_info(w.scheme);
  Tensor out = Tensor::empty(DType::kF32, {w.n, w.k});
  std::vector<uint8_t> codes(static_cast<size_t>(w.k));
  const int64_t nb = mx_num_blocks(w.k), rb = w.row_bytes();
  for (int64_t r = 0; r < w.n; ++r) {
    const uint8_t* src = w.codes.data_as<uint8_t>() + r * rb;
    if (info.weight == ElemFormat::kE2M1) {
      fp4_unpack(src, w.k, Fp4Order::kAdjacent, codes.data());
    } else {
      std::memcpy(codes.data(), src, static_cast<size_t>(w.k));
    }
    float* dst = out.mutable_data_as<float>() + r * w.k;
    const uint8_t* sc = w.scales.data_as<uint8_t>() + r * nb;
    if (info.dual) {
      mxfp4_dual_dequantize_row(codes.data(), sc,
                                w.chunk_scales.data_as<float>() + r * mx_num_chunks(w.k), w.k, dst);
    } else {
      mx_dequantize_row(codes.data(), sc, w.k, info.weight, dst);
    }
    // The rotation is its own inverse.
    if (w.rotation > 0) hadamard_kernels().rotate(dst, w.k, w.rotation);
  }
  return out;
}

namespace {

// Grows v to at least n and never shrinks it: rows held in an execution context keep their
// largest size, so a decode step after a prefill neither frees nor zero-fills them again.
template <typename T>
void grow_to(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
}

}  // namespace

void ActRows::resize(int64_t r) {
  rows = r;
  if (!quantized) {
    grow_to(f32, r * k);
    return;
  }
  grow_to(codes, r * row_bytes);
  if (int8) {
    grow_to(int8_scales, r * mx_num_blocks(k));
    return;
  }
  grow_to(scales, r * mx_num_blocks(k));
  if (dual) grow_to(chunk_scales, r * mx_num_chunks(k));
}

RowFormat RowFormat::mx(Scheme s, int64_t rotation) {
  MX_CHECK(s != Scheme::kBf16 && (rotation == 0 || hadamard_block_ok(rotation)));
  return RowFormat(s, rotation);
}

Scheme RowFormat::scheme() const {
  MX_CHECK(mx_.has_value());
  return *mx_;
}

void act_rows_init(RowFormat format, int64_t k, ScaleRule rule, ActRows* out) {
  (void)rule;
  out->quantized = format.quantized();
  out->k = k;
  out->rows = 0;
  out->rotation = format.rotation();
  if (!format.quantized()) {
    out->format = ElemFormat::kE4M3;
    out->dual = false;
    out->int8 = false;
    out->row_bytes = 0;
    return;
  }
  const SchemeInfo& info = scheme_info(format.scheme());
  out->format = info.activation;
  out->dual = info.dual;
  out->int8 = info.int8_act;
  out->row_bytes = info.int8_act ? mx_num_blocks(k) * kMxBlock : codes_per_row(info.activation, k);
}

bool ActRows::in_format(RowFormat want) const {
  if (!quantized || !want.quantized()) return !quantized && !want.quantized();
  if (rotation != want.rotation()) return false;
  const SchemeInfo& info = scheme_info(want.scheme());
  if (int8 || info.int8_act) return int8 == info.int8_act;
  return format == info.activation && dual == info.dual;
}

void act_rows_quantize(const float* x, int64_t r, ScaleRule rule, ActRows* out) {
  if (!out->quantized) {
    std::memcpy(out->f32.data() + r * out->k, x, static_cast<size_t>(out->k) * sizeof(float));
    return;
  }
  act_rows_quantize_cols(x, r, 0, out->k, rule, out);
}

int64_t act_rows_unit(const ActRows& rows) {
  return std::max<int64_t>(rows.dual ? kMxDualChunk : kMxBlock, rows.rotation);
}

namespace {
void quantize_cols(const float* x, int64_t r, int64_t col0, int64_t n, ScaleRule rule,
                   ActRows* out);
}  // namespace

void act_rows_quantize_cols(const float* x, int64_t r, int64_t col0, int64_t n, ScaleRule rule,
                            ActRows* out) {
  MX_CHECK(out->quantized && col0 % act_rows_unit(*out) == 0 && col0 + n <= out->k);
  if (out->rotation == 0) return quantize_cols(x, r, col0, n, rule, out);
  // Rotated a piece at a time in a buffer that stays in L1, each piece quantized as soon as it
  // is rotated; pieces are whole dual-level chunks, so the chunk scales see what they would.
  constexpr int64_t kPiece = kMxDualChunk;
  static_assert(kPiece % 128 == 0);
  float t[kPiece];
  const HadamardKernels& h = hadamard_kernels();
  for (int64_t base = 0; base < n; base += kPiece) {
    const int64_t len = std::min(kPiece, n - base);
    std::memcpy(t, x + base, static_cast<size_t>(len) * sizeof(float));
    h.rotate(t, len, out->rotation);
    quantize_cols(t, r, col0 + base, len, rule, out);
  }
}

namespace {

void quantize_cols(const float* x, int64_t r, int64_t col0, int64_t n, ScaleRule rule,
                   ActRows* out) {
  const int64_t k = out->k, nb = mx_num_blocks(k);
  if (out->int8) {
    quantize_int8_blocks(x, n,
                         reinterpret_cast<int8_t*>(out->codes.data() + r * out->row_bytes) + col0,
                         out->int8_scales.data() + r * nb + col0 / kMxBlock);
    return;
  }
  uint8_t* codes = out->codes.data() + r * out->row_bytes;
  uint8_t* scales = out->scales.data() + r * nb;
  const ActQuantKernels& kern = act_quant_kernels();
  if (out->dual) {
    // mxfp4_dual_quantize_row's arithmetic, with the per-32 step on the active kernel (which
    // matches mx_quantize_row bit for bit).
    float t[kMxDualChunk];
    for (int64_t base = 0; base < n; base += kMxDualChunk) {
      const int64_t len = std::min<int64_t>(kMxDualChunk, n - base);
      float amax = 0.0f;
      for (int64_t i = 0; i < len; ++i) amax = std::max(amax, std::fabs(x[base + i]));
      const float s0 = amax / 6.0f;
      out->chunk_scales[static_cast<size_t>(r * mx_num_chunks(k) + (col0 + base) / kMxDualChunk)] =
          s0;
      for (int64_t i = 0; i < len; ++i) t[i] = s0 == 0.0f ? 0.0f : round_to_bf16(x[base + i] / s0);
      kern.f32_to_mxfp4(t, len, ScaleRule::kFloor, codes + (col0 + base) / 2,
                        scales + (col0 + base) / kMxBlock);
    }
    return;
  }
  if (out->format == ElemFormat::kE2M1) {
    kern.f32_to_mxfp4(x, n, rule, codes + col0 / 2, scales + col0 / kMxBlock);
  } else {
    kern.f32_to_mxfp8(x, n, rule, codes + col0, scales + col0 / kMxBlock);
  }
}

}  // namespace

void act_rows_copy(const ActRows& src, int64_t s, ActRows* dst, int64_t d) {
  const int64_t k = src.k;
  if (!src.quantized) {
    std::memcpy(dst->f32.data() + d * k, src.f32.data() + s * k,
                static_cast<size_t>(k) * sizeof(float));
    return;
  }
  const int64_t nb = mx_num_blocks(k);
  std::memcpy(dst->codes.data() + d * src.row_bytes, src.codes.data() + s * src.row_bytes,
              static_cast<size_t>(src.row_bytes));
  if (src.int8) {
    std::memcpy(dst->int8_scales.data() + d * nb, src.int8_scales.data() + s * nb,
                static_cast<size_t>(nb) * sizeof(float));
    return;
  }
  std::memcpy(dst->scales.data() + d * nb, src.scales.data() + s * nb, static_cast<size_t>(nb));
  if (src.dual) {
    const int64_t nc = mx_num_chunks(k);
    std::memcpy(dst->chunk_scales.data() + d * nc, src.chunk_scales.data() + s * nc,
                static_cast<size_t>(nc) * sizeof(float));
  }
}

}  // namespace mx

// The AVX-512 table of the integer GEMM over ggml blocks: the 256-bit kernels of
// ggml_dot_simd.h with VNNI, and 512-bit kernels for Q4_K, Q6_K (the types of the most
// downloaded files), Q4_0, Q8_0, MXFP4, IQ4_NL and IQ4_XS, up to eight activation rows a call. A
// 512-bit register holds 64 consecutive values of a super-block: Q4_K's 32 bytes of a pair of
// sub-blocks broadcast to both halves and shifted by 0 and 4, Q6_K's 64 low-nibble bytes with their
// 2-bit fields shifted per half, so that the activation codes load as they lie.
#include "kernels/ggml_dot_simd.h"

namespace mx::ggml_dot_detail {
namespace {

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }

inline __m512i broadcast256(const void* p) {
  return _mm512_maskz_broadcast_i64x4(0xFF, load256(p));
}

// GCC 12's unmasked forms (_mm512_reduce_add_ps, the casts to 256 bits, the 256-bit
// broadcast) pass an undefined vector that -Wuninitialized flags: all-ones masks instead.
inline float hsum512(__m512 v) {
  return hsum(_mm256_add_ps(_mm512_maskz_extractf32x8_ps(0xFF, v, 0),
                            _mm512_maskz_extractf32x8_ps(0xFF, v, 1)));
}

// vpermw indices: 32 int16 lanes in runs of `run` lanes, run j taking scale first + j.
struct ScaleIndex {
  alignas(64) int16_t lanes[32];
};
constexpr ScaleIndex scale_index(int first, int run) {
  ScaleIndex s{};
  for (int i = 0; i < 32; ++i) s.lanes[i] = static_cast<int16_t>(first + i / run);
  return s;
}
// Q4_K chunk c: sub-blocks 2c and 2c + 1, 32 values each. Q6_K quarter q: groups of 16.
constexpr ScaleIndex kQ4kIndex[4] = {scale_index(0, 16), scale_index(2, 16), scale_index(4, 16),
                                     scale_index(6, 16)};
constexpr ScaleIndex kQ6kIndex[4] = {scale_index(0, 8), scale_index(4, 8), scale_index(8, 8),
                                     scale_index(12, 8)};
// Dword lanes 0-7 take element 2c of a vector, lanes 8-15 element 2c + 1.
struct HalvesIndex {
  alignas(64) int32_t lanes[16];
};
constexpr HalvesIndex halves_index(int c) {
  HalvesIndex h{};
  for (int i = 0; i < 16; ++i) h.lanes[i] = 2 * c + i / 8;
  return h;
}
constexpr HalvesIndex kHalvesIndex[4] = {halves_index(0), halves_index(1), halves_index(2),
                                         halves_index(3)};
inline __m512i scale_runs(__m512i sc, const ScaleIndex& idx) {
  return _mm512_permutexvar_epi16(_mm512_load_si512(idx.lanes), sc);
}

// Q4_K: each pair of sub-blocks' exact integer dot on vpdpbusd (lanes 0-7 the first, 8-15 the
// second), widened and scaled by d times its six-bit scale in FP32 (exact products), summed
// per super-block, then times the row's dx; the mins' term enters lanes 0-7. Against
// vpmaddubsw + vpmaddwd with int16 scales (two multiplies a 64-value step per row) and four
// rows: the 30B-A3B shape's prefill 3-4% faster with eight rows.
template <int R>
void dot_q4_k_512(const uint8_t* w, const ActRowView* x, int64_t k, float* out) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i shift = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* blk = w + b * 144;
    const float d = fp16_at(blk), dmin = fp16_at(blk + 2);
    uint64_t sc, m;
    k4_scales(blk + 4, &sc, &m);
    const __m128i m8 = _mm_cvtsi64_si128(static_cast<int64_t>(m));
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
    // Lane l of chunk c: d * scale of sub-block 2c + l / 8.
    const __m512 scf = _mm512_mul_ps(
        _mm512_set1_ps(d),
        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(sc)))));
    __m512 blk_acc[R];
    for (int r = 0; r < R; ++r) blk_acc[r] = _mm512_setzero_ps();
    for (int c = 0; c < 4; ++c) {
      const __m512i raw = broadcast256(blk + 16 + 32 * c);
      const __m512i q = _mm512_and_si512(_mm512_srlv_epi64(raw, shift), m4);
      const __m512 fs = _mm512_permutexvar_ps(_mm512_load_si512(kHalvesIndex[c].lanes), scf);
      for (int r = 0; r < R; ++r) {
        const __m512i xv = load512(x[r].codes + 256 * b + 64 * c);
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, xv);
        blk_acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), fs, blk_acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const float dx = x[r].d[b];
      acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(dx), blk_acc[r], acc[r]);
      const __m256i msum = _mm256_madd_epi16(sums16(x[r], b), mins);
      acc[r] = _mm512_fnmadd_ps(_mm512_set1_ps(dmin * dx),
                                _mm512_cvtepi32_ps(_mm512_zextsi256_si512(msum)), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum512(acc[r]);
}

template <int R>
void dot_q6_k_512(const uint8_t* w, const ActRowView* x, int64_t k, float* out) {
  float acc[R];
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(0x03);
  const __m512i shift_a = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2);
  const __m512i shift_b = _mm512_setr_epi64(4, 4, 4, 4, 6, 6, 6, 6);
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* blk = w + b * 210;
    const float d = fp16_at(blk + 208);
    const __m256i sc256 = _mm256_cvtepi8_epi16(load128(blk + 192));
    const __m512i sc16 = _mm512_zextsi256_si512(sc256);
    __m512i isum[R];
    for (int r = 0; r < R; ++r) {
      // The -32 of every code, through the activations' sums of 16.
      const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(sums16(x[r], b), sc256), 5);
      isum[r] = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), off));
    }
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = load512(blk + 64 * h);
      const __m512i qh = broadcast256(blk + 128 + 32 * h);
      const __m512i qa = _mm512_or_si512(
          _mm512_and_si512(ql, m4),
          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, shift_a), m3), 4));
      const __m512i qb = _mm512_or_si512(
          _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, shift_b), m3), 4));
      const __m512i sa = scale_runs(sc16, kQ6kIndex[2 * h]);
      const __m512i sb = scale_runs(sc16, kQ6kIndex[2 * h + 1]);
      for (int r = 0; r < R; ++r) {
        const int8_t* xc = x[r].codes + 256 * b + 128 * h;
        const __m512i pa = _mm512_madd_epi16(_mm512_maddubs_epi16(qa, load512(xc)), sa);
        const __m512i pb = _mm512_madd_epi16(_mm512_maddubs_epi16(qb, load512(xc + 64)), sb);
        isum[r] = _mm512_add_epi32(isum[r], _mm512_add_epi32(pa, pb));
      }
    }
    // Lanes added as integers first: the -32 offsets sit in other lanes than their products.
    for (int r = 0; r < R; ++r) {
      const float total = static_cast<float>(_mm512_reduce_add_epi32(isum[r]));
      acc[r] = __builtin_fmaf(d * x[r].d[b], total, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = acc[r];
}

// The 32-value block types two blocks to a register: codes unpacked per block as the 256-bit
// kernels do, activation codes loaded as they lie, one scale per half. Signed codes meet the
// activations offset to unsigned (x ^ 0x80 reads as x + 128), so no row needs a sign fix; the
// 128 * (sum of each four weight codes) this adds starts every row's integer sum negated,
// computed once per pair of blocks (exact integers throughout).
template <class F, int R>
void dot32_512(const uint8_t* w, const ActRowView* x, int64_t k, float* out) {
  const int64_t nb = k / 32, pairs = nb / 2;
  __m512 acc[R];
  float off[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm512_setzero_ps();
    off[r] = 0.0f;
  }
  const __m512i k80 = _mm512_set1_epi8(static_cast<char>(0x80));
  // Lanes 0-7 take element 0 of a vector, lanes 8-15 element 1: a scale per block.
  const __m512i halves = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  for (int64_t p = 0; p < pairs; ++p) {
    const uint8_t* b0 = w + 2 * p * F::kBytes;
    const uint8_t* b1 = b0 + F::kBytes;
    const __m512i q = _mm512_inserti64x4(_mm512_zextsi256_si512(F::codes(b0)), F::codes(b1), 1);
    __m512i start = _mm512_setzero_si512();
    if constexpr (F::kSigned) {
      start = _mm512_sub_epi32(start, _mm512_dpbusd_epi32(_mm512_setzero_si512(), k80, q));
    }
    const __m512 dw = _mm512_permutexvar_ps(
        halves, _mm512_zextps128_ps512(_mm_setr_ps(F::scale(b0), F::scale(b1), 0.0f, 0.0f)));
    for (int r = 0; r < R; ++r) {
      const __m512i xv = load512(x[r].codes + 64 * p);
      __m512i isum;
      if constexpr (F::kSigned) {
        isum = _mm512_dpbusd_epi32(start, _mm512_xor_si512(xv, k80), q);
      } else {
        isum = _mm512_dpbusd_epi32(start, q, xv);
      }
      const __m128 d2 = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(x[r].d + 2 * p)));
      const __m512 dx = _mm512_permutexvar_ps(halves, _mm512_zextps128_ps512(d2));
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum), acc[r]);
      if constexpr (!F::kSigned) {
        off[r] += F::coef(b0) * x[r].s[2 * p] + F::coef(b1) * x[r].s[2 * p + 1];
      }
    }
  }
  float tail[R] = {};
  if (nb % 2 != 0) {
    // The odd last block through the 256-bit kernel, on views moved to it.
    ActRowView xt[R];
    for (int r = 0; r < R; ++r) {
      xt[r] = x[r];
      xt[r].codes += 32 * (nb - 1);
      xt[r].d += nb - 1;
      xt[r].s += nb - 1;
    }
    dot32<F, R>(w + (nb - 1) * F::kBytes, xt, 32, tail);
  }
  for (int r = 0; r < R; ++r) out[r] = hsum512(acc[r]) + off[r] + tail[r];
}

// IQ4_XS: a 512-bit register holds two 32-value sub-blocks, each one's 16 bytes broadcast to a
// pair of 128-bit lanes and shifted by 0 and 4 there, mapped through the IQ4_NL grid; their
// six-bit scales (biased by 32) are int16 runs of 16 lanes, as Q4_K's.
template <int R>
void dot_iq4_xs_512(const uint8_t* w, const ActRowView* x, int64_t k, float* out) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const __m512i grid = _mm512_maskz_broadcast_i32x4(0xFFFF, load128(kGgmlIq4Values));
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i shift = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* blk = w + b * 136;
    const float d = fp16_at(blk);
    uint16_t sh;
    uint32_t sl;
    std::memcpy(&sh, blk + 2, 2);
    std::memcpy(&sl, blk + 4, 4);
    // Sub-block j's scale in byte j: its low nibble (nibble j of sl) in bits 0-3, its two high
    // bits (bits 2j, 2j + 1 of sh) in bits 4-5; then biased by -32 as int16.
    const uint64_t six =
        _pdep_u64(sl, 0x0F0F0F0F0F0F0F0Full) | _pdep_u64(sh, 0x3030303030303030ull);
    const __m128i ls = _mm_sub_epi16(
        _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(six))), _mm_set1_epi16(32));
    const __m512i sc16 = _mm512_zextsi128_si512(ls);
    __m512i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {
      // Lanes: bytes 0-15, bytes 0-15, bytes 16-31, bytes 16-31 of the pair's 32 bytes.
      const __m512i raw = broadcast256(blk + 8 + 32 * c);
      const __m512i lanes = _mm512_shuffle_i64x2(raw, raw, 0x50);
      const __m512i q =
          _mm512_shuffle_epi8(grid, _mm512_and_si512(_mm512_srlv_epi64(lanes, shift), m4));
      const __m512i aq = _mm512_abs_epi8(q);
      const __mmask64 neg = _mm512_movepi8_mask(q);
      const __m512i scale = scale_runs(sc16, kQ4kIndex[c]);
      for (int r = 0; r < R; ++r) {
        __m512i xv = load512(x[r].codes + 256 * b + 64 * c);
        xv = _mm512_mask_sub_epi8(xv, neg, _mm512_setzero_si512(), xv);
        isum[r] = _mm512_add_epi32(isum[r], _mm512_madd_epi16(_mm512_maddubs_epi16(aq, xv), scale));
      }
    }
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(d * x[r].d[b]), _mm512_cvtepi32_ps(isum[r]), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum512(acc[r]);
}

template <int R>
RowDot row_dot_512(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_K:
      return dot_q4_k_512<R>;
    case GgmlType::kQ6_K:
      return dot_q6_k_512<R>;
    case GgmlType::kQ4_0:
      return dot32_512<Q4_0Fmt, R>;
    case GgmlType::kQ8_0:
      return dot32_512<Q8_0Fmt, R>;
    case GgmlType::kMXFP4:
      return dot32_512<Mxfp4Fmt, R>;
    case GgmlType::kIQ4_NL:
      return dot32_512<Iq4NlFmt, R>;
    case GgmlType::kIQ4_XS:
      return dot_iq4_xs_512<R>;
    default:
      return row_dot<R>(t);
  }
}

void gemm_avx512(const GgmlDotArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.panel != 0) {
    gemm_panels_avx512(a, n_begin, n_end);
    return;
  }
  const RowDot fns[kMaxRows512] = {row_dot_512<1>(a.type), row_dot_512<2>(a.type),
                                   row_dot_512<3>(a.type), row_dot_512<4>(a.type),
                                   row_dot_512<5>(a.type), row_dot_512<6>(a.type),
                                   row_dot_512<7>(a.type), row_dot_512<8>(a.type)};
  gemm_rows<kMaxRows512>(a, n_begin, n_end, fns);
}

}  // namespace

const GgmlDotKernels kAvx512GgmlDot = {IsaLevel::kAvx512, quantize_simd, gemm_avx512,
                                       panel_rows_avx512, repack_avx512};

}  // namespace mx::ggml_dot_detail

// Row-interleaved panels for the AVX2 table: the AVX-512 table's panels of sixteen rows
// (ggml_panel_layout.h), each read as two halves of eight rows, so that a 32-byte register holds
// four consecutive weights of each of eight rows. vpmaddubsw multiplies a broadcast group of
// four activation codes into the eight rows' pairs, int16 sums of a few of those stay exact, and
// one vpmaddwd widens them to the rows' int32 lanes: no horizontal sum, and the per-block scales
// scale eight columns a vector operation, where the row kernels (ggml_dot_simd.h) end every
// super-block of every row with one.
//
// Every int16 sum stays below 2^15: a Q4_K sub-block's eight products per lane pair sum to at
// most 16 * 15 * 127; Q5_K's are summed over four registers (8 * 31 * 127), Q6_K's over two
// (4 * 63 * 127). Each output sees the operations of the AVX-512 panel kernels in their order,
// so the two tables give the same results.
//
// Compiled with AVX2 flags: its own helpers have internal linkage, so no other translation unit
// can link them in its place (see formats/act_quant.h); of the shared headers' inline functions
// it calls only act_row_view (ggml_dot.h), pointer arithmetic that every table shares.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/ggml_dot.h"
#include "kernels/ggml_panel_layout.h"

namespace mx::ggml_dot_detail {
namespace {

// Activation rows per kernel call (sixteen vector registers).
constexpr int kRows = 4;

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
// Eight int32 lanes of the half's plane bytes at p (one per row).
inline __m256i plane8(const uint8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v));
}
inline __m256i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
// Eight FP16 values of the half at p.
inline __m256 halves8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

using PanelFn2 = void (*)(const uint8_t*, int, const ActRowView*, const int32_t*, int64_t, int64_t,
                          __m256*);
struct PanelType2 {
  int64_t values, bytes, per;
  GgmlActType act;
  PreFn pre;
  RepackFn repack;
  PanelFn2 fns[kRows];
};

// Q4_K and Q5_K: per super-block, sum_j d sc_j dot_j - dmin sum_j m_j bsum_j, times the row's
// dx. Q5_K's fifth bits come from the register at kQ4kPanelBlock + 64j, bit v of a byte for
// code register v, and its products stay exact in int16 over four registers, not eight.
template <bool kFive, int R>
void k4_half(const uint8_t* pan, int h, const ActRowView* x, const int32_t* pre, int64_t b0,
             int64_t nb, __m256* tot) {
  constexpr int64_t kBytes = kFive ? kQ5kPanelBlock : kQ4kPanelBlock;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i k15 = _mm256_set1_epi32(15), k3 = _mm256_set1_epi32(3);
  alignas(32) float dsc[8][8];
  for (int64_t bi = 0; bi < nb; ++bi) {
    const int64_t b = b0 + bi;
    const uint8_t* blk = pan + b * kBytes;
    const __m256 d = halves8(blk + 16 * h), dmin = halves8(blk + 32 + 16 * h);
    __m256i mv[8];
    for (int j = 0; j < 8; ++j) {
      const __m256i lo = plane8(blk + 64 + 16 * j + 8 * h);
      const __m256i hi = _mm256_srli_epi32(plane8(blk + 192 + 16 * (j / 2) + 8 * h), 4 * (j & 1));
      const __m256i sc = _mm256_or_si256(_mm256_and_si256(lo, k15),
                                         _mm256_slli_epi32(_mm256_and_si256(hi, k3), 4));
      mv[j] = _mm256_or_si256(_mm256_srli_epi32(lo, 4),
                              _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hi, 2), k3), 4));
      _mm256_store_ps(dsc[j], _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc)));
    }
    __m256i mins[4];
    for (int p = 0; p < 4; ++p) {
      mins[p] = _mm256_or_si256(mv[2 * p], _mm256_slli_epi32(mv[2 * p + 1], 16));
    }
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int j = 0; j < 8; ++j) {
      if (h == 0) prefetch_part(blk, kBytes, j);
      const uint8_t* q = blk + 256 + 256 * j + 32 * h;
      // [0]: the low nibbles' products (weights 32j + 4u + t), [1]: the high ones'.
      __m256i s16[R][2];
      for (int r = 0; r < R; ++r) s16[r][0] = s16[r][1] = _mm256_setzero_si256();
      const __m256i hv = kFive ? load256(blk + kQ4kPanelBlock + 64 * j + 32 * h) : m4;
      for (int u = 0; u < 4; ++u) {
        const __m256i v = load256(q + 64 * u);
        __m256i lo = _mm256_and_si256(v, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if constexpr (kFive) {
          // Bit u (bit u + 4) of the fifth-bit bytes to bit 4; 16-bit shifts carry nothing
          // else there.
          lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(hv, 4 - u), m10));
          hi = _mm256_or_si256(hi, _mm256_and_si256(u == 0 ? hv : _mm256_srli_epi16(hv, u), m10));
        }
        for (int r = 0; r < R; ++r) {
          const int8_t* xc = x[r].codes + 256 * b + 32 * j + 4 * u;
          s16[r][0] = _mm256_add_epi16(s16[r][0], _mm256_maddubs_epi16(lo, bcast32(xc)));
          s16[r][kFive ? 1 : 0] =
              _mm256_add_epi16(s16[r][kFive ? 1 : 0], _mm256_maddubs_epi16(hi, bcast32(xc + 16)));
        }
      }
      const __m256 scale = _mm256_load_ps(dsc[j]);
      for (int r = 0; r < R; ++r) {
        __m256i dot = _mm256_madd_epi16(s16[r][0], ones);
        if constexpr (kFive) dot = _mm256_add_epi32(dot, _mm256_madd_epi16(s16[r][1], ones));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const int32_t* pr = pre + (r * nb + bi) * 4;
      __m256i ms = _mm256_setzero_si256();
      for (int p = 0; p < 4; ++p) {
        ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mins[p], _mm256_set1_epi32(pr[p])));
      }
      acc[r] = _mm256_fnmadd_ps(dmin, _mm256_cvtepi32_ps(ms), acc[r]);
      tot[r] = _mm256_fmadd_ps(_mm256_set1_ps(x[r].d[b]), acc[r], tot[r]);
    }
  }
}

// Q6_K: the six-bit codes as unsigned bytes (low nibble | high bits << 4), each group of 16's
// sum started at -32 times its activation sum and scaled by d times its int8 scale.
template <int R>
void q6_k_half(const uint8_t* pan, int h, const ActRowView* x, const int32_t* pre, int64_t b0,
               int64_t nb, __m256* tot) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  const __m256i ones = _mm256_set1_epi16(1);
  alignas(32) float dsc[16][8];
  for (int64_t bi = 0; bi < nb; ++bi) {
    const int64_t b = b0 + bi;
    const uint8_t* blk = pan + b * kQ6kPanelBlock;
    const __m256 d = halves8(blk + 16 * h);
    for (int g = 0; g < 16; ++g) {
      int64_t v;
      std::memcpy(&v, blk + 32 + 16 * g + 8 * h, 8);
      const __m256i sc = _mm256_cvtepi8_epi32(_mm_cvtsi64_si128(v));
      _mm256_store_ps(dsc[g], _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc)));
    }
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int j = 0; j < 8; ++j) {
      if (h == 0) prefetch_part(blk, kQ6kPanelBlock, j);
      // Group 2j (codes registers 0-3, the low nibbles) then 2j + 1 (4-7, the high ones).
      for (int s = 0; s < 2; ++s) {
        const __m256i hv = load256(blk + 2336 + 128 * j + 64 * s + 32 * h);
        __m256i w[4];
        for (int u = 0; u < 4; ++u) {
          const __m256i v = load256(blk + 288 + 256 * j + 64 * u + 32 * h);
          const __m256i nib = _mm256_and_si256(s == 0 ? v : _mm256_srli_epi16(v, 4), m4);
          const __m256i top = u == 0   ? _mm256_slli_epi16(hv, 4)
                              : u == 1 ? _mm256_slli_epi16(hv, 2)
                              : u == 2 ? hv
                                       : _mm256_srli_epi16(hv, 2);
          w[u] = _mm256_or_si256(nib, _mm256_and_si256(top, m30));
        }
        const __m256 scale = _mm256_load_ps(dsc[2 * j + s]);
        for (int r = 0; r < R; ++r) {
          const int8_t* xc = x[r].codes + 256 * b + 32 * j + 16 * s;
          const __m256i a = _mm256_add_epi16(_mm256_maddubs_epi16(w[0], bcast32(xc)),
                                             _mm256_maddubs_epi16(w[1], bcast32(xc + 4)));
          const __m256i c = _mm256_add_epi16(_mm256_maddubs_epi16(w[2], bcast32(xc + 8)),
                                             _mm256_maddubs_epi16(w[3], bcast32(xc + 12)));
          __m256i dot = _mm256_set1_epi32(pre[(r * nb + bi) * 16 + 2 * j + s]);
          dot = _mm256_add_epi32(dot, _mm256_madd_epi16(a, ones));
          dot = _mm256_add_epi32(dot, _mm256_madd_epi16(c, ones));
          acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[r]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      tot[r] = _mm256_fmadd_ps(_mm256_set1_ps(x[r].d[b]), acc[r], tot[r]);
    }
  }
}

// Group e (0: code registers 0-3, 1: 4-7) of sub-block j's 2-bit codes from its register of
// fields at q (ggml_panel_layout.h), with Q3_K's third bits from the register hv moved to bit 2
// (16-bit shifts: the bits they carry across a byte fall outside the bits kept).
template <bool kThird>
inline void codes2(const uint8_t* q, __m256i hv, int e, __m256i w[4]) {
  const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4);
  const __m256i l = load256(q + 64 * e);
  for (int u = 0; u < 4; ++u) {
    const __m256i f = _mm256_and_si256(u == 0 ? l : _mm256_srli_epi16(l, 2 * u), m3);
    if constexpr (kThird) {
      const int v = 4 * e + u;
      const __m256i b = v < 2 ? _mm256_slli_epi16(hv, 2 - v) : _mm256_srli_epi16(hv, v - 2);
      w[u] = _mm256_or_si256(f, _mm256_and_si256(b, m4));
    } else {
      w[u] = f;
    }
  }
}

// A sub-block's two group dots (each within int16: at most 16 x 4 x 127 in magnitude) as the
// int16 halves of each lane, what vpmaddwd multiplies against the groups' scale pairs: the
// scales apply in exact integers, one conversion per super-block and row, as on AVX-512.
inline __m256i pair16(__m256i lo, __m256i hi) {
  return _mm256_blend_epi16(lo, _mm256_slli_epi32(hi, 16), 0xAA);
}

// Q2_K and Q3_K: per sub-block the two groups' dots of the 2-bit (3-bit) codes, four registers
// each summed in int16 (at most 8 x 7 x 127), widened and paired, times the scale pairs; Q3_K's
// codes stand 4 above their values (each group started at -4 times its activation sum), Q2_K's
// mins enter through the groups' activation sums. Then d (and dmin) and the row's dx.
template <bool kThree, int R>
void k23_half(const uint8_t* pan, int h, const ActRowView* x, const int32_t* pre, int64_t b0,
              int64_t nb, __m256* tot) {
  constexpr int64_t kBytes = kThree ? kQ3kPanelBlock : kQ2kPanelBlock;
  constexpr int64_t kCodes = kThree ? 224 : 320;
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i k15 = _mm256_set1_epi32(15), k3 = _mm256_set1_epi32(3);
  alignas(32) int32_t scp[8][8];
  alignas(32) int32_t mins[8][8];
  for (int64_t bi = 0; bi < nb; ++bi) {
    const int64_t b = b0 + bi;
    const uint8_t* blk = pan + b * kBytes;
    for (int j = 0; j < 8; ++j) {
      __m256i sc[2];
      for (int e = 0; e < 2; ++e) {
        const int g = 2 * j + e;
        if constexpr (kThree) {
          const __m256i lo = _mm256_and_si256(
              _mm256_srli_epi32(plane8(blk + 32 + 16 * (g / 2) + 8 * h), 4 * (g % 2)), k15);
          const __m256i hi = _mm256_and_si256(
              _mm256_srli_epi32(plane8(blk + 160 + 16 * (g / 4) + 8 * h), 2 * (g % 4)), k3);
          sc[e] = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)),
                                   _mm256_set1_epi32(32));
        } else {
          const __m256i s = plane8(blk + 64 + 16 * g + 8 * h);
          sc[e] = _mm256_and_si256(s, k15);
          if (e == 1) {
            const __m256i s0 = plane8(blk + 64 + 16 * (g - 1) + 8 * h);
            _mm256_store_si256(reinterpret_cast<__m256i*>(mins[j]),
                               pair16(_mm256_srli_epi32(s0, 4), _mm256_srli_epi32(s, 4)));
          }
        }
      }
      _mm256_store_si256(reinterpret_cast<__m256i*>(scp[j]), pair16(sc[0], sc[1]));
    }
    __m256i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      if (h == 0) prefetch_part(blk, kBytes, j);
      const uint8_t* q = blk + kCodes + 128 * j + 32 * h;
      const __m256i hv = kThree ? load256(blk + 1248 + 64 * j + 32 * h) : ones;
      __m256i dot[2][R];
      for (int e = 0; e < 2; ++e) {
        __m256i w[4];
        codes2<kThree>(q, hv, e, w);
        for (int r = 0; r < R; ++r) {
          const int8_t* xc = x[r].codes + 256 * b + 32 * j + 16 * e;
          __m256i s16 = _mm256_maddubs_epi16(w[0], bcast32(xc));
          for (int u = 1; u < 4; ++u) {
            s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(w[u], bcast32(xc + 4 * u)));
          }
          dot[e][r] = _mm256_madd_epi16(s16, ones);
          if constexpr (kThree) {
            dot[e][r] =
                _mm256_add_epi32(dot[e][r], _mm256_set1_epi32(pre[(r * nb + bi) * 16 + 2 * j + e]));
          }
        }
      }
      const __m256i sp = _mm256_load_si256(reinterpret_cast<const __m256i*>(scp[j]));
      for (int r = 0; r < R; ++r) {
        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(pair16(dot[0][r], dot[1][r]), sp));
      }
    }
    const __m256 d = halves8(blk + 16 * h);
    for (int r = 0; r < R; ++r) {
      if constexpr (kThree) {
        tot[r] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x[r].d[b])),
                                 _mm256_cvtepi32_ps(isum[r]), tot[r]);
      } else {
        const __m256 dmin = halves8(blk + 32 + 16 * h);
        const int32_t* pr = pre + (r * nb + bi) * 8;
        __m256i ms = _mm256_setzero_si256();
        for (int p = 0; p < 8; ++p) {
          ms = _mm256_add_epi32(
              ms, _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(mins[p])),
                                    _mm256_set1_epi32(pr[p])));
        }
        const __m256 v = _mm256_fmsub_ps(d, _mm256_cvtepi32_ps(isum[r]),
                                         _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(ms)));
        tot[r] = _mm256_fmadd_ps(_mm256_set1_ps(x[r].d[b]), v, tot[r]);
      }
    }
  }
}

// IQ4_XS: the grid's values looked up signed and met as Q8_0's are (magnitudes against the
// activations carrying their signs: the values plus 128 would saturate vpmaddubsw), each pair
// widened at once; the biased scales in FP32 with d.
template <int R>
void iq4_xs_half(const uint8_t* pan, int h, const ActRowView* x, const int32_t*, int64_t b0,
                 int64_t nb, __m256* tot) {
  const __m256i grid = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kGgmlIq4Values)));
  const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  const __m256i k15 = _mm256_set1_epi32(15), k3 = _mm256_set1_epi32(3);
  alignas(32) float dsc[8][8];
  for (int64_t bi = 0; bi < nb; ++bi) {
    const int64_t b = b0 + bi;
    const uint8_t* blk = pan + b * kIq4PanelBlock;
    const __m256 d = halves8(blk + 16 * h);
    for (int j = 0; j < 8; ++j) {
      const __m256i lo = _mm256_and_si256(
          _mm256_srli_epi32(plane8(blk + 32 + 16 * (j / 2) + 8 * h), 4 * (j % 2)), k15);
      const __m256i hi = _mm256_and_si256(
          _mm256_srli_epi32(plane8(blk + 96 + 16 * (j / 4) + 8 * h), 2 * (j % 4)), k3);
      const __m256i sc =
          _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
      _mm256_store_ps(dsc[j], _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc)));
    }
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int j = 0; j < 8; ++j) {
      if (h == 0) prefetch_part(blk, kIq4PanelBlock, j);
      const uint8_t* q = blk + 128 + 256 * j + 32 * h;
      __m256i isum[R];
      for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
      for (int u = 0; u < 4; ++u) {
        const __m256i v = load256(q + 64 * u);
        for (int half = 0; half < 2; ++half) {
          const __m256i idx = _mm256_and_si256(half == 0 ? v : _mm256_srli_epi16(v, 4), m4);
          const __m256i ws = _mm256_shuffle_epi8(grid, idx);
          const __m256i aw = _mm256_abs_epi8(ws);
          for (int r = 0; r < R; ++r) {
            const int8_t* xc = x[r].codes + 256 * b + 32 * j + 16 * half + 4 * u;
            const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast32(xc), ws));
            isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(p, ones));
          }
        }
      }
      const __m256 scale = _mm256_load_ps(dsc[j]);
      for (int r = 0; r < R; ++r) {
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), scale, acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      tot[r] = _mm256_fmadd_ps(_mm256_set1_ps(x[r].d[b]), acc[r], tot[r]);
    }
  }
}

// Q8_0: the codes stored plus 128 come back signed; vpmaddubsw takes their magnitudes against
// the activations carrying their signs (pairs at most 2 * 128 * 127), each register's pairs
// widened at once. The integer dot equals the AVX-512 panels' offset sum, and the block's
// scaling is theirs. No software prefetch: its loads are even, and with the next blocks asked
// for into L2 one-row decode ran 72-74% of the roofline against 79-87% without.
template <int R>
void q8_0_half(const uint8_t* pan, int h, const ActRowView* x, const int32_t*, int64_t b0,
               int64_t nb, __m256* tot) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80)), ones = _mm256_set1_epi16(1);
  for (int64_t bi = 0; bi < nb; ++bi) {
    const int64_t b = b0 + bi;
    const uint8_t* blk = pan + b * kQ8PanelBlock;
    const __m256 dw = halves8(blk + 16 * h);
    __m256i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
    for (int v = 0; v < 8; ++v) {
      const __m256i ws = _mm256_xor_si256(load256(blk + 32 + 64 * v + 32 * h), flip);
      const __m256i aw = _mm256_abs_epi8(ws);
      for (int r = 0; r < R; ++r) {
        const __m256i sx = _mm256_sign_epi8(bcast32(x[r].codes + 32 * b + 4 * v), ws);
        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones));
      }
    }
    for (int r = 0; r < R; ++r) {
      tot[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]),
                               _mm256_mul_ps(dw, _mm256_set1_ps(x[r].d[b])), tot[r]);
    }
  }
}

// The 32-value nibble types, per block of 32: the codes' dot started at the offset's share
// (Q4_0 -8, Q5_0 -16 times the activation sum), times the rows' d and the activation's; Q4_1
// and Q5_1 add m times the activation block's d * sum. IQ4_NL's grid meets the activations as
// IQ4_XS's does. Five-bit codes sum in int16 over four registers, four-bit ones over eight.
// No software prefetch, as for Q8_0 (Q4_0 one-row decode, three alternations: 81.5% of the
// roofline without it against 77-78% with the next blocks asked for into L2).
template <const B32Kind& K, int R>
void b32_half(const uint8_t* pan, int h, const ActRowView* x, const int32_t* pre, int64_t b0,
              int64_t nb, __m256* tot) {
  constexpr int64_t kBytes = panel_block(K), kCodes = codes_at(K);
  constexpr bool kFive = K.qh_at >= 0;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i grid = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kGgmlIq4Values)));
  for (int64_t bi = 0; bi < nb; ++bi) {
    const int64_t b = b0 + bi;
    const uint8_t* blk = pan + b * kBytes;
    const __m256 dw = halves8(blk + 16 * h);
    const __m256 mw = K.has_min ? halves8(blk + 32 + 16 * h) : _mm256_setzero_ps();
    const __m256i hv = kFive ? load256(blk + kCodes + 256 + 32 * h) : m4;
    __m256i s16[R][2], isum[R];
    for (int r = 0; r < R; ++r) {
      s16[r][0] = s16[r][1] = _mm256_setzero_si256();
      isum[r] = K.grid ? _mm256_setzero_si256() : _mm256_set1_epi32(pre[r * nb + bi]);
    }
    for (int u = 0; u < 4; ++u) {
      const __m256i v = load256(blk + kCodes + 64 * u + 32 * h);
      __m256i w[2] = {_mm256_and_si256(v, m4), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4)};
      if constexpr (kFive) {
        // As Q5_K's: bit u (u + 4) of the fifth-bit bytes to bit 4.
        w[0] = _mm256_or_si256(w[0], _mm256_and_si256(_mm256_slli_epi16(hv, 4 - u), m10));
        w[1] = _mm256_or_si256(w[1], _mm256_and_si256(u == 0 ? hv : _mm256_srli_epi16(hv, u), m10));
      }
      for (int half = 0; half < 2; ++half) {
        for (int r = 0; r < R; ++r) {
          const __m256i xb = bcast32(x[r].codes + 32 * b + 16 * half + 4 * u);
          if constexpr (K.grid) {
            const __m256i ws = _mm256_shuffle_epi8(grid, w[half]);
            const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(ws), _mm256_sign_epi8(xb, ws));
            isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(p, ones));
          } else {
            __m256i& acc = s16[r][kFive ? half : 0];
            acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(w[half], xb));
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      if constexpr (!K.grid) {
        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(s16[r][0], ones));
        if constexpr (kFive)
          isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(s16[r][1], ones));
      }
      tot[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]),
                               _mm256_mul_ps(dw, _mm256_set1_ps(x[r].d[b])), tot[r]);
      if constexpr (K.has_min) tot[r] = _mm256_fmadd_ps(mw, _mm256_set1_ps(x[r].s[b]), tot[r]);
    }
  }
}

template <const B32Kind& K>
PanelType2 b32_type() {
  return {32,
          panel_block(K),
          1,
          GgmlActType::kQ8_0,
          K.grid ? nullptr : pre_blocks32<K.offset>,
          repack_b32<K>,
          {b32_half<K, 1>, b32_half<K, 2>, b32_half<K, 3>, b32_half<K, 4>}};
}

const PanelType2* panel_type2(GgmlType t) {
  static const PanelType2 kQ4k{
      256,
      kQ4kPanelBlock,
      4,
      GgmlActType::kQ8_K,
      pre_q4_k,
      repack_q4_k_panels,
      {k4_half<false, 1>, k4_half<false, 2>, k4_half<false, 3>, k4_half<false, 4>}};
  static const PanelType2 kQ5k{
      256,
      kQ5kPanelBlock,
      4,
      GgmlActType::kQ8_K,
      pre_q4_k,
      repack_q5_k_panels,
      {k4_half<true, 1>, k4_half<true, 2>, k4_half<true, 3>, k4_half<true, 4>}};
  static const PanelType2 kQ6k{256,
                               kQ6kPanelBlock,
                               16,
                               GgmlActType::kQ8_K,
                               pre_q6_k,
                               repack_q6_k_panels,
                               {q6_k_half<1>, q6_k_half<2>, q6_k_half<3>, q6_k_half<4>}};
  // Q8_0 and IQ4_XS take no activation terms: their values meet the activations signed.
  static const PanelType2 kQ80{32,
                               kQ8PanelBlock,
                               1,
                               GgmlActType::kQ8_0,
                               nullptr,
                               repack_q8_0_panels,
                               {q8_0_half<1>, q8_0_half<2>, q8_0_half<3>, q8_0_half<4>}};
  static const PanelType2 kIq4Xs{256,
                                 kIq4PanelBlock,
                                 8,
                                 GgmlActType::kQ8_K,
                                 nullptr,
                                 repack_iq4_xs_panels,
                                 {iq4_xs_half<1>, iq4_xs_half<2>, iq4_xs_half<3>, iq4_xs_half<4>}};
  static const PanelType2 kQ3k{
      256,
      kQ3kPanelBlock,
      16,
      GgmlActType::kQ8_K,
      pre_q3_k,
      repack_q3_k_panels,
      {k23_half<true, 1>, k23_half<true, 2>, k23_half<true, 3>, k23_half<true, 4>}};
  static const PanelType2 kQ2k{
      256,
      kQ2kPanelBlock,
      8,
      GgmlActType::kQ8_K,
      pre_q2_k,
      repack_q2_k_panels,
      {k23_half<false, 1>, k23_half<false, 2>, k23_half<false, 3>, k23_half<false, 4>}};
  static const PanelType2 kB32[] = {b32_type<kQ40>(), b32_type<kQ41>(), b32_type<kQ50>(),
                                    b32_type<kQ51>(), b32_type<kIq4Nl>()};
  switch (t) {
    case GgmlType::kQ4_0:
      return &kB32[0];
    case GgmlType::kQ4_1:
      return &kB32[1];
    case GgmlType::kQ5_0:
      return &kB32[2];
    case GgmlType::kQ5_1:
      return &kB32[3];
    case GgmlType::kIQ4_NL:
      return &kB32[4];
    case GgmlType::kQ8_0:
      return &kQ80;
    case GgmlType::kQ2_K:
      return &kQ2k;
    case GgmlType::kQ3_K:
      return &kQ3k;
    case GgmlType::kIQ4_XS:
      return &kIq4Xs;
    case GgmlType::kQ4_K:
      return &kQ4k;
    case GgmlType::kQ5_K:
      return &kQ5k;
    case GgmlType::kQ6_K:
      return &kQ6k;
    default:
      return nullptr;
  }
}

// Lanes [lo, hi) of eight.
inline __m256i lane_mask(int64_t lo, int64_t hi) {
  const __m256i i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_and_si256(_mm256_cmpgt_epi32(i, _mm256_set1_epi32(static_cast<int>(lo) - 1)),
                          _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(hi)), i));
}

}  // namespace

int panel_rows_avx2(GgmlType t) { return panel_type2(t) != nullptr ? 16 : 0; }

void repack_avx2(GgmlType t, const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k,
                 uint8_t* out) {
  panel_type2(t)->repack(rows, row_bytes, n, k, out);
}

// As gemm_panels_avx512: columns in blocks of panels that stay in L2, each swept by four
// activation rows at a time and its panels by halves of eight columns; k in chunks of blocks
// whose activation terms fit the stack, the columns accumulating in y after the first.
void gemm_panels_avx2(const GgmlDotArgs& a, int64_t n_begin, int64_t n_end) {
  constexpr int64_t kPreInts = 4096;
  const PanelType2& pt = *panel_type2(a.type);
  const int64_t nblk = a.k / pt.values, chunk = kPreInts / (kRows * pt.per);
  const int64_t panel_bytes = nblk * pt.bytes;
  const int64_t block_cols = 16 * std::max<int64_t>(1, (256 << 10) / panel_bytes);
  alignas(32) int32_t pre[kPreInts];
  for (int64_t nb0 = n_begin / 16 * 16; nb0 < n_end; nb0 += block_cols) {
    const int64_t nb1 = std::min(n_end, nb0 + block_cols);
    for (int64_t i0 = 0; i0 < a.m; i0 += kRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kRows, a.m - i0));
      ActRowView x[kRows];
      for (int r = 0; r < rows; ++r) {
        x[r] = act_row_view(pt.act, a.xq + (i0 + r) * a.xq_stride, a.k);
      }
      for (int64_t b0 = 0; b0 < nblk; b0 += chunk) {
        const int64_t nb = std::min(chunk, nblk - b0);
        if (pt.pre != nullptr) pt.pre(x, rows, b0, nb, pre);
        for (int64_t n0 = nb0; n0 < nb1; n0 += 16) {
          for (int h = 0; h < 2; ++h) {
            const int64_t c0 = n0 + 8 * h;
            const int64_t lo = std::max<int64_t>(n_begin - c0, 0);
            const int64_t hi = std::min<int64_t>(nb1 - c0, 8);
            if (lo >= hi) continue;
            const __m256i mask = lane_mask(lo, hi);
            float* y0 = a.y + i0 * a.ldy + c0;
            __m256 tot[kRows];
            for (int r = 0; r < rows; ++r) {
              tot[r] = b0 == 0 ? _mm256_setzero_ps() : _mm256_maskload_ps(y0 + r * a.ldy, mask);
            }
            pt.fns[rows - 1](a.w + n0 / 16 * panel_bytes, h, x, pre, b0, nb, tot);
            for (int r = 0; r < rows; ++r) _mm256_maskstore_ps(y0 + r * a.ldy, mask, tot[r]);
          }
        }
      }
    }
  }
}

}  // namespace mx::ggml_dot_detail

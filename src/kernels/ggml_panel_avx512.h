// Pieces that the AVX-512 GGUF panel units share: loads, the prefetch spread, the sub-block
// dot products, and the table of a panel type. Included only by translation units compiled with
// the AVX-512 flags.
#pragma once

#include <utility>

#include "kernels/ggml_dot_simd.h"
#include "kernels/ggml_panel_layout.h"
#include "kernels/prefetch.h"

namespace mx::ggml_dot_detail {

using PanelFn = void (*)(const uint8_t*, const ActRowView*, const int32_t*, int64_t, int64_t,
                         __m512*);

// Kernels by row count (R = index + 1); a plain array, since std::array of a type naming __m512
// drops its alignment attribute.
struct PanelFns {
  PanelFn f[kMaxRows512];
};

struct PanelType {
  int64_t values;  // weights per block along k
  int64_t bytes;   // bytes of one block of a panel
  int64_t per;     // activation terms per row and block
  GgmlActType act;
  void (*pre)(const ActRowView*, int, int64_t, int64_t, int32_t*);
  void (*repack)(const uint8_t*, int64_t, int64_t, int64_t, uint8_t*);
  PanelFns fns;
};

// Q2_K and Q3_K (ggml_panel_k2_avx512.cpp); null for other types.
const PanelType* panel_type_k2(GgmlType t);
// Q4_0, Q4_1, Q5_0, Q5_1 and IQ4_NL (ggml_panel_b32_avx512.cpp); null for other types.
const PanelType* panel_type_b32(GgmlType t);

// Internal linkage: each including unit keeps its own copies.
namespace {

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }

// Sixteen int32 lanes of plane bytes at p (one per row).
inline __m512i plane(const uint8_t* p) { return _mm512_cvtepu8_epi32(load128(p)); }
inline __m512i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Sub-block j's sixteen rows of 32 weights as eight registers of unsigned bytes: four loads,
// each split into its low and high nibbles.
inline void nibbles(const uint8_t* q, __m512i w[8]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int u = 0; u < 4; ++u) {
    const __m512i v = load512(q + 64 * u);
    w[u] = _mm512_and_si512(v, m4);
    w[u + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
  }
}

// A Q5_K sub-block's or Q5_0 / Q5_1 block's: the nibble registers with each weight's fifth bit,
// register v's bit v of the high-bit register at hq moved to bit 4 (16-bit shifts: the bits they
// carry across a byte fall outside bit 4, which alone is kept).
inline void nibbles5(const uint8_t* q, const uint8_t* hq, __m512i w[8]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
  const __m512i hv = load512(hq);
  const __m512i b[8] = {_mm512_slli_epi16(hv, 4),
                        _mm512_slli_epi16(hv, 3),
                        _mm512_slli_epi16(hv, 2),
                        _mm512_slli_epi16(hv, 1),
                        hv,
                        _mm512_srli_epi16(hv, 1),
                        _mm512_srli_epi16(hv, 2),
                        _mm512_srli_epi16(hv, 3)};
  for (int u = 0; u < 4; ++u) {
    const __m512i v = load512(q + 64 * u);
    // (a & 0x0F) | b in one vpternlogd (0xEC).
    w[u] = _mm512_ternarylogic_epi32(v, _mm512_and_si512(b[u], m10), m4, 0xEC);
    w[u + 4] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), _mm512_and_si512(b[u + 4], m10),
                                         m4, 0xEC);
  }
}

// Eight registers' dot products against an activation row's 32 codes at xc, in two chains (the
// first 16 values, the last 16) that start at sa and sb.
inline void sub_dots(const __m512i w[8], const int8_t* xc, __m512i sa, __m512i sb, __m512i* a,
                     __m512i* b) {
  *a = sa;
  *b = sb;
  for (int u = 0; u < 4; ++u) {
    *a = _mm512_dpbusd_epi32(*a, w[u], bcast32(xc + 4 * u));
    *b = _mm512_dpbusd_epi32(*b, w[u + 4], bcast32(xc + 16 + 4 * u));
  }
}
inline __m512i sub_dot(const __m512i w[8], const int8_t* xc, __m512i start) {
  __m512i a, b;
  sub_dots(w, xc, start, _mm512_setzero_si512(), &a, &b);
  return _mm512_add_epi32(a, b);
}
// acc <- dot x scale, or plus it from the second sub-block on: the first product needs no sum,
// and acc is read only once written.
inline void scaled_acc(int j, __m512i dot, __m512 scale, __m512* acc) {
  *acc = j == 0 ? _mm512_mul_ps(_mm512_cvtepi32_ps(dot), scale)
                : _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, *acc);
}

template <template <int> class K, int... R>
constexpr PanelFns fns_of(std::integer_sequence<int, R...>) {
  return {{K<R + 1>::run...}};
}
constexpr auto kRowCounts = std::make_integer_sequence<int, kMaxRows512>{};

}  // namespace
}  // namespace mx::ggml_dot_detail

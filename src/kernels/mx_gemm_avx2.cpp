// AVX2 MX GEMM: each weight block is decoded once in registers (E4M3 by moving its bits into
// an FP32 pattern, E2M1 through an eight-entry permute; E5M2 by table), dotted with every
// activation row, and its E8M0 scale applied to the block's sum (exact: a power of two); one
// 8-lane accumulator per row and a horizontal sum per row and chunk close it.
#include <immintrin.h>

#include "kernels/mx_gemm.h"

namespace mx::mx_gemm_detail {
namespace {

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

inline float pow2(int e) {
  union {
    uint32_t u;
    float f;
  } v;
  v.u = e >= -126 ? static_cast<uint32_t>(e + 127) << 23 : 1u << (e + 149);
  return v.f;
}

// Eight E4M3 codes to FP32: sign to bit 31, exponent and mantissa to bits 20..26, which reads
// as the value times 2^-120 (subnormals included, as FP32 subnormals); the multiply restores
// it exactly. The NaN codes (S.1111.111, never produced by quantization) read as +-480.
inline __m256 e4m3x8(const uint8_t* p) {
  const __m256i u = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m256i bits =
      _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x80)), 24),
                      _mm256_slli_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7F)), 20));
  return _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(0x1p120f));
}

// Eight E2M1 codes (four bytes, low nibble first) to FP32: magnitude by permute, sign by XOR.
inline __m256 e2m1x8(const uint8_t* p) {
  uint32_t word;
  __builtin_memcpy(&word, p, 4);
  const __m256i n =
      _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word)),
                                         _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                       _mm256_set1_epi32(0xF));
  const __m256 mag =
      _mm256_permutevar8x32_ps(_mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f), n);
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(n, _mm256_set1_epi32(8)), 28);
  return _mm256_xor_ps(mag, _mm256_castsi256_ps(sign));
}

void mx_gemm_avx2(const float* af, const float* a_chunk_scales, int64_t m, const MxMatrixView& w,
                  float* y, int64_t ldy, int64_t n_begin, int64_t n_end, float* acc) {
  const int64_t k = w.k, nb = (k + 31) / 32, kp = nb * 32;
  const bool dual = w.chunk_scales != nullptr;
  const bool fp4 = w.format == ElemFormat::kE2M1;
  const float* lut = w.format == ElemFormat::kE4M3   ? e4m3_table()
                     : w.format == ElemFormat::kE5M2 ? e5m2_table()
                                                     : e2m1_table();
  const int64_t chunks = (k + 511) / 512;
  auto* accv = reinterpret_cast<__m256*>(acc);  // m vectors
  float* total = acc + 8 * m;                   // m floats
  alignas(32) float wb[32];
  for (int64_t n = n_begin; n < n_end; ++n) {
    const uint8_t* wrow = w.codes + n * w.row_bytes;
    const uint8_t* wsc = w.scales + n * nb;
    for (int64_t i = 0; i < m; ++i) total[i] = 0.0f;
    for (int64_t c = 0; c < (dual ? chunks : 1); ++c) {
      const int64_t b0 = dual ? c * 16 : 0;
      const int64_t b1 = dual ? (b0 + 16 < nb ? b0 + 16 : nb) : nb;
      for (int64_t i = 0; i < m; ++i) accv[i] = _mm256_setzero_ps();
      for (int64_t b = b0; b < b1; ++b) {
        const int cnt = static_cast<int>(k - b * 32 < 32 ? k - b * 32 : 32);
        const __m256 ws = _mm256_set1_ps(pow2(static_cast<int>(wsc[b]) - 127));
        __m256 w0, w1, w2, w3;
        if (cnt == 32 && w.format == ElemFormat::kE4M3) {
          const uint8_t* p = wrow + b * 32;
          w0 = e4m3x8(p);
          w1 = e4m3x8(p + 8);
          w2 = e4m3x8(p + 16);
          w3 = e4m3x8(p + 24);
        } else if (cnt == 32 && fp4) {
          const uint8_t* p = wrow + b * 16;
          w0 = e2m1x8(p);
          w1 = e2m1x8(p + 4);
          w2 = e2m1x8(p + 8);
          w3 = e2m1x8(p + 12);
        } else {
          if (fp4) {
            const uint8_t* p = wrow + b * 16;
            for (int j = 0; j < cnt; ++j) wb[j] = lut[(p[j >> 1] >> ((j & 1) * 4)) & 0xF];
          } else {
            const uint8_t* p = wrow + b * 32;
            for (int j = 0; j < cnt; ++j) wb[j] = lut[p[j]];
          }
          for (int j = cnt; j < 32; ++j) wb[j] = 0.0f;
          w0 = _mm256_load_ps(wb);
          w1 = _mm256_load_ps(wb + 8);
          w2 = _mm256_load_ps(wb + 16);
          w3 = _mm256_load_ps(wb + 24);
        }
        const float* ar = af + b * 32;
        for (int64_t i = 0; i < m; ++i, ar += kp) {
          __m256 s = _mm256_mul_ps(_mm256_loadu_ps(ar), w0);
          s = _mm256_fmadd_ps(_mm256_loadu_ps(ar + 8), w1, s);
          s = _mm256_fmadd_ps(_mm256_loadu_ps(ar + 16), w2, s);
          s = _mm256_fmadd_ps(_mm256_loadu_ps(ar + 24), w3, s);
          accv[i] = _mm256_fmadd_ps(s, ws, accv[i]);
        }
      }
      if (dual) {
        const float w0s = w.chunk_scales[n * chunks + c];
        for (int64_t i = 0; i < m; ++i)
          total[i] += hsum(accv[i]) * (a_chunk_scales[i * chunks + c] * w0s);
      } else {
        for (int64_t i = 0; i < m; ++i) total[i] = hsum(accv[i]);
      }
    }
    for (int64_t i = 0; i < m; ++i) y[i * ldy + n] = total[i];
  }
}

}  // namespace

const MxGemmKernels kAvx2MxGemm = {IsaLevel::kAvx2, mx_gemm_avx2};

}  // namespace mx::mx_gemm_detail

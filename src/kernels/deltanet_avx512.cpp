// AVX-512 gated DeltaNet kernels: kernels/deltanet_simd.h on sixteen lanes.
#include <immintrin.h>

#include "kernels/deltanet_simd.h"
#include "kernels/vec_math_avx512.h"

namespace mx::deltanet_detail {
namespace {

struct V16 {
  using T = __m512;
  static constexpr int64_t W = 16;
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T set1(float x) { return _mm512_set1_ps(x); }
  static T zero() { return _mm512_setzero_ps(); }
  static T fmadd(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T silu(T x) { return silu_avx512(x); }
  static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
};

}  // namespace

const DeltaNetKernels kAvx512DeltaNet = {IsaLevel::kAvx512,
                                         conv_silu<V16>,
                                         delta_rule_recurrent<V16>,
                                         delta_rule_chunked<V16>,
                                         l2_norm<V16>,
                                         gated_rms_norm<V16>,
                                         sigmoid,
                                         softplus,
                                         decay_gate};

}  // namespace mx::deltanet_detail

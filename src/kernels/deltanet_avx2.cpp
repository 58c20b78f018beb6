// AVX2 gated DeltaNet kernels: kernels/deltanet_simd.h on eight lanes.
#include <immintrin.h>

#include "kernels/deltanet_simd.h"
#include "kernels/vec_math_avx2.h"

namespace mx::deltanet_detail {
namespace {

struct V8 {
  using T = __m256;
  static constexpr int64_t W = 8;
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static T set1(float x) { return _mm256_set1_ps(x); }
  static T zero() { return _mm256_setzero_ps(); }
  static T fmadd(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T silu(T x) { return silu_avx2(x); }
  static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
};

}  // namespace

const DeltaNetKernels kAvx2DeltaNet = {IsaLevel::kAvx2,
                                       conv_silu<V8>,
                                       delta_rule_recurrent<V8>,
                                       delta_rule_chunked<V8>,
                                       l2_norm<V8>,
                                       gated_rms_norm<V8>,
                                       sigmoid,
                                       softplus,
                                       decay_gate};

}  // namespace mx::deltanet_detail

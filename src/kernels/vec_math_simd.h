// exp, SiLU and the logistic sigmoid on FP32 vectors, written once over a vector type V:
// vec_math_avx2.h and vec_math_avx512.h each give V for their width. V provides T, set1,
// min, max, mul, add, sub, div, fmadd, fnmadd, round (to nearest), the argument bounds
// kLo / kHi, and pow2 (p times 2^n for integral n in [kLo, kHi] log2 e, with infinity on
// overflow as expf gives it). Within 2 ulp of expf (kernels/glu.h) down to kLo; below it the
// result stays exp(kLo), which only 1 + exp(-x) (SiLU, sigmoid) may meet, where it rounds to 1
// as expf's would.
//
// Internal linkage: each including unit keeps its own copies (see tile_plan.h).
#pragma once

namespace mx {
namespace {

// n = round(x log2 e), r = x - n ln 2 with ln 2 in a high part exact in FP32 and a low part
// (|r| <= ln2 / 2 + a few ulp), e^r by its Taylor polynomial to r^7 (truncation 5e-9
// relative), then 2^n.
template <class V>
inline typename V::T vexp(typename V::T x) {
  using T = typename V::T;
  // The bound first and x second: min and max return their second operand for a NaN, which
  // then runs through as expf's NaN does.
  x = V::max(V::set1(V::kLo), V::min(V::set1(V::kHi), x));
  const T n = V::round(V::mul(x, V::set1(1.44269504088896341f)));
  T r = V::fnmadd(n, V::set1(0.693145751953125f), x);
  r = V::fnmadd(n, V::set1(1.428606820309417232e-6f), r);
  constexpr float kC[8] = {1.0f,      1.0f,       0.5f,       1.0f / 6,
                           1.0f / 24, 1.0f / 120, 1.0f / 720, 1.0f / 5040};
  T p = V::set1(kC[7]);
  for (int k = 6; k >= 0; --k) p = V::fmadd(p, r, V::set1(kC[k]));
  return V::pow2(p, n);
}

// 1 / (1 + exp(-x)) and x / (1 + exp(-x)), the scalar formulas' operations after the exp.
template <class V>
inline typename V::T vsigmoid(typename V::T x) {
  const typename V::T one = V::set1(1.0f);
  return V::div(one, V::add(one, vexp<V>(V::sub(V::set1(0.0f), x))));
}
template <class V>
inline typename V::T vsilu(typename V::T x) {
  return V::div(x, V::add(V::set1(1.0f), vexp<V>(V::sub(V::set1(0.0f), x))));
}

}  // namespace
}  // namespace mx

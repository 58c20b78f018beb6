// The softmax numerators a sampled token needs over the whole vocabulary, one table per ISA,
// chosen once: out[i] = exp((logits[i] - mx) * inv_t) in double, for logits at most mx (so
// every argument is at most 0; -inf gives 0). The scalar table calls the C library's exp; the
// vector tables evaluate 2^n times a degree-13 Taylor polynomial of the remainder (Cody-Waite
// reduction against ln 2 in two parts), within 2 ulp of it: FP32 logits a float ulp apart
// give numerators far more than 2 double ulp apart, so the filters see the logits' order, as
// with exp. Arguments below -708 (results below 3.3e-308, nothing beside the top's 1) give 0
// on the AVX2 table; a NaN gives NaN.
//
// Declarations and constants only: ISA translation units include this header (see
// formats/act_quant.h).
#pragma once

#include <cstdint>

#include "core/cpu_features.h"

namespace mx {

struct SamplerExpKernels {
  IsaLevel isa;
  void (*exps)(const float* logits, int64_t n, double mx, double inv_t, double* out);
};

const SamplerExpKernels* sampler_exp_kernels_for(IsaLevel level);
const SamplerExpKernels& sampler_exp_kernels();

namespace sampler_exp_detail {
// The vector tables' Taylor coefficients: 1 / k!, each the double nearest (a quotient of exact
// integers).
constexpr double kInvFactorial[14] = {1.0,
                                      1.0,
                                      1.0 / 2,
                                      1.0 / 6,
                                      1.0 / 24,
                                      1.0 / 120,
                                      1.0 / 720,
                                      1.0 / 5040,
                                      1.0 / 40320,
                                      1.0 / 362880,
                                      1.0 / 3628800,
                                      1.0 / 39916800,
                                      1.0 / 479001600,
                                      1.0 / 6227020800.0};
extern const SamplerExpKernels kScalarSamplerExp;
extern const SamplerExpKernels kAvx2SamplerExp;
extern const SamplerExpKernels kAvx512SamplerExp;
}  // namespace sampler_exp_detail

}  // namespace mx

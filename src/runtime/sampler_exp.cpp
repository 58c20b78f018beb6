#include "runtime/sampler_exp.h"

#include <cmath>

#include "core/isa_table.h"

namespace mx {
namespace sampler_exp_detail {
namespace {

void exps_scalar(const float* logits, int64_t n, double mx, double inv_t, double* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp((static_cast<double>(logits[i]) - mx) * inv_t);
}

}  // namespace

const SamplerExpKernels kScalarSamplerExp = {IsaLevel::kScalar, exps_scalar};

}  // namespace sampler_exp_detail

namespace {
constexpr IsaTable<SamplerExpKernels> kSamplerExpTable{&sampler_exp_detail::kScalarSamplerExp,
                                                       &sampler_exp_detail::kAvx2SamplerExp,
                                                       &sampler_exp_detail::kAvx512SamplerExp};
}  // namespace

const SamplerExpKernels* sampler_exp_kernels_for(IsaLevel level) {
  return kSamplerExpTable.at(level);
}

const SamplerExpKernels& sampler_exp_kernels() {
  static const SamplerExpKernels& k = kSamplerExpTable.select();
  return k;
}

}  // namespace mx

#include "kernels/glu.h"

#include <cmath>

#include "core/isa_table.h"

namespace mx {
namespace glu_detail {
namespace {

void swiglu_scalar(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void sigmoid_gate_scalar(const float* gate, int64_t n, float* x) {
  for (int64_t i = 0; i < n; ++i) x[i] *= 1.0f / (1.0f + std::exp(-gate[i]));
}

}  // namespace

const GluKernels kScalarGlu = {IsaLevel::kScalar, swiglu_scalar, sigmoid_gate_scalar};

}  // namespace glu_detail

namespace {
constexpr IsaTable<GluKernels> kGluKernelsTable{&glu_detail::kScalarGlu, &glu_detail::kAvx2Glu,
                                                &glu_detail::kAvx512Glu};
}  // namespace

const GluKernels* glu_kernels_for(IsaLevel level) { return kGluKernelsTable.at(level); }

const GluKernels& glu_kernels() {
  static const GluKernels& k = kGluKernelsTable.select();
  return k;
}

}  // namespace mx

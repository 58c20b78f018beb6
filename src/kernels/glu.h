// Gated activations, one table per ISA, chosen once:
// - swiglu (the MLPs and experts): out[i] = silu(gate[i]) * up[i] = gate[i] / (1 +
//   exp(-gate[i])) * up[i]; out may alias gate or up.
// - sigmoid_gate (gated attention's output): x[i] *= 1 / (1 + exp(-gate[i])).
//
// The scalar table calls the C library's expf. The vector tables evaluate exp as 2^n times
// a degree-7 polynomial of the remainder (Cody-Waite reduction against ln 2 in two parts),
// within 2 ulp of expf, and keep the division, so a result is within a few ulp of the scalar
// table's and never depends on its neighbours or on how a row is split.
//
// Declarations only: ISA translation units include this header (see formats/act_quant.h).
#pragma once

#include <cstdint>

#include "core/cpu_features.h"

namespace mx {

struct GluKernels {
  IsaLevel isa;
  void (*swiglu)(const float* gate, const float* up, int64_t n, float* out);
  void (*sigmoid_gate)(const float* gate, int64_t n, float* x);
};

const GluKernels* glu_kernels_for(IsaLevel level);
const GluKernels& glu_kernels();

namespace glu_detail {
extern const GluKernels kScalarGlu;
extern const GluKernels kAvx2Glu;
extern const GluKernels kAvx512Glu;
}  // namespace glu_detail

}  // namespace mx

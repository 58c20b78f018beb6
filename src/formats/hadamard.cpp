#include "formats/hadamard.h"

#include <cmath>

#include "core/isa_table.h"

namespace mx {
namespace hadamard_detail {

float hadamard_scale(int64_t block) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(block)));
}

namespace {

// The reference: stage h pairs x[j] with x[j + h] inside each run of 2h, the sum going to j and
// the difference to j + h; then one multiply by the scale.
void rotate_scalar(float* x, int64_t n, int64_t block) {
  const float s = hadamard_scale(block);
  for (int64_t b = 0; b < n; b += block) {
    float* v = x + b;
    for (int64_t h = 1; h < block; h *= 2) {
      for (int64_t i = 0; i < block; i += 2 * h) {
        for (int64_t j = i; j < i + h; ++j) {
          const float a = v[j], c = v[j + h];
          v[j] = a + c;
          v[j + h] = a - c;
        }
      }
    }
    for (int64_t j = 0; j < block; ++j) v[j] *= s;
  }
}

}  // namespace

const HadamardKernels kScalarHadamard = {IsaLevel::kScalar, rotate_scalar};

}  // namespace hadamard_detail

namespace {
constexpr IsaTable<HadamardKernels> kHadamardTable{&hadamard_detail::kScalarHadamard,
                                                   &hadamard_detail::kAvx2Hadamard,
                                                   &hadamard_detail::kAvx512Hadamard};
}  // namespace

const HadamardKernels* hadamard_kernels_for(IsaLevel level) { return kHadamardTable.at(level); }

const HadamardKernels& hadamard_kernels() {
  static const HadamardKernels& k = kHadamardTable.select();
  return k;
}

}  // namespace mx

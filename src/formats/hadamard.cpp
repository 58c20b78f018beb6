#include "formats/hadamard.h"

#include <cmath>

#include "core/isa_table.h"

namespace mx {
namespace hadamard_detail {

float hadamard_scale(int64_t block) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(block)));
}

// Stage h pairs v[j] with v[j + h] inside each run of 2h, the sum going to j and the
// difference to j + h; then one multiply by the scale.
void rotate_run_scalar(float* v, int64_t len) {
  const float s = hadamard_scale(len);
  for (int64_t h = 1; h < len; h *= 2) {
    for (int64_t i = 0; i < len; i += 2 * h) {
      for (int64_t j = i; j < i + h; ++j) {
        const float a = v[j], c = v[j + h];
        v[j] = a + c;
        v[j + h] = a - c;
      }
    }
  }
  for (int64_t j = 0; j < len; ++j) v[j] *= s;
}

void rotate_tail_scalar(float* x, int64_t len) {
  for (int64_t p = int64_t{1} << 62; len > 0; p >>= 1) {
    if (len < p) continue;
    if (p > 1) rotate_run_scalar(x, p);
    x += p;
    len -= p;
  }
}

namespace {

void rotate_scalar(float* x, int64_t n, int64_t block) {
  const int64_t full = n / block * block;
  for (int64_t b = 0; b < full; b += block) rotate_run_scalar(x + b, block);
  rotate_tail_scalar(x + full, n - full);
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

// Block Hadamard rotations along a row: each run of `block` values (a power of two) is replaced
// by its normalized Walsh-Hadamard transform, H x / sqrt(block). H / sqrt(block) is orthogonal
// and its own inverse, so rotating a weight's rows and an activation row by the same blocks
// leaves their dot product unchanged while spreading outliers across each MX block, which the
// block's shared power-of-two scale then represents better. One table per ISA, chosen once;
// every variant runs the reference's butterflies in the same order, so all agree bit for bit.
//
// Declarations only: ISA translation units include this header (see act_quant.h).
#pragma once

#include <cstdint>

#include "core/cpu_features.h"

namespace mx {

// The block sizes offered: one MX block, and four.
constexpr bool hadamard_block_ok(int64_t block) { return block == 32 || block == 128; }

struct HadamardKernels {
  IsaLevel isa;
  // x[0, n) in place by blocks of `block` (hadamard_block_ok). A last run shorter than a block
  // (a row of 688 under blocks of 32 ends in 16) is split into descending powers of two
  // (48: 32 and 16), each rotated by its own normalized transform (a single value stays), so
  // that any width rotates and the rotation stays orthogonal and its own inverse.
  void (*rotate)(float* x, int64_t n, int64_t block);
};

const HadamardKernels* hadamard_kernels_for(IsaLevel level);
const HadamardKernels& hadamard_kernels();

namespace hadamard_detail {
// 1 / sqrt(block), rounded once.
float hadamard_scale(int64_t block);
// The reference on one run of `len` values (a power of two), and on a last short run as
// HadamardKernels::rotate splits it; the vector kernels call the latter for their tails.
void rotate_run_scalar(float* v, int64_t len);
void rotate_tail_scalar(float* x, int64_t len);
extern const HadamardKernels kScalarHadamard;
extern const HadamardKernels kAvx2Hadamard;
extern const HadamardKernels kAvx512Hadamard;
}  // namespace hadamard_detail

}  // namespace mx

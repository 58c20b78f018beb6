// Attention over a paged KV cache, one table per ISA, chosen once. For a query head q seeing
// len positions: out = sum_t softmax(q . k_t * scale) v_t over t < len, where position t's key
// is k_blocks[t / block_size] + (t % block_size) * ld (likewise values); the block pointers
// already point at this KV head's columns.
//
// Declarations only: ISA translation units include this header (see formats/act_quant.h).
#pragma once

#include <cstdint>

#include "core/cpu_features.h"

namespace mx {

// Rows of one sequence at consecutive positions, for `group` query heads sharing one KV head
// (grouped-query attention): row j's head h reads its query at q + j * q_ld + h * head_dim,
// sees positions [0, len0 + j) and writes out + j * out_ld + h * head_dim. Each key and value
// row is read once for the group, and from cache for the rows after the first, so a prefill's
// rows share the reads; every (row, head) result is bit for bit what it would be alone (one row,
// one head).
struct AttentionRows {
  const float* q;
  int64_t q_ld;
  float* out;
  int64_t out_ld;
  int64_t rows, group, len0;
  int64_t block_size, ld, head_dim;
  float scale;
  float* scratch;  // attention_scratch_floats(rows, group, len0 + rows - 1, head_dim)
};

// At most this many rows per call.
constexpr int64_t kAttentionMaxRows = 16;
constexpr int64_t attention_scratch_floats(int64_t rows, int64_t group, int64_t max_len,
                                           int64_t head_dim) {
  return rows * group * (max_len + head_dim);
}

struct AttentionKernels {
  IsaLevel isa;
  void (*group_paged)(const AttentionRows& a, const float* const* k_blocks,
                      const float* const* v_blocks);
  // Over a BF16 cache: keys and values widened to FP32 as they are read, then the same
  // operations as group_paged on the widened values.
  void (*group_paged_bf16)(const AttentionRows& a, const uint16_t* const* k_blocks,
                           const uint16_t* const* v_blocks);
  // Over an FP8 cache: E4M3 codes, each position's key (value) row times its own scale,
  // ks_blocks[t / block_size][t % block_size] (vs_blocks likewise; the block pointers already
  // point at this head's scales). The rows are widened exactly (code times scale, a power of
  // two) as they are read, then the same operations as group_paged on the widened values.
  void (*group_paged_fp8)(const AttentionRows& a, const uint8_t* const* k_blocks,
                          const uint8_t* const* v_blocks, const float* const* ks_blocks,
                          const float* const* vs_blocks);
};

const AttentionKernels* attention_kernels_for(IsaLevel level);
const AttentionKernels& attention_kernels();

namespace attention_detail {
extern const AttentionKernels kScalarAttention;
extern const AttentionKernels kAvx2Attention;
extern const AttentionKernels kAvx512Attention;
}  // namespace attention_detail

}  // namespace mx

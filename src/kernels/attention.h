// Attention of one query head over a paged KV cache, one table per ISA, chosen once.
// out = sum_t softmax(q . k_t * scale) v_t over positions t < len, where position t's key is
// k_blocks[t / block_size] + (t % block_size) * ld (likewise values); the block pointers
// already point at this head's columns. scores: len floats of caller scratch.
//
// Declarations only: ISA translation units include this header (see formats/act_quant.h).
#pragma once

#include <cstdint>

#include "core/cpu_features.h"

namespace mx {

struct AttentionKernels {
  IsaLevel isa;
  void (*head_paged)(const float* q, const float* const* k_blocks, const float* const* v_blocks,
                     int64_t block_size, int64_t len, int64_t ld, int64_t head_dim, float scale,
                     float* scores, float* out);
  // `group` query heads sharing one KV head (grouped-query attention), head h at
  // q + h * head_dim, its output at out + h * head_dim; scores: group * len floats. Each key
  // and value row is read once for the whole group, and each head's output is bit for bit
  // what head_paged gives it.
  void (*group_paged)(const float* q, int64_t group, const float* const* k_blocks,
                      const float* const* v_blocks, int64_t block_size, int64_t len, int64_t ld,
                      int64_t head_dim, float scale, float* scores, float* out);
  // group_paged over a BF16 cache: keys and values widened to FP32 as they are read, then
  // the same operations as group_paged on the widened values.
  void (*group_paged_bf16)(const float* q, int64_t group, const uint16_t* const* k_blocks,
                           const uint16_t* const* v_blocks, int64_t block_size, int64_t len,
                           int64_t ld, int64_t head_dim, float scale, float* scores, float* out);
  // group_paged over an FP8 cache: E4M3 codes, each position's key (value) row times its
  // own scale, ks_blocks[t / block_size][t % block_size] (vs_blocks likewise; the block
  // pointers already point at this head's scales). The rows are widened exactly (code times
  // scale, a power of two) as they are read, then the same operations as group_paged on the
  // widened values.
  void (*group_paged_fp8)(const float* q, int64_t group, const uint8_t* const* k_blocks,
                          const uint8_t* const* v_blocks, const float* const* ks_blocks,
                          const float* const* vs_blocks, int64_t block_size, int64_t len,
                          int64_t ld, int64_t head_dim, float scale, float* scores, float* out);
};

const AttentionKernels* attention_kernels_for(IsaLevel level);
const AttentionKernels& attention_kernels();

namespace attention_detail {
extern const AttentionKernels kScalarAttention;
extern const AttentionKernels kAvx2Attention;
extern const AttentionKernels kAvx512Attention;
}  // namespace attention_detail

}  // namespace mx

#include "kernels/attention.h"

#include "core/isa_table.h"
#include "formats/half.h"
#include "kernels/ops.h"

namespace mx {
namespace attention_detail {
namespace {

inline float widen(float x) { return x; }
inline float widen(uint16_t x) { return bf16_to_float(x); }

template <typename T>
void head_paged_reference(const float* q, const T* const* k_blocks, const T* const* v_blocks,
                          int64_t block_size, int64_t len, int64_t ld, int64_t head_dim,
                          float scale, float* scores, float* out) {
  for (int64_t t = 0; t < len; ++t) {
    const T* kt = k_blocks[t / block_size] + (t % block_size) * ld;
    float s = 0.0f;
    for (int64_t d = 0; d < head_dim; ++d) s += q[d] * widen(kt[d]);
    scores[t] = s * scale;
  }
  softmax(scores, len);
  for (int64_t d = 0; d < head_dim; ++d) out[d] = 0.0f;
  for (int64_t t = 0; t < len; ++t) {
    const float p = scores[t];
    const T* vt = v_blocks[t / block_size] + (t % block_size) * ld;
    for (int64_t d = 0; d < head_dim; ++d) out[d] += p * widen(vt[d]);
  }
}

template <typename T>
void group_paged_reference(const float* q, int64_t group, const T* const* k_blocks,
                           const T* const* v_blocks, int64_t block_size, int64_t len, int64_t ld,
                           int64_t head_dim, float scale, float* scores, float* out) {
  for (int64_t h = 0; h < group; ++h) {
    head_paged_reference(q + h * head_dim, k_blocks, v_blocks, block_size, len, ld, head_dim, scale,
                         scores + h * len, out + h * head_dim);
  }
}

}  // namespace

const AttentionKernels kScalarAttention = {IsaLevel::kScalar, head_paged_reference<float>,
                                           group_paged_reference<float>,
                                           group_paged_reference<uint16_t>};

}  // namespace attention_detail

namespace {
// No AVX-512 table is written where it says null: the AVX2 one serves.
constexpr IsaTable<AttentionKernels> kAttentionKernelsTable{
    &attention_detail::kScalarAttention, &attention_detail::kAvx2Attention, nullptr};
}  // namespace

const AttentionKernels* attention_kernels_for(IsaLevel level) {
  return kAttentionKernelsTable.at(level);
}

const AttentionKernels& attention_kernels() {
  static const AttentionKernels& k = kAttentionKernelsTable.select();
  return k;
}

void attention_head_paged(const float* q, const float* const* k_blocks,
                          const float* const* v_blocks, int64_t block_size, int64_t len, int64_t ld,
                          int64_t head_dim, float scale, float* scores, float* out) {
  attention_kernels().head_paged(q, k_blocks, v_blocks, block_size, len, ld, head_dim, scale,
                                 scores, out);
}

void attention_group_paged(const float* q, int64_t group, const float* const* k_blocks,
                           const float* const* v_blocks, int64_t block_size, int64_t len,
                           int64_t ld, int64_t head_dim, float scale, float* scores, float* out) {
  attention_kernels().group_paged(q, group, k_blocks, v_blocks, block_size, len, ld, head_dim,
                                  scale, scores, out);
}

void attention_group_paged_bf16(const float* q, int64_t group, const uint16_t* const* k_blocks,
                                const uint16_t* const* v_blocks, int64_t block_size, int64_t len,
                                int64_t ld, int64_t head_dim, float scale, float* scores,
                                float* out) {
  attention_kernels().group_paged_bf16(q, group, k_blocks, v_blocks, block_size, len, ld, head_dim,
                                       scale, scores, out);
}

}  // namespace mx

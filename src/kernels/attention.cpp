#include "kernels/attention.h"

#include "core/isa_table.h"
#include "formats/half.h"
#include "formats/minifloat.h"
#include "kernels/ops.h"

namespace mx {
namespace attention_detail {
namespace {

// A cached element as FP32: FP32 as stored, BF16 widened, an E4M3 code times its row's scale
// (a power of two, so exact).
inline float widen(float x, float) { return x; }
inline float widen(uint16_t x, float) { return bf16_to_float(x); }
inline float widen(uint8_t x, float s) { return e4m3_table()[x] * s; }

// ks, vs: per-position row scales (FP8 caches), null otherwise.
template <typename T>
void head_paged_reference(const float* q, const T* const* k_blocks, const T* const* v_blocks,
                          const float* const* ks, const float* const* vs, int64_t block_size,
                          int64_t len, int64_t ld, int64_t head_dim, float scale, float* scores,
                          float* out) {
  for (int64_t t = 0; t < len; ++t) {
    const T* kt = k_blocks[t / block_size] + (t % block_size) * ld;
    const float sk = ks != nullptr ? ks[t / block_size][t % block_size] : 1.0f;
    float s = 0.0f;
    for (int64_t d = 0; d < head_dim; ++d) s += q[d] * widen(kt[d], sk);
    scores[t] = s * scale;
  }
  softmax(scores, len);
  for (int64_t d = 0; d < head_dim; ++d) out[d] = 0.0f;
  for (int64_t t = 0; t < len; ++t) {
    const float p = scores[t];
    const T* vt = v_blocks[t / block_size] + (t % block_size) * ld;
    const float sv = vs != nullptr ? vs[t / block_size][t % block_size] : 1.0f;
    for (int64_t d = 0; d < head_dim; ++d) out[d] += p * widen(vt[d], sv);
  }
}

void head_reference(const float* q, const float* const* k_blocks, const float* const* v_blocks,
                    int64_t block_size, int64_t len, int64_t ld, int64_t head_dim, float scale,
                    float* scores, float* out) {
  head_paged_reference<float>(q, k_blocks, v_blocks, nullptr, nullptr, block_size, len, ld,
                              head_dim, scale, scores, out);
}

template <typename T>
void group_reference(const float* q, int64_t group, const T* const* k_blocks,
                     const T* const* v_blocks, const float* const* ks, const float* const* vs,
                     int64_t block_size, int64_t len, int64_t ld, int64_t head_dim, float scale,
                     float* scores, float* out) {
  for (int64_t h = 0; h < group; ++h) {
    head_paged_reference(q + h * head_dim, k_blocks, v_blocks, ks, vs, block_size, len, ld,
                         head_dim, scale, scores + h * len, out + h * head_dim);
  }
}

template <typename T>
void group_paged_reference(const float* q, int64_t group, const T* const* k_blocks,
                           const T* const* v_blocks, int64_t block_size, int64_t len, int64_t ld,
                           int64_t head_dim, float scale, float* scores, float* out) {
  group_reference<T>(q, group, k_blocks, v_blocks, nullptr, nullptr, block_size, len, ld, head_dim,
                     scale, scores, out);
}

}  // namespace

const AttentionKernels kScalarAttention = {
    IsaLevel::kScalar, head_reference, group_paged_reference<float>,
    group_paged_reference<uint16_t>, group_reference<uint8_t>};

}  // namespace attention_detail

namespace {
constexpr IsaTable<AttentionKernels> kAttentionKernelsTable{&attention_detail::kScalarAttention,
                                                            &attention_detail::kAvx2Attention,
                                                            &attention_detail::kAvx512Attention};
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

void attention_group_paged_fp8(const float* q, int64_t group, const uint8_t* const* k_blocks,
                               const uint8_t* const* v_blocks, const float* const* ks_blocks,
                               const float* const* vs_blocks, int64_t block_size, int64_t len,
                               int64_t ld, int64_t head_dim, float scale, float* scores,
                               float* out) {
  attention_kernels().group_paged_fp8(q, group, k_blocks, v_blocks, ks_blocks, vs_blocks,
                                      block_size, len, ld, head_dim, scale, scores, out);
}

}  // namespace mx

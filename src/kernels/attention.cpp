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

// Each (row, head) on its own, its scores in the scratch's first len floats.
template <typename T>
void rows_reference(const AttentionRows& a, const T* const* k_blocks, const T* const* v_blocks,
                    const float* const* ks, const float* const* vs) {
  for (int64_t j = 0; j < a.rows; ++j) {
    for (int64_t h = 0; h < a.group; ++h) {
      head_paged_reference(a.q + j * a.q_ld + h * a.head_dim, k_blocks, v_blocks, ks, vs,
                           a.block_size, a.len0 + j, a.ld, a.head_dim, a.scale, a.scratch,
                           a.out + j * a.out_ld + h * a.head_dim);
    }
  }
}

template <typename T>
void rows_paged_reference(const AttentionRows& a, const T* const* k_blocks,
                          const T* const* v_blocks) {
  rows_reference<T>(a, k_blocks, v_blocks, nullptr, nullptr);
}

}  // namespace

const AttentionKernels kScalarAttention = {IsaLevel::kScalar, rows_paged_reference<float>,
                                           rows_paged_reference<uint16_t>, rows_reference<uint8_t>};

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

void attention_group_paged(const AttentionRows& a, const float* const* k_blocks,
                           const float* const* v_blocks) {
  attention_kernels().group_paged(a, k_blocks, v_blocks);
}

void attention_group_paged_bf16(const AttentionRows& a, const uint16_t* const* k_blocks,
                                const uint16_t* const* v_blocks) {
  attention_kernels().group_paged_bf16(a, k_blocks, v_blocks);
}

void attention_group_paged_fp8(const AttentionRows& a, const uint8_t* const* k_blocks,
                               const uint8_t* const* v_blocks, const float* const* ks_blocks,
                               const float* const* vs_blocks) {
  attention_kernels().group_paged_fp8(a, k_blocks, v_blocks, ks_blocks, vs_blocks);
}

}  // namespace mx

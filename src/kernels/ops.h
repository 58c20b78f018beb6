// FP32 elementwise and row operations of the transformer blocks. Kernels: raw pointers, no
// allocation; `scratch` arguments are caller-owned.
#pragma once

#include <cstdint>

#include "kernels/attention.h"

namespace mx {

// y[i] = x[i] / rms(x) * w[i] with BF16 weights; y may alias x. `gemma_offset` applies
// (1 + w) as Gemma-style norms store it.
void rms_norm_bf16(const float* x, const uint16_t* w, int64_t n, double eps, float* y,
                   bool gemma_offset = false);
// The same with FP32 weights (norms are kept in FP32 whatever their stored type; a BF16
// weight widened to FP32 gives exactly rms_norm_bf16's result).
void rms_norm(const float* x, const float* w, int64_t n, double eps, float* y,
              bool gemma_offset = false);

// Rotary embedding on one head of `head_dim` (the NeoX "rotate half" pairing: i with
// i + head_dim/2), in place, at position `pos`. inv_freq[head_dim/2] = theta^(-2i/d).
void rope_neox(float* head, int64_t head_dim, int64_t pos, const float* inv_freq);
void rope_inv_freq(int64_t head_dim, double theta, float* inv_freq);
// The cosines and sines rope_neox uses at `pos` (head_dim/2 each), to apply to many heads.
void rope_cos_sin(int64_t head_dim, int64_t pos, const float* inv_freq, float* cos, float* sin);
// Multimodal (interleaved) RoPE: frequency j takes pos[1] (height) where j % 3 == 1 and
// j / 3 < section[1], pos[2] (width) where j % 3 == 2 and j / 3 < section[2], else pos[0]
// (temporal). Three equal positions give rope_cos_sin's values bit for bit.
void rope_cos_sin_mrope(int64_t head_dim, const int64_t pos[3], const int64_t section[3],
                        const float* inv_freq, float* cos, float* sin);
// rope_neox with precomputed cosines and sines: the same result.
void rope_neox_cs(float* head, int64_t head_dim, const float* cos, const float* sin);

// LayerNorm over n values: (x - mean) / sqrt(var + eps) * w + b, the moments in double.
void layer_norm(const float* x, const float* w, const float* b, int64_t n, double eps, float* y);
// GELU in place: the tanh approximation (PyTorch's gelu(approximate="tanh")) or exact (erf).
void gelu_tanh(float* x, int64_t n);
void gelu_erf(float* x, int64_t n);
// out = silu(gate) * up through the active ISA's table (kernels/glu.h); out may alias gate.
void swiglu(const float* gate, const float* up, int64_t n, float* out);
// x *= sigmoid(gate), elementwise, through the same table.
void sigmoid_gate(const float* gate, int64_t n, float* x);

// Numerically stable softmax in place.
void softmax(float* x, int64_t n);

// log-softmax of logits[n] into out[n] (may alias).
void log_softmax(const float* logits, int64_t n, float* out);

// Rows of grouped query heads over a paged cache, through the active ISA's kernel
// (kernels/attention.h says what they compute).
void attention_group_paged(const AttentionRows& a, const float* const* k_blocks,
                           const float* const* v_blocks);
// The same over a BF16 cache.
void attention_group_paged_bf16(const AttentionRows& a, const uint16_t* const* k_blocks,
                                const uint16_t* const* v_blocks);
// The same over an FP8 cache (kernels/attention.h).
void attention_group_paged_fp8(const AttentionRows& a, const uint8_t* const* k_blocks,
                               const uint8_t* const* v_blocks, const float* const* ks_blocks,
                               const float* const* vs_blocks);

}  // namespace mx

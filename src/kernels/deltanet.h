// Gated DeltaNet (the linear attention of Qwen3.5 / Qwen3-Next) for one sequence at a time:
// the causal depthwise conv1d + SiLU over the [q | k | v] channels, the gated delta rule
// (token by token for decode, chunked for prefill), and the small row ops around them.
// One table per ISA, chosen once. Kernels take raw pointers; they never allocate, log or
// throw: callers validate shapes and pass scratch. A model calls them per sequence with that
// sequence's own conv state and recurrent state, for a prefill chunk of any length or a decode
// step, and may split value heads across threads (offset the pointers, keep the strides).
//
// Precision contract (u = 2^-24):
// - delta_rule_recurrent, delta_rule_chunked, sigmoid, softplus, decay_gate: every variant
//   equals the scalar reference bit for bit. The references fix one operation order
//   (sequential FMA chains, expf/log1pf per element) and the vector versions vectorize only
//   over independent outputs (channels, value columns, chunk rows), keeping each output's chain.
// - conv_silu: the convolution bit for bit as above; the vector tables' SiLU takes its exp from
//   a polynomial within 2 ulp of expf (kernels/vec_math_simd.h), so |dy| <= 6 u |y| against
//   the exact SiLU of the same sum, and a channel's result does not depend on the call's
//   channels or tokens.
// - l2_norm, gated_rms_norm: each row's sum of squares is reduced in eight lanes instead of one
//   chain, so the result differs from the reference by that order only: |dy| <= (dim + 8) u |y|
//   (sum relative error <= (dim - 1) u, halved by the square root, plus four roundings), and
//   gated_rms_norm's SiLU as conv_silu's adds 6 u.
// - Against exact arithmetic, the recurrence (per value head, S_t the exact state, Frobenius
//   norms) satisfies ||dS_T|| <= (dk + 8) u sum_t (||S_{t-1}|| + ||S_t|| + ||v_t||): each
//   step's rounding is at most that (the S^T k dot contributes dk u ||S|| by Cauchy-Schwarz
//   with ||k|| <= 1), and later steps never amplify it, since S -> exp(g)(I - beta k k^T) S has
//   spectral norm <= 1 for beta in [0, 1] and ||k|| <= 1 (what l2_norm gives). An output then
//   errs by ||q_t|| (||dS_t|| + (dk + 2) u ||S_t||) + u ||o_t||.
// - The chunked form computes the same linear map with the UT transform T = (I + B)^-1 of each
//   chunk (B[i][m] = beta_i (k_i . k_m) exp(G_i - G_m), m < i, G the in-chunk cumulative
//   log-decay). Its products have inner lengths <= max(dk, 64) and pass through T twice (its
//   own forward-substitution error and its use), so per chunk the state errs by at most
//   (dk + dv + 2 * 64 + 8) u kappa^2 sum_{t in chunk} (||S_{t-1}|| + ||S_t|| + ||v_t||),
//   kappa = max_i sum_m |T[i][m]| (>= 1, about 1 to 2 for normalized keys); chunk errors add up
//   as in the recurrence and an output errs by ||q_t|| times the error accumulated through its
//   chunk. Chunked and recurrent results therefore agree within the sum of the two bounds
//   whatever the split into calls. (The test's random problems use under 2% of either bound.)
//
// Declarations only: ISA translation units include this header (see formats/act_quant.h).
#pragma once

#include <cstdint>

#include "core/cpu_features.h"

namespace mx {

constexpr int64_t kDeltaChunk = 64;    // tokens per chunk of the chunked delta rule
constexpr int64_t kConvMaxKernel = 8;  // longest conv1d kernel supported (Qwen3.5: 4)
constexpr float kL2NormEps = 1e-6f;    // x * rsqrt(sum(x^2) + eps), as the models use

// Causal depthwise conv1d of T tokens over C channels, then SiLU, no bias:
// y[t, c] = silu(sum_j w[c, j] * xin[t - (K-1) + j, c]), where xin before t = 0 comes from
// state. Sum order: j = 0 first (a product), then FMA for j = 1 .. K-1.
struct ConvArgs {
  const float* x;  // [T, C], row stride ldx
  const float* w;  // [C, K] (conv1d.weight [C, 1, K] is the same memory)
  float* state;    // [K-1, C]: the previous K-1 inputs per channel, oldest first, row
                   // stride lds; updated in place to the last K-1 inputs (carried across calls)
  float* y;        // [T, C], row stride ldy; may alias x (same pointer and stride)
  int64_t t, channels, kernel;  // kernel in 1 .. kConvMaxKernel
  int64_t ldx, ldy;
  int64_t lds = 0;  // 0: channels (dense); more when the call covers a slice of the channels
};

// The gated delta rule over T tokens of one sequence, per value head h (key head
// h / (nv / nk)), state S_h [dk][dv] row-major FP32:
//   S = S * exp(g_t); kv = S^T k_t; d = (v_t - kv) * beta_t; S = S + k_t d^T; o_t = S^T q_t.
// q and k already L2-normalized (and q scaled by 1/sqrt(dk)) by the caller (l2_norm).
struct DeltaRuleArgs {
  const float* q;             // [T, nk, dk]: token t, key head i at q + t * ldq + i * dk
  const float* k;             // [T, nk, dk]: at k + t * ldk + i * dk
  const float* v;             // [T, nv, dv]: at v + t * ldv + h * dv
  const float* g;             // [T, nv] log decay (<= 0) at g + t * ldg + h
  const float* beta;          // [T, nv] in [0, 1] at beta + t * ldg + h
  float* state;               // [nv, dk, dv], updated in place to the state after the last token
  float* o;                   // [T, nv, dv]: at o + t * ldo + h * dv
  int64_t t, nk, nv, dk, dv;  // nv a multiple of nk
  int64_t ldq, ldk, ldv, ldg, ldo;
};

// Floats of scratch delta_rule_chunked needs for a call of T tokens (any ISA). The value
// heads are processed one after another and share it; threads splitting heads need one each.
int64_t delta_rule_chunked_scratch_floats(int64_t t, int64_t nv, int64_t dk, int64_t dv);

struct DeltaNetKernels {
  IsaLevel isa;
  void (*conv_silu)(const ConvArgs& a);
  // Token by token (decode; any T). Each state row block is read and written once per token.
  void (*delta_rule_recurrent)(const DeltaRuleArgs& a);
  // Chunks of kDeltaChunk tokens from the first token of the call (the last one shorter),
  // the state carried between them; equal to the recurrence within the bound above.
  void (*delta_rule_chunked)(const DeltaRuleArgs& a, float* scratch);
  // In place on `t` rows of `heads` vectors of `dim`: row r, head i at x + r * ld + i * dim;
  // x = x * rsqrt(sum(x^2) + kL2NormEps) * scale (scale = 1/sqrt(dk) for queries, 1 for keys).
  void (*l2_norm)(float* x, int64_t t, int64_t heads, int64_t dim, int64_t ld, float scale);
  // RMSNormGated over `rows` contiguous rows of `dim`: y = w * (x * rsqrt(mean(x^2) + eps)) *
  // silu(z), plain w (not 1 + w), in FP32. y may alias x. (The zero-centred (1 + w) norms of
  // Qwen3.5 are ordinary RMSNorms once the model adds the 1 to their weights at load.)
  void (*gated_rms_norm)(const float* x, const float* z, const float* w, int64_t rows, int64_t dim,
                         float eps, float* y);
  // y = 1 / (1 + exp(-x)); y may alias x.
  void (*sigmoid)(const float* x, int64_t n, float* y);
  // y = x > 20 ? x : log1p(exp(x)) (torch's softplus, threshold 20); y may alias x.
  void (*softplus)(const float* x, int64_t n, float* y);
  // g[t, h] = -exp(a_log[h]) * softplus(a[t * lda + h] + dt_bias[h]) for t < T, h < nv;
  // g dense [T, nv].
  void (*decay_gate)(const float* a, int64_t lda, const float* dt_bias, const float* a_log,
                     int64_t t, int64_t nv, float* g);
};

// The kernels of one level; null when this binary or processor lacks it (the AVX-512 level is
// served by the AVX2 table through deltanet_kernels()).
const DeltaNetKernels* deltanet_kernels_for(IsaLevel level);
// The kernels of active_isa(), resolved once.
const DeltaNetKernels& deltanet_kernels();

namespace deltanet_detail {
extern const DeltaNetKernels kScalarDeltaNet;
extern const DeltaNetKernels kAvx2DeltaNet;
extern const DeltaNetKernels kAvx512DeltaNet;
}  // namespace deltanet_detail

}  // namespace mx

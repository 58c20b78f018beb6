// Building blocks shared by the architecture files: loading attention, dense MLP and MoE
// weights, and running each block over a flattened batch. An architecture file composes
// them into its layers and owns how a layer runs (registry.cpp lists the architectures).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/exec_context.h"
#include "model/model.h"
#include "model/profile.h"
#include "model/weights.h"

namespace mx {

// What every block of one forward pass shares: the batch's rows (in slice order), where each
// row sits, its rotary angles, the KV cache, and the run-time switches of the model.
struct ForwardContext {
  const ModelConfig& config;
  // The model's pool, workspace (slots below) and the threads' arenas, kept from step to step.
  ExecContext& exec;
  ForwardProfile* profile;  // null: not profiling
  ScaleRule scale_rule;
  bool fused_dispatch;
  std::vector<RouterTrace>* router_trace;  // null: not tracing
  std::span<const SeqSlice> seqs;
  const std::vector<int64_t>& row_seq;  // each row's slice
  const std::vector<int64_t>& row_pos;  // each row's position in its sequence
  const float* rope;                    // per row: rotary_dim / 2 cosines, then as many sines
  PagedKv& kv;
  int64_t rows;
  MoeDispatcher& dispatcher;
  bool has_prefill;  // a slice holds more than one token
  uint64_t step;     // forward passes of the model so far
  // Tensor parallelism: the ranks whose partial block outputs are summed (null: one process).
  Comm* tp;
  // Data-parallel attention: the rows are this rank's own, and most_rows the most any rank
  // runs in this step (MoeArgs::own_rows).
  bool own_rows;
  int64_t most_rows;
};

// x += h over the step's rows (the residual add).
void add_rows(ForwardContext& ctx, const float* h, float* x);
// Sums rows [rows, hidden] of every rank's partial output in place (tensor parallelism; a
// no-op in one process).
void tp_all_reduce(ForwardContext& ctx, float* rows);

// Workspace slots of a forward pass, after the schemes' (quant/linear.h): each is used by one
// block at a time.
enum WorkspaceSlot : int {
  kWsResidual = kQuantWsSlots,
  kWsNormed,
  kWsRope,
  kWsQkv,
  kWsAttention,
  kWsMoe,
  kWsGatedQueries,  // gated attention: the queries apart from their gates
  kWsGates,
  kWsRowRuns,  // attention's runs of rows
  kWsDnProj,   // DeltaNet: q, k, v and z of every row
  kWsDnGateInputs,
  kWsDnGates,  // one sequence's decays and betas
  kWsDnOut,
  kWsMlp,           // a dense MLP's gate/up rows
  kWsRouterLogits,  // MoE: router logits, then probabilities
  kWsRoutedExperts,
  kWsRoutedWeights,
  kWsSharedExpert,
  kWsSharedGate,
  kWsHeadShare,   // vocabulary-parallel lm_head: this rank's share of the logits
  kWsHeadGather,  // rank 0: every rank's share
  kWsHeadCounts,  // the gather's byte counts and offsets
  kWsHeadPacked,  // the rows a rank sends when some want only their largest logit
  kWsHeadBest,    // rank 0: each such row's largest so far (value, id)
  kWsMtpConcat,   // an MTP head's [normed embedding | normed hidden] rows
  kWsTpGathered,  // tensor parallelism: a gathered row-parallel input (tensor_parallel.h)
  kWsTpRows,      // and this rank's rows of its output
  kWsDpHidden,    // data-parallel attention: this rank's normed logit rows
  kWsDpGathered,  // every rank's, by rank
  kWsDpOrdered,   // every rank's, in slice order
  kWsDpIdle,      // an idle rank's empty MoE arguments
};
// Slots of each pool thread's arena, after the schemes'.
enum ArenaSlot : int {
  kArenaAttention = kQuantArenaSlots,  // scores of one attention call
  kArenaKeyBlocks,                     // the paged blocks an attention call reads
  kArenaDeltaRule,                     // one head's chunked delta rule
};

Status load_attention(const WeightLoader& w, const ModelConfig& c, const std::string& prefix,
                      AttentionBlock* out);
Status load_dense_mlp(const WeightLoader& w, const ModelConfig& c, const std::string& prefix,
                      int64_t width, DenseMlp* out);
Status load_moe(const WeightLoader& w, const ModelConfig& c, const std::string& prefix,
                MoeBlock* out);
// Norms, embedding, final norm and lm_head (tied or not).
Status load_norms(const WeightLoader& w, const ModelConfig& c, const std::string& prefix,
                  DecoderLayer* out);
// `head_scheme`: lm_head's online scheme (nullopt keeps it in floating point).
Status load_embeddings_and_head(const WeightLoader& w, const ModelConfig& c,
                                std::optional<Scheme> head_scheme, ScaleRule rule, DecoderModel* m);

// h: the normed rows in, the attention output (after o_proj) out.
void attention_forward(const AttentionBlock& attn, int64_t layer, ForwardContext& ctx, float* h);
// h: the normed rows in, the DeltaNet output (after out_proj) out. Each sequence's recurrent
// state lives in its slot of ctx.kv and is reset when the sequence starts.
void deltanet_forward(const DeltaNetBlock& dn, int64_t layer, ForwardContext& ctx, float* h);
Status load_deltanet(const WeightLoader& w, const ModelConfig& c, const std::string& prefix,
                     DeltaNetBlock* out);
// A norm weight as FP32, with (1 + w) applied for zero-centred norms.
Result<Tensor> load_norm(const WeightLoader& w, const ModelConfig& c, const std::string& name,
                         int64_t n);
// h: the normed rows in, the MLP output out.
void dense_mlp_forward(const DenseMlp& mlp, ForwardContext& ctx, float* h);
// The same, untimed (a shared expert times itself).
void dense_mlp_apply(const DenseMlp& mlp, ForwardContext& ctx, float* h);
// Adds the MoE output of the normed rows h to x: the routed experts' sum, plus the shared
// expert's, formed apart from x as the reference forms it, then added to x.
void moe_forward(const MoeBlock& moe, int64_t layer, ForwardContext& ctx, const float* h, float* x);
// Pre-norm residual sublayers that architectures compose: x += mixer(norm(x)) with the input
// norm, and x += ffn(norm(x)) with the post-attention norm. h is scratch of x's size.
void attention_sublayer(const DecoderLayer& layer, int64_t li, ForwardContext& ctx, float* x,
                        float* h);
void deltanet_sublayer(const DecoderLayer& layer, int64_t li, ForwardContext& ctx, float* x,
                       float* h);
void dense_ffn_sublayer(const DecoderLayer& layer, ForwardContext& ctx, float* x, float* h);
void moe_ffn_sublayer(const DecoderLayer& layer, int64_t li, ForwardContext& ctx, float* x,
                      float* h);

// Architectures: how each builds and runs one layer; registry.cpp lists them.
using LayerBuilder = Status (*)(const WeightLoader& w, const ModelConfig& c, int64_t layer,
                                DecoderLayer* out);
using LayerForward = void (*)(const DecoderLayer& layer, int64_t li, ForwardContext& ctx, float* x,
                              float* h);
struct ArchImpl {
  Arch arch;
  LayerBuilder build;
  LayerForward forward;
  const PackedModules* packed;  // the architecture's own packed modules (null: none)
};
extern const PackedModules kQwen3_5PackedModules;
// Null for an architecture without an implementation (config parsing rejects those first).
const ArchImpl* arch_impl(Arch arch);

Status build_qwen3_layer(const WeightLoader& w, const ModelConfig& c, int64_t layer,
                         DecoderLayer* out);
void qwen3_layer_forward(const DecoderLayer& layer, int64_t li, ForwardContext& ctx, float* x,
                         float* h);
Status build_qwen3_moe_layer(const WeightLoader& w, const ModelConfig& c, int64_t layer,
                             DecoderLayer* out);
void qwen3_moe_layer_forward(const DecoderLayer& layer, int64_t li, ForwardContext& ctx, float* x,
                             float* h);
Status build_qwen3_5_layer(const WeightLoader& w, const ModelConfig& c, int64_t layer,
                           DecoderLayer* out);
void qwen3_5_layer_forward(const DecoderLayer& layer, int64_t li, ForwardContext& ctx, float* x,
                           float* h);

}  // namespace mx

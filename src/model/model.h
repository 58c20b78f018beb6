// A decoder-only language model: embedding, N layers, final norm, lm_head. Each architecture
// file builds its layers from shared blocks and owns how a layer runs (model/blocks.h;
// registry.cpp lists them); this shell embeds, prepares positions and runs the head.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/exec_context.h"
#include "core/huge_pages.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "formats/ggml_types.h"
#include "loader/model_config.h"
#include "model/kv_store.h"
#include "model/profile.h"
#include "model/tensor_parallel.h"
#include "parallel/dispatch.h"
#include "quant/linear.h"

namespace mx {

// Keys and values of many sequences in fixed-size blocks (KvStore, which owns how they are
// stored), and the recurrent states of a hybrid model's sequences (RecurrentStore). Which
// blocks a sequence owns is the scheduler's business (runtime/kv_blocks.h); the model only
// follows block tables.
class PagedKv {
 public:
  // `slots`: recurrent states for as many sequences at once (hybrid models only).
  PagedKv(const ModelConfig& c, int32_t num_blocks, int32_t block_size,
          KvDtype dtype = KvDtype::kF32, int32_t slots = 1);
  int32_t num_blocks() const { return kv_.num_blocks(); }
  int32_t block_size() const { return kv_.block_size(); }
  int64_t row() const { return kv_.row(); }
  KvDtype dtype() const { return kv_.dtype(); }
  KvStore& keys_values() { return kv_; }
  RecurrentStore& recurrent() { return rec_; }
  int32_t slots() const { return rec_.slots(); }
  float* conv_state(int64_t layer, int32_t slot) { return rec_.conv_state(layer, slot); }
  float* delta_state(int64_t layer, int32_t slot) { return rec_.delta_state(layer, slot); }
  uint64_t slot_bytes() const { return rec_.slot_bytes(); }
  void reserve_state_steps(int32_t positions) { rec_.reserve_state_steps(positions); }
  int32_t state_steps() const { return rec_.state_steps(); }
  float* kept_state(int64_t layer, int32_t slot, int64_t p) {
    return rec_.kept_state(layer, slot, p);
  }
  void restore_state(int32_t slot, int64_t p) { rec_.restore_state(slot, p); }
  void reserve_saved_states(int32_t entries) { rec_.reserve_saved_states(entries); }
  int32_t saved_states() const { return rec_.saved_states(); }
  void save_state(int32_t slot, int32_t entry) { rec_.save_state(slot, entry); }
  void load_state(int32_t entry, int32_t slot) { rec_.load_state(entry, slot); }
  // Unique in the process: an expert-parallel step names the cache its replicas follow.
  uint64_t id() const { return id_; }

 private:
  KvStore kv_;
  RecurrentStore rec_;
  uint64_t id_;
};

// One sequence in a batch: tokens at positions [start, start + count), whose keys and values
// go to (and whose attention reads from) the blocks of `blocks`.
struct SeqSlice {
  enum class Logits { kNone, kLast, kAll };
  const int32_t* tokens = nullptr;
  int64_t count = 0;
  int64_t start = 0;
  const int32_t* blocks = nullptr;  // covers start + count positions
  Logits logits = Logits::kLast;
  // The recurrent-state slot of the sequence (hybrid models); reset when start == 0.
  int32_t slot = 0;
  // Verification of drafted tokens: the recurrent layers run token by token, as decode steps
  // do (so that every position's result equals a decode step's, bit for bit), and keep the
  // state after each position for PagedKv::restore_state (count <= PagedKv::state_steps()).
  bool keep_states = false;
  // The recurrent layers run token by token without keeping states: a recomputation of tokens
  // that were decoded (after preemption) rounds as their decode steps did.
  bool stepwise = false;
  // Multimodal input: per row, an embedding that replaces the token's (null rows, or a null
  // array: the token's own), e.g. a vision tower's output at image placeholders.
  const float* const* embeds = nullptr;
  // Multimodal rotary positions of the rows, (t, h, w) each; null: all three are the row's
  // position plus rope_delta (what text after an image takes).
  const int64_t* mrope = nullptr;
  int64_t rope_delta = 0;
  // Only the largest logit of each of its rows is wanted (greedy sampling that nothing else
  // reads the rows for): under a vocabulary-split lm_head each rank then sends its largest
  // (value and id) instead of its share, and the row holds that logit, -inf elsewhere.
  bool top1_logits = false;
  // Data-parallel attention: the rank that runs this sequence (its attention, its cache
  // blocks and its recurrent state); the engine balances sequences over the ranks.
  int32_t dp_rank = 0;
};

// A single sequence's cache: one block as long as the capacity.
class KvCache {
 public:
  KvCache(const ModelConfig& c, int64_t capacity, KvDtype dtype = KvDtype::kF32)
      : kv_(c, 1, static_cast<int32_t>(capacity), dtype) {}
  int64_t capacity() const { return kv_.block_size(); }
  int64_t length() const { return length_; }
  void set_length(int64_t n) { length_ = n; }
  PagedKv& paged() { return kv_; }

 private:
  PagedKv kv_;
  int64_t length_ = 0;
};

struct AttentionBlock {
  // q, k, v stacked along the output dimension; with an output gate each query head is
  // [query | gate] (2 x head_dim) and the attention output is scaled by sigmoid(gate).
  std::unique_ptr<Linear> qkv;
  std::unique_ptr<Linear> o;
  Tensor q_norm, k_norm;  // [head_dim] FP32
  bool output_gate = false;
};

// Gated DeltaNet linear attention (Qwen3.5): projections, causal conv1d over [q | k | v],
// the gated delta rule over a recurrent state per sequence, a gated RMSNorm with z, out_proj.
struct DeltaNetBlock {
  std::unique_ptr<Linear> qkvz;  // in_proj_qkv rows [q | k | v], then in_proj_z
  std::unique_ptr<Linear> ba;    // in_proj_b, then in_proj_a (kept as stored)
  std::unique_ptr<Linear> out;
  Tensor conv_w;   // [conv_dim, kernel] FP32
  Tensor a_log;    // [nv] FP32
  Tensor dt_bias;  // [nv] FP32
  Tensor norm;     // [dv] FP32, plain w
};

struct DenseMlp {
  std::unique_ptr<Linear> gate_up;  // [2I, H]: gate rows then up rows
  std::unique_ptr<Linear> down;
};

struct MoeBlock {
  std::unique_ptr<Linear> router;       // [E, H], FP32 logits
  std::unique_ptr<ExpertBank> experts;  // this rank's share of the experts
  int64_t first_expert = 0;             // the bank's first (tensor parallelism, whole experts)
  int64_t num_experts = 0;              // of the layer, over all ranks
  int64_t top_k = 0;
  bool norm_topk_prob = false;
  // Optional shared expert, added as sigmoid(shared_gate(x)) * shared(x).
  std::unique_ptr<DenseMlp> shared;
  std::unique_ptr<Linear> shared_gate;  // [1, H]
};

struct DecoderLayer {
  Tensor input_norm, post_norm;  // [H] FP32 (1 + w already applied for zero-centred norms)
  AttentionBlock attn;           // full-attention layers
  std::unique_ptr<DeltaNetBlock> deltanet;  // linear-attention layers
  std::unique_ptr<DenseMlp> mlp;            // exactly one of mlp, moe
  std::unique_ptr<MoeBlock> moe;
  // Bytes of the token mixer's weights (attention or DeltaNet), read once per step.
  uint64_t mixer_weight_bytes() const;
};

// The token embedding: BF16 rows, or rows of ggml blocks (a GGUF kept as stored) dequantized
// one token at a time.
struct Embedding {
  Tensor table;  // [V, H] BF16, or U8 [V, row_bytes]
  std::optional<GgmlType> ggml;
  int64_t hidden = 0;
  // Tensor parallelism: the table holds tokens [first, first + its rows) of the vocabulary, and
  // the others' rows are zero here (the ranks' rows are then summed).
  int64_t first = 0;
  bool split = false;
  void row(int32_t token, float* out) const;
};

struct LoadOptions {
  int threads = 1;
  // Online quantization of every linear layer and expert bank (router gate, embeddings,
  // norms and lm_head stay as stored). An offline-quantized checkpoint refuses it: its
  // weights already are in a scheme.
  std::optional<Scheme> quantization;
  // --quantization modelslim: the checkpoint must be an msmodelslim one.
  bool expect_modelslim = false;
  // A GGUF's weights dequantized to BF16 at load instead of kept in their blocks.
  bool gguf_dequant_bf16 = false;
  // Blocks kept as stored: activations quantized to each type's dot-product type (llama.cpp's
  // numerics, the default) or kept FP32 against blocks dequantized in L1 (exact).
  GgmlActivations gguf_activations = GgmlActivations::kNative;
  ScaleRule scale_rule = ScaleRule::kFloor;
  // Online quantization rotates weights and activations by block Hadamard transforms of this
  // size along K first (--rotation block32|block128; 0: none).
  int64_t rotation = 0;
  // Online quantization covers lm_head too (a tied head is quantized from the embedding),
  // as peers configure it when they compare quantized decode speed.
  bool quantize_lm_head = false;
  // How the runtime's KV caches store keys and values (DecoderModel::kv_dtype()).
  KvDtype kv_dtype = KvDtype::kF32;
  // Expert parallelism (--ep-size): the experts split over ep.comm's ranks, each rank loading
  // only its own share; null comm: one process.
  EpOptions ep;
  // Tensor parallelism (--tp-size): each layer's heads and widths split over tp.comm's ranks
  // (model/tensor_parallel.h); null comm: one process.
  TpOptions tp;
  // Called after each layer loads (done, total), e.g. to draw a progress bar.
  std::function<void(int64_t, int64_t)> progress;
};

// Routing decisions of one MoE layer for the last forward call, for tests and profiles.
struct RouterTrace {
  int64_t layer = 0;
  std::vector<int32_t> experts;  // [tokens, top_k]
  std::vector<float> weights;    // [tokens, top_k]
};

class DecoderModel {
 public:
  const ModelConfig& config() const { return config_; }
  ThreadPool& pool() { return *pool_; }
  uint64_t weight_bytes() const;

  // Runs `n` tokens at positions cache.length() .. + n - 1, appends their keys and values,
  // and writes logits [n, vocab] (all_logits) or [1, vocab] for the last token. Fails on a
  // token id out of range or a full cache.
  Status forward(const int32_t* tokens, int64_t n, KvCache& cache, bool all_logits, float* logits);
  // Many sequences in one pass (continuous batching): logits rows in slice order, one per
  // kLast slice and `count` per kAll slice. Each row's result is independent of the others.
  // Under expert parallelism only rank 0 receives logits (the others may pass null). With
  // `hidden`, also the final-normed hidden state of every row [rows, hidden_size], what the
  // lm_head reads (and what an MTP head is fed).
  Status forward_batch(std::span<const SeqSlice> seqs, PagedKv& kv, float* logits,
                       float* hidden = nullptr);
  // As forward_batch, but writes the final-normed hidden state of each row that would have
  // had logits ([rows, hidden_size]) instead: what embedding models pool.
  Status forward_hidden(std::span<const SeqSlice> seqs, PagedKv& kv, float* hidden);
  // A multi-token-prediction head (has_mtp_input()): row r's input is
  // fc(cat[norm_e(embed(token r)), norm_h(hidden_in row r)]) instead of the embedding alone.
  Status forward_mtp(std::span<const SeqSlice> seqs, PagedKv& kv, const float* hidden_in,
                     float* logits, float* hidden);
  bool has_mtp_input() const { return mtp_input != nullptr; }
  // Whether the pass under way computes hidden states for forward_hidden (the step hook tells
  // the ranks that replay it).
  bool hidden_pass() const { return hidden_out_ != nullptr; }
  // Every forward is replayed by other ranks (expert parallelism): a forward outside the
  // engine's steps would leave them behind.
  bool replays_steps() const { return static_cast<bool>(step_hook_); }

  // Local dispatch writes routed rows in the format the expert kernel declares (activation
  // quantization fused into the permutation). Off, rows travel as FP32 and gmm1 quantizes
  // them, as in normal-mode expert parallelism; the outputs are identical.
  void set_fused_dispatch(bool on) { fused_dispatch_ = on; }
  // Whether the checkpoint was quantized offline, and the schemes in use, for reports.
  bool offline_quantized = false;
  std::string scheme_summary() const;
  // The KV storage chosen at load (LoadOptions::kv_dtype), for the caches the runtime makes;
  // forward() follows whatever cache it is given.
  KvDtype kv_dtype() const { return kv_dtype_; }

  // The MoE dispatcher: local in one process, expert-parallel under --ep-size.
  MoeDispatcher& dispatcher() { return *dispatcher_; }
  // Called by forward_batch with each valid step before it runs (rank 0 broadcasts the step
  // to the other ranks of an expert-parallel job from here).
  using StepHook = std::function<void(std::span<const SeqSlice>, const PagedKv&)>;
  void set_step_hook(StepHook hook) { step_hook_ = std::move(hook); }
  // Rolls slot `slot` of `kv` back to its state after fed position `p` of the last verify
  // (PagedKv::restore_state), telling the restore hook first: the ranks that replay steps keep
  // replicas of the recurrent states, which must go back too.
  void restore_state(PagedKv& kv, int32_t slot, int64_t p) {
    if (restore_hook_) restore_hook_(kv, slot, p);
    kv.restore_state(slot, p);
  }
  using RestoreHook = std::function<void(const PagedKv&, int32_t, int64_t)>;
  void set_restore_hook(RestoreHook hook) { restore_hook_ = std::move(hook); }

  // When set, every forward adds the time of each phase to `prof` (null: off).
  void set_profile(ForwardProfile* prof) { profile_ = prof; }
  bool profiling() const { return profile_ != nullptr; }

  // Forward passes run only the first n layers (calibration gathers a layer's inputs without
  // running those above it; the logits are then meaningless); negative: all of them.
  void set_layer_limit(int64_t n) { layer_limit_ = n; }

  // When set, forward() records the router choices of each MoE layer.
  void set_trace_router(bool on) { trace_router_ = on; }
  const std::vector<RouterTrace>& router_trace() const { return router_trace_; }

  // Built by the architecture files.
  ModelConfig config_;
  Embedding embed;
  Tensor final_norm;                // [H] FP32
  std::unique_ptr<Linear> lm_head;  // logits [head_begin, head_end) of the vocabulary
  // An MTP head's: the target model's lm_head, which it shares (lm_head then null).
  const Linear* shared_head = nullptr;
  struct MtpInput {
    std::unique_ptr<Linear> fc;          // [H, 2H]: the embedding half first
    Tensor norm_embedding, norm_hidden;  // [H] FP32, (1 + w) applied
  };
  std::unique_ptr<MtpInput> mtp_input;
  std::vector<DecoderLayer> layers;
  // Vocabulary-parallel lm_head under expert or tensor parallelism: each rank computes its share of
  // the logits and rank 0 gathers them (head_comm null: one process, the whole vocabulary).
  int64_t head_begin = 0, head_end = 0;
  Comm* head_comm = nullptr;
  // Tensor parallelism: the ranks that hold the other shares of every layer (null: none).
  Comm* tp_comm = nullptr;
  // Data-parallel attention beside expert parallelism (null: every rank runs every row): each
  // rank runs the slices given its rank; the lm_head is split by vocabulary over the ranks
  // (dp_lm_head) or whole on each.
  Comm* dp_comm = nullptr;
  bool dp_lm_head = false;
  int dp_size() const { return dp_comm != nullptr ? dp_comm->size() : 1; }
  std::unique_ptr<ThreadPool> pool_;

 private:
  bool trace_router_ = false;
  int64_t layer_limit_ = -1;
  ForwardProfile* profile_ = nullptr;
  bool fused_dispatch_ = true;
  ScaleRule scale_rule_ = ScaleRule::kFloor;
  KvDtype kv_dtype_ = KvDtype::kF32;
  // Rank 0 gets the logits [rows, vocab] from every rank's share [rows, its share]; rows
  // flagged in top1 (null: none) only their largest logit (SeqSlice::top1_logits).
  void gather_logits(const float* mine, int64_t mine_floats, int64_t rows, float* logits,
                     const char* top1);
  // Embedding, rotary angles and every layer over `seqs` (plan_rows done): the residual rows.
  // most_rows >= 0: data-parallel attention, the most rows any rank runs in this step.
  float* run_layers(std::span<const SeqSlice> seqs, PagedKv& kv, bool has_prefill,
                    int64_t most_rows);
  // Data-parallel attention (model/data_parallel.cpp): this rank's slices, or the MoE layers'
  // collectives alone when it has none, then every rank's logit rows through the lm_head.
  Status forward_dp(std::span<const SeqSlice> seqs, PagedKv& kv, float* logits, float* hidden);
  void idle_layers(bool has_prefill, int64_t most_rows);
  void dp_logits(std::span<const SeqSlice> seqs, const float* mine, float* logits);
  std::vector<SeqSlice> own_seqs_;
  std::vector<int64_t> dp_rows_, dp_logit_rows_, dp_counts_, dp_next_;
  std::vector<char> dp_top1_;
  // Each row's slice into row_seq_ and the rows that want logits into logit_rows_, after
  // checking the tokens and the recurrent-state slots.
  Status plan_rows(std::span<const SeqSlice> seqs, const PagedKv& kv);
  friend Result<std::unique_ptr<DecoderModel>> load_model(const std::string&, const LoadOptions&);
  friend Result<std::unique_ptr<DecoderModel>> load_mtp_head(const std::string&, DecoderModel&,
                                                             const LoadOptions&);
  std::vector<RouterTrace> router_trace_;
  std::vector<float> inv_freq_;
  // What every forward lends its layers: pool_, the activations' workspace (model/blocks.h and
  // quant/linear.h name the slots) and the threads' arenas, kept from step to step.
  std::unique_ptr<ExecContext> exec_;
  // forward_batch's per-row bookkeeping (model/blocks.h's ForwardContext refers to it).
  std::vector<int64_t> row_seq_, row_pos_, logit_rows_;
  std::vector<char> slot_taken_;
  // Per logit row of the last plan_rows: whether only its largest logit is wanted.
  std::vector<char> logit_top1_;
  bool any_top1_ = false;
  std::unique_ptr<MoeDispatcher> dispatcher_;
  StepHook step_hook_;
  RestoreHook restore_hook_;
  float* hidden_out_ = nullptr;        // set by forward_hidden for its pass
  const float* mtp_hidden_ = nullptr;  // set by forward_mtp for its pass
  const Linear& head() const { return shared_head != nullptr ? *shared_head : *lm_head; }
  // Each row's MTP input into x: fc over the normed embedding and hidden state.
  void mtp_inputs(int64_t n, float* x);
  uint64_t steps_ = 0;
};

Result<std::unique_ptr<DecoderModel>> load_model(const std::string& dir,
                                                 const LoadOptions& options);
// The checkpoint's multi-token-prediction head (mtp.* in safetensors, the nextn block of a
// GGUF) as a one-layer model that shares `target`'s embedding, lm_head and threads: its
// layer a full-attention one with the target's MLP or MoE, its final norm mtp.norm. Weights
// load in the scheme `options` gives, as the target's did. Fails naming the checkpoint when it
// has no such head.
Result<std::unique_ptr<DecoderModel>> load_mtp_head(const std::string& dir, DecoderModel& target,
                                                    const LoadOptions& options);

}  // namespace mx

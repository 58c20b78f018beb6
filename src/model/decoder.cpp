#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/check.h"
#include "core/log.h"
#include "formats/half.h"
#include "kernels/ops.h"
#include "loader/checkpoint_format.h"
#include "loader/weight_source.h"
#include "model/blocks.h"

namespace mx {

namespace {
uint64_t next_kv_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}
}  // namespace

PagedKv::PagedKv(const ModelConfig& c, int32_t num_blocks, int32_t block_size, KvDtype dtype,
                 int32_t slots)
    : kv_(c, num_blocks, block_size, dtype), rec_(c, slots), id_(next_kv_id()) {}

uint64_t DecoderLayer::mixer_weight_bytes() const {
  if (deltanet) {
    return deltanet->qkvz->weight_bytes() + deltanet->ba->weight_bytes() +
           deltanet->out->weight_bytes() + deltanet->conv_w.nbytes();
  }
  return attn.qkv->weight_bytes() + attn.o->weight_bytes();
}

uint64_t DecoderModel::weight_bytes() const {
  uint64_t b = embed.table.nbytes() + head().weight_bytes();
  for (const DecoderLayer& l : layers) {
    b += l.mixer_weight_bytes();
    if (l.mlp) b += l.mlp->gate_up->weight_bytes() + l.mlp->down->weight_bytes();
    if (l.moe) b += l.moe->router->weight_bytes() + l.moe->experts->weight_bytes();
    if (l.moe && l.moe->shared) {
      b += l.moe->shared->gate_up->weight_bytes() + l.moe->shared->down->weight_bytes() +
           l.moe->shared_gate->weight_bytes();
    }
  }
  return b;
}

std::string DecoderModel::scheme_summary() const {
  std::string s;
  auto add = [&s](const std::string& name) {
    if (s.find(name) == std::string::npos) s += (s.empty() ? "" : ", ") + name;
  };
  for (const DecoderLayer& l : layers) {
    if (l.attn.qkv) add(l.attn.qkv->scheme_name());
    if (l.deltanet) add(l.deltanet->qkvz->scheme_name());
    if (l.mlp) add(l.mlp->gate_up->scheme_name());
    if (l.moe) add(l.moe->experts->scheme_name());
  }
  return s;
}

Status DecoderModel::forward(const int32_t* tokens, int64_t n, KvCache& cache, bool all_logits,
                             float* logits) {
  if (n <= 0) return invalid_argument("forward: no tokens");
  if (cache.length() + n > cache.capacity()) {
    return invalid_argument("sequence of " + std::to_string(cache.length() + n) +
                            " tokens exceeds the KV cache capacity of " +
                            std::to_string(cache.capacity()));
  }
  const int32_t block = 0;
  SeqSlice s;
  s.tokens = tokens;
  s.count = n;
  s.start = cache.length();
  s.blocks = &block;
  s.logits = all_logits ? SeqSlice::Logits::kAll : SeqSlice::Logits::kLast;
  MX_RETURN_IF_ERROR(forward_batch(std::span<const SeqSlice>(&s, 1), cache.paged(), logits));
  cache.set_length(cache.length() + n);
  return Status::ok();
}

Status DecoderModel::plan_rows(std::span<const SeqSlice> seqs, const PagedKv& kv) {
  const ModelConfig& c = config_;
  // Members kept from step to step, so that the bookkeeping allocates nothing once warm.
  row_seq_.clear();
  logit_rows_.clear();
  logit_top1_.clear();
  any_top1_ = false;
  for (size_t sidx = 0; sidx < seqs.size(); ++sidx) {
    const SeqSlice& sq = seqs[sidx];
    if (sq.count <= 0 || sq.start < 0) return invalid_argument("forward: empty sequence slice");
    for (int64_t i = 0; i < sq.count; ++i) {
      const int32_t tok = sq.tokens[i];
      if (tok < 0 || tok >= c.vocab_size) {
        return invalid_argument("token id " + std::to_string(tok) +
                                " is outside the vocabulary of " + std::to_string(c.vocab_size));
      }
      const bool want = sq.logits == SeqSlice::Logits::kAll ||
                        (sq.logits == SeqSlice::Logits::kLast && i == sq.count - 1);
      if (want) {
        logit_rows_.push_back(static_cast<int64_t>(row_seq_.size()));
        logit_top1_.push_back(sq.top1_logits ? 1 : 0);
        any_top1_ = any_top1_ || sq.top1_logits;
      }
      row_seq_.push_back(static_cast<int64_t>(sidx));
    }
  }
  if (row_seq_.empty()) return invalid_argument("forward: no tokens");
  if (kv.slot_bytes() > 0) {
    // Each sequence's recurrent state is read and written in place: one slot per sequence.
    slot_taken_.assign(static_cast<size_t>(kv.slots()), 0);
    for (const SeqSlice& sq : seqs) {
      if (sq.slot < 0 || sq.slot >= kv.slots() || slot_taken_[static_cast<size_t>(sq.slot)]) {
        return invalid_argument("forward: recurrent-state slot " + std::to_string(sq.slot) +
                                " is out of range or used twice (" + std::to_string(kv.slots()) +
                                " slots)");
      }
      slot_taken_[static_cast<size_t>(sq.slot)] = 1;
      if (sq.keep_states && sq.count > kv.state_steps()) {
        return invalid_argument("forward: a verified slice of " + std::to_string(sq.count) +
                                " tokens exceeds the " + std::to_string(kv.state_steps()) +
                                " kept states per slot");
      }
    }
  }
  return Status::ok();
}

float* DecoderModel::run_layers(std::span<const SeqSlice> seqs, PagedKv& kv, bool has_prefill,
                                int64_t most_rows) {
  const ModelConfig& c = config_;
  const int64_t hid = c.hidden_size;
  const std::vector<int64_t>& row_seq = row_seq_;
  const auto n = static_cast<int64_t>(row_seq.size());
  const int64_t rot = c.rotary_dim;
  if (inv_freq_.empty()) {
    inv_freq_.resize(static_cast<size_t>(rot / 2));
    rope_inv_freq(rot, c.rope_theta, inv_freq_.data());
  }
  router_trace_.clear();
  if (profile_) ++profile_->forwards;
  PhaseTimer t_embed(profile_, Phase::kEmbed);
  float* x = exec_->workspace().floats(kWsResidual, n * hid);
  float* h = exec_->workspace().floats(kWsNormed, n * hid);
  for (int64_t r = 0, sidx = 0; sidx < static_cast<int64_t>(seqs.size()); ++sidx) {
    const SeqSlice& sq = seqs[sidx];
    for (int64_t i = 0; i < sq.count; ++i, ++r) {
      if (sq.embeds != nullptr && sq.embeds[i] != nullptr) {
        std::memcpy(x + r * hid, sq.embeds[i], static_cast<size_t>(hid) * sizeof(float));
      } else {
        embed.row(sq.tokens[i], x + r * hid);
      }
    }
  }
  if (mtp_input) mtp_inputs(n, x);
  // Rotary angles once per row for every layer: sin and cos cost more than the rotations.
  std::vector<int64_t>& row_pos = row_pos_;
  row_pos.resize(static_cast<size_t>(n));
  float* rope = exec_->workspace().floats(kWsRope, n * rot);
  for (int64_t t = 0, r = 0; t < static_cast<int64_t>(seqs.size()); ++t) {
    for (int64_t i = 0; i < seqs[t].count; ++i, ++r) {
      const SeqSlice& sq = seqs[t];
      row_pos[r] = sq.start + i;
      float* cs = rope + r * rot;
      if (sq.mrope != nullptr) {
        rope_cos_sin_mrope(rot, sq.mrope + 3 * i, c.mrope_section.data(), inv_freq_.data(), cs,
                           cs + rot / 2);
      } else {
        rope_cos_sin(rot, row_pos[r] + sq.rope_delta, inv_freq_.data(), cs, cs + rot / 2);
      }
    }
  }
  t_embed.stop();
  if (embed.split) {
    // Each row's embedding is on one rank and zero on the others: the sum is exact. (An MTP
    // head, which reads x above, is refused under tensor parallelism.)
    PhaseTimer t_reduce(profile_, Phase::kTpAllReduce);
    const Status st = tp_comm->all_reduce_sum(x, n * hid);
    if (!st.is_ok()) tp_comm->abort("gathering the embeddings failed: " + st.to_string());
  }
  ForwardContext ctx{c,
                     *exec_,
                     profile_,
                     scale_rule_,
                     fused_dispatch_,
                     trace_router_ ? &router_trace_ : nullptr,
                     seqs,
                     row_seq,
                     row_pos,
                     rope,
                     kv,
                     n,
                     *dispatcher_,
                     has_prefill,
                     steps_++,
                     tp_comm,
                     most_rows >= 0,
                     most_rows};
  const LayerForward layer_forward = arch_impl(c.arch)->forward;
  const int64_t run = layer_limit_ >= 0 ? std::min(layer_limit_, c.num_layers) : c.num_layers;
  for (int64_t li = 0; li < run; ++li) {
    layer_forward(layers[static_cast<size_t>(li)], li, ctx, x, h);
  }
  return x;
}

Status DecoderModel::forward_batch(std::span<const SeqSlice> seqs, PagedKv& kv, float* logits,
                                   float* hidden) {
  // Before the step goes to the other ranks, so that none is left in a collective.
  if (dp_comm != nullptr && (hidden != nullptr || hidden_out_ != nullptr || mtp_input)) {
    return unimplemented("hidden states under --enable-dp-attention are not available yet");
  }
  MX_RETURN_IF_ERROR(plan_rows(seqs, kv));
  if (step_hook_) step_hook_(seqs, kv);
  if (dp_comm != nullptr) return forward_dp(seqs, kv, logits, hidden);
  bool has_prefill = false;
  for (const SeqSlice& sq : seqs) has_prefill = has_prefill || sq.count > 1;
  const ModelConfig& c = config_;
  const int64_t hid = c.hidden_size;
  float* x = run_layers(seqs, kv, has_prefill, -1);
  float* h = exec_->workspace().floats(kWsNormed, static_cast<int64_t>(row_seq_.size()) * hid);
  const std::vector<int64_t>& logit_rows = logit_rows_;
  const auto n = static_cast<int64_t>(row_seq_.size());
  const int64_t rows = static_cast<int64_t>(logit_rows.size());
  if (hidden != nullptr) {
    for (int64_t r = 0; r < n; ++r) {
      rms_norm(x + r * hid, final_norm.data_as<float>(), hid, c.rms_norm_eps, hidden + r * hid);
    }
  }
  if (rows == 0) return Status::ok();
  PhaseTimer t_head(profile_, Phase::kLmHead);
  for (int64_t i = 0; i < rows; ++i) {
    if (hidden != nullptr) {
      std::memcpy(h + i * hid, hidden + logit_rows[i] * hid,
                  static_cast<size_t>(hid) * sizeof(float));
    } else {
      rms_norm(x + logit_rows[i] * hid, final_norm.data_as<float>(), hid, c.rms_norm_eps,
               h + i * hid);
    }
  }
  if (hidden_out_ != nullptr) {
    std::memcpy(hidden_out_, h, static_cast<size_t>(rows * hid) * sizeof(float));
    return Status::ok();
  }
  if (head_comm == nullptr) {
    head().forward(h, rows, logits, *exec_);
    return Status::ok();
  }
  const int64_t share = rows * (head_end - head_begin);
  float* mine = exec_->workspace().floats(kWsHeadShare, share);
  head().forward(h, rows, mine, *exec_);
  gather_logits(mine, share, rows, logits, any_top1_ ? logit_top1_.data() : nullptr);
  return Status::ok();
}

Status DecoderModel::forward_mtp(std::span<const SeqSlice> seqs, PagedKv& kv,
                                 const float* hidden_in, float* logits, float* hidden) {
  if (!mtp_input) return invalid_argument("forward_mtp: not an MTP head");
  mtp_hidden_ = hidden_in;
  const Status st = forward_batch(seqs, kv, logits, hidden);
  mtp_hidden_ = nullptr;
  return st;
}

void DecoderModel::mtp_inputs(int64_t n, float* x) {
  const int64_t hid = config_.hidden_size;
  const double eps = config_.rms_norm_eps;
  MX_CHECK(mtp_hidden_ != nullptr);
  float* cat = exec_->workspace().floats(kWsMtpConcat, n * 2 * hid);
  for (int64_t r = 0; r < n; ++r) {
    rms_norm(x + r * hid, mtp_input->norm_embedding.data_as<float>(), hid, eps, cat + r * 2 * hid);
    rms_norm(mtp_hidden_ + r * hid, mtp_input->norm_hidden.data_as<float>(), hid, eps,
             cat + r * 2 * hid + hid);
  }
  mtp_input->fc->forward(cat, n, x, *exec_);
}

Status DecoderModel::forward_hidden(std::span<const SeqSlice> seqs, PagedKv& kv, float* hidden) {
  hidden_out_ = hidden;
  const Status st = forward_batch(seqs, kv, nullptr);
  hidden_out_ = nullptr;
  return st;
}

void DecoderModel::gather_logits(const float* mine, int64_t mine_floats, int64_t rows,
                                 float* logits, const char* top1) {
  Comm& comm = *head_comm;
  const int n = comm.size();
  const int64_t vocab = config_.vocab_size;
  Workspace& ws = exec_->workspace();
  const ExpertRange own = expert_range(vocab, comm.rank(), n);
  // What each row sends: its share of the vocabulary, or for a top-1 row its largest logit
  // and that logit's id (two floats, the id's bits in the second).
  auto row_floats = [&](int64_t r, int64_t share) {
    return top1 != nullptr && top1[r] ? 2 : share;
  };
  const float* send = mine;
  if (top1 != nullptr) {
    float* packed = ws.floats(kWsHeadPacked, mine_floats);
    int64_t at = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = mine + r * own.count;
      if (top1[r]) {
        const int64_t best = std::max_element(row, row + own.count) - row;
        packed[at] = row[best];
        const auto id = static_cast<int32_t>(own.first + best);
        std::memcpy(packed + at + 1, &id, sizeof id);
        at += 2;
      } else {
        std::memcpy(packed + at, row, static_cast<size_t>(own.count) * sizeof(float));
        at += own.count;
      }
    }
    send = packed;
    mine_floats = at;
  }
  int64_t* counts = ws.get<int64_t>(kWsHeadCounts, 4 * n);
  std::fill(counts, counts + 4 * n, 0);
  int64_t *sb = counts, *so = counts + n, *rb = counts + 2 * n, *ro = counts + 3 * n;
  sb[0] = mine_floats * static_cast<int64_t>(sizeof(float));
  float* all = nullptr;
  if (comm.rank() == 0) {
    int64_t at = 0;
    for (int q = 0; q < n; ++q) {
      const ExpertRange v = expert_range(vocab, q, n);
      int64_t floats = 0;
      for (int64_t r = 0; r < rows; ++r) floats += row_floats(r, v.count);
      rb[q] = floats * static_cast<int64_t>(sizeof(float));
      ro[q] = at * static_cast<int64_t>(sizeof(float));
      at += floats;
    }
    all = ws.floats(kWsHeadGather, at);
  }
  const Status st = comm.all_to_all_v(send, sb, so, all, rb, ro);
  if (!st.is_ok()) comm.abort("gathering the logits failed: " + st.to_string());
  if (comm.rank() != 0) return;
  // Each rank's block holds its rows in order; the caller's logits are [rows, vocab]. A top-1
  // row keeps the largest of the ranks' largest, ranks in vocabulary order and a later one
  // only when strictly larger: ties go to the lower id, as a whole row's argmax.
  float* best = top1 != nullptr ? ws.floats(kWsHeadBest, 2 * rows) : nullptr;
  for (int q = 0; q < n; ++q) {
    const ExpertRange v = expert_range(vocab, q, n);
    const float* src = all + ro[q] / static_cast<int64_t>(sizeof(float));
    for (int64_t r = 0; r < rows; ++r) {
      if (top1 != nullptr && top1[r]) {
        if (q == 0 || src[0] > best[2 * r]) std::memcpy(best + 2 * r, src, 2 * sizeof(float));
        src += 2;
      } else {
        std::memcpy(logits + r * vocab + v.first, src,
                    static_cast<size_t>(v.count) * sizeof(float));
        src += v.count;
      }
    }
  }
  for (int64_t r = 0; top1 != nullptr && r < rows; ++r) {
    if (!top1[r]) continue;
    float* dst = logits + r * vocab;
    std::fill(dst, dst + vocab, -std::numeric_limits<float>::infinity());
    int32_t id = 0;
    std::memcpy(&id, best + 2 * r + 1, sizeof id);
    dst[id] = best[2 * r];
  }
}

void Embedding::row(int32_t token, float* out) const {
  const int64_t local = token - first;
  if (local < 0 || local >= table.dim(0)) {
    std::fill(out, out + hidden, 0.0f);
    return;
  }
  token = static_cast<int32_t>(local);
  if (ggml) {
    const int64_t rb = table.dim(1);
    ggml_kernels().dequant[static_cast<uint32_t>(*ggml)](table.data_as<uint8_t>() + token * rb, out,
                                                         hidden);
    return;
  }
  const uint16_t* e = table.data_as<uint16_t>() + token * hidden;
  for (int64_t j = 0; j < hidden; ++j)
    out[j] = std::bit_cast<float>(static_cast<uint32_t>(e[j]) << 16);
}

namespace {

// The weights' own scheme against --quantization, as SGLang words it: what the checkpoint
// holds against what was asked.
Status check_quantization_request(const WeightSource& src, const LoadOptions& o) {
  const QuantDescription* d = src.quant_description();
  if (o.expect_modelslim && d == nullptr) {
    return invalid_argument(src.label() +
                            ": --quantization modelslim needs an msmodelslim "
                            "checkpoint (a directory with quant_model_description.json)");
  }
  if (d != nullptr && o.quantization) {
    return invalid_argument(
        src.label() + ": the checkpoint is quantized offline (msmodelslim, " +
        (d->model_quant_type.empty() ? std::string("per-tensor types") : d->model_quant_type) +
        ") but --quantization asks for " + std::string(scheme_info(*o.quantization).name) +
        "; drop the flag or pass --quantization modelslim");
  }
  if (!o.quantization || src.kind() != "gguf") return Status::ok();
  const SchemeInfo& info = scheme_info(*o.quantization);
  for (const std::string& n : src.names()) {
    const std::string type = src.stored_type(n);
    if (type == "MXFP4" && (info.weight != ElemFormat::kE2M1 || info.dual)) {
      return invalid_argument(src.label() + ": the checkpoint holds MXFP4 weights ('" + n +
                              "') but --quantization asks for " + std::string(info.name) +
                              "; MXFP4 tensors move without loss only into w4a8_mxfp4 or "
                              "w4a4_mxfp4");
    }
  }
  return Status::ok();
}

// A routed expert's tensor ("...mlp.experts.17.up_proj.weight") that another rank loads.
bool placed_elsewhere(const std::string& name, int64_t experts, int rank, int size) {
  if (size <= 1) return false;
  const size_t at = name.find(".experts.");
  if (at == std::string::npos) return false;
  size_t i = at + 9;
  int64_t e = 0;
  const size_t digits = i;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9' && e <= experts)
    e = e * 10 + (name[i++] - '0');
  if (i == digits || i >= name.size() || name[i] != '.') return false;
  const ExpertRange mine = expert_range(experts, rank, size);
  return e < experts && (e < mine.first || e >= mine.first + mine.count);
}

}  // namespace

Result<std::unique_ptr<DecoderModel>> load_model(const std::string& dir,
                                                 const LoadOptions& options) {
  MX_ASSIGN_OR_RETURN(Checkpoint ck, open_checkpoint(dir));
  const WeightSource& src = *ck.weights;
  MX_RETURN_IF_ERROR(check_quantization_request(src, options));
  const bool offline = src.quant_description() != nullptr;
  const ModelConfig& config = ck.config;
  auto m = std::make_unique<DecoderModel>();
  m->config_ = config;
  m->offline_quantized = offline;
  m->scale_rule_ = options.scale_rule;
  m->kv_dtype_ = options.kv_dtype;
  m->pool_ = std::make_unique<ThreadPool>(std::max(1, options.threads));
  m->exec_ = std::make_unique<ExecContext>(m->pool_.get());
  const ArchImpl* arch = arch_impl(config.arch);
  if (arch == nullptr) {
    return unimplemented(dir + ": architecture " + config.hf_class + " has no implementation");
  }
  if (options.rotation != 0 &&
      (offline || !options.quantization || *options.quantization == Scheme::kBf16)) {
    return invalid_argument(
        "--rotation rotates online quantization: it needs --quantization with an MX scheme" +
        std::string(offline ? " and a checkpoint that is not quantized already" : ""));
  }
  WeightPlan plan;
  if (arch->packed != nullptr) plan.packed = merge_packed_modules(*arch->packed);
  plan.online = offline ? std::nullopt : options.quantization;
  plan.rotation = offline ? src.quant_description()->rotation : options.rotation;
  plan.gguf_dequant_bf16 = options.gguf_dequant_bf16;
  plan.gguf_activations = options.gguf_activations;
  plan.rule = options.scale_rule;
  plan.pool = m->pool_.get();
  m->head_end = config.vocab_size;
  Comm* tp = options.tp.comm != nullptr && options.tp.comm->size() > 1 ? options.tp.comm : nullptr;
  if (tp != nullptr && options.ep.comm != nullptr &&
      (options.ep.comm != tp || options.ep.dp_attention)) {
    return unimplemented(
        "--ep-size beside --tp-size splits the experts over the same ranks: it must equal "
        "--tp-size (and data-parallel attention runs with --ep-size alone)");
  }
  if (tp != nullptr) {
    // SGLang's --tp N --ep N: attention and dense layers split, experts whole, a share a rank.
    plan.tp_whole_experts = options.ep.comm != nullptr;
    MX_RETURN_IF_ERROR(check_tensor_parallel(config, tp->size()).with_context(dir));
    plan.tp = {tp->rank(), tp->size(), tp};
    m->config_ = tp_local_config(config, plan.tp);
    m->tp_comm = tp;
    const ExpertRange v = expert_range(config.vocab_size, tp->rank(), tp->size());
    m->head_begin = v.first;
    m->head_end = v.first + v.count;
    m->head_comm = tp;
    m->dispatcher_ = make_local_dispatcher();
  } else if (options.ep.comm != nullptr) {
    plan.ep_rank = options.ep.comm->rank();
    plan.ep_size = options.ep.comm->size();
    m->dispatcher_ = make_ep_dispatcher(options.ep);
    // The vocabulary split like the experts: contiguous shares.
    if (options.ep.dp_attention) {
      m->dp_comm = options.ep.comm;
      m->dp_lm_head = options.ep.dp_lm_head;
    }
    if (!options.ep.dp_attention || options.ep.dp_lm_head) {
      const ExpertRange v = expert_range(config.vocab_size, plan.ep_rank, plan.ep_size);
      m->head_begin = v.first;
      m->head_end = v.first + v.count;
      m->head_comm = options.ep.comm;
    }
  } else {
    m->dispatcher_ = make_local_dispatcher();
  }
  const WeightLoader w(src, plan);
  const std::optional<Scheme> head_scheme =
      options.quantize_lm_head && !offline ? options.quantization : std::nullopt;
  MX_RETURN_IF_ERROR(load_embeddings_and_head(w, config, head_scheme, options.scale_rule, m.get()));
  const LayerBuilder build = arch->build;
  m->layers.resize(static_cast<size_t>(config.num_layers));
  for (int64_t i = 0; i < config.num_layers; ++i) {
    MX_RETURN_IF_ERROR(build(w, config, i, &m->layers[static_cast<size_t>(i)]));
    if (options.progress) options.progress(i + 1, config.num_layers);
  }
  std::vector<std::string> skipped;
  MX_RETURN_IF_ERROR(src.check_all_used(&skipped, [&](const std::string& name) {
    if (w.whole_experts())
      return placed_elsewhere(name, config.num_experts, plan.tp.rank, plan.tp.size);
    return placed_elsewhere(name, config.num_experts, plan.ep_rank, plan.ep_size);
  }));
  if (!skipped.empty()) {
    MX_LOG_INFO(dir + ": skipped " + std::to_string(skipped.size()) +
                " tensors a text-only model does not read (the first: " + skipped[0] + ")");
  }
  // Loading freed its quantization and packing buffers into the heap, which the process keeps
  // above a high trim threshold (main.cpp); give their pages back once.
  malloc_trim(0);
  return m;
}

}  // namespace mx

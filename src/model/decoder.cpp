#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/log.h"
#include "formats/half.h"
#include "kernels/ops.h"
#include "loader/weight_source.h"
#include "model/blocks.h"

namespace mx {

const char* kv_dtype_name(KvDtype d) { return d == KvDtype::kBF16 ? "bf16" : "fp32"; }

PagedKv::PagedKv(const ModelConfig& c, int32_t num_blocks, int32_t block_size, KvDtype dtype)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      row_(c.num_kv_heads * c.head_dim),
      dtype_(dtype) {
  const size_t n = static_cast<size_t>(c.num_layers * num_blocks * block_size * row_);
  if (dtype == KvDtype::kBF16) {
    k16_ = std::make_unique_for_overwrite<uint16_t[]>(n);
    v16_ = std::make_unique_for_overwrite<uint16_t[]>(n);
  } else {
    k_ = std::make_unique_for_overwrite<float[]>(n);
    v_ = std::make_unique_for_overwrite<float[]>(n);
  }
}

uint64_t DecoderModel::weight_bytes() const {
  uint64_t b = embed.table.nbytes() + lm_head->weight_bytes();
  for (const DecoderLayer& l : layers) {
    b += l.attn.qkv->weight_bytes() + l.attn.o->weight_bytes();
    if (l.mlp) b += l.mlp->gate_up->weight_bytes() + l.mlp->down->weight_bytes();
    if (l.moe) b += l.moe->router->weight_bytes() + l.moe->experts->weight_bytes();
  }
  return b;
}

void DecoderModel::attention(DecoderLayer& layer, int64_t li, float* h,
                             const std::vector<SeqSlice>& seqs, const std::vector<int64_t>& row_seq,
                             const std::vector<int64_t>& row_pos, const float* rope, PagedKv& kv) {
  const ModelConfig& c = config_;
  const int64_t d = c.head_dim, nq = c.num_heads, nkv = c.num_kv_heads;
  const int64_t qkv_w = (nq + 2 * nkv) * d;
  const int64_t n = static_cast<int64_t>(row_seq.size());
  // A block holds each KV head's slots together ([kv_head][slot][head_dim]): one (row, KV head)
  // item of attention reads whole contiguous runs rather than a slice of every cached row.
  const int64_t bs = kv.block_size(), head_block = bs * d;
  std::vector<float> qkv(static_cast<size_t>(n * qkv_w));
  PhaseTimer t_qkv(profile_, Phase::kQkv);
  layer.attn.qkv->forward(h, n, qkv.data(), pool_.get());
  t_qkv.stop();
  PhaseTimer t_attn(profile_, Phase::kAttention);
  const auto* qn = layer.attn.q_norm.data_as<float>();
  const auto* kn = layer.attn.k_norm.data_as<float>();
  // q/k norms, RoPE, and the new keys and values into their blocks: all rows first, so that
  // rows of one prefill chunk see each other's keys.
  const int64_t half = d / 2;
  const bool bf16_kv = kv.dtype() == KvDtype::kBF16;
  for (int64_t t = 0; t < n; ++t) {
    float* row = qkv.data() + t * qkv_w;
    const int64_t pos = row_pos[t];
    const float* cos = rope + t * d;
    const float* sin = cos + half;
    const SeqSlice& sq = seqs[static_cast<size_t>(row_seq[t])];
    for (int64_t hd = 0; hd < nq; ++hd) {
      rms_norm(row + hd * d, qn, d, c.rms_norm_eps, row + hd * d);
      rope_neox_cs(row + hd * d, d, cos, sin);
    }
    // The row's keys and values into their slot of each KV head's part of the block.
    const int32_t block = sq.blocks[pos / bs];
    for (int64_t hd = 0; hd < nkv; ++hd) {
      float* kr = row + (nq + hd) * d;
      rms_norm(kr, kn, d, c.rms_norm_eps, kr);
      rope_neox_cs(kr, d, cos, sin);
      const int64_t at = hd * head_block + (pos % bs) * d;
      const float* vr = row + (nq + nkv + hd) * d;
      if (bf16_kv) {
        uint16_t* k = kv.k_bf16(li, block) + at;
        uint16_t* v = kv.v_bf16(li, block) + at;
        for (int64_t j = 0; j < d; ++j) {
          k[j] = float_to_bf16(kr[j]);
          v[j] = float_to_bf16(vr[j]);
        }
      } else {
        std::memcpy(kv.k(li, block) + at, kr, static_cast<size_t>(d) * sizeof(float));
        std::memcpy(kv.v(li, block) + at, vr, static_cast<size_t>(d) * sizeof(float));
      }
    }
  }
  // Causal attention: the token at position p sees positions 0 .. p of its own sequence.
  std::vector<float> out(static_cast<size_t>(n * nq * d));
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t group = nq / nkv;
  // One item per (row, KV head): the group's query heads read each key and value row once.
  pool_->parallel_for(n * nkv, [&](int64_t b, int64_t e, int) {
    std::vector<float> scores;
    std::vector<const float*> kb, vb;
    std::vector<const uint16_t*> kb16, vb16;
    for (int64_t idx = b; idx < e; ++idx) {
      const int64_t t = idx / nkv, kvh = idx % nkv;
      const int64_t len = row_pos[t] + 1;
      const SeqSlice& sq = seqs[static_cast<size_t>(row_seq[t])];
      const int64_t nblk = (len + bs - 1) / bs;
      scores.resize(static_cast<size_t>(group * len));
      const int64_t h0 = kvh * group;
      const float* q = qkv.data() + t * qkv_w + h0 * d;
      float* o = out.data() + (t * nq + h0) * d;
      if (bf16_kv) {
        kb16.resize(static_cast<size_t>(nblk));
        vb16.resize(static_cast<size_t>(nblk));
        for (int64_t j = 0; j < nblk; ++j) {
          kb16[j] = kv.k_bf16(li, sq.blocks[j]) + kvh * head_block;
          vb16[j] = kv.v_bf16(li, sq.blocks[j]) + kvh * head_block;
        }
        attention_group_paged_bf16(q, group, kb16.data(), vb16.data(), bs, len, d, d, scale,
                                   scores.data(), o);
      } else {
        kb.resize(static_cast<size_t>(nblk));
        vb.resize(static_cast<size_t>(nblk));
        for (int64_t j = 0; j < nblk; ++j) {
          kb[j] = kv.k(li, sq.blocks[j]) + kvh * head_block;
          vb[j] = kv.v(li, sq.blocks[j]) + kvh * head_block;
        }
        attention_group_paged(q, group, kb.data(), vb.data(), bs, len, d, d, scale, scores.data(),
                              o);
      }
    }
  });
  t_attn.stop();
  PhaseTimer t_o(profile_, Phase::kOProj);
  layer.attn.o->forward(out.data(), n, h, pool_.get());
}

void DecoderModel::moe(const MoeBlock& m, int64_t li, const float* h, int64_t n, float* x) {
  const int64_t ne = m.experts->num_experts(), hid = config_.hidden_size, k = m.top_k;
  std::vector<float> probs(static_cast<size_t>(n * ne));
  PhaseTimer t_router(profile_, Phase::kRouter);
  m.router->forward(h, n, probs.data(), pool_.get());
  std::vector<int32_t> ids(static_cast<size_t>(n * k));
  std::vector<float> wts(static_cast<size_t>(n * k));
  std::vector<int32_t> order(static_cast<size_t>(ne));
  for (int64_t t = 0; t < n; ++t) {
    float* p = probs.data() + t * ne;
    softmax(p, ne);
    std::iota(order.begin(), order.end(), 0);
    // Highest probability first; ties to the lower expert id.
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) sum += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      ids[t * k + j] = order[j];
      wts[t * k + j] = m.norm_topk_prob ? p[order[j]] / sum : p[order[j]];
    }
  }
  t_router.stop();
  if (trace_router_) router_trace_.push_back({li, ids, wts});
  PhaseTimer t_dispatch(profile_, Phase::kDispatch);
  // Dispatch: rows sorted by expert, written straight into the format the expert kernel
  // declares. Each token row is quantized once, into its first slot, and copied to the rest:
  // the quantization is part of the permutation, not a pass of its own.
  std::vector<int64_t> offsets(static_cast<size_t>(ne + 1), 0);
  for (int32_t e : ids) ++offsets[static_cast<size_t>(e) + 1];
  for (int64_t e = 0; e < ne; ++e) offsets[e + 1] += offsets[e];
  std::vector<int64_t> slot(static_cast<size_t>(n * k));
  {
    std::vector<int64_t> fill(offsets.begin(), offsets.end() - 1);
    for (int64_t i = 0; i < n * k; ++i)
      slot[static_cast<size_t>(i)] = fill[static_cast<size_t>(ids[static_cast<size_t>(i)])]++;
  }
  const Scheme decl =
      fused_dispatch_ ? m.experts->input_scheme(DispatchMode::kLocal) : Scheme::kBf16;
  ActRows rows;
  act_rows_init(decl, hid, scale_rule_, &rows);
  rows.resize(n * k);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t first = slot[static_cast<size_t>(t * k)];
    act_rows_quantize(h + t * hid, first, scale_rule_, &rows);
    for (int64_t j = 1; j < k; ++j)
      act_rows_copy(rows, first, &rows, slot[static_cast<size_t>(t * k + j)]);
  }
  std::vector<float> outs(static_cast<size_t>(n * k * hid));
  t_dispatch.stop();
  ExpertTimes et;
  m.experts->run(rows, offsets.data(), outs.data(), pool_.get(), profile_ ? &et : nullptr);
  if (profile_) {
    profile_->add(Phase::kGmm1, et.gmm1);
    profile_->add(Phase::kGmm2, et.gmm2);
  }
  PhaseTimer t_combine(profile_, Phase::kCombine);
  // Combine: the weighted un-permute back to token order.
  for (int64_t t = 0; t < n; ++t) {
    float* dst = x + t * hid;
    for (int64_t j = 0; j < k; ++j) {
      const float wj = wts[static_cast<size_t>(t * k + j)];
      const float* o = outs.data() + slot[static_cast<size_t>(t * k + j)] * hid;
      for (int64_t d = 0; d < hid; ++d) dst[d] += wj * o[d];
    }
  }
}

std::string DecoderModel::scheme_summary() const {
  std::string s;
  auto add = [&s](const std::string& name) {
    if (s.find(name) == std::string::npos) s += (s.empty() ? "" : ", ") + name;
  };
  for (const DecoderLayer& l : layers) {
    add(l.attn.qkv->scheme_name());
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
  MX_RETURN_IF_ERROR(forward_batch({s}, cache.paged(), logits));
  cache.set_length(cache.length() + n);
  return Status::ok();
}

Status DecoderModel::forward_batch(const std::vector<SeqSlice>& seqs, PagedKv& kv, float* logits) {
  const ModelConfig& c = config_;
  const int64_t hid = c.hidden_size;
  std::vector<int64_t> row_seq;
  std::vector<int64_t> logit_rows;
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
      if (want) logit_rows.push_back(static_cast<int64_t>(row_seq.size()));
      row_seq.push_back(static_cast<int64_t>(sidx));
    }
  }
  const int64_t n = static_cast<int64_t>(row_seq.size());
  if (n == 0) return invalid_argument("forward: no tokens");
  if (inv_freq_.empty()) {
    inv_freq_.resize(static_cast<size_t>(c.head_dim / 2));
    rope_inv_freq(c.head_dim, c.rope_theta, inv_freq_.data());
  }
  router_trace_.clear();
  if (profile_) ++profile_->forwards;
  PhaseTimer t_embed(profile_, Phase::kEmbed);
  std::vector<float> x(static_cast<size_t>(n * hid)), h(x.size());
  for (int64_t r = 0, sidx = 0; sidx < static_cast<int64_t>(seqs.size()); ++sidx) {
    for (int64_t i = 0; i < seqs[sidx].count; ++i, ++r)
      embed.row(seqs[sidx].tokens[i], &x[r * hid]);
  }
  // Rotary angles once per row for every layer: sin and cos cost more than the rotations.
  std::vector<int64_t> row_pos(static_cast<size_t>(n));
  std::vector<float> rope(static_cast<size_t>(n * c.head_dim));
  for (int64_t t = 0, r = 0; t < static_cast<int64_t>(seqs.size()); ++t) {
    for (int64_t i = 0; i < seqs[t].count; ++i, ++r) {
      row_pos[r] = seqs[t].start + i;
      float* cs = rope.data() + r * c.head_dim;
      rope_cos_sin(c.head_dim, row_pos[r], inv_freq_.data(), cs, cs + c.head_dim / 2);
    }
  }
  t_embed.stop();
  std::vector<float> tmp;
  for (int64_t li = 0; li < c.num_layers; ++li) {
    DecoderLayer& layer = layers[static_cast<size_t>(li)];
    PhaseTimer t_norm(profile_, Phase::kNorms);
    for (int64_t t = 0; t < n; ++t) {
      rms_norm(x.data() + t * hid, layer.input_norm.data_as<float>(), hid, c.rms_norm_eps,
               h.data() + t * hid);
    }
    t_norm.stop();
    attention(layer, li, h.data(), seqs, row_seq, row_pos, rope.data(), kv);  // h <- output
    PhaseTimer t_norm2(profile_, Phase::kNorms);
    for (size_t i = 0; i < x.size(); ++i) x[i] += h[i];
    for (int64_t t = 0; t < n; ++t) {
      rms_norm(x.data() + t * hid, layer.post_norm.data_as<float>(), hid, c.rms_norm_eps,
               h.data() + t * hid);
    }
    t_norm2.stop();
    if (layer.moe) {
      moe(*layer.moe, li, h.data(), n, x.data());
    } else {
      PhaseTimer t_mlp(profile_, Phase::kDenseMlp);
      const int64_t width = layer.mlp->down->in_features();
      tmp.resize(static_cast<size_t>(n * 2 * width));
      layer.mlp->gate_up->forward(h.data(), n, tmp.data(), pool_.get());
      for (int64_t t = 0; t < n; ++t) {
        swiglu(tmp.data() + t * 2 * width, tmp.data() + t * 2 * width + width, width,
               tmp.data() + t * 2 * width);
        // Compact the activations to [n, width] rows (in place, forward order is safe).
        std::memmove(tmp.data() + t * width, tmp.data() + t * 2 * width,
                     static_cast<size_t>(width) * sizeof(float));
      }
      layer.mlp->down->forward(tmp.data(), n, h.data(), pool_.get());
      for (size_t i = 0; i < x.size(); ++i) x[i] += h[i];
    }
  }
  const int64_t rows = static_cast<int64_t>(logit_rows.size());
  if (rows == 0) return Status::ok();
  PhaseTimer t_head(profile_, Phase::kLmHead);
  for (int64_t i = 0; i < rows; ++i) {
    rms_norm(x.data() + logit_rows[i] * hid, final_norm.data_as<float>(), hid, c.rms_norm_eps,
             h.data() + i * hid);
  }
  lm_head->forward(h.data(), rows, logits, pool_.get());
  return Status::ok();
}

void Embedding::row(int32_t token, float* out) const {
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
  WeightPlan plan;
  plan.online = offline ? std::nullopt : options.quantization;
  plan.gguf_dequant_bf16 = options.gguf_dequant_bf16;
  plan.rule = options.scale_rule;
  plan.pool = m->pool_.get();
  const WeightLoader w(src, plan);
  const std::optional<Scheme> head_scheme =
      options.quantize_lm_head && !offline ? options.quantization : std::nullopt;
  MX_RETURN_IF_ERROR(load_embeddings_and_head(w, config, head_scheme, options.scale_rule, m.get()));
  const LayerBuilder build = layer_builder_for(config.arch);
  m->layers.resize(static_cast<size_t>(config.num_layers));
  for (int64_t i = 0; i < config.num_layers; ++i) {
    MX_RETURN_IF_ERROR(build(w, config, i, &m->layers[static_cast<size_t>(i)]));
    if (options.progress) options.progress(i + 1, config.num_layers);
  }
  std::vector<std::string> skipped;
  MX_RETURN_IF_ERROR(src.check_all_used(&skipped));
  if (!skipped.empty()) {
    MX_LOG_INFO(dir + ": skipped " + std::to_string(skipped.size()) +
                " tensors a text-only model does not read (the first: " + skipped[0] + ")");
  }
  return m;
}

}  // namespace mx

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/log.h"
#include "kernels/ops.h"
#include "loader/checkpoint.h"
#include "loader/quant_description.h"
#include "model/blocks.h"

namespace mx {

KvCache::KvCache(const ModelConfig& c, int64_t capacity)
    : capacity_(capacity), row_(c.num_kv_heads * c.head_dim) {
  const size_t n = static_cast<size_t>(c.num_layers * capacity * row_);
  k_.assign(n, 0.0f);
  v_.assign(n, 0.0f);
}

uint64_t DecoderModel::weight_bytes() const {
  uint64_t b = embed.nbytes() + lm_head->weight_bytes();
  for (const DecoderLayer& l : layers) {
    b += l.attn.qkv->weight_bytes() + l.attn.o->weight_bytes();
    if (l.mlp) b += l.mlp->gate_up->weight_bytes() + l.mlp->down->weight_bytes();
    if (l.moe) b += l.moe->router->weight_bytes() + l.moe->experts->weight_bytes();
  }
  return b;
}

void DecoderModel::attention(DecoderLayer& layer, int64_t li, float* h, int64_t n, KvCache& cache) {
  const ModelConfig& c = config_;
  const int64_t d = c.head_dim, nq = c.num_heads, nkv = c.num_kv_heads;
  const int64_t qkv_w = (nq + 2 * nkv) * d;
  const int64_t start = cache.length();
  std::vector<float> qkv(static_cast<size_t>(n * qkv_w));
  layer.attn.qkv->forward(h, n, qkv.data(), pool_.get());
  const auto* qn = layer.attn.q_norm.data_as<uint16_t>();
  const auto* kn = layer.attn.k_norm.data_as<uint16_t>();
  for (int64_t t = 0; t < n; ++t) {
    float* row = qkv.data() + t * qkv_w;
    const int64_t pos = start + t;
    for (int64_t hd = 0; hd < nq; ++hd) {
      rms_norm_bf16(row + hd * d, qn, d, c.rms_norm_eps, row + hd * d);
      rope_neox(row + hd * d, d, pos, inv_freq_.data());
    }
    float* k = cache.k(li, pos);
    float* v = cache.v(li, pos);
    for (int64_t hd = 0; hd < nkv; ++hd) {
      float* kh = row + (nq + hd) * d;
      rms_norm_bf16(kh, kn, d, c.rms_norm_eps, kh);
      rope_neox(kh, d, pos, inv_freq_.data());
      std::memcpy(k + hd * d, kh, static_cast<size_t>(d) * sizeof(float));
      std::memcpy(v + hd * d, row + (nq + nkv + hd) * d, static_cast<size_t>(d) * sizeof(float));
    }
  }
  // Causal attention: token t sees positions 0 .. start + t.
  std::vector<float> out(static_cast<size_t>(n * nq * d));
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t group = nq / nkv;
  pool_->parallel_for(n * nq, [&](int64_t b, int64_t e, int) {
    std::vector<float> scores(static_cast<size_t>(start + n));
    for (int64_t idx = b; idx < e; ++idx) {
      const int64_t t = idx / nq, hd = idx % nq, kvh = hd / group;
      attention_head(qkv.data() + t * qkv_w + hd * d, cache.k(li, 0) + kvh * d,
                     cache.v(li, 0) + kvh * d, start + t + 1, cache.row(), d, scale, scores.data(),
                     out.data() + (t * nq + hd) * d);
    }
  });
  layer.attn.o->forward(out.data(), n, h, pool_.get());
}

void DecoderModel::moe(const MoeBlock& m, int64_t li, const float* h, int64_t n, float* x) {
  const int64_t ne = m.experts->num_experts(), hid = config_.hidden_size, k = m.top_k;
  std::vector<float> probs(static_cast<size_t>(n * ne));
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
  if (trace_router_) router_trace_.push_back({li, ids, wts});
  // Group rows by expert, run each expert once over its rows, add back weighted.
  std::vector<float> rows(static_cast<size_t>(n * k * hid)), outs(rows.size());
  std::vector<float> scratch(static_cast<size_t>(n * k * 3 * m.experts->inter()));
  std::vector<int64_t> src;
  std::vector<float> w;
  for (int64_t e = 0; e < ne; ++e) {
    src.clear();
    w.clear();
    for (int64_t i = 0; i < n * k; ++i) {
      if (ids[static_cast<size_t>(i)] == e) {
        src.push_back(i / k);
        w.push_back(wts[static_cast<size_t>(i)]);
      }
    }
    if (src.empty()) continue;
    const int64_t cnt = static_cast<int64_t>(src.size());
    for (int64_t r = 0; r < cnt; ++r) {
      std::memcpy(rows.data() + r * hid, h + src[r] * hid,
                  static_cast<size_t>(hid) * sizeof(float));
    }
    m.experts->forward(e, rows.data(), cnt, outs.data(), scratch.data(), pool_.get());
    for (int64_t r = 0; r < cnt; ++r) {
      float* dst = x + src[r] * hid;
      const float* o = outs.data() + r * hid;
      for (int64_t j = 0; j < hid; ++j) dst[j] += w[r] * o[j];
    }
  }
}

Status DecoderModel::forward(const int32_t* tokens, int64_t n, KvCache& cache, bool all_logits,
                             float* logits) {
  const ModelConfig& c = config_;
  const int64_t hid = c.hidden_size;
  if (n <= 0) return invalid_argument("forward: no tokens");
  if (cache.length() + n > cache.capacity()) {
    return invalid_argument("sequence of " + std::to_string(cache.length() + n) +
                            " tokens exceeds the KV cache capacity of " +
                            std::to_string(cache.capacity()));
  }
  for (int64_t t = 0; t < n; ++t) {
    if (tokens[t] < 0 || tokens[t] >= c.vocab_size) {
      return invalid_argument("token id " + std::to_string(tokens[t]) +
                              " is outside the vocabulary of " + std::to_string(c.vocab_size));
    }
  }
  if (inv_freq_.empty()) {
    inv_freq_.resize(static_cast<size_t>(c.head_dim / 2));
    rope_inv_freq(c.head_dim, c.rope_theta, inv_freq_.data());
  }
  router_trace_.clear();
  std::vector<float> x(static_cast<size_t>(n * hid)), h(x.size());
  const auto* emb = embed.data_as<uint16_t>();
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < hid; ++j) {
      x[t * hid + j] = std::bit_cast<float>(static_cast<uint32_t>(emb[tokens[t] * hid + j]) << 16);
    }
  }
  std::vector<float> tmp;
  for (int64_t li = 0; li < c.num_layers; ++li) {
    DecoderLayer& layer = layers[static_cast<size_t>(li)];
    for (int64_t t = 0; t < n; ++t) {
      rms_norm_bf16(x.data() + t * hid, layer.input_norm.data_as<uint16_t>(), hid, c.rms_norm_eps,
                    h.data() + t * hid);
    }
    attention(layer, li, h.data(), n, cache);  // h <- attention output
    for (size_t i = 0; i < x.size(); ++i) x[i] += h[i];
    for (int64_t t = 0; t < n; ++t) {
      rms_norm_bf16(x.data() + t * hid, layer.post_norm.data_as<uint16_t>(), hid, c.rms_norm_eps,
                    h.data() + t * hid);
    }
    if (layer.moe) {
      moe(*layer.moe, li, h.data(), n, x.data());
    } else {
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
  cache.set_length(cache.length() + n);
  const int64_t first = all_logits ? 0 : n - 1;
  const int64_t rows = n - first;
  for (int64_t t = first; t < n; ++t) {
    rms_norm_bf16(x.data() + t * hid, final_norm.data_as<uint16_t>(), hid, c.rms_norm_eps,
                  h.data() + (t - first) * hid);
  }
  lm_head->forward(h.data(), rows, logits, pool_.get());
  return Status::ok();
}

Result<std::unique_ptr<DecoderModel>> load_model(const std::string& dir,
                                                 const LoadOptions& options) {
  MX_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir));
  if (has_quant_description(dir)) {
    return unimplemented(dir +
                         ": offline-quantized checkpoints (quant_model_description.json) "
                         "are not supported by this build");
  }
  auto ck = CheckpointFiles::open(dir, "model");
  if (!ck.is_ok()) return ck.status();
  auto m = std::make_unique<DecoderModel>();
  m->config_ = config;
  m->pool_ = std::make_unique<ThreadPool>(std::max(1, options.threads));
  const WeightSource w(*ck);
  MX_RETURN_IF_ERROR(load_embeddings_and_head(w, config, m.get()));
  const LayerBuilder build = layer_builder_for(config.arch);
  m->layers.resize(static_cast<size_t>(config.num_layers));
  for (int64_t i = 0; i < config.num_layers; ++i) {
    MX_RETURN_IF_ERROR(build(w, config, i, &m->layers[static_cast<size_t>(i)]));
    if (options.progress) options.progress(i + 1, config.num_layers);
  }
  return m;
}

}  // namespace mx

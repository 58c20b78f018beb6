#include "model/vision_tower.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/ops.h"
#include "loader/checkpoint_format.h"
#include "loader/weight_source.h"
#include "model/weights.h"

namespace mx {
namespace {

void add_bias(float* y, int64_t rows, const Tensor& b) {
  const int64_t n = b.numel();
  const float* bp = b.data_as<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < n; ++i) y[r * n + i] += bp[i];
  }
}

// torch.linspace(0, end, steps) in float32: the first half counted from the start, the second
// from the end, as its CPU kernel does.
float linspace_at(float end, int64_t steps, int64_t i) {
  if (steps == 1) return 0.0f;
  const float step = end / static_cast<float>(steps - 1);
  if (i < steps / 2) return static_cast<float>(i) * step;
  return end - static_cast<float>(steps - 1 - i) * step;
}

// Where patch p of a frame (merge-block order) sits on the grid.
void patch_place(int64_t p, int64_t w, int64_t m, int64_t* row, int64_t* col) {
  const int64_t group = p / (m * m), inside = p % (m * m);
  *row = group / (w / m) * m + inside / m;
  *col = group % (w / m) * m + inside % m;
}

}  // namespace

int64_t VisionTower::output_rows(const ImageGrid& g) const {
  const int64_t m = config_.spatial_merge_size;
  return g.patches() / (m * m);
}

Status VisionTower::check_grid(const ImageGrid& g) const {
  const int64_t m = config_.spatial_merge_size;
  if (g.t < 1 || g.h < m || g.w < m || g.h % m != 0 || g.w % m != 0 || g.h > (int64_t{1} << 16) ||
      g.w > (int64_t{1} << 16) || g.t > 4096) {
    return invalid_argument("vision tower: an image grid of " + std::to_string(g.t) + " x " +
                            std::to_string(g.h) + " x " + std::to_string(g.w) +
                            " patches does not divide into " + std::to_string(m) + " x " +
                            std::to_string(m) + " groups");
  }
  return Status::ok();
}

uint64_t VisionTower::weight_bytes() const {
  uint64_t b = patch_embed->weight_bytes() + pos_table.nbytes();
  for (const Block& k : blocks_) {
    b += k.qkv->weight_bytes() + k.proj->weight_bytes() + k.fc1->weight_bytes() +
         k.fc2->weight_bytes();
  }
  return b + merger_.fc1->weight_bytes() + merger_.fc2->weight_bytes();
}

std::string VisionTower::scheme_summary() const {
  return blocks_.empty() ? merger_.fc1->scheme_name() : blocks_[0].qkv->scheme_name();
}

// The learned table (a side x side grid) resampled to the frame's grid bilinearly with aligned
// corners, each frame alike, summed over the four taps in transformers' order.
void VisionTower::add_positions(const ImageGrid& g, float* x) const {
  const int64_t hid = config_.hidden_size, m = config_.spatial_merge_size;
  const auto side = static_cast<int64_t>(std::llround(std::sqrt(config_.num_position_embeddings)));
  const float* table = pos_table.data_as<float>();
  const auto last = static_cast<float>(side - 1);
  const int64_t per_frame = g.h * g.w;
  for (int64_t p = 0; p < per_frame; ++p) {
    int64_t row = 0, col = 0;
    patch_place(p, g.w, m, &row, &col);
    const float hy = linspace_at(last, g.h, row), wx = linspace_at(last, g.w, col);
    const auto h0 = static_cast<int64_t>(hy), w0 = static_cast<int64_t>(wx);
    const int64_t h1 = std::min(h0 + 1, side - 1), w1 = std::min(w0 + 1, side - 1);
    const float dh = hy - static_cast<float>(h0), dw = wx - static_cast<float>(w0);
    const float wt[4] = {(1 - dh) * (1 - dw), (1 - dh) * dw, dh * (1 - dw), dh * dw};
    const float* tap[4] = {table + (h0 * side + w0) * hid, table + (h0 * side + w1) * hid,
                           table + (h1 * side + w0) * hid, table + (h1 * side + w1) * hid};
    for (int64_t i = 0; i < hid; ++i) {
      const float e = tap[0][i] * wt[0] + tap[1][i] * wt[1] + tap[2][i] * wt[2] + tap[3][i] * wt[3];
      for (int64_t f = 0; f < g.t; ++f) x[(f * per_frame + p) * hid + i] += e;
    }
  }
}

// Per patch, head_dim / 2 cosines then as many sines: the first half of the rotated pairs
// turn with the patch's row, the second with its column.
void VisionTower::rotary_tables(const ImageGrid& g, float* cs) const {
  const int64_t hd = config_.hidden_size / config_.num_heads, half = hd / 2, q = half / 2;
  const int64_t m = config_.spatial_merge_size, per_frame = g.h * g.w;
  for (int64_t p = 0; p < g.patches(); ++p) {
    int64_t row = 0, col = 0;
    patch_place(p % per_frame, g.w, m, &row, &col);
    float* c = cs + p * hd;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t at = i < q ? row : col;
      const float angle = static_cast<float>(at) * inv_freq_[static_cast<size_t>(i % q)];
      c[i] = std::cos(angle);
      c[half + i] = std::sin(angle);
    }
  }
}

// Bidirectional attention over the patches of each frame; qkv rows are [q | k | v], heads
// contiguous in each, already rotated. It runs on the decoder's attention kernels: a frame is
// one block of per_frame positions that every query sees whole, and kGroup queries of one head
// go in together as a group sharing that head's keys and values, which are then read once for
// the group. Each query's result is the kernel's for it alone.
void VisionTower::attention(const ImageGrid& g, float* qkv, float* out) {
  constexpr int64_t kGroup = 8;
  const int64_t hid = config_.hidden_size, heads = config_.num_heads, hd = hid / heads;
  const int64_t per_frame = g.h * g.w, w3 = 3 * hid;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t chunks = (per_frame + kGroup - 1) / kGroup;
  const int64_t items = g.t * heads * chunks;
  const AttentionKernels& kernels = attention_kernels();
  const int64_t scratch = attention_scratch_floats(1, kGroup, per_frame, hd);
  exec_->reserve_arenas<float>(0, scratch + 2 * kGroup * hd);
  auto body = [&](int64_t begin, int64_t end, int thread) {
    float* s = exec_->arena(thread).get<float>(0, scratch + 2 * kGroup * hd);
    float* qs = s + scratch;
    float* os = qs + kGroup * hd;
    for (int64_t it = begin; it < end; ++it) {
      const int64_t f = it / (heads * chunks), head = it / chunks % heads;
      const int64_t q0 = it % chunks * kGroup, n = std::min(kGroup, per_frame - q0);
      const int64_t base = f * per_frame;
      for (int64_t i = 0; i < n; ++i) {
        const float* q = qkv + (base + q0 + i) * w3 + head * hd;
        std::copy(q, q + hd, qs + i * hd);
      }
      const float* k = qkv + base * w3 + hid + head * hd;
      const float* v = qkv + base * w3 + 2 * hid + head * hd;
      const AttentionRows a{qs, 0, os, 0, 1, n, per_frame, per_frame, w3, hd, scale, s};
      kernels.group_paged(a, &k, &v);
      for (int64_t i = 0; i < n; ++i) {
        std::copy(os + i * hd, os + (i + 1) * hd, out + (base + q0 + i) * hid + head * hd);
      }
    }
  };
  if (exec_->pool() != nullptr) {
    exec_->pool()->parallel_for(items, body);
  } else {
    body(0, items, 0);
  }
}

void VisionTower::block_forward(const Block& b, const ImageGrid& g, const float* cs, float* x) {
  const int64_t n = g.patches(), hid = config_.hidden_size, heads = config_.num_heads;
  const int64_t hd = hid / heads, inter = config_.intermediate_size;
  const double eps = 1e-6;
  std::vector<float> h(static_cast<size_t>(n * hid)), qkv(static_cast<size_t>(n * 3 * hid));
  std::vector<float> a(static_cast<size_t>(n * hid)), mid(static_cast<size_t>(n * inter));
  for (int64_t r = 0; r < n; ++r) {
    layer_norm(x + r * hid, b.norm1_w.data_as<float>(), b.norm1_b.data_as<float>(), hid, eps,
               h.data() + r * hid);
  }
  b.qkv->forward(h.data(), n, qkv.data(), *exec_);
  add_bias(qkv.data(), n, b.qkv_b);
  for (int64_t r = 0; r < n; ++r) {
    const float* c = cs + r * hd;
    for (int64_t k = 0; k < 2 * heads; ++k) {
      rope_neox_cs(qkv.data() + r * 3 * hid + k * hd, hd, c, c + hd / 2);
    }
  }
  attention(g, qkv.data(), a.data());
  b.proj->forward(a.data(), n, h.data(), *exec_);
  add_bias(h.data(), n, b.proj_b);
  for (int64_t i = 0; i < n * hid; ++i) x[i] += h[static_cast<size_t>(i)];
  for (int64_t r = 0; r < n; ++r) {
    layer_norm(x + r * hid, b.norm2_w.data_as<float>(), b.norm2_b.data_as<float>(), hid, eps,
               h.data() + r * hid);
  }
  b.fc1->forward(h.data(), n, mid.data(), *exec_);
  add_bias(mid.data(), n, b.fc1_b);
  if (config_.mlp_gelu_tanh) {
    gelu_tanh(mid.data(), n * inter);
  } else {
    gelu_erf(mid.data(), n * inter);
  }
  b.fc2->forward(mid.data(), n, h.data(), *exec_);
  add_bias(h.data(), n, b.fc2_b);
  for (int64_t i = 0; i < n * hid; ++i) x[i] += h[static_cast<size_t>(i)];
}

void VisionTower::merge(const Merger& mg, int64_t n, const float* x, float* out) {
  const int64_t hid = config_.hidden_size, m = config_.spatial_merge_size;
  const int64_t rows = n / (m * m), wide = hid * m * m;
  std::vector<float> h(static_cast<size_t>(n * hid)), mid(static_cast<size_t>(rows * wide));
  for (int64_t r = 0; r < n; ++r) {
    layer_norm(x + r * hid, mg.norm_w.data_as<float>(), mg.norm_b.data_as<float>(), hid, 1e-6,
               h.data() + r * hid);
  }
  mg.fc1->forward(h.data(), rows, mid.data(), *exec_);
  add_bias(mid.data(), rows, mg.fc1_b);
  gelu_erf(mid.data(), rows * wide);
  mg.fc2->forward(mid.data(), rows, out, *exec_);
  add_bias(out, rows, mg.fc2_b);
}

Status VisionTower::forward(const float* patches, const ImageGrid& g, float* out) {
  MX_RETURN_IF_ERROR(check_grid(g));
  const int64_t n = g.patches(), hid = config_.hidden_size;
  const int64_t hd = hid / config_.num_heads;
  std::vector<float> x(static_cast<size_t>(n * hid)), cs(static_cast<size_t>(n * hd));
  patch_embed->forward(patches, n, x.data(), *exec_);
  add_bias(x.data(), n, patch_bias);
  add_positions(g, x.data());
  rotary_tables(g, cs.data());
  for (const Block& b : blocks_) block_forward(b, g, cs.data(), x.data());
  merge(merger_, n, x.data(), out);
  return Status::ok();
}

Result<std::unique_ptr<VisionTower>> load_vision_tower(const std::string& dir,
                                                       const LoadOptions& options,
                                                       ThreadPool* pool) {
  MX_ASSIGN_OR_RETURN(Checkpoint ck, open_checkpoint(dir));
  const WeightSource& src = *ck.weights;
  const VisionConfig& c = ck.config.vision;
  if (!c.unusable.empty()) return invalid_argument(c.unusable);
  if (!c.present()) {
    return invalid_argument(dir + ": the checkpoint has no vision tower (no vision_config)");
  }
  if (!c.deepstack_indexes.empty()) {
    // Qwen3-VL adds intermediate blocks' merged features into the first decoder layers; without
    // that the answers would be quietly wrong, so such a tower is refused by name.
    return invalid_argument(dir +
                            ": vision_config.deepstack_visual_indexes (DeepStack feature "
                            "injection, Qwen3-VL) is not supported; Qwen3.5's tower has none");
  }
  std::string p;
  for (const char* prefix : {"model.visual.", "visual."}) {
    if (src.has(std::string(prefix) + "patch_embed.proj.weight")) p = prefix;
  }
  if (p.empty()) {
    return invalid_argument(src.label() +
                            ": vision_config is given but no vision tower weights "
                            "(model.visual.patch_embed.proj.weight) are stored");
  }
  auto t = std::unique_ptr<VisionTower>(new VisionTower());
  t->config_ = c;
  t->exec_ = std::make_unique<ExecContext>(pool);
  WeightPlan plan;
  plan.online = src.quant_description() != nullptr ? std::nullopt : options.quantization;
  plan.rotation =
      src.quant_description() != nullptr ? src.quant_description()->rotation : options.rotation;
  plan.rule = options.scale_rule;
  plan.pool = pool;
  const WeightLoader w(src, plan);
  const int64_t hid = c.hidden_size, inter = c.intermediate_size;
  const int64_t wide = hid * c.spatial_merge_size * c.spatial_merge_size;
  MX_ASSIGN_OR_RETURN(
      Tensor pe, w.get(p + "patch_embed.proj.weight",
                       {hid, c.in_channels, c.temporal_patch_size, c.patch_size, c.patch_size}));
  MX_ASSIGN_OR_RETURN(t->patch_embed,
                      make_bf16_linear({pe.reshape({hid, c.patch_values()})}, "patch_embed"));
  MX_ASSIGN_OR_RETURN(t->patch_bias, w.norm(p + "patch_embed.proj.bias", hid));
  MX_ASSIGN_OR_RETURN(t->pos_table,
                      w.floats(p + "pos_embed.weight", {c.num_position_embeddings, hid}));
  t->blocks_.resize(static_cast<size_t>(c.depth));
  for (int64_t i = 0; i < c.depth; ++i) {
    const std::string b = p + "blocks." + std::to_string(i) + ".";
    VisionTower::Block& k = t->blocks_[static_cast<size_t>(i)];
    MX_ASSIGN_OR_RETURN(k.norm1_w, w.norm(b + "norm1.weight", hid));
    MX_ASSIGN_OR_RETURN(k.norm1_b, w.norm(b + "norm1.bias", hid));
    MX_ASSIGN_OR_RETURN(k.norm2_w, w.norm(b + "norm2.weight", hid));
    MX_ASSIGN_OR_RETURN(k.norm2_b, w.norm(b + "norm2.bias", hid));
    MX_ASSIGN_OR_RETURN(k.qkv, w.linear({b + "attn.qkv"}, {3 * hid}, hid, b + "attn.qkv"));
    MX_ASSIGN_OR_RETURN(k.qkv_b, w.norm(b + "attn.qkv.bias", 3 * hid));
    MX_ASSIGN_OR_RETURN(k.proj, w.linear({b + "attn.proj"}, {hid}, hid, b + "attn.proj"));
    MX_ASSIGN_OR_RETURN(k.proj_b, w.norm(b + "attn.proj.bias", hid));
    MX_ASSIGN_OR_RETURN(k.fc1, w.linear({b + "mlp.linear_fc1"}, {inter}, hid, b + "mlp.fc1"));
    MX_ASSIGN_OR_RETURN(k.fc1_b, w.norm(b + "mlp.linear_fc1.bias", inter));
    MX_ASSIGN_OR_RETURN(k.fc2, w.linear({b + "mlp.linear_fc2"}, {hid}, inter, b + "mlp.fc2"));
    MX_ASSIGN_OR_RETURN(k.fc2_b, w.norm(b + "mlp.linear_fc2.bias", hid));
  }
  VisionTower::Merger& m = t->merger_;
  const std::string g = p + "merger.";
  MX_ASSIGN_OR_RETURN(m.norm_w, w.norm(g + "norm.weight", hid));
  MX_ASSIGN_OR_RETURN(m.norm_b, w.norm(g + "norm.bias", hid));
  MX_ASSIGN_OR_RETURN(m.fc1, w.linear({g + "linear_fc1"}, {wide}, wide, g + "linear_fc1"));
  MX_ASSIGN_OR_RETURN(m.fc1_b, w.norm(g + "linear_fc1.bias", wide));
  MX_ASSIGN_OR_RETURN(m.fc2,
                      w.linear({g + "linear_fc2"}, {c.out_hidden_size}, wide, g + "linear_fc2"));
  MX_ASSIGN_OR_RETURN(m.fc2_b, w.norm(g + "linear_fc2.bias", c.out_hidden_size));
  t->inv_freq_.resize(static_cast<size_t>(hid / c.num_heads / 4));
  rope_inv_freq(hid / c.num_heads / 2, 10000.0, t->inv_freq_.data());
  return t;
}

}  // namespace mx

// Weight sources over safetensors: a Hugging Face directory (model.safetensors or shards) and
// an msmodelslim directory (quant_model_weights + quant_model_description.json), plus the
// checks every source shares and the detection that picks one.
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "formats/mx_block.h"
#include "formats/mx_layout.h"
#include "loader/checkpoint.h"
#include "loader/weight_source.h"

namespace mx {
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A per-expert weight that is a slice of a fused expert tensor: expert `expert`, rows
// [row0, row0 + rows) of `fused` ([E, out, in]).
struct ExpertSlice {
  std::string fused;
  int64_t expert, row0, rows;
};

class SafetensorsSource : public WeightSource {
 public:
  SafetensorsSource(std::string label, CheckpointFiles ck)
      : label_(std::move(label)), ck_(std::move(ck)) {
    index_fused_experts();
  }
  const std::string& label() const override { return label_; }
  std::string_view kind() const override { return "safetensors"; }
  std::vector<std::string> names() const override { return ck_.names(); }
  bool has(const std::string& name) const override {
    return ck_.find(name) != nullptr || slices_.count(name) != 0;
  }
  std::vector<std::string> logical_names() const override {
    std::set<std::string> out;
    for (const std::string& n : ck_.names()) out.insert(n);
    for (const auto& [n, s] : slices_) {
      out.erase(s.fused);
      out.insert(n);
    }
    return {out.begin(), out.end()};
  }
  std::string stored_type(const std::string& name) const override {
    const TensorInfo* t = ck_.find(name);
    return t == nullptr ? "" : std::string(dtype_name(t->dtype));
  }

  Result<Tensor> tensor(const std::string& name) const override {
    if (auto sl = slices_.find(name); sl != slices_.end()) return slice(sl->second);
    auto t = ck_.tensor(name);
    if (!t.is_ok()) return not_found("checkpoint is missing tensor '" + name + "'");
    mark_used(name);
    return t;
  }

  Result<StoredWeight> weight(const std::string& module, int64_t out, int64_t in) const override {
    StoredWeight w;
    w.name = module + ".weight";
    w.out = out;
    w.in = in;
    MX_ASSIGN_OR_RETURN(w.data, checked(w.name, {out, in}));
    return w;
  }

 protected:
  Result<Tensor> checked(const std::string& name, const Shape& shape) const {
    MX_ASSIGN_OR_RETURN(Tensor t, tensor(name));
    if (t.shape() != shape) {
      return invalid_argument("tensor '" + name + "' has shape " + shape_to_string(t.shape()) +
                              " but the config implies " + shape_to_string(shape));
    }
    return t;
  }
  const CheckpointFiles& files() const { return ck_; }

 private:
  // Qwen3.5-MoE stores routed experts fused, without a ".weight" suffix:
  // `experts.gate_up_proj` [E, 2I, H] (rows gate then up) and `experts.down_proj` [E, H, I].
  // Each expert's gate, up and down are seen as views of them.
  void index_fused_experts() {
    for (const std::string& n : ck_.names()) {
      const TensorInfo* t = ck_.find(n);
      if (t->shape.size() != 3 || t->shape[0] > kMaxExperts) continue;
      const bool gate_up = ends_with(n, ".experts.gate_up_proj");
      if (!gate_up && !ends_with(n, ".experts.down_proj")) continue;
      const std::string base = n.substr(0, n.rfind('.') + 1);  // "...experts."
      const int64_t out = t->shape[1];
      for (int64_t e = 0; e < t->shape[0]; ++e) {
        const std::string ep = base + std::to_string(e);
        if (gate_up) {
          slices_[ep + ".gate_proj.weight"] = {n, e, 0, out / 2};
          slices_[ep + ".up_proj.weight"] = {n, e, out / 2, out / 2};
        } else {
          slices_[ep + ".down_proj.weight"] = {n, e, 0, out};
        }
      }
    }
  }
  Result<Tensor> slice(const ExpertSlice& s) const {
    MX_ASSIGN_OR_RETURN(Tensor t, ck_.tensor(s.fused));
    if (t.dim(1) % 2 != 0 && s.row0 > 0) {
      return invalid_argument("tensor '" + s.fused + "' has an odd row count " +
                              std::to_string(t.dim(1)) + " where gate and up rows belong");
    }
    mark_used(s.fused);
    return t.select(0, s.expert).slice(0, s.row0, s.row0 + s.rows);
  }

  std::string label_;
  CheckpointFiles ck_;
  std::map<std::string, ExpertSlice> slices_;
};

// msmodelslim: each weight tensor's type string comes from the description; MX weights carry
// `.weight_scale` (E8M0 bytes) and, dual level, `.weight_dual_scale` (FP32 per 512).
class MsmodelslimSource : public SafetensorsSource {
 public:
  MsmodelslimSource(std::string label, CheckpointFiles ck, QuantDescription d)
      : SafetensorsSource(std::move(label), std::move(ck)), desc_(std::move(d)) {}
  std::string_view kind() const override { return "msmodelslim"; }
  const QuantDescription* quant_description() const override { return &desc_; }
  std::string stored_type(const std::string& name) const override {
    auto it = desc_.raw_types.find(name);
    return it != desc_.raw_types.end() ? it->second : SafetensorsSource::stored_type(name);
  }

  Result<StoredWeight> weight(const std::string& module, int64_t out, int64_t in) const override {
    const std::string wn = module + ".weight";
    auto raw = desc_.raw_types.find(wn);
    if (raw == desc_.raw_types.end()) {
      return invalid_argument("quant_model_description.json has no type for '" + wn + "'");
    }
    const QuantType type = desc_.tensor_types.at(wn);
    if (type == QuantType::kUnsupported) {
      return unimplemented("tensor '" + wn + "' has quantization type '" + raw->second +
                           "', which mxserve does not run (supported: FLOAT, W8A8_MXFP8, "
                           "W4A8_MXFP, W4A4_MXFP4, W4A4_MXFP4_DUALSCALE)");
    }
    if (type == QuantType::kFloat) return SafetensorsSource::weight(module, out, in);
    return mx_weight(module, type, out, in);
  }

 private:
  Result<StoredWeight> mx_weight(const std::string& module, QuantType type, int64_t n,
                                 int64_t k) const;
  QuantDescription desc_;
};

Result<StoredWeight> MsmodelslimSource::mx_weight(const std::string& module, QuantType type,
                                                  int64_t n, int64_t k) const {
  StoredWeight q;
  q.encoding = WeightEncoding::kMx;
  q.mx_type = type;
  q.out = n;
  q.in = k;
  q.name = module + ".weight";
  const std::string sn = module + ".weight_scale";
  auto w = files().tensor(q.name);
  if (!w.is_ok()) return not_found("checkpoint is missing tensor '" + q.name + "'");
  const bool fp4 = type != QuantType::kW8A8Mxfp8;
  const Shape want_w = {n, fp4 ? fp4_packed_bytes(k) : k};
  const DType want_dt = fp4 ? DType::kU8 : DType::kF8E4M3;
  if (w->shape() != want_w || (w->dtype() != want_dt && w->dtype() != DType::kU8)) {
    return invalid_argument("tensor '" + q.name + "' is " + w->describe() + " but " +
                            std::string(quant_type_name(type)) + " needs " +
                            std::string(dtype_name(want_dt)) + shape_to_string(want_w));
  }
  auto sc = files().tensor(sn);
  if (!sc.is_ok()) {
    return not_found("checkpoint is missing tensor '" + sn + "' (the E8M0 scales of '" + q.name +
                     "')");
  }
  const Shape want_s = {n, mx_num_blocks(k)};
  if (sc->shape() != want_s || sc->dtype() != DType::kU8) {
    return invalid_argument("tensor '" + sn + "' is " + sc->describe() + " but must be U8" +
                            shape_to_string(want_s) + " (one E8M0 byte per 32 inputs)");
  }
  const auto* sb = sc->data_as<uint8_t>();
  if (const void* nan = std::memchr(sb, kE8M0Nan, static_cast<size_t>(sc->numel()))) {
    const int64_t i = static_cast<const uint8_t*>(nan) - sb;
    return invalid_argument("tensor '" + sn + "' holds the NaN scale byte 0xFF at row " +
                            std::to_string(i / want_s[1]) + ", block " +
                            std::to_string(i % want_s[1]));
  }
  q.data = w->reshape(want_w);
  q.scale = *sc;
  mark_used(q.name);
  mark_used(sn);
  if (type == QuantType::kW4A4Mxfp4DualScale) {
    const std::string dn = module + ".weight_dual_scale";
    auto d = files().tensor(dn);
    if (!d.is_ok()) return not_found("checkpoint is missing tensor '" + dn + "'");
    const int64_t nc = mx_num_chunks(k);
    if (d->dtype() != DType::kF32 || d->numel() != n * nc) {
      return invalid_argument("tensor '" + dn + "' is " + d->describe() + " but must be F32[" +
                              std::to_string(n) + ", " + std::to_string(nc) + "(, 1)]");
    }
    q.dual_scale = d->reshape({n, nc});
    mark_used(dn);
  }
  return q;
}

bool starts_with(const std::string& s, std::string_view p) { return s.rfind(p, 0) == 0; }

}  // namespace

std::string StoredWeight::type_name() const {
  switch (encoding) {
    case WeightEncoding::kFloat:
      return "FLOAT";
    case WeightEncoding::kMx:
      return std::string(quant_type_name(mx_type));
    case WeightEncoding::kGgml:
      return std::string(ggml_type_info(ggml).name);
  }
  return "?";
}

bool is_skippable_tensor(const std::string& name) {
  // The multi-token-prediction head (a draft model for speculative decoding) and vision
  // towers: weights a text-only forward never reads. Rotary inverse frequencies are
  // recomputed from rope_theta.
  for (std::string_view p : {"mtp.", "model.mtp.", "model.visual.", "visual.", "vision_tower.",
                             "model.vision_tower.", "multi_modal_projector.", "mm_projector."}) {
    if (starts_with(name, p)) return true;
  }
  const std::string_view inv = ".rotary_emb.inv_freq";
  return name.size() >= inv.size() && name.compare(name.size() - inv.size(), inv.size(), inv) == 0;
}

Status WeightSource::check_all_used(
    std::vector<std::string>* skipped,
    const std::function<bool(const std::string&)>& elsewhere) const {
  for (const std::string& n : names()) {
    if (used_.count(n) != 0 || (elsewhere && elsewhere(n))) continue;
    if (is_skippable_tensor(n)) {
      if (skipped != nullptr) skipped->push_back(n);
      continue;
    }
    return invalid_argument(label() + ": tensor '" + n +
                            "' is not used by any module of the model (an unsupported "
                            "feature of this checkpoint, such as a norm bias or a rotation?)");
  }
  return Status::ok();
}

Result<std::unique_ptr<WeightSource>> open_safetensors_source(const std::string& dir) {
  MX_ASSIGN_OR_RETURN(CheckpointFiles ck, CheckpointFiles::open(dir, "model"));
  return std::unique_ptr<WeightSource>(new SafetensorsSource(dir, std::move(ck)));
}

Result<std::unique_ptr<WeightSource>> open_msmodelslim_source(const std::string& dir) {
  MX_ASSIGN_OR_RETURN(QuantDescription d, load_quant_description(dir));
  if (d.group_size != kMxBlock) {
    return unimplemented(dir + ": group_size " + std::to_string(d.group_size) +
                         " is not the MX block of 32");
  }
  MX_ASSIGN_OR_RETURN(CheckpointFiles ck, CheckpointFiles::open(dir, kQuantWeightsStem));
  return std::unique_ptr<WeightSource>(new MsmodelslimSource(dir, std::move(ck), std::move(d)));
}

}  // namespace mx

#include "model/weights.h"

#include "core/check.h"
#include "formats/half.h"
#include "model/model.h"

namespace mx {
namespace {

Status mixes_types(const std::string& packed, const StoredWeight& a, const StoredWeight& b) {
  auto module = [](const StoredWeight& w) { return w.name.substr(0, w.name.size() - 7); };
  return invalid_argument("packed module '" + packed + "' mixes types: '" + module(a) + "' is " +
                          a.type_name() + " but '" + module(b) + "' is " + b.type_name());
}

// One kernel runs a packed module as one matmul, so float and MX shards must agree; ggml
// parts become segments of their own types.
Status check_one_type(const std::vector<StoredWeight>& parts, const std::string& packed) {
  for (size_t i = 1; i < parts.size(); ++i) {
    const bool ggml =
        parts[i].encoding == WeightEncoding::kGgml && parts[0].encoding == WeightEncoding::kGgml;
    if (!ggml && parts[i].type_name() != parts[0].type_name()) {
      return mixes_types(packed, parts[0], parts[i]);
    }
  }
  return Status::ok();
}

}  // namespace

Result<Tensor> WeightLoader::get(const std::string& name, const Shape& shape) const {
  MX_ASSIGN_OR_RETURN(Tensor t, src_.tensor(name));
  if (t.shape() != shape) {
    return invalid_argument("tensor '" + name + "' has shape " + shape_to_string(t.shape()) +
                            " but the config implies " + shape_to_string(shape));
  }
  return t;
}

Result<Tensor> WeightLoader::norm(const std::string& name, int64_t n) const {
  return floats(name, {n});
}

Result<Tensor> float_tensor_f32(const Tensor& t, const std::string& name) {
  if (t.dtype() != DType::kBF16 && t.dtype() != DType::kF16 && t.dtype() != DType::kF32) {
    return invalid_argument("tensor '" + name + "' is " + t.describe() +
                            " where float weights belong");
  }
  const int64_t n = t.numel();
  Tensor out = Tensor::empty(DType::kF32, t.shape());
  float* o = out.mutable_data_as<float>();
  const Tensor c = t.is_contiguous() ? t : t.contiguous_copy();
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = c.dtype() == DType::kF32 ? 0 : c.data_as<uint16_t>()[i];
    o[i] = c.dtype() == DType::kF32    ? c.data_as<float>()[i]
           : c.dtype() == DType::kBF16 ? bf16_to_float(h)
                                       : fp16_to_float(h);
  }
  return out;
}

Result<Tensor> WeightLoader::floats(const std::string& name, const Shape& shape) const {
  MX_ASSIGN_OR_RETURN(Tensor t, get(name, shape));
  return float_tensor_f32(t, name);
}

Result<std::vector<StoredWeight>> WeightLoader::parts_of(const std::vector<std::string>& modules,
                                                         const std::vector<int64_t>& out_dims,
                                                         int64_t in,
                                                         const std::string& packed_name) const {
  std::vector<StoredWeight> parts;
  for (size_t i = 0; i < modules.size(); ++i) {
    MX_ASSIGN_OR_RETURN(StoredWeight w, src_.weight(modules[i], out_dims[i], in));
    parts.push_back(std::move(w));
  }
  MX_RETURN_IF_ERROR(check_one_type(parts, packed_name));
  return parts;
}

Result<std::unique_ptr<Linear>> WeightLoader::linear(const std::vector<std::string>& modules,
                                                     const std::vector<int64_t>& out_dims,
                                                     int64_t in, const std::string& packed_name,
                                                     bool keep_float) const {
  MX_ASSIGN_OR_RETURN(std::vector<StoredWeight> parts,
                      parts_of(modules, out_dims, in, packed_name));
  return linear_of(parts, packed_name, keep_float);
}

Result<std::unique_ptr<Linear>> WeightLoader::linear_rows(const std::string& module, int64_t out,
                                                          int64_t in, int64_t begin, int64_t end,
                                                          const std::string& name,
                                                          bool keep_float) const {
  return linear_row_ranges(module, out, in, {{begin, end}}, name, keep_float);
}

Result<std::unique_ptr<Linear>> WeightLoader::linear_row_ranges(
    const std::string& module, int64_t out, int64_t in,
    const std::vector<std::pair<int64_t, int64_t>>& ranges, const std::string& name,
    bool keep_float) const {
  MX_ASSIGN_OR_RETURN(std::vector<StoredWeight> whole, parts_of({module}, {out}, in, name));
  const StoredWeight& w = whole[0];
  std::vector<StoredWeight> parts;
  for (const auto& [begin, end] : ranges) {
    MX_CHECK(0 <= begin && begin < end && end <= out);
    // Rows are contiguous in every encoding (float rows, ggml block rows, MX code and scale rows).
    StoredWeight p = w;
    p.data = w.data.slice(0, begin, end);
    if (w.scale.defined()) p.scale = w.scale.slice(0, begin, end);
    if (w.dual_scale.defined()) p.dual_scale = w.dual_scale.slice(0, begin, end);
    p.out = end - begin;
    parts.push_back(std::move(p));
  }
  return linear_of(parts, name, keep_float);
}

Result<std::unique_ptr<Linear>> WeightLoader::linear_of(const std::vector<StoredWeight>& parts,
                                                        const std::string& packed_name,
                                                        bool keep_float) const {
  auto made = quant_method_for(parts, plan_, keep_float).create_linear(parts, packed_name, plan_);
  if (made.is_ok() && plan_.on_module) {
    LoadedModule m{made->get(), nullptr, {}};
    for (const StoredWeight& p : parts) {
      if (m.weights.empty() || m.weights.back() != p.name) m.weights.push_back(p.name);
    }
    plan_.on_module(m);
  }
  return made;
}

Result<std::unique_ptr<Linear>> WeightLoader::packed(const std::string& prefix,
                                                     const std::string& name,
                                                     const std::vector<int64_t>& out_dims,
                                                     int64_t in, bool keep_float) const {
  auto it = plan_.packed.find(name);
  MX_CHECK(it != plan_.packed.end() && it->second.size() == out_dims.size());
  std::vector<std::string> modules;
  for (const std::string& shard : it->second) modules.push_back(prefix + "." + shard);
  return linear(modules, out_dims, in, prefix + "." + name, keep_float);
}

Result<std::unique_ptr<Linear>> WeightLoader::router(const std::string& module, int64_t experts,
                                                     int64_t hidden) const {
  MX_ASSIGN_OR_RETURN(StoredWeight w, src_.weight(module, experts, hidden));
  return linear_of({w}, module, /*keep_float=*/true);
}

Result<std::unique_ptr<ExpertBank>> WeightLoader::experts(const std::string& prefix,
                                                          int64_t num_experts, int64_t inter,
                                                          int64_t hidden) const {
  std::vector<StoredWeight> g, u, d;
  const std::string packed = prefix + ".experts";
  const ExpertRange mine = expert_range(num_experts, plan_.ep_rank, plan_.ep_size);
  // Every rank refuses alike (each holds at least one expert), so none is left waiting.
  if (num_experts < plan_.ep_size) {
    return invalid_argument(packed + ": " + std::to_string(num_experts) +
                            " experts cannot be split over " + std::to_string(plan_.ep_size) +
                            " ranks (each needs one at least)");
  }
  for (int64_t e = mine.first; e < mine.first + mine.count; ++e) {
    const std::string ep = packed + "." + std::to_string(e);
    MX_ASSIGN_OR_RETURN(StoredWeight ge, src_.weight(ep + ".gate_proj", inter, hidden));
    MX_ASSIGN_OR_RETURN(StoredWeight ue, src_.weight(ep + ".up_proj", inter, hidden));
    MX_ASSIGN_OR_RETURN(StoredWeight de, src_.weight(ep + ".down_proj", hidden, inter));
    for (const StoredWeight* w : {&ge, &ue, &de}) {
      if (w->encoding != WeightEncoding::kGgml &&
          w->type_name() != (g.empty() ? ge : g[0]).type_name()) {
        return mixes_types(packed, g.empty() ? ge : g[0], *w);
      }
    }
    g.push_back(std::move(ge));
    u.push_back(std::move(ue));
    d.push_back(std::move(de));
  }
  std::vector<StoredWeight> all = g;
  all.insert(all.end(), u.begin(), u.end());
  all.insert(all.end(), d.begin(), d.end());
  const QuantMethod& method = quant_method_for(all, plan_, /*keep_float=*/false);
  all.clear();
  LoadedModule m;
  for (size_t e = 0; plan_.on_module && e < g.size(); ++e) {
    for (const std::vector<StoredWeight>* part : {&g, &u, &d}) m.weights.push_back((*part)[e].name);
  }
  auto bank = method.create_expert_bank({std::move(g), std::move(u), std::move(d)}, prefix, plan_);
  if (bank.is_ok() && plan_.on_module) {
    m.bank = bank->get();
    plan_.on_module(m);
  }
  return bank;
}

Status WeightLoader::embedding(const std::string& module, int64_t vocab, int64_t hidden,
                               Embedding* out) const {
  MX_ASSIGN_OR_RETURN(StoredWeight w, src_.weight(module, vocab, hidden));
  out->hidden = hidden;
  MX_ASSIGN_OR_RETURN(
      EmbeddingTable t,
      quant_method_for({w}, plan_, /*keep_float=*/true).create_embedding(w, module));
  out->table = std::move(t.table);
  out->ggml = t.ggml;
  // Each new token reads one row of the mapping; without read-ahead, its first read in decode
  // waits for the disk.
  out->table.prefetch_mapped_pages();
  return Status::ok();
}

}  // namespace mx

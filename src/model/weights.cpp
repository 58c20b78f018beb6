#include "model/weights.h"

#include <cstring>

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

// Columns `cols` of a 2-D tensor, stacked in order, as an owned tensor of the same dtype.
Tensor take_columns(const Tensor& t, const Ranges& cols) {
  const Tensor c = t.is_contiguous() ? t : t.contiguous_copy();
  int64_t width = 0;
  for (const auto& [b, e] : cols) width += e - b;
  Tensor out = Tensor::empty(c.dtype(), {c.dim(0), width});
  const size_t es = dtype_size(c.dtype());
  const auto* src = static_cast<const uint8_t*>(c.data());
  auto* dst = static_cast<uint8_t*>(out.mutable_data());
  for (int64_t r = 0; r < c.dim(0); ++r) {
    for (const auto& [b, e] : cols) {
      const size_t n = static_cast<size_t>(e - b) * es;
      std::memcpy(dst, src + static_cast<size_t>(r * c.dim(1) + b) * es, n);
      dst += n;
    }
  }
  return out;
}

// Whether every range begins on a multiple of `unit` and ends on one or at `in`.
bool on_grid(const Ranges& cols, int64_t unit, int64_t in) {
  for (const auto& [b, e] : cols) {
    if (b % unit != 0 || (e % unit != 0 && e != in)) return false;
  }
  return true;
}

// Element ranges as ranges of the `unit`-sized blocks that hold them.
Ranges in_blocks(const Ranges& cols, int64_t unit) {
  Ranges out;
  for (const auto& [b, e] : cols) out.emplace_back(b / unit, (e + unit - 1) / unit);
  return out;
}

int64_t width_of(const Ranges& cols) {
  int64_t n = 0;
  for (const auto& [b, e] : cols) n += e - b;
  return n;
}

// The columns `cols` of every row of a stored weight (a row-parallel shard), in its encoding.
Result<StoredWeight> columns_of(const StoredWeight& w, const Ranges& cols) {
  StoredWeight s = w;
  s.in = width_of(cols);
  switch (w.encoding) {
    case WeightEncoding::kFloat:
      s.data = take_columns(w.data, cols);
      return s;
    case WeightEncoding::kMx: {
      const int64_t chunk = w.dual_scale.defined() ? 512 : 32;
      if (!on_grid(cols, chunk, w.in)) {
        return invalid_argument(w.name + ": a tensor-parallel shard must begin where a block of " +
                                std::to_string(chunk) + " of its scales does; --tp-size " +
                                "cuts its " + std::to_string(w.in) + " columns elsewhere");
      }
      const bool packed = w.mx_type != QuantType::kW8A8Mxfp8;  // two E2M1 codes a byte
      s.data = take_columns(w.data, packed ? in_blocks(cols, 2) : cols);
      s.scale = take_columns(w.scale, in_blocks(cols, 32));
      if (w.dual_scale.defined()) s.dual_scale = take_columns(w.dual_scale, in_blocks(cols, 512));
      return s;
    }
    case WeightEncoding::kGgml: {
      const GgmlTypeInfo& t = ggml_type_info(w.ggml);
      if (!on_grid(cols, t.block, w.in)) {
        return invalid_argument(w.name + ": a tensor-parallel shard must begin where a block of " +
                                std::string(t.name) + " does (every " + std::to_string(t.block) +
                                " columns)");
      }
      s.data = take_columns(w.data, scaled(in_blocks(cols, t.block), t.block_bytes));
      return s;
    }
  }
  return s;
}

// The ranges with each one that continues the one before joined to it: one part, one segment.
Ranges coalesced(const Ranges& r) {
  Ranges out;
  for (const auto& [b, e] : r) {
    if (!out.empty() && out.back().second == b) {
      out.back().second = e;
    } else {
      out.emplace_back(b, e);
    }
  }
  return out;
}

// Rows [begin, end): contiguous in every encoding (float rows, ggml block rows, MX code and
// scale rows).
StoredWeight rows_of(const StoredWeight& w, int64_t begin, int64_t end) {
  MX_CHECK(0 <= begin && begin < end && end <= w.out);
  StoredWeight p = w;
  p.data = w.data.slice(0, begin, end);
  if (w.scale.defined()) p.scale = w.scale.slice(0, begin, end);
  if (w.dual_scale.defined()) p.dual_scale = w.dual_scale.slice(0, begin, end);
  p.out = end - begin;
  return p;
}

// Where column shards of `w` may begin so that each rank's blocks are those one process
// forms: the stored blocks, and under online quantization the scheme's (its dual-level chunk).
int64_t column_unit_of(const StoredWeight& w, const QuantPlan& plan) {
  int64_t unit = 32;
  if (w.encoding == WeightEncoding::kMx && w.dual_scale.defined()) unit = 512;
  if (w.encoding == WeightEncoding::kGgml) unit = std::max(unit, ggml_type_info(w.ggml).block);
  if (plan.online && scheme_info(*plan.online).dual) unit = std::max<int64_t>(unit, 512);
  // Rotated weights (online or offline) were rotated by blocks of K from its start: each
  // rank's activations must be rotated by the same blocks.
  if (plan.rotation > 0) unit = std::max(unit, plan.rotation);
  return unit;
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
  return shard({module}, {out}, in, {ranges}, {}, name, keep_float);
}

Result<std::unique_ptr<Linear>> WeightLoader::shard(const std::vector<std::string>& modules,
                                                    const std::vector<int64_t>& out_dims,
                                                    int64_t in, const std::vector<Ranges>& rows,
                                                    const Ranges& cols, const std::string& name,
                                                    bool keep_float) const {
  MX_ASSIGN_OR_RETURN(std::vector<StoredWeight> whole, parts_of(modules, out_dims, in, name));
  std::vector<StoredWeight> parts;
  for (size_t i = 0; i < whole.size(); ++i) {
    const StoredWeight& w = whole[i];
    for (const auto& [begin, end] : coalesced(rows[i])) {
      StoredWeight p = rows_of(w, begin, end);
      if (!cols.empty()) {
        MX_ASSIGN_OR_RETURN(p, columns_of(p, coalesced(cols)));
      }
      parts.push_back(std::move(p));
    }
  }
  return linear_of(parts, name, keep_float);
}

Result<int64_t> WeightLoader::column_unit(const std::string& module, int64_t out,
                                          int64_t in) const {
  MX_ASSIGN_OR_RETURN(StoredWeight w, src_.weight(module, out, in));
  return column_unit_of(w, plan_);
}

Result<std::unique_ptr<Linear>> WeightLoader::row_parallel(const std::string& module, int64_t out,
                                                           int64_t in,
                                                           const std::vector<Ranges>& cols,
                                                           const std::string& name) const {
  const TpShard& tp = plan_.tp;
  MX_ASSIGN_OR_RETURN(StoredWeight w, src_.weight(module, out, in));
  const int64_t unit = column_unit_of(w, plan_);
  // Every rank takes the same way, so that each meets the others in the same collectives.
  bool aligned = true;
  for (const Ranges& c : cols) aligned = aligned && on_grid(coalesced(c), unit, in);
  const Ranges& mine = cols[static_cast<size_t>(tp.rank)];
  if (aligned) return shard({module}, {out}, in, {{{0, out}}}, mine, name);
  const auto [n0, n1] = tp.heads(out);
  MX_ASSIGN_OR_RETURN(std::unique_ptr<Linear> rows, linear_of({rows_of(w, n0, n1)}, name, false));
  return make_gathered_row_parallel(std::move(rows), tp.comm, in, coalesced(mine), out, n0, n1);
}

std::vector<std::string> WeightLoader::packed_modules(const std::string& prefix,
                                                      const std::string& name, size_t count) const {
  auto it = plan_.packed.find(name);
  MX_CHECK(it != plan_.packed.end() && it->second.size() == count);
  std::vector<std::string> modules;
  for (const std::string& shard : it->second) modules.push_back(prefix + "." + shard);
  return modules;
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
  return linear(packed_modules(prefix, name, out_dims.size()), out_dims, in, prefix + "." + name,
                keep_float);
}

Result<std::unique_ptr<Linear>> WeightLoader::router(const std::string& module, int64_t experts,
                                                     int64_t hidden) const {
  MX_ASSIGN_OR_RETURN(StoredWeight w, src_.weight(module, experts, hidden));
  return linear_of({w}, module, /*keep_float=*/true);
}

Result<std::unique_ptr<ExpertBank>> WeightLoader::experts(const std::string& prefix,
                                                          int64_t num_experts, int64_t inter,
                                                          int64_t hidden,
                                                          int64_t* first_expert) const {
  std::vector<StoredWeight> g, u, d;
  const std::string packed = prefix + ".experts";
  ExpertRange mine = expert_range(num_experts, plan_.ep_rank, plan_.ep_size);
  // Every rank refuses alike (each holds at least one expert), so none is left waiting.
  if (num_experts < plan_.ep_size) {
    return invalid_argument(packed + ": " + std::to_string(num_experts) +
                            " experts cannot be split over " + std::to_string(plan_.ep_size) +
                            " ranks (each needs one at least)");
  }
  // Tensor parallelism: every expert's slice of the intermediate width, cut where the down
  // projection's blocks begin; a width with fewer blocks than ranks (a dual-level chunk of
  // 512 over a narrow expert) keeps whole experts instead, a contiguous share per rank.
  // Decided bank by bank (a mixed checkpoint's banks may differ in their blocks).
  std::pair<int64_t, int64_t> slice{0, inter};
  bool whole = false;
  if (plan_.tp.on()) {
    const std::string first = packed + "." + std::to_string(mine.first) + ".down_proj";
    MX_ASSIGN_OR_RETURN(int64_t unit, column_unit(first, hidden, inter));
    if (!plan_.tp_whole_experts && splits_at(inter, unit, plan_.tp.size)) {
      slice = plan_.tp.width(inter, unit);
    } else if (num_experts >= plan_.tp.size) {
      mine = expert_range(num_experts, plan_.tp.rank, plan_.tp.size);
      whole = true;
      whole_experts_ = true;
    } else {
      return invalid_argument("--tp-size " + std::to_string(plan_.tp.size) + " cannot split " +
                              packed + ": " + std::to_string(num_experts) +
                              " experts, and a width of " + std::to_string(inter) +
                              " with fewer blocks of " + std::to_string(unit) + " than ranks");
    }
  }
  if (first_expert != nullptr) *first_expert = mine.first;
  for (int64_t e = mine.first; e < mine.first + mine.count; ++e) {
    const std::string ep = packed + "." + std::to_string(e);
    MX_ASSIGN_OR_RETURN(StoredWeight ge, src_.weight(ep + ".gate_proj", inter, hidden));
    MX_ASSIGN_OR_RETURN(StoredWeight ue, src_.weight(ep + ".up_proj", inter, hidden));
    MX_ASSIGN_OR_RETURN(StoredWeight de, src_.weight(ep + ".down_proj", hidden, inter));
    if (plan_.tp.on() && !whole) {
      ge = rows_of(ge, slice.first, slice.second);
      ue = rows_of(ue, slice.first, slice.second);
      MX_ASSIGN_OR_RETURN(de, columns_of(de, {slice}));
    }
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
  if (plan_.tp.on()) {
    // The vocabulary split as lm_head's is: a tied head is then this table.
    const auto [v0, v1] = plan_.tp.heads(vocab);
    w = rows_of(w, v0, v1);
    out->first = v0;
    out->split = true;
  }
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

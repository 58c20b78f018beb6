#include "model/weights.h"

#include "core/check.h"
#include "formats/half.h"
#include "model/model.h"

namespace mx {
namespace {

GgmlWeight wide_of(const StoredWeight& w);
bool runs_wide(const StoredWeight& w);

// A weight as ggml rows: GGUF blocks as stored, or F32/F16 float tensors.
GgmlWeight ggml_of(const StoredWeight& w) {
  if (w.encoding == WeightEncoding::kFloat) return wide_of(w);
  return {w.ggml, w.data, w.out, w.in};
}

Scheme scheme_of(const StoredWeight& w) {
  return *scheme_from_offline_type(quant_type_name(w.mx_type));
}

MxWeights mx_of(const StoredWeight& w) {
  MxWeights q;
  q.scheme = scheme_of(w);
  q.n = w.out;
  q.k = w.in;
  q.codes = w.data;
  q.scales = w.scale;
  q.chunk_scales = w.dual_scale;
  return q;
}

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

// F32 and F16 weights run as stored, through the kernel that GGUF's F32/F16 tensors use:
// rounding them to BF16 would lose what the checkpoint holds.
bool runs_wide(const StoredWeight& w) {
  return w.encoding == WeightEncoding::kFloat &&
         (w.data.dtype() == DType::kF32 || w.data.dtype() == DType::kF16);
}

GgmlWeight wide_of(const StoredWeight& w) {
  const bool f32 = w.data.dtype() == DType::kF32;
  const Tensor c = w.data.is_contiguous() ? w.data : w.data.contiguous_copy();
  return {f32 ? GgmlType::kF32 : GgmlType::kF16,
          c.view_as(DType::kU8, {w.out, w.in * (f32 ? 4 : 2)}), w.out, w.in};
}

// After a weight was packed, converted or quantized into memory of its own: its checkpoint
// pages need not stay resident beside the copy.
void release_stored(const std::vector<StoredWeight>& parts) {
  for (const StoredWeight& p : parts) {
    for (const Tensor* t : {&p.data, &p.scale, &p.dual_scale}) {
      if (t->defined()) t->release_mapped_pages();
    }
  }
}

// Float tensors for the BF16 path: as stored, or GGUF blocks dequantized to FP32 first.
std::vector<Tensor> floats_of(const std::vector<StoredWeight>& parts) {
  std::vector<Tensor> out;
  for (const StoredWeight& p : parts) {
    out.push_back(p.encoding == WeightEncoding::kGgml ? dequantize_ggml(ggml_of(p)) : p.data);
  }
  return out;
}

}  // namespace

// MXFP4 blocks with no other target run on the MX kernels, repacked without loss, meeting the
// activations llama.cpp gives them (int8 per 32); other GGUF types and --gguf-activations f32
// keep their blocks.
std::optional<Scheme> WeightLoader::mxfp4_target(const std::vector<StoredWeight>& parts) const {
  if (plan_.gguf_dequant_bf16 || plan_.gguf_activations != GgmlActivations::kNative) {
    return std::nullopt;
  }
  for (const StoredWeight& p : parts) {
    if (p.encoding != WeightEncoding::kGgml || p.ggml != GgmlType::kMXFP4) return std::nullopt;
  }
  return Scheme::kW4A8Mxfp4Int8;
}

// Whether weights without an MX target run on the ggml kernels (GGUF blocks as stored, F32/F16
// float tensors) rather than the BF16 one.
bool WeightLoader::native(const std::vector<StoredWeight>& parts) const {
  for (const StoredWeight& p : parts) {
    if (plan_.gguf_dequant_bf16) return false;
    if (p.encoding != WeightEncoding::kGgml && !runs_wide(p)) return false;
  }
  return true;
}

Result<Tensor> WeightLoader::get(const std::string& name, const Shape& shape) const {
  MX_ASSIGN_OR_RETURN(Tensor t, src_.tensor(name));
  if (t.shape() != shape) {
    return invalid_argument("tensor '" + name + "' has shape " + shape_to_string(t.shape()) +
                            " but the config implies " + shape_to_string(shape));
  }
  return t;
}

Result<Tensor> WeightLoader::norm(const std::string& name, int64_t n) const {
  MX_ASSIGN_OR_RETURN(Tensor t, get(name, {n}));
  if (t.dtype() != DType::kBF16 && t.dtype() != DType::kF16 && t.dtype() != DType::kF32) {
    return invalid_argument("tensor '" + name + "' is " + t.describe() +
                            " where a float norm weight belongs");
  }
  Tensor out = Tensor::empty(DType::kF32, {n});
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

Result<MxWeights> WeightLoader::to_mx(const StoredWeight& w, Scheme s) const {
  switch (w.encoding) {
    case WeightEncoding::kMx:
      return mx_of(w);
    case WeightEncoding::kFloat:
      return quantize_weight(w.data, s, plan_.rule, w.name, plan_.pool);
    case WeightEncoding::kGgml:
      break;
  }
  const SchemeInfo& info = scheme_info(s);
  // MXFP4 blocks already are E2M1 with E8M0 scales per 32: repacked, not requantized.
  if (w.ggml == GgmlType::kMXFP4 && info.weight == ElemFormat::kE2M1 && !info.dual) {
    return ggml_mxfp4_to_mx(ggml_of(w), s, w.name);
  }
  return quantize_weight(dequantize_ggml(ggml_of(w)), s, plan_.rule, w.name, plan_.pool);
}

Result<std::unique_ptr<Linear>> WeightLoader::linear(const std::vector<std::string>& modules,
                                                     const std::vector<int64_t>& out_dims,
                                                     int64_t in, const std::string& packed_name,
                                                     bool keep_float) const {
  MX_ASSIGN_OR_RETURN(std::vector<StoredWeight> parts,
                      parts_of(modules, out_dims, in, packed_name));
  return linear_of(std::move(parts), packed_name, keep_float);
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
  return linear_of(std::move(parts), name, keep_float);
}

Result<std::unique_ptr<Linear>> WeightLoader::linear_of(std::vector<StoredWeight> parts,
                                                        const std::string& packed_name,
                                                        bool keep_float) const {
  const WeightEncoding enc = parts[0].encoding;
  std::optional<Scheme> target;
  if (enc == WeightEncoding::kMx) {
    target = scheme_of(parts[0]);
  } else if (!keep_float) {
    target = plan_.online ? plan_.online : mxfp4_target(parts);
  }
  if (!target && native(parts)) {
    std::vector<GgmlWeight> g;
    for (const StoredWeight& p : parts) g.push_back(ggml_of(p));
    return make_ggml_linear(std::move(g), packed_name, plan_.gguf_activations);
  }
  if (!target) {
    MX_ASSIGN_OR_RETURN(std::unique_ptr<Linear> l, make_bf16_linear(floats_of(parts), packed_name));
    release_stored(parts);
    return l;
  }
  std::vector<MxWeights> mx;
  for (const StoredWeight& p : parts) {
    MX_ASSIGN_OR_RETURN(MxWeights q, to_mx(p, *target));
    mx.push_back(std::move(q));
  }
  MX_ASSIGN_OR_RETURN(MxWeights all, stack_mx_weights(mx, packed_name));
  mx.clear();
  std::unique_ptr<Linear> l = make_mx_linear(std::move(all), plan_.rule);
  release_stored(parts);
  return l;
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
  // A gate the checkpoint quantized runs in its scheme, activations quantized as for any MX
  // linear (what the exporter's fake-quant reference computes), never read without its scales.
  if (w.encoding == WeightEncoding::kMx) {
    std::unique_ptr<Linear> l = make_mx_linear(mx_of(w), plan_.rule);
    release_stored({w});
    return l;
  }
  if (native({w})) return make_ggml_linear({ggml_of(w)}, module, plan_.gguf_activations);
  auto l = make_bf16_linear(floats_of({w}), module);
  if (l.is_ok()) release_stored({w});
  return l;
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
  const WeightEncoding enc = g[0].encoding;
  std::optional<Scheme> target = enc == WeightEncoding::kMx ? scheme_of(g[0]) : plan_.online;
  if (!target) {
    std::vector<StoredWeight> all = g;
    all.insert(all.end(), u.begin(), u.end());
    all.insert(all.end(), d.begin(), d.end());
    target = mxfp4_target(all);
  }
  if (!target && native(g) && native(u) && native(d)) {
    std::vector<std::vector<GgmlWeight>> w13;
    std::vector<GgmlWeight> w2;
    for (size_t e = 0; e < g.size(); ++e) {
      w13.push_back({ggml_of(g[e]), ggml_of(u[e])});
      w2.push_back(ggml_of(d[e]));
    }
    return make_ggml_expert_bank(std::move(w13), std::move(w2), prefix, plan_.gguf_activations);
  }
  auto release = [&] {
    for (const auto* parts : {&g, &u, &d}) release_stored(*parts);
  };
  if (!target) {
    auto next = [&](int64_t x) -> Result<std::array<Tensor, 3>> {
      const auto e = static_cast<size_t>(x);
      if (e > 0) release_stored({g[e - 1], u[e - 1], d[e - 1]});
      auto f = floats_of({g[e], u[e], d[e]});
      return std::array<Tensor, 3>{f[0], f[1], f[2]};
    };
    auto bank = make_bf16_expert_bank(static_cast<int64_t>(g.size()), next, prefix);
    if (bank.is_ok()) release();
    return bank;
  }
  // Expert by expert: each one's checkpoint pages go once the bank has packed it, so a layer
  // never holds its source and its quantized copy whole at once.
  auto next = [&](int64_t x) -> Result<std::pair<MxWeights, MxWeights>> {
    const auto e = static_cast<size_t>(x);
    if (e > 0) release_stored({g[e - 1], u[e - 1], d[e - 1]});
    MX_ASSIGN_OR_RETURN(MxWeights gq, to_mx(g[e], *target));
    MX_ASSIGN_OR_RETURN(MxWeights uq, to_mx(u[e], *target));
    MX_ASSIGN_OR_RETURN(MxWeights dq, to_mx(d[e], *target));
    MX_ASSIGN_OR_RETURN(MxWeights gu, stack_mx_weights({gq, uq}, packed + "." + std::to_string(e) +
                                                                     ".gate_up_proj"));
    return std::make_pair(std::move(gu), std::move(dq));
  };
  auto bank = make_mx_expert_bank(static_cast<int64_t>(g.size()), next, plan_.rule, packed);
  if (bank.is_ok()) release();
  return bank;
}

Status WeightLoader::embedding(const std::string& module, int64_t vocab, int64_t hidden,
                               Embedding* out) const {
  MX_ASSIGN_OR_RETURN(StoredWeight w, src_.weight(module, vocab, hidden));
  out->hidden = hidden;
  if (w.encoding == WeightEncoding::kMx) {
    return unimplemented(w.name + " is stored as " + w.type_name() + "; embeddings must be FLOAT");
  }
  if (native({w})) {
    const GgmlWeight g = ggml_of(w);
    out->table = g.rows;
    out->ggml = g.type;
    out->table.prefetch_mapped_pages();
    return Status::ok();
  }
  MX_ASSIGN_OR_RETURN(out->table, stack_rows_bf16(floats_of({w}), module));
  // Each new token reads one row of the mapping; without read-ahead, its first read in decode
  // waits for the disk.
  out->table.prefetch_mapped_pages();
  return Status::ok();
}

}  // namespace mx

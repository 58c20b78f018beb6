#include "model/weights.h"

#include <cstring>

#include "formats/mx_block.h"
#include "formats/mx_layout.h"

namespace mx {

Result<Tensor> WeightLoader::get(const std::string& name, const Shape& shape) const {
  auto t = ck_.tensor(name);
  if (!t.is_ok()) return not_found("checkpoint is missing tensor '" + name + "'");
  if (t->shape() != shape) {
    return invalid_argument("tensor '" + name + "' has shape " + shape_to_string(t->shape()) +
                            " but the config implies " + shape_to_string(shape));
  }
  return t;
}

Result<Scheme> WeightLoader::scheme_of(const std::string& module, bool keep_float) const {
  if (offline_ == nullptr) return keep_float || !online_ ? Scheme::kBf16 : *online_;
  const std::string w = module + ".weight";
  auto raw = offline_->raw_types.find(w);
  if (raw == offline_->raw_types.end()) {
    return invalid_argument("quant_model_description.json has no type for '" + w + "'");
  }
  auto s = scheme_from_offline_type(raw->second);
  if (!s) {
    return unimplemented("tensor '" + w + "' has quantization type '" + raw->second +
                         "', which mxserve does not run (supported: FLOAT, W8A8_MXFP8, "
                         "W4A8_MXFP, W4A4_MXFP4, W4A4_MXFP4_DUALSCALE)");
  }
  return *s;
}

Result<MxWeights> WeightLoader::load_offline_mx(const std::string& module, Scheme s, int64_t n,
                                                int64_t k) const {
  const SchemeInfo& info = scheme_info(s);
  MxWeights q;
  q.scheme = s;
  q.n = n;
  q.k = k;
  const std::string wn = module + ".weight", sn = module + ".weight_scale";
  auto w = ck_.tensor(wn);
  if (!w.is_ok()) return not_found("checkpoint is missing tensor '" + wn + "'");
  const bool fp4 = info.weight == ElemFormat::kE2M1;
  const Shape want_w = {n, fp4 ? fp4_packed_bytes(k) : k};
  const DType want_dt = fp4 ? DType::kU8 : DType::kF8E4M3;
  if (w->shape() != want_w || (w->dtype() != want_dt && w->dtype() != DType::kU8)) {
    return invalid_argument("tensor '" + wn + "' is " + w->describe() + " but " +
                            std::string(info.offline_type) + " needs " +
                            std::string(dtype_name(want_dt)) + shape_to_string(want_w));
  }
  auto sc = ck_.tensor(sn);
  if (!sc.is_ok())
    return not_found("checkpoint is missing tensor '" + sn + "' (the E8M0 scales of '" + wn + "')");
  const Shape want_s = {n, mx_num_blocks(k)};
  if (sc->shape() != want_s || sc->dtype() != DType::kU8) {
    return invalid_argument("tensor '" + sn + "' is " + sc->describe() + " but must be U8" +
                            shape_to_string(want_s) + " (one E8M0 byte per 32 inputs)");
  }
  const auto* sb = sc->data_as<uint8_t>();
  for (int64_t i = 0; i < sc->numel(); ++i) {
    if (sb[i] == kE8M0Nan) {
      return invalid_argument("tensor '" + sn + "' holds the NaN scale byte 0xFF at row " +
                              std::to_string(i / want_s[1]) + ", block " +
                              std::to_string(i % want_s[1]));
    }
  }
  q.codes = w->reshape(want_w);
  q.scales = *sc;
  if (info.dual) {
    const std::string dn = module + ".weight_dual_scale";
    auto d = ck_.tensor(dn);
    if (!d.is_ok()) return not_found("checkpoint is missing tensor '" + dn + "'");
    const int64_t nc = mx_num_chunks(k);
    if (d->dtype() != DType::kF32 || d->numel() != n * nc) {
      return invalid_argument("tensor '" + dn + "' is " + d->describe() + " but must be F32[" +
                              std::to_string(n) + ", " + std::to_string(nc) + "(, 1)]");
    }
    q.chunk_scales = d->reshape({n, nc});
  }
  return q;
}

Result<MxWeights> WeightLoader::mx_weights(const std::string& module, Scheme s, int64_t n,
                                           int64_t k) const {
  if (offline_ != nullptr) return load_offline_mx(module, s, n, k);
  MX_ASSIGN_OR_RETURN(Tensor w, get(module + ".weight", {n, k}));
  return quantize_weight(w, s, rule_, module + ".weight", pool_);
}

Result<std::unique_ptr<Linear>> WeightLoader::linear(const std::vector<std::string>& modules,
                                                     const std::vector<int64_t>& out_dims,
                                                     int64_t in, const std::string& packed_name,
                                                     bool keep_float) const {
  std::vector<Scheme> schemes;
  for (const std::string& m : modules) {
    MX_ASSIGN_OR_RETURN(Scheme s, scheme_of(m, keep_float && offline_ == nullptr));
    schemes.push_back(s);
  }
  for (size_t i = 1; i < schemes.size(); ++i) {
    if (schemes[i] != schemes[0]) {
      return invalid_argument("packed module '" + packed_name + "' mixes types: '" + modules[0] +
                              "' is " + std::string(scheme_info(schemes[0]).offline_type) +
                              " but '" + modules[i] + "' is " +
                              std::string(scheme_info(schemes[i]).offline_type));
    }
  }
  if (schemes[0] == Scheme::kBf16) {
    std::vector<Tensor> parts;
    for (size_t i = 0; i < modules.size(); ++i) {
      MX_ASSIGN_OR_RETURN(Tensor t, get(modules[i] + ".weight", {out_dims[i], in}));
      parts.push_back(std::move(t));
    }
    return make_bf16_linear(parts, packed_name);
  }
  std::vector<MxWeights> parts;
  for (size_t i = 0; i < modules.size(); ++i) {
    MX_ASSIGN_OR_RETURN(MxWeights q, mx_weights(modules[i], schemes[0], out_dims[i], in));
    parts.push_back(std::move(q));
  }
  MX_ASSIGN_OR_RETURN(MxWeights all, stack_mx_weights(parts, packed_name));
  return make_mx_linear(std::move(all), rule_);
}

Result<Tensor> WeightLoader::float_weight(const std::string& module, const Shape& shape) const {
  MX_ASSIGN_OR_RETURN(Scheme s, scheme_of(module, /*keep_float=*/true));
  if (s == Scheme::kBf16) return get(module + ".weight", shape);
  MX_ASSIGN_OR_RETURN(MxWeights q, load_offline_mx(module, s, shape[0], shape[1]));
  return dequantize_weight(q);
}

Result<std::unique_ptr<ExpertBank>> WeightLoader::experts(const std::string& prefix,
                                                          int64_t num_experts, int64_t inter,
                                                          int64_t hidden) const {
  MX_ASSIGN_OR_RETURN(Scheme s0, scheme_of(prefix + ".experts.0.gate_proj", false));
  for (int64_t e = 0; e < num_experts; ++e) {
    for (const char* p : {"gate_proj", "up_proj", "down_proj"}) {
      const std::string m = prefix + ".experts." + std::to_string(e) + "." + p;
      MX_ASSIGN_OR_RETURN(Scheme s, scheme_of(m, false));
      if (s != s0) {
        return invalid_argument("packed module '" + prefix + ".experts' mixes types: '" + prefix +
                                ".experts.0.gate_proj' is " +
                                std::string(scheme_info(s0).offline_type) + " but '" + m + "' is " +
                                std::string(scheme_info(s).offline_type));
      }
    }
  }
  if (s0 == Scheme::kBf16) {
    std::vector<Tensor> g, u, d;
    for (int64_t e = 0; e < num_experts; ++e) {
      const std::string ep = prefix + ".experts." + std::to_string(e);
      MX_ASSIGN_OR_RETURN(Tensor ge, get(ep + ".gate_proj.weight", {inter, hidden}));
      MX_ASSIGN_OR_RETURN(Tensor ue, get(ep + ".up_proj.weight", {inter, hidden}));
      MX_ASSIGN_OR_RETURN(Tensor de, get(ep + ".down_proj.weight", {hidden, inter}));
      g.push_back(std::move(ge));
      u.push_back(std::move(ue));
      d.push_back(std::move(de));
    }
    return make_bf16_expert_bank(g, u, d, prefix);
  }
  std::vector<MxWeights> w13, w2;
  for (int64_t e = 0; e < num_experts; ++e) {
    const std::string ep = prefix + ".experts." + std::to_string(e);
    MX_ASSIGN_OR_RETURN(MxWeights g, mx_weights(ep + ".gate_proj", s0, inter, hidden));
    MX_ASSIGN_OR_RETURN(MxWeights u, mx_weights(ep + ".up_proj", s0, inter, hidden));
    MX_ASSIGN_OR_RETURN(MxWeights d, mx_weights(ep + ".down_proj", s0, hidden, inter));
    MX_ASSIGN_OR_RETURN(MxWeights gu, stack_mx_weights({g, u}, ep + ".gate_up_proj"));
    w13.push_back(std::move(gu));
    w2.push_back(std::move(d));
  }
  return make_mx_expert_bank(std::move(w13), std::move(w2), rule_, prefix + ".experts");
}

}  // namespace mx

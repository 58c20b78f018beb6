#include "quant/quant_method.h"

#include <array>
#include <utility>

#include "core/check.h"

namespace mx {
namespace {

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

// After a weight was packed, converted or quantized into memory of its own: its checkpoint
// pages need not stay resident beside the copy.
void release_stored(const std::vector<StoredWeight>& parts) {
  for (const StoredWeight& p : parts) {
    for (const Tensor* t : {&p.data, &p.scale, &p.dual_scale}) {
      if (t->defined()) t->release_mapped_pages();
    }
  }
}

void release_bank(const ExpertWeights& w) {
  for (const auto* parts : {&w.gate, &w.up, &w.down}) release_stored(*parts);
}

// Float tensors for the BF16 path: as stored, or GGUF blocks dequantized to FP32 first.
std::vector<Tensor> floats_of(const std::vector<StoredWeight>& parts) {
  std::vector<Tensor> out;
  for (const StoredWeight& p : parts) {
    out.push_back(p.encoding == WeightEncoding::kGgml ? dequantize_ggml(ggml_of(p)) : p.data);
  }
  return out;
}

// MXFP4 blocks with no other target run on the MX kernels, repacked without loss, meeting the
// activations llama.cpp gives them (int8 per 32); other GGUF types and --gguf-activations f32
// keep their blocks.
bool mxfp4_to_mx(const std::vector<StoredWeight>& parts, const QuantPlan& plan) {
  if (plan.gguf_dequant_bf16 || plan.gguf_activations != GgmlActivations::kNative) return false;
  for (const StoredWeight& p : parts) {
    if (p.encoding != WeightEncoding::kGgml || p.ggml != GgmlType::kMXFP4) return false;
  }
  return true;
}

class MxMethod final : public QuantMethod {
 public:
  std::string_view name() const override { return "mx"; }

  bool takes(const std::vector<StoredWeight>& parts, const QuantPlan& plan,
             bool keep_float) const override {
    // A checkpoint's MX weights (a router gate's included) are never read without their scales.
    if (parts[0].encoding == WeightEncoding::kMx) return true;
    return !keep_float && (plan.online.has_value() || mxfp4_to_mx(parts, plan));
  }

  Result<std::unique_ptr<Linear>> create_linear(const std::vector<StoredWeight>& parts,
                                                const std::string& name,
                                                const QuantPlan& plan) const override {
    const Scheme target = target_of(parts[0], plan);
    std::vector<MxWeights> mx;
    for (const StoredWeight& p : parts) {
      MX_ASSIGN_OR_RETURN(MxWeights q, to_mx(p, target, plan));
      mx.push_back(std::move(q));
    }
    MX_ASSIGN_OR_RETURN(MxWeights all, stack_mx_weights(mx, name));
    mx.clear();
    std::unique_ptr<Linear> l = make_mx_linear(std::move(all), plan.rule);
    release_stored(parts);
    return l;
  }

  Result<std::unique_ptr<ExpertBank>> create_expert_bank(const ExpertWeights& w,
                                                         const std::string& prefix,
                                                         const QuantPlan& plan) const override {
    const std::string packed = prefix + ".experts";
    const Scheme target = target_of(w.gate[0], plan);
    // Each expert's checkpoint pages go once the bank has packed it.
    auto next = [&](int64_t x) -> Result<std::pair<MxWeights, MxWeights>> {
      const auto e = static_cast<size_t>(x);
      if (e > 0) release_stored({w.gate[e - 1], w.up[e - 1], w.down[e - 1]});
      MX_ASSIGN_OR_RETURN(MxWeights gq, to_mx(w.gate[e], target, plan));
      MX_ASSIGN_OR_RETURN(MxWeights uq, to_mx(w.up[e], target, plan));
      MX_ASSIGN_OR_RETURN(MxWeights dq, to_mx(w.down[e], target, plan));
      MX_ASSIGN_OR_RETURN(
          MxWeights gu,
          stack_mx_weights({gq, uq}, packed + "." + std::to_string(e) + ".gate_up_proj"));
      return std::make_pair(std::move(gu), std::move(dq));
    };
    auto bank = make_mx_expert_bank(static_cast<int64_t>(w.gate.size()), next, plan.rule, packed);
    if (bank.is_ok()) release_bank(w);
    return bank;
  }

  Result<EmbeddingTable> create_embedding(const StoredWeight& w,
                                          const std::string&) const override {
    return unimplemented(w.name + " is stored as " + w.type_name() + "; embeddings must be FLOAT");
  }

 private:
  // The checkpoint's scheme, else the online one, else MXFP4 blocks' own.
  static Scheme target_of(const StoredWeight& first, const QuantPlan& plan) {
    if (first.encoding == WeightEncoding::kMx) return scheme_of(first);
    return plan.online ? *plan.online : Scheme::kW4A8Mxfp4Int8;
  }

  static Result<MxWeights> to_mx(const StoredWeight& w, Scheme s, const QuantPlan& plan) {
    switch (w.encoding) {
      case WeightEncoding::kMx: {
        MxWeights m = mx_of(w);
        m.rotation = plan.rotation;  // an offline checkpoint's, from its description
        return m;
      }
      case WeightEncoding::kFloat:
        return quantize_weight(w.data, s, plan.rule, w.name, plan.pool, plan.rotation);
      case WeightEncoding::kGgml:
        break;
    }
    const SchemeInfo& info = scheme_info(s);
    // MXFP4 blocks already are E2M1 with E8M0 scales per 32: repacked, not requantized (unless
    // a rotation asks for new blocks).
    if (w.ggml == GgmlType::kMXFP4 && info.weight == ElemFormat::kE2M1 && !info.dual &&
        plan.rotation == 0) {
      return ggml_mxfp4_to_mx(ggml_of(w), s, w.name, plan.pool);
    }
    return quantize_weight(dequantize_ggml(ggml_of(w)), s, plan.rule, w.name, plan.pool,
                           plan.rotation);
  }
};

class GgmlMethod final : public QuantMethod {
 public:
  std::string_view name() const override { return "ggml"; }

  bool takes(const std::vector<StoredWeight>& parts, const QuantPlan& plan, bool) const override {
    if (plan.gguf_dequant_bf16) return false;
    for (const StoredWeight& p : parts) {
      if (p.encoding != WeightEncoding::kGgml && !runs_wide(p)) return false;
    }
    return true;
  }

  // The blocks stay where they are mapped; a kernel table that reads a type as panels
  // repacks it and releases the mapping itself.
  Result<std::unique_ptr<Linear>> create_linear(const std::vector<StoredWeight>& parts,
                                                const std::string& name,
                                                const QuantPlan& plan) const override {
    std::vector<GgmlWeight> g;
    for (const StoredWeight& p : parts) g.push_back(ggml_of(p));
    return make_ggml_linear(std::move(g), name, plan.gguf_activations, plan.pool);
  }

  Result<std::unique_ptr<ExpertBank>> create_expert_bank(const ExpertWeights& w,
                                                         const std::string& prefix,
                                                         const QuantPlan& plan) const override {
    std::vector<std::vector<GgmlWeight>> w13;
    std::vector<GgmlWeight> w2;
    for (size_t e = 0; e < w.gate.size(); ++e) {
      w13.push_back({ggml_of(w.gate[e]), ggml_of(w.up[e])});
      w2.push_back(ggml_of(w.down[e]));
    }
    return make_ggml_expert_bank(std::move(w13), std::move(w2), prefix, plan.gguf_activations,
                                 plan.pool);
  }

  Result<EmbeddingTable> create_embedding(const StoredWeight& w,
                                          const std::string&) const override {
    GgmlWeight g = ggml_of(w);
    return EmbeddingTable{std::move(g.rows), g.type};
  }
};

class Bf16Method final : public QuantMethod {
 public:
  std::string_view name() const override { return "bf16"; }

  bool takes(const std::vector<StoredWeight>&, const QuantPlan&, bool) const override {
    return true;
  }

  Result<std::unique_ptr<Linear>> create_linear(const std::vector<StoredWeight>& parts,
                                                const std::string& name,
                                                const QuantPlan&) const override {
    MX_ASSIGN_OR_RETURN(std::unique_ptr<Linear> l, make_bf16_linear(floats_of(parts), name));
    release_stored(parts);
    return l;
  }

  Result<std::unique_ptr<ExpertBank>> create_expert_bank(const ExpertWeights& w,
                                                         const std::string& prefix,
                                                         const QuantPlan&) const override {
    auto next = [&](int64_t x) -> Result<std::array<Tensor, 3>> {
      const auto e = static_cast<size_t>(x);
      if (e > 0) release_stored({w.gate[e - 1], w.up[e - 1], w.down[e - 1]});
      auto f = floats_of({w.gate[e], w.up[e], w.down[e]});
      return std::array<Tensor, 3>{f[0], f[1], f[2]};
    };
    auto bank = make_bf16_expert_bank(static_cast<int64_t>(w.gate.size()), next, prefix);
    if (bank.is_ok()) release_bank(w);
    return bank;
  }

  Result<EmbeddingTable> create_embedding(const StoredWeight& w,
                                          const std::string& name) const override {
    MX_ASSIGN_OR_RETURN(Tensor t, stack_rows_bf16(floats_of({w}), name));
    return EmbeddingTable{std::move(t), std::nullopt};
  }
};

}  // namespace

const std::vector<const QuantMethod*>& quant_methods() {
  static const MxMethod mx;
  static const GgmlMethod ggml;
  static const Bf16Method bf16;
  static const std::vector<const QuantMethod*> methods = {&mx, &ggml, &bf16};
  return methods;
}

const QuantMethod& quant_method_for(const std::vector<StoredWeight>& parts, const QuantPlan& plan,
                                    bool keep_float) {
  MX_CHECK(!parts.empty());
  for (const QuantMethod* m : quant_methods()) {
    if (m->takes(parts, plan, keep_float)) return *m;
  }
  MX_CHECK_MSG(false, "the BF16 method takes every weight");
  return *quant_methods().back();
}

}  // namespace mx

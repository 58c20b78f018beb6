#include "model/calibrate.h"

#include <cmath>
#include <memory>
#include <string_view>
#include <unordered_map>

#include "core/check.h"
#include "formats/hadamard.h"
#include "formats/mx_block.h"
#include "loader/checkpoint_format.h"
#include "model/blocks.h"

namespace mx {
namespace {

// A linear's inputs, gathered as the model runs.
struct LinearSite {
  std::vector<std::string> weights;  // the quantized ones it stacks
  int64_t k = 0;
  std::vector<float> rows;
  // CalibrationOptions::float_targets: the same rows as the unquantized model gives them.
  std::vector<float> targets;
  bool router = false;  // a MoE router's, tapped only to pair expert rows with tokens
  // Reads the layer's normed input (q/k/v, gate/up): only these take float targets. A
  // projection inside the layer (o, down) reads what the corrected ones above it give.
  bool layer_input = false;
};

class TapLinear final : public Linear {
 public:
  TapLinear(std::unique_ptr<Linear> inner, LinearSite* site)
      : Linear(inner->in_features(), inner->out_features()),
        inner_(std::move(inner)),
        site_(site) {}
  std::string scheme_name() const override { return inner_->scheme_name(); }
  std::string kernel_table() const override { return inner_->kernel_table(); }
  uint64_t weight_bytes() const override { return inner_->weight_bytes(); }
  void forward(const float* x, int64_t m, float* y, ExecContext& ctx) const override {
    site_->rows.insert(site_->rows.end(), x, x + m * in_features());
    inner_->forward(x, m, y, ctx);
  }

 private:
  std::unique_ptr<Linear> inner_;
  LinearSite* site_;
};

// An expert bank's routed rows, per expert.
struct BankSite {
  std::vector<std::string> weights;  // gate, up, down per expert
  int64_t inter = 0;
  std::vector<std::vector<float>> rows;
  // CalibrationOptions::float_targets: per expert, the unquantized model's inputs to the layer
  // for the tokens of `rows`.
  std::vector<std::vector<float>> targets;
};

class TapBank final : public ExpertBank {
 public:
  TapBank(std::unique_ptr<ExpertBank> inner, BankSite* site)
      : ExpertBank(inner->num_experts(), inner->hidden(), inner->inter()),
        inner_(std::move(inner)),
        site_(site) {}
  std::string scheme_name() const override { return inner_->scheme_name(); }
  std::string kernel_table() const override { return inner_->kernel_table(); }
  uint64_t weight_bytes() const override { return inner_->weight_bytes(); }
  RowFormat input_format(DispatchMode) const override { return RowFormat::f32(); }
  void run(const ActRows& rows, const int64_t* offsets, float* out, ExecContext& ctx,
           ExpertTimes* times) const override {
    MX_CHECK(!rows.quantized);
    for (int64_t e = 0; e < num_experts(); ++e) {
      const float* x = rows.f32.data() + offsets[e] * hidden();
      site_->rows[static_cast<size_t>(e)].insert(site_->rows[static_cast<size_t>(e)].end(), x,
                                                 x + (offsets[e + 1] - offsets[e]) * hidden());
    }
    inner_->run(rows, offsets, out, ctx, times);
  }

 private:
  std::unique_ptr<ExpertBank> inner_;
  BankSite* site_;
};

// The floating-point checkpoint with the weights GPTQ quantized so far in their place, as an
// offline checkpoint stores them.
class CalibratedSource final : public WeightSource {
 public:
  CalibratedSource(const WeightSource& base, const std::map<std::string, MxWeights>& done)
      : base_(base), done_(done) {}
  const std::string& label() const override { return base_.label(); }
  std::string_view kind() const override { return base_.kind(); }
  std::vector<std::string> names() const override { return base_.names(); }
  bool has(const std::string& name) const override { return base_.has(name); }
  Result<Tensor> tensor(const std::string& name) const override { return base_.tensor(name); }
  std::string stored_type(const std::string& name) const override {
    return base_.stored_type(name);
  }
  Result<StoredWeight> weight(const std::string& module, int64_t out, int64_t in) const override {
    auto it = done_.find(module + ".weight");
    if (it == done_.end()) return base_.weight(module, out, in);
    const MxWeights& q = it->second;
    MX_CHECK(q.n == out && q.k == in);
    StoredWeight w;
    w.name = it->first;
    w.encoding = WeightEncoding::kMx;
    w.out = out;
    w.in = in;
    w.data = q.codes;
    w.scale = q.scales;
    w.dual_scale = q.chunk_scales;
    w.mx_type = quant_type_from_string(scheme_info(q.scheme).offline_type);
    return w;
  }

 private:
  const WeightSource& base_;
  const std::map<std::string, MxWeights>& done_;
};

// Rows [m, k] as FP32, rotated when the scheme's inputs are.
std::vector<float> rotated(const float* x, int64_t m, int64_t k, int64_t rotation) {
  std::vector<float> r(x, x + m * k);
  if (rotation > 0) {
    for (int64_t i = 0; i < m; ++i) hadamard_kernels().rotate(&r[i * k], k, rotation);
  }
  return r;
}

// Rows as the scheme's activation quantization gives them to its kernels (the reference
// codecs, which the kernels equal bit for bit).
std::vector<float> quantized_inputs(const std::vector<float>& x, int64_t k, Scheme s,
                                    ScaleRule rule) {
  const SchemeInfo& info = scheme_info(s);
  const int64_t m = static_cast<int64_t>(x.size()) / k;
  std::vector<float> y(x.size());
  std::vector<uint8_t> codes(static_cast<size_t>(k)), scales(static_cast<size_t>(mx_num_blocks(k)));
  std::vector<float> s0(static_cast<size_t>(mx_num_chunks(k)));
  for (int64_t r = 0; r < m; ++r) {
    if (info.dual) {
      mxfp4_dual_quantize_row(&x[r * k], k, codes.data(), scales.data(), s0.data());
      mxfp4_dual_dequantize_row(codes.data(), scales.data(), s0.data(), k, &y[r * k]);
    } else {
      mx_quantize_row(&x[r * k], k, info.activation, rule, codes.data(), scales.data());
      mx_dequantize_row(codes.data(), scales.data(), k, info.activation, &y[r * k]);
    }
  }
  return y;
}

// What GPTQ needs of a module's inputs: their Hessian, and with input awareness the Hessian of
// the inputs as quantized plus the cross moments of exact and quantized.
struct Moments {
  Hessian h;
  std::optional<CrossMoments> cross;
  Moments(int64_t k, bool aware) : h(k) {
    if (aware) cross.emplace(k);
  }
  void add(const Moments& o) {
    h.add(o.h);
    if (cross) cross->add(*o.cross);
  }
};

constexpr int64_t kFitRowsPerInput = 32;

struct Calibrator {
  const WeightSource& src;
  const CalibrationOptions& opt;
  ThreadPool* pool;
  CalibrationResult* result;

  // The activation scheme of the first quantized weight of `names` (one module, one scheme).
  std::optional<Scheme> scheme_of(const std::vector<std::string>& names) const {
    for (const std::string& n : names) {
      if (auto s = opt.scheme_of(n)) return s;
    }
    return std::nullopt;
  }

  bool aware(Scheme s) const { return opt.input_aware && !scheme_info(s).int8_act; }

  // `target`: the rows the weights are to answer as if they met them (null: x itself).
  Moments moments_of(const float* x, const float* target, int64_t m, int64_t k, Scheme s) const {
    Moments mo(k, aware(s) || target != nullptr);
    constexpr int64_t kChunk = 4096;
    for (int64_t r0 = 0; r0 < m; r0 += kChunk) {
      const int64_t n = std::min(kChunk, m - r0);
      const std::vector<float> r = rotated(x + r0 * k, n, k, opt.rotation);
      if (!mo.cross) {
        mo.h.add(r.data(), n, pool);
        continue;
      }
      const std::vector<float> y = aware(s) ? quantized_inputs(r, k, s, opt.rule) : r;
      const std::vector<float> t =
          target != nullptr ? rotated(target + r0 * k, n, k, opt.rotation) : r;
      mo.h.add(y.data(), n, pool);
      mo.cross->add(t.data(), y.data(), n, pool);
    }
    return mo;
  }

  Result<Tensor> float_weight(const std::string& name) const {
    MX_ASSIGN_OR_RETURN(Tensor t, src.tensor(name));
    if (t.rank() != 2) return invalid_argument(name + ": expected a 2-D weight");
    return float_tensor_f32(t, name);
  }

  Status quantize(const std::string& name, const Moments& mo) {
    const std::optional<Scheme> s = opt.scheme_of(name);
    if (!s) return Status::ok();
    MX_ASSIGN_OR_RETURN(Tensor w, float_weight(name));
    const int64_t n = w.dim(0), k = w.dim(1);
    std::vector<float> r = rotated(w.data_as<float>(), n, k, opt.rotation);
    const std::vector<double> h = mo.h.matrix();
    // A least-squares fit of k weights per row follows the calibration rows' noise unless
    // they are many times k (W4A4 on 2 K tokens ended worse than rounding to nearest): with
    // fewer, the weights are fitted to their own inputs alone.
    if (mo.cross && mo.h.rows() >= kFitRowsPerInput * k) {
      auto aware_w =
          input_aware_weights(r.data(), n, k, mo.cross->matrix(), h, opt.gptq.damp, pool);
      if (!aware_w.is_ok()) return invalid_argument(name + ": " + aware_w.status().message());
      r = std::move(*aware_w);
    }
    MX_ASSIGN_OR_RETURN(MxWeights q,
                        gptq_quantize(r.data(), n, k, h, *s, opt.rule, opt.gptq, pool, name));
    q.rotation = opt.rotation;
    result->weights[name] = std::move(q);
    return Status::ok();
  }

  Status linear(const LinearSite& site) {
    const std::optional<Scheme> s = scheme_of(site.weights);
    if (!s) return Status::ok();
    const int64_t m = static_cast<int64_t>(site.rows.size()) / site.k;
    const Moments mo = moments_of(
        site.rows.data(), site.targets.empty() ? nullptr : site.targets.data(), m, site.k, *s);
    for (const std::string& name : site.weights) MX_RETURN_IF_ERROR(quantize(name, mo));
    return Status::ok();
  }

  // SwiGLU(gate x, up x) of expert rows, what the down projection reads.
  // `quantized`: with the gate and up GPTQ gave (dequantized), what the down projection will
  // meet; else with the stored ones.
  Result<std::vector<float>> expert_acts(const BankSite& site, size_t e,
                                         const std::vector<float>& x, int64_t hidden,
                                         ExecContext& ctx, bool quantized = false) const {
    const int64_t m = static_cast<int64_t>(x.size()) / hidden;
    Tensor g, u;
    if (quantized) {
      g = dequantize_weight(result->weights.at(site.weights[3 * e]));
      u = dequantize_weight(result->weights.at(site.weights[3 * e + 1]));
    } else {
      MX_ASSIGN_OR_RETURN(g, src.tensor(site.weights[3 * e]));
      MX_ASSIGN_OR_RETURN(u, src.tensor(site.weights[3 * e + 1]));
    }
    const int64_t inter = g.dim(0);
    MX_ASSIGN_OR_RETURN(std::unique_ptr<Linear> gu, make_bf16_linear({g, u}, site.weights[3 * e]));
    std::vector<float> y(static_cast<size_t>(m * 2 * inter)), act(static_cast<size_t>(m * inter));
    if (m > 0) gu->forward(x.data(), m, y.data(), ctx);
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t i = 0; i < inter; ++i) {
        const float gv = y[r * 2 * inter + i];
        act[r * inter + i] = gv / (1.0f + std::exp(-gv)) * y[r * 2 * inter + inter + i];
      }
    }
    return act;
  }

  // The moments of expert e's inputs (its gate and up).
  Moments input_moments(const BankSite& site, size_t e, int64_t hidden, Scheme s) const {
    const std::vector<float>& x = site.rows[e];
    const float* t = site.targets.empty() ? nullptr : site.targets[e].data();
    return moments_of(x.data(), t, static_cast<int64_t>(x.size()) / hidden, hidden, s);
  }

  // The down projection's moments once gate and up are quantized: it meets SwiGLU of the
  // quantized gate and up, and under float targets answers as the unquantized expert answers
  // the unquantized model's rows.
  Result<Moments> down_moments(const BankSite& site, size_t e, int64_t hidden, Scheme s,
                               ExecContext& ctx) const {
    const std::vector<float>& x = site.rows[e];
    const int64_t m = static_cast<int64_t>(x.size()) / hidden;
    MX_ASSIGN_OR_RETURN(std::vector<float> act, expert_acts(site, e, x, hidden, ctx, true));
    std::vector<float> act_t;
    if (!site.targets.empty()) {
      MX_ASSIGN_OR_RETURN(act_t, expert_acts(site, e, site.targets[e], hidden, ctx));
    }
    const int64_t inter = static_cast<int64_t>(act.size()) / m;
    return moments_of(act.data(), act_t.empty() ? nullptr : act_t.data(), m, inter, s);
  }

  // The layer's moments over every routed row, for experts with too few of their own: the down
  // projection's from the stored gate and up, as none of them is quantized yet.
  Status pooled(const BankSite& site, int64_t hidden, Scheme s, ExecContext& ctx,
                std::optional<Moments>* in, std::optional<Moments>* down) const {
    in->emplace(hidden, aware(s) || !site.targets.empty());
    down->emplace(site.inter, aware(s));
    for (size_t e = 0; e < site.rows.size(); ++e) {
      const int64_t m = static_cast<int64_t>(site.rows[e].size()) / hidden;
      if (m == 0) continue;
      MX_ASSIGN_OR_RETURN(std::vector<float> act, expert_acts(site, e, site.rows[e], hidden, ctx));
      (*in)->add(input_moments(site, e, hidden, s));
      (*down)->add(moments_of(act.data(), nullptr, m, site.inter, s));
    }
    if ((*in)->h.rows() == 0)
      return invalid_argument("no calibration row reached " + site.weights[0]);
    return Status::ok();
  }

  Status bank(const BankSite& site, int64_t hidden) {
    const std::optional<Scheme> s = scheme_of(site.weights);
    if (!s) return Status::ok();
    const size_t experts = site.rows.size();
    ExecContext ctx(pool);
    auto own = [&](size_t e) {
      return static_cast<int64_t>(site.rows[e].size()) / hidden >= std::max(hidden, site.inter);
    };
    std::optional<Moments> pooled_in, pooled_down;
    for (size_t e = 0; e < experts && !pooled_in; ++e) {
      if (!own(e)) MX_RETURN_IF_ERROR(pooled(site, hidden, *s, ctx, &pooled_in, &pooled_down));
    }
    for (size_t e = 0; e < experts; ++e) {
      if (!own(e)) {
        ++result->pooled_experts;
        for (int p = 0; p < 3; ++p)
          MX_RETURN_IF_ERROR(quantize(site.weights[3 * e + p], p < 2 ? *pooled_in : *pooled_down));
        continue;
      }
      const Moments in = input_moments(site, e, hidden, *s);
      MX_RETURN_IF_ERROR(quantize(site.weights[3 * e], in));
      MX_RETURN_IF_ERROR(quantize(site.weights[3 * e + 1], in));
      MX_ASSIGN_OR_RETURN(const Moments down, down_moments(site, e, hidden, *s, ctx));
      MX_RETURN_IF_ERROR(quantize(site.weights[3 * e + 2], down));
    }
    return Status::ok();
  }
};

// A layer's linears, which gather their inputs in one pass. Gathering the FFN's inputs again
// after the token mixer below it was quantized (GPTQ's "true sequential" order) left the
// bundled model further from BF16 (W4A8 + block32, first 300 prose windows: KL 0.00538
// against 0.00525).
std::vector<std::unique_ptr<Linear>*> linear_slots(DecoderLayer& l) {
  std::vector<std::unique_ptr<Linear>*> v;
  auto add = [&](std::initializer_list<std::unique_ptr<Linear>*> slots) {
    for (std::unique_ptr<Linear>* p : slots) v.push_back(p);
  };
  add({&l.attn.qkv, &l.attn.o});
  if (l.deltanet) add({&l.deltanet->qkvz, &l.deltanet->ba, &l.deltanet->out});
  if (l.mlp) add({&l.mlp->gate_up, &l.mlp->down});
  if (l.moe) {
    add({&l.moe->router, &l.moe->shared_gate});
    if (l.moe->shared) add({&l.moe->shared->gate_up, &l.moe->shared->down});
  }
  return v;
}

// Puts taps on the layer's modules with weights to quantize.
void install_taps(DecoderLayer& layer, const std::vector<LoadedModule>& seen,
                  const CalibrationOptions& opt, std::vector<std::unique_ptr<LinearSite>>* sites,
                  std::unique_ptr<BankSite>* bank) {
  auto quantized = [&](const std::vector<std::string>& names) {
    for (const std::string& n : names) {
      if (opt.scheme_of(n)) return true;
    }
    return false;
  };
  for (std::unique_ptr<Linear>* slot : linear_slots(layer)) {
    if (*slot == nullptr) continue;
    // Under float_targets the router's inputs (every token's, in order) pair expert rows with
    // their tokens.
    const bool router = opt.float_targets && layer.moe && slot == &layer.moe->router;
    for (const LoadedModule& m : seen) {
      if (m.linear != slot->get() || !(quantized(m.weights) || router)) continue;
      auto site = std::make_unique<LinearSite>();
      site->weights = m.weights;
      site->k = (*slot)->in_features();
      site->router = router;
      site->layer_input = router || slot == &layer.attn.qkv ||
                          (layer.deltanet && slot == &layer.deltanet->qkvz) ||
                          (layer.mlp && slot == &layer.mlp->gate_up) ||
                          (layer.moe && layer.moe->shared && slot == &layer.moe->shared->gate_up);
      *slot = std::make_unique<TapLinear>(std::move(*slot), site.get());
      sites->push_back(std::move(site));
      break;
    }
  }
  if (!layer.moe) return;
  for (const LoadedModule& m : seen) {
    if (m.bank != layer.moe->experts.get() || !quantized(m.weights)) continue;
    *bank = std::make_unique<BankSite>();
    (*bank)->weights = m.weights;
    (*bank)->inter = m.bank->inter();
    (*bank)->rows.resize(static_cast<size_t>(m.bank->num_experts()));
    layer.moe->experts = std::make_unique<TapBank>(std::move(layer.moe->experts), bank->get());
  }
}

// Layer l from the floating-point checkpoint with the weights quantized so far in their place;
// `seen` gets the modules built.
Result<DecoderLayer> rebuild(const ArchImpl& arch, const WeightPlan& plan, const ModelConfig& c,
                             int64_t l, const Calibrator& cal, std::vector<LoadedModule>* seen) {
  const CalibratedSource src(cal.src, cal.result->weights);
  WeightPlan p = plan;
  p.rotation = cal.opt.rotation;
  if (seen != nullptr) p.on_module = [seen](const LoadedModule& m) { seen->push_back(m); };
  DecoderLayer layer;
  MX_RETURN_IF_ERROR(arch.build(WeightLoader(src, p), c, l, &layer));
  return layer;
}

// Gathers the inputs of layer l over the calibration windows and quantizes it.
Status run_windows(DecoderModel& model, const std::vector<std::vector<int32_t>>& windows) {
  std::vector<float> logits(static_cast<size_t>(model.config().vocab_size));
  for (const std::vector<int32_t>& w : windows) {
    KvCache cache(model.config(), static_cast<int64_t>(w.size()));
    MX_RETURN_IF_ERROR(
        model.forward(w.data(), static_cast<int64_t>(w.size()), cache, false, logits.data()));
  }
  return Status::ok();
}

// The unquantized model's inputs to layer l's linears (for CalibrationOptions::float_targets),
// into `sites` in order; `ref` runs its first l + 1 layers unquantized.
// Each expert row's token, found by its bits among the router's inputs (the rows the dispatcher
// copied), then that token's row of the unquantized model.
void pair_expert_rows(const LinearSite& router, const std::vector<float>& ref_rows,
                      BankSite* bank) {
  const int64_t k = router.k;
  const auto bytes = static_cast<size_t>(k) * sizeof(float);
  std::unordered_map<std::string_view, int64_t> token;
  const char* base = reinterpret_cast<const char*>(router.rows.data());
  for (int64_t t = 0; t * k < static_cast<int64_t>(router.rows.size()); ++t)
    token.emplace(std::string_view(base + t * bytes, bytes), t);
  bank->targets.resize(bank->rows.size());
  for (size_t e = 0; e < bank->rows.size(); ++e) {
    const std::vector<float>& rows = bank->rows[e];
    std::vector<float>& out = bank->targets[e];
    out.resize(rows.size());
    for (size_t r = 0; r * k < rows.size(); ++r) {
      auto it =
          token.find(std::string_view(reinterpret_cast<const char*>(rows.data() + r * k), bytes));
      MX_CHECK(it != token.end());
      std::copy_n(ref_rows.data() + it->second * k, k, out.data() + r * k);
    }
  }
}

Status gather_targets(DecoderModel& ref, const ArchImpl& arch, const WeightPlan& plan, int64_t l,
                      const std::vector<std::vector<int32_t>>& windows, const Calibrator& cal,
                      std::vector<std::unique_ptr<LinearSite>>& sites, BankSite* experts) {
  std::vector<LoadedModule> seen;
  WeightPlan p = plan;
  p.on_module = [&](const LoadedModule& m) { seen.push_back(m); };
  DecoderLayer layer;
  MX_RETURN_IF_ERROR(arch.build(WeightLoader(cal.src, p), ref.config(), l, &layer));
  std::vector<std::unique_ptr<LinearSite>> mine;
  std::unique_ptr<BankSite> bank;
  install_taps(layer, seen, cal.opt, &mine, &bank);
  ref.layers[static_cast<size_t>(l)] = std::move(layer);
  ref.set_layer_limit(l + 1);
  MX_RETURN_IF_ERROR(run_windows(ref, windows));
  MX_CHECK(mine.size() == sites.size());
  for (size_t i = 0; i < sites.size(); ++i) {
    MX_CHECK(mine[i]->weights == sites[i]->weights &&
             mine[i]->rows.size() == sites[i]->rows.size());
    if (sites[i]->layer_input) sites[i]->targets = std::move(mine[i]->rows);
  }
  for (size_t i = 0; experts != nullptr && i < sites.size(); ++i) {
    if (sites[i]->router) pair_expert_rows(*sites[i], sites[i]->targets, experts);
  }
  // Untapped again, for the layers above.
  p.on_module = nullptr;
  DecoderLayer plain;
  MX_RETURN_IF_ERROR(arch.build(WeightLoader(cal.src, p), ref.config(), l, &plain));
  ref.layers[static_cast<size_t>(l)] = std::move(plain);
  return Status::ok();
}

Status calibrate_layer(DecoderModel& model, DecoderModel* ref, const ArchImpl& arch,
                       const WeightPlan& plan, int64_t l,
                       const std::vector<std::vector<int32_t>>& windows, Calibrator& cal) {
  const ModelConfig& c = model.config();
  std::vector<LoadedModule> seen;
  MX_ASSIGN_OR_RETURN(DecoderLayer layer, rebuild(arch, plan, c, l, cal, &seen));
  std::vector<std::unique_ptr<LinearSite>> sites;
  std::unique_ptr<BankSite> bank;
  install_taps(layer, seen, cal.opt, &sites, &bank);
  model.layers[static_cast<size_t>(l)] = std::move(layer);
  MX_RETURN_IF_ERROR(run_windows(model, windows));
  if (ref != nullptr) {
    MX_RETURN_IF_ERROR(gather_targets(*ref, arch, plan, l, windows, cal, sites, bank.get()));
  }
  for (const auto& site : sites) MX_RETURN_IF_ERROR(cal.linear(*site));
  if (bank) MX_RETURN_IF_ERROR(cal.bank(*bank, c.hidden_size));
  return Status::ok();
}

}  // namespace

Result<CalibrationResult> gptq_calibrate(const std::string& dir,
                                         const std::vector<std::vector<int32_t>>& windows,
                                         const CalibrationOptions& opt) {
  MX_ASSIGN_OR_RETURN(Checkpoint ck, open_checkpoint(dir));
  if (ck.weights->kind() != "safetensors" || ck.weights->quant_description() != nullptr) {
    return invalid_argument(dir + ": GPTQ calibrates a floating-point Hugging Face checkpoint");
  }
  if (windows.empty()) return invalid_argument("GPTQ needs calibration tokens");
  LoadOptions lo;
  lo.threads = opt.threads;
  MX_ASSIGN_OR_RETURN(std::unique_ptr<DecoderModel> model, load_model(dir, lo));
  const ModelConfig& c = model->config();
  const ArchImpl* arch = arch_impl(c.arch);
  WeightPlan plan;
  if (arch->packed != nullptr) plan.packed = merge_packed_modules(*arch->packed);
  plan.rule = opt.rule;
  plan.pool = &model->pool();
  CalibrationResult result;
  for (const auto& w : windows) result.tokens += static_cast<int64_t>(w.size());
  Calibrator cal{*ck.weights, opt, &model->pool(), &result};
  std::unique_ptr<DecoderModel> ref;
  if (opt.float_targets) {
    MX_ASSIGN_OR_RETURN(ref, load_model(dir, lo));
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    model->set_layer_limit(l + 1);
    MX_RETURN_IF_ERROR(calibrate_layer(*model, ref.get(), *arch, plan, l, windows, cal));
    // The layer as the export will load it, for the layers above to calibrate on.
    MX_ASSIGN_OR_RETURN(model->layers[static_cast<size_t>(l)],
                        rebuild(*arch, plan, c, l, cal, nullptr));
    if (opt.progress) opt.progress(l + 1, c.num_layers);
  }
  return result;
}

}  // namespace mx

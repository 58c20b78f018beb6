// The multi-token-prediction head of Qwen3.5 and Qwen3-Next checkpoints, loaded as a one-layer
// model beside its target: x = mtp.fc(cat[mtp.pre_fc_norm_embedding(embed(t + 1)),
// mtp.pre_fc_norm_hidden(h_t)]) with h_t the target's final-normed hidden state, then one
// full-attention decoder layer (its own KV), mtp.norm and the target's lm_head. A GGUF's
// nextn block arrives under the same names (gguf_source.cpp).
#include "loader/checkpoint_format.h"
#include "loader/weight_source.h"
#include "model/blocks.h"

namespace mx {

Result<std::unique_ptr<DecoderModel>> load_mtp_head(const std::string& dir, DecoderModel& target,
                                                    const LoadOptions& options) {
  MX_ASSIGN_OR_RETURN(Checkpoint ck, open_checkpoint(dir));
  const WeightSource& src = *ck.weights;
  if (!src.has("mtp.fc.weight")) {
    return invalid_argument(src.label() +
                            ": the checkpoint has no multi-token-prediction head (mtp.*, or a "
                            "GGUF nextn block); use another --speculative-algorithm");
  }
  const ArchImpl* arch = arch_impl(ck.config.arch);
  if (arch == nullptr) return unimplemented(dir + ": no implementation of its architecture");
  // One full-attention layer under mtp.layers.0, with the target's MLP or MoE.
  ModelConfig c = ck.config;
  c.weight_prefix = "mtp.";
  c.num_layers = 1;
  c.layer_kinds = {LayerKind::kFullAttention};
  c.mlp_only_layers.clear();
  if (c.decoder_sparse_step < 1) c.decoder_sparse_step = 1;
  auto m = std::make_unique<DecoderModel>();
  m->config_ = c;
  m->offline_quantized = src.quant_description() != nullptr;
  m->scale_rule_ = options.scale_rule;
  m->kv_dtype_ = options.kv_dtype;
  m->exec_ = std::make_unique<ExecContext>(target.pool_.get());
  m->dispatcher_ = make_local_dispatcher();
  m->embed = target.embed;
  m->shared_head = target.lm_head.get();
  m->head_end = c.vocab_size;
  WeightPlan plan;
  if (arch->packed != nullptr) plan.packed = merge_packed_modules(*arch->packed);
  plan.online = m->offline_quantized ? std::nullopt : options.quantization;
  plan.rotation = m->offline_quantized ? src.quant_description()->rotation : options.rotation;
  plan.gguf_dequant_bf16 = options.gguf_dequant_bf16;
  plan.gguf_activations = options.gguf_activations;
  plan.rule = options.scale_rule;
  plan.pool = target.pool_.get();
  const WeightLoader w(src, plan);
  const int64_t h = c.hidden_size;
  auto in = std::make_unique<DecoderModel::MtpInput>();
  MX_ASSIGN_OR_RETURN(in->fc, w.linear({"mtp.fc"}, {h}, 2 * h, "mtp.fc"));
  MX_ASSIGN_OR_RETURN(in->norm_embedding, load_norm(w, c, "mtp.pre_fc_norm_embedding.weight", h));
  MX_ASSIGN_OR_RETURN(in->norm_hidden, load_norm(w, c, "mtp.pre_fc_norm_hidden.weight", h));
  m->mtp_input = std::move(in);
  MX_ASSIGN_OR_RETURN(m->final_norm, load_norm(w, c, "mtp.norm.weight", h));
  m->layers.resize(1);
  MX_RETURN_IF_ERROR(arch->build(w, c, 0, &m->layers[0]));
  return m;
}

}  // namespace mx

// libFuzzer target: a Hugging Face config.json. Whatever parses must be a config the model
// code can index: one layer kind per layer, sizes within the documented bounds.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "json_mutator.h"
#include "loader/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mx::fuzz::guarded("model_config", [&] {
    static const std::string kLabel = "fuzz/config.json";
    auto c = mx::parse_model_config(mx::fuzz::as_string(data, size), kLabel);
    if (!mx::fuzz::accepted("parse_model_config", c, kLabel)) return;
    MX_FUZZ_CHECK(c->num_layers >= 1 && c->num_layers <= mx::kMaxLayers, "num_layers");
    MX_FUZZ_CHECK(static_cast<int64_t>(c->layer_kinds.size()) == c->num_layers, "layer_kinds");
    for (int64_t v : {c->vocab_size, c->hidden_size, c->num_heads, c->num_kv_heads, c->head_dim}) {
      MX_FUZZ_CHECK(v >= 1 && v <= mx::kMaxConfigSize, "size field out of bounds");
    }
    MX_FUZZ_CHECK(c->num_heads % c->num_kv_heads == 0, "heads");
    MX_FUZZ_CHECK(c->rotary_dim > 0 && c->rotary_dim <= c->head_dim, "rotary_dim");
    if (c->has_moe()) {
      MX_FUZZ_CHECK(c->num_experts_per_tok >= 1 && c->num_experts_per_tok <= c->num_experts,
                    "experts");
    }
    int64_t moe_layers = 0;
    for (int64_t l = 0; l < c->num_layers; ++l) {
      moe_layers += c->is_moe_layer(l) ? 1 : 0;
      (void)c->is_linear_attention(l);
    }
    MX_FUZZ_CHECK(c->has_moe() || moe_layers == 0, "a dense model with MoE layers");
  });
  return 0;
}

MX_FUZZ_JSON_MUTATOR

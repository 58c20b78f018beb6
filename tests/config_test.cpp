// config.json and quant_model_description.json parsing.
#include <gtest/gtest.h>

#include "loader/model_config.h"
#include "loader/model_inventory.h"
#include "loader/quant_description.h"
#include "test_util.h"

namespace mx {
namespace {

TEST(ModelConfig, BundledMoeModel) {
  auto c = load_model_config(test::shared_dir() + "/fixtures/tiny-qwen3-moe");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->arch, Arch::kQwen3Moe);
  EXPECT_EQ(c->hidden_size, 256);
  EXPECT_EQ(c->num_layers, 4);
  EXPECT_EQ(c->num_heads, 4);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->vocab_size, 4096);
  EXPECT_EQ(c->num_experts, 8);
  EXPECT_EQ(c->num_experts_per_tok, 2);
  EXPECT_EQ(c->moe_intermediate_size, 240);
  EXPECT_EQ(c->intermediate_size, 688);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_FALSE(c->is_moe_layer(0));  // mlp_only_layers [0]
  EXPECT_TRUE(c->is_moe_layer(1));
  EXPECT_TRUE(c->is_moe_layer(3));
}

TEST(ModelConfig, DenseModel) {
  auto c = load_model_config(test::shared_dir() + "/fixtures/tiny-qwen3-dense");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->arch, Arch::kQwen3);
  EXPECT_EQ(c->num_layers, 2);
  EXPECT_FALSE(c->is_moe_layer(0));
  EXPECT_FALSE(c->is_moe_layer(1));
}

TEST(ModelConfig, SparseStep) {
  auto c = parse_model_config(R"({"architectures":["Qwen3MoeForCausalLM"],"vocab_size":8,
    "hidden_size":8,"num_hidden_layers":4,"num_attention_heads":2,"intermediate_size":8,
    "num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":4,"decoder_sparse_step":2})",
                              "c.json");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_FALSE(c->is_moe_layer(0));
  EXPECT_TRUE(c->is_moe_layer(1));
  EXPECT_FALSE(c->is_moe_layer(2));
  EXPECT_TRUE(c->is_moe_layer(3));
  EXPECT_FALSE(c->norm_topk_prob);  // the library default when the file omits it
  EXPECT_EQ(c->head_dim, 4);
}

void expect_config_error(const std::string& json, const std::string& needle) {
  auto c = parse_model_config(json, "c.json");
  ASSERT_FALSE(c.is_ok()) << json;
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("c.json"), std::string::npos);
}

TEST(ModelConfig, ErrorsNameTheCause) {
  const std::string base =
      R"("vocab_size":8,"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":8)";
  expect_config_error("{", "malformed JSON");
  expect_config_error(R"({"architectures":["LlamaForCausalLM"],)" + base + "}",
                      "unsupported architecture 'LlamaForCausalLM'");
  expect_config_error("{" + base + "}", "unsupported architecture");
  expect_config_error(R"({"architectures":["Qwen3ForCausalLM"],"vocab_size":"8","hidden_size":8})",
                      "'vocab_size' must be an integer");
  expect_config_error(R"({"architectures":["Qwen3ForCausalLM"],"vocab_size":8})",
                      "missing field 'hidden_size'");
  expect_config_error(
      R"({"architectures":["Qwen3ForCausalLM"],)" + base + R"(,"num_key_value_heads":3})",
      "not a multiple");
  expect_config_error(R"({"architectures":["Qwen3ForCausalLM"],)" + base + R"(,"rope_theta":"x"})",
                      "'rope_theta' must be a number");
  expect_config_error(R"({"architectures":["Qwen3MoeForCausalLM"],)" + base + "}",
                      "missing field 'num_experts'");
  expect_config_error(R"({"architectures":["Qwen3ForCausalLM"],)" + base + R"(,"hidden_size":-1})",
                      "");
}

// Fields that change the math and are not implemented are refused by name; the same fields
// at their harmless values (as every fixture writes them) load.
TEST(ModelConfig, UnimplementedFieldsAreRefusedByName) {
  const std::string base =
      R"({"architectures":["Qwen3ForCausalLM"],"vocab_size":8,"hidden_size":8,)"
      R"("num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":8)";
  auto with = [&](const std::string& extra) { return base + "," + extra + "}"; };
  expect_config_error(with(R"("rope_scaling":{"rope_type":"yarn","factor":4.0})"),
                      "field 'rope_scaling' (yarn)");
  expect_config_error(with(R"("rope_scaling":{"type":"linear","factor":2.0})"),
                      "field 'rope_scaling' (linear)");
  expect_config_error(with(R"("hidden_act":"gelu")"), "field 'hidden_act' is \"gelu\"");
  expect_config_error(with(R"("use_sliding_window":true)"), "field 'use_sliding_window'");
  expect_config_error(with(R"("attention_bias":true)"), "field 'attention_bias'");
  expect_config_error(with(R"("layer_types":["sliding_attention"])"), "field 'layer_types'");
  auto ok = parse_model_config(
      with(R"("rope_scaling":null,"hidden_act":"silu","use_sliding_window":false,)"
           R"("sliding_window":null,"attention_bias":false)"),
      "c.json");
  EXPECT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_TRUE(
      parse_model_config(with(R"("rope_scaling":{"rope_type":"default"})"), "c.json").is_ok());
  // Qwen3.5 keeps the language model's fields in text_config: checked there.
  expect_config_error(
      R"({"architectures":["Qwen3_5ForConditionalGeneration"],"text_config":{"vocab_size":8,)"
      R"("hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"head_dim":8,)"
      R"("intermediate_size":8,"hidden_act":"gelu_pytorch_tanh"}})",
      "field 'hidden_act'");
}

// Absurd sizes are refused with the field's name before anything is allocated from them.
TEST(ModelConfig, AbsurdValuesAreBounded) {
  const std::string head = R"({"architectures":["Qwen3ForCausalLM"],"vocab_size":8,)";
  auto cfg = [&](const std::string& fields) { return head + fields + "}"; };
  const std::string rest = R"("num_attention_heads":2,"intermediate_size":8,"hidden_size":8)";
  expect_config_error(cfg(R"("num_hidden_layers":100000,)" + rest), "num_hidden_layers 100000");
  expect_config_error(cfg(R"("num_hidden_layers":1,"max_position_embeddings":1e12,)" + rest),
                      "'max_position_embeddings' must be an integer");
  expect_config_error(
      cfg(R"("num_hidden_layers":1,"max_position_embeddings":1000000000000,)" + rest),
      "'max_position_embeddings' must be between 1 and 16777216");
  expect_config_error(
      cfg(R"("num_hidden_layers":1,"max_position_embeddings":18446744073709551615,)" + rest),
      "'max_position_embeddings' must be an int64");
  expect_config_error(cfg(R"("num_hidden_layers":1,"rope_theta":0,)" + rest),
                      "rope_theta must be a finite positive number");
  // JSON cannot carry infinity: 1e400 is a parse error, not an infinite theta.
  expect_config_error(cfg(R"("num_hidden_layers":1,"rope_theta":1e400,)" + rest), "overflow");
  expect_config_error(cfg(R"("num_hidden_layers":1,"rms_norm_eps":-1e-6,)" + rest),
                      "rms_norm_eps must be a finite positive number");
  expect_config_error(cfg(R"("num_hidden_layers":1,"vocab_size":0,)" + rest), "'vocab_size'");
  expect_config_error(cfg(R"("num_hidden_layers":1,"head_dim":16777216,)" + rest),
                      "num_attention_heads x head_dim");
  const std::string moe =
      R"({"architectures":["Qwen3MoeForCausalLM"],"vocab_size":8,"hidden_size":8,)"
      R"("num_hidden_layers":1,"num_attention_heads":2,"intermediate_size":8,)"
      R"("moe_intermediate_size":4,)";
  expect_config_error(moe + R"("num_experts":100000,"num_experts_per_tok":2})",
                      "num_experts must be between 1 and 4096");
  expect_config_error(moe + R"("num_experts":4,"num_experts_per_tok":5})",
                      "num_experts_per_tok exceeds num_experts");
}

// Every fixture and the bundled model pass the new checks.
TEST(ModelConfig, EveryFixtureLoads) {
  for (const std::string& dir : {test::shared_dir() + "/fixtures/tiny-qwen3-dense",
                                 test::shared_dir() + "/fixtures/tiny-qwen3-moe",
                                 test::shared_dir() + "/fixtures/tiny-qwen3_5-dense",
                                 test::shared_dir() + "/fixtures/tiny-qwen3_5-moe",
                                 test::shared_dir() + "/fixtures/tiny-qwen3_5-moe-w8a8-mxfp8",
                                 test::source_dir() + "/models/tiny-qwen3-moe"}) {
    auto c = load_model_config(dir);
    EXPECT_TRUE(c.is_ok()) << dir << ": " << c.status().to_string();
  }
}

TEST(ModelConfig, MissingDirectory) {
  auto c = load_model_config("/nonexistent/model");
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("/nonexistent/model"), std::string::npos);
}

TEST(QuantDescription, ParsesTypesAndGlobals) {
  auto d = parse_quant_description(R"({
    "version": "1.0.0", "model_quant_type": "W4A4_MXFP4", "group_size": 32,
    "metadata": {"x": 1},
    "model.layers.0.self_attn.q_proj.weight": "W8A8_MXFP8",
    "model.layers.0.self_attn.q_proj.weight_scale": "W8A8_MXFP8",
    "model.layers.0.mlp.gate.weight": "FLOAT",
    "model.layers.1.mlp.experts.0.up_proj.weight": "W4A4_MXFP4_DUALSCALE",
    "model.layers.1.mlp.experts.0.down_proj.weight": "W4A8_MXFP",
    "model.layers.1.mlp.experts.1.down_proj.weight": "W4A4_MXFP4",
    "model.layers.2.mlp.down_proj.weight": "W8A8_DYNAMIC"})",
                                   "q.json");
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(d->version, "1.0.0");
  EXPECT_EQ(d->model_quant_type, "W4A4_MXFP4");
  EXPECT_EQ(d->group_size, 32);
  EXPECT_EQ(d->type_of("model.layers.0.self_attn.q_proj.weight"), QuantType::kW8A8Mxfp8);
  EXPECT_EQ(d->type_of("model.layers.0.mlp.gate.weight"), QuantType::kFloat);
  EXPECT_EQ(d->type_of("model.layers.1.mlp.experts.0.up_proj.weight"),
            QuantType::kW4A4Mxfp4DualScale);
  EXPECT_EQ(d->type_of("model.layers.1.mlp.experts.0.down_proj.weight"), QuantType::kW4A8Mxfp);
  EXPECT_EQ(d->type_of("model.layers.1.mlp.experts.1.down_proj.weight"), QuantType::kW4A4Mxfp4);
  EXPECT_EQ(d->type_of("model.layers.2.mlp.down_proj.weight"), QuantType::kUnsupported);
  EXPECT_EQ(d->raw_types.at("model.layers.2.mlp.down_proj.weight"), "W8A8_DYNAMIC");
  EXPECT_FALSE(d->type_of("nope").has_value());
  auto bad = parse_quant_description(R"({"a.weight": 3})", "q.json");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("a.weight"), std::string::npos);
  EXPECT_FALSE(parse_quant_description(R"({"group_size": "32"})", "q.json").is_ok());
}

// The fixture README states the checkpoint holds exactly 7,844,608 parameters.
TEST(Inventory, BundledModelParameterCount) {
  auto inv = inspect_model_dir(test::source_dir() + "/models/tiny-qwen3-moe");
  ASSERT_TRUE(inv.is_ok()) << inv.status().to_string();
  EXPECT_EQ(inv->parameters, 7844608);
  EXPECT_EQ(inv->bytes_by_dtype.at("BF16"), 2u * 7844608u);
  EXPECT_FALSE(inv->quant.has_value());
}

}  // namespace
}  // namespace mx

// The checkpoint-format registry: each fixture is claimed by its format, and the stop tokens
// and layouts it gives equal what the fixture's own files say, read here without the loader.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "loader/checkpoint_format.h"
#include "loader/model_text.h"
#include "test_util.h"

namespace mx {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) { return test::shared_dir() + "/fixtures/" + name; }

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, false);
}

void add_ids(const nlohmann::json& v, std::set<int32_t>* out) {
  if (v.is_number_integer()) out->insert(v.get<int32_t>());
  if (v.is_array()) {
    for (const auto& e : v) out->insert(e.get<int32_t>());
  }
}

int32_t added_token_id(const std::string& dir, const std::string& content) {
  const nlohmann::json tok = read_json(dir + "/tokenizer.json");
  for (const auto& t : tok["added_tokens"]) {
    if (t["content"] == content) return t["id"].get<int32_t>();
  }
  ADD_FAILURE() << dir << ": no added token " << content;
  return -1;
}

// What a Hugging Face directory names as its end tokens: eos_token_id of config.json (or its
// text_config) and of generation_config.json, with the ChatML end of turn its template writes.
std::set<int32_t> directory_stops(const std::string& dir) {
  std::set<int32_t> ids;
  const nlohmann::json config = read_json(dir + "/config.json");
  if (config.contains("eos_token_id")) add_ids(config["eos_token_id"], &ids);
  if (config.contains("text_config"))
    add_ids(config["text_config"].value("eos_token_id", -1), &ids);
  ids.erase(-1);
  const nlohmann::json gen = read_json(dir + "/generation_config.json");
  if (gen.is_object() && gen.contains("eos_token_id")) add_ids(gen["eos_token_id"], &ids);
  const nlohmann::json tc = read_json(dir + "/tokenizer_config.json");
  EXPECT_NE(tc["chat_template"].get<std::string>().find("<|im_end|>"), std::string::npos);
  ids.insert(added_token_id(dir, "<|im_end|>"));
  return ids;
}

// A reader of GGUF's key-value section, only as far as this test needs (GGUF v3: little-endian,
// 64-bit counts and string lengths).
struct GgufKv {
  std::map<std::string, int64_t> ints;
  std::vector<std::string> tokens;
  std::vector<int64_t> token_types;
};

class GgufReader {
 public:
  explicit GgufReader(const std::string& path) : in_(path, std::ios::binary) {}

  GgufKv read() {
    GgufKv kv;
    EXPECT_EQ(bytes(4), "GGUF");
    num<uint32_t>();  // version
    num<uint64_t>();  // tensor count
    const uint64_t n = num<uint64_t>();
    for (uint64_t i = 0; i < n && in_; ++i) {
      const std::string key = str();
      const uint32_t type = num<uint32_t>();
      if (type == kArray) {
        const uint32_t elem = num<uint32_t>();
        const uint64_t count = num<uint64_t>();
        for (uint64_t j = 0; j < count; ++j) {
          if (elem == kString) {
            std::string s = str();
            if (key == "tokenizer.ggml.tokens") kv.tokens.push_back(std::move(s));
          } else {
            const int64_t v = scalar(elem);
            if (key == "tokenizer.ggml.token_type") kv.token_types.push_back(v);
          }
        }
      } else if (type == kString) {
        str();
      } else {
        kv.ints[key] = scalar(type);
      }
    }
    return kv;
  }

 private:
  static constexpr uint32_t kString = 8, kArray = 9;

  std::string bytes(size_t n) {
    std::string s(n, '\0');
    in_.read(s.data(), static_cast<std::streamsize>(n));
    return s;
  }
  template <typename T>
  T num() {
    T v{};
    in_.read(reinterpret_cast<char*>(&v), sizeof v);
    return v;
  }
  std::string str() { return bytes(num<uint64_t>()); }
  // Integers as their value; floats and bools are read past (their values are unused here).
  int64_t scalar(uint32_t type) {
    switch (type) {
      case 0:
        return num<uint8_t>();
      case 1:
        return num<int8_t>();
      case 2:
        return num<uint16_t>();
      case 3:
        return num<int16_t>();
      case 4:
        return num<uint32_t>();
      case 5:
        return num<int32_t>();
      case 10:
        return static_cast<int64_t>(num<uint64_t>());
      case 11:
        return num<int64_t>();
      case 6:
        bytes(4);
        return 0;
      case 7:
        bytes(1);
        return 0;
      case 12:
        bytes(8);
        return 0;
    }
    ADD_FAILURE() << "GGUF value type " << type;
    in_.setstate(std::ios::failbit);
    return 0;
  }
  std::ifstream in_;
};

// llama.cpp's end of generation: the eos/eot/eom ids and the control tokens (type 3) it knows
// by name (llama-vocab.cpp).
std::set<int32_t> gguf_stops(const std::string& path) {
  const GgufKv kv = GgufReader(path).read();
  std::set<int32_t> ids;
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    if (auto it = kv.ints.find(key); it != kv.ints.end())
      ids.insert(static_cast<int32_t>(it->second));
  }
  const std::set<std::string> names = {"<|eot_id|>",    "<|im_end|>",    "<|end|>",
                                       "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
                                       "<EOT>",         "_<EOT>",        "<|end_of_text|>"};
  EXPECT_EQ(kv.tokens.size(), kv.token_types.size());
  for (size_t i = 0; i < kv.tokens.size() && i < kv.token_types.size(); ++i) {
    if (names.count(kv.tokens[i]) != 0 && kv.token_types[i] == 3)
      ids.insert(static_cast<int32_t>(i));
  }
  return ids;
}

std::set<int32_t> stops_of(const std::string& path) {
  auto tok = load_model_tokenizer(path);
  EXPECT_TRUE(tok.is_ok()) << tok.status().to_string();
  if (!tok.is_ok()) return {};
  auto tmpl = load_model_chat_template(path);
  EXPECT_TRUE(tmpl.is_ok()) << tmpl.status().to_string();
  auto ids = checkpoint_stop_token_ids(path, **tok, tmpl.is_ok() ? &*tmpl : nullptr);
  EXPECT_TRUE(ids.is_ok()) << ids.status().to_string();
  if (!ids.is_ok()) return {};
  EXPECT_TRUE(std::is_sorted(ids->begin(), ids->end()));
  return {ids->begin(), ids->end()};
}

std::string format_of(const std::string& path) {
  auto f = find_checkpoint_format(path);
  EXPECT_TRUE(f.is_ok()) << path << ": " << f.status().to_string();
  return f.is_ok() ? std::string((*f)->name) : "";
}

TEST(CheckpointFormat, EachFixtureIsItsFormatAndOpensAsIt) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {fixture("tiny-qwen3-dense"), "safetensors"},
      {fixture("tiny-qwen3_5-moe"), "safetensors"},
      {fixture("tiny-qwen3_5-moe-w8a8-mxfp8"), "msmodelslim"},
      {fixture("tiny-qwen3_5-moe-vl-w8a8-mxfp8"), "msmodelslim"},
      {fixture("gguf/tiny-qwen3-dense.Q4_0.gguf"), "gguf"},
      {fixture("gguf/tiny-qwen3_5-moe.Q4_K_M.gguf"), "gguf"},
  };
  for (const auto& [path, name] : cases) {
    EXPECT_EQ(format_of(path), name) << path;
    auto ck = open_checkpoint(path);
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    EXPECT_EQ(ck->weights->kind(), name) << path;
    EXPECT_GT(ck->config.num_layers, 0) << path;
  }
}

TEST(CheckpointFormat, WhatIsNoCheckpointIsNamed) {
  auto missing = find_checkpoint_format(fixture("no-such-model"));
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("does not exist"), std::string::npos);
  // A file that is not GGUF is not taken for one, and the reason says so.
  auto json = find_checkpoint_format(fixture("tiny-qwen3-dense/config.json"));
  ASSERT_FALSE(json.is_ok());
  EXPECT_NE(json.status().message().find("magic"), std::string::npos);
  // Its tokenizer still loads from a tokenizer.json named directly.
  auto tok = load_model_tokenizer(fixture("tiny-qwen3-dense/tokenizer.json"));
  EXPECT_TRUE(tok.is_ok()) << tok.status().to_string();
}

TEST(CheckpointFormat, DirectoryStopsAreTheFilesEosIdsAndTheEndOfTurn) {
  for (const char* name :
       {"tiny-qwen3-dense", "tiny-qwen3-moe", "tiny-qwen3_5-moe", "tiny-qwen3_5-moe-w8a8-mxfp8"}) {
    const std::string dir = fixture(name);
    const std::set<int32_t> want = directory_stops(dir);
    EXPECT_FALSE(want.empty());
    EXPECT_EQ(stops_of(dir), want) << name;
  }
}

TEST(CheckpointFormat, GgufStopsAreLlamaCppsEndOfGeneration) {
  for (const char* name : {"tiny-qwen3-dense.Q4_0.gguf", "tiny-qwen3-moe-allmoe.Q8_0.gguf",
                           "tiny-qwen3_5-moe.Q4_K_M.gguf"}) {
    const std::string path = fixture(std::string("gguf/") + name);
    const std::set<int32_t> want = gguf_stops(path);
    EXPECT_FALSE(want.empty());
    EXPECT_EQ(stops_of(path), want) << name;
  }
}

// The names of every tensor a directory's safetensors files hold, read from their headers (an
// 8-byte little-endian length, then JSON).
std::set<std::string> safetensors_names(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    std::ifstream in(e.path(), std::ios::binary);
    uint64_t n = 0;
    in.read(reinterpret_cast<char*>(&n), sizeof n);
    std::string header(n, '\0');
    in.read(header.data(), static_cast<std::streamsize>(n));
    const nlohmann::json h = nlohmann::json::parse(header, nullptr, false);
    EXPECT_TRUE(h.is_object()) << e.path();
    if (!h.is_object()) continue;
    for (const auto& [name, v] : h.items()) {
      if (name != "__metadata__") names.insert(name);
    }
  }
  return names;
}

TEST(CheckpointFormat, EveryFormatLaysOutEverySupportedArchitectureOnce) {
  for (const CheckpointFormat& f : checkpoint_formats()) {
    for (const ArchInfo& a : supported_archs()) {
      const auto n = std::count_if(f.layouts.begin(), f.layouts.end(),
                                   [&](const ArchLayout& l) { return l.arch == a.arch; });
      EXPECT_EQ(n, 1) << f.name << " " << a.hf_class;
    }
    EXPECT_EQ(f.layouts.size(), supported_archs().size()) << f.name;
  }
}

// Where a Hugging Face fixture keeps its language model's fields and tensors is where its
// layout row says.
TEST(CheckpointFormat, HuggingFaceLayoutsMatchTheFixturesFiles) {
  for (const char* name :
       {"tiny-qwen3-dense", "tiny-qwen3-moe", "tiny-qwen3_5-dense", "tiny-qwen3_5-moe"}) {
    const std::string dir = fixture(name);
    const nlohmann::json config = read_json(dir + "/config.json");
    const std::string hf_class = config["architectures"][0].get<std::string>();
    const auto arch = std::find_if(supported_archs().begin(), supported_archs().end(),
                                   [&](const ArchInfo& a) { return a.hf_class == hf_class; });
    ASSERT_NE(arch, supported_archs().end()) << hf_class;
    const ArchLayout& layout = checkpoint_arch_layout("safetensors", arch->arch);
    const nlohmann::json& fields =
        layout.config_object.empty() ? config : config[std::string(layout.config_object)];
    EXPECT_TRUE(fields.is_object() && fields.contains("num_hidden_layers")) << name;
    const std::set<std::string> names = safetensors_names(dir);
    EXPECT_EQ(names.count(std::string(layout.weight_prefix) + "embed_tokens.weight"), 1u) << name;
    // The decoder's tensors; the multi-token-prediction block sits apart under mtp.
    for (const std::string& n : names) {
      if (n.starts_with("model.")) {
        EXPECT_TRUE(n.starts_with(layout.weight_prefix)) << name << ": " << n;
      }
    }
  }
}

// Every format agrees on a fixture and its GGUF conversion: the commands stop alike on both.
TEST(CheckpointFormat, AConversionKeepsItsStops) {
  EXPECT_EQ(stops_of(fixture("tiny-qwen3-dense")),
            stops_of(fixture("gguf/tiny-qwen3-dense.BF16.gguf")));
}

// A base model's metadata may name only <|endoftext|>; the template's end of turn still stops.
TEST(CheckpointFormat, TheTemplatesEndOfTurnFillsWhatMetadataLacks) {
  const std::string src = fixture("tiny-qwen3-dense");
  const std::string dir = test::temp_dir("ckfmt_base");
  fs::create_directories(dir);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(src + "/" + f, dir + "/" + f, fs::copy_options::overwrite_existing);
  }
  const int32_t eot = added_token_id(src, "<|endoftext|>");
  const int32_t im_end = added_token_id(src, "<|im_end|>");
  nlohmann::json config = read_json(src + "/config.json");
  config["eos_token_id"] = eot;
  std::ofstream(dir + "/config.json") << config.dump();
  fs::remove(dir + "/generation_config.json");

  auto tok = load_model_tokenizer(dir);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  auto no_template = checkpoint_stop_token_ids(dir, **tok, nullptr);
  ASSERT_TRUE(no_template.is_ok()) << no_template.status().to_string();
  EXPECT_EQ(*no_template, std::vector<int32_t>{eot});
  auto tmpl = load_model_chat_template(dir);
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().to_string();
  EXPECT_EQ(template_end_of_turn_token(*tmpl, **tok), std::optional<int32_t>(im_end));
  auto with_template = checkpoint_stop_token_ids(dir, **tok, &*tmpl);
  ASSERT_TRUE(with_template.is_ok()) << with_template.status().to_string();
  EXPECT_EQ(std::set<int32_t>(with_template->begin(), with_template->end()),
            (std::set<int32_t>{eot, im_end}));

  std::ofstream(dir + "/generation_config.json") << R"({"eos_token_id": "none"})";
  auto bad = checkpoint_stop_token_ids(dir, **tok, nullptr);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("generation_config.json"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mx

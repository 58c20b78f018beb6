#include "loader/gguf_tokenizer.h"

#include <unordered_map>
#include <utility>
#include <vector>

#include "core/json_util.h"

namespace mx {

namespace {

// llama.cpp's llama_token_type values as gguf-py writes them.
enum TokenType : int64_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// What HF's Qwen2 tokenizer.json holds besides the vocabulary: the pre-tokenizer regex that
// llama.cpp's "qwen2" pre-tokenizer stands for, NFC, and byte-level without a prefix space.
constexpr const char* kQwen2Regex =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|)re"
    R"re( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

Json byte_level() {
  return Json{{"type", "ByteLevel"},
              {"add_prefix_space", false},
              {"trim_offsets", false},
              {"use_regex", false}};
}

Json qwen2_pre_tokenizer() {
  const Json split = {{"type", "Split"},
                      {"pattern", {{"Regex", kQwen2Regex}}},
                      {"behavior", "Isolated"},
                      {"invert", false}};
  return Json{{"type", "Sequence"}, {"pretokenizers", Json::array({split, byte_level()})}};
}

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

Status check_supported(const GgufFile& f) {
  const std::string& path = f.path();
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model.is_ok()) return model.status();
  if (*model != "gpt2") {
    return unimplemented(path + ": tokenizer.ggml.model " + in_quotes(*model) +
                         " is not supported (supported: gpt2 with tokenizer.ggml.pre qwen2)");
  }
  if (f.find("tokenizer.ggml.pre") == nullptr) {
    return unimplemented(path + ": tokenizer.ggml.pre is absent (supported: qwen2)");
  }
  MX_ASSIGN_OR_RETURN(std::string pre, f.get_string("tokenizer.ggml.pre"));
  if (pre != "qwen2") {
    return unimplemented(path + ": tokenizer.ggml.pre " + in_quotes(pre) +
                         " is not supported (supported: qwen2)");
  }
  return Status::ok();
}

// A string array whose every element is valid UTF-8 (the JSON text must be).
Result<std::vector<std::string>> read_strings(const GgufFile& f, const std::string& key) {
  auto arr = f.get_array(key, GgufValueType::kString);
  if (!arr.is_ok()) return arr.status();
  std::vector<std::string> out;
  out.reserve((*arr)->array.size());
  for (const GgufValue& v : (*arr)->array) {
    if (repair_utf8(v.str) != v.str) {
      return invalid_argument(f.path() + ": " + key + "[" + std::to_string(out.size()) +
                              "] is not valid UTF-8");
    }
    out.push_back(v.str);
  }
  return out;
}

Result<std::vector<int64_t>> read_token_types(const GgufFile& f, size_t n_tokens) {
  const std::string key = "tokenizer.ggml.token_type";
  auto arr = f.get_array(key, GgufValueType::kI32);
  if (!arr.is_ok()) return arr.status();
  const auto& a = (*arr)->array;
  if (a.size() != n_tokens) {
    return invalid_argument(f.path() + ": " + key + " has " + std::to_string(a.size()) +
                            " entries but tokenizer.ggml.tokens has " + std::to_string(n_tokens));
  }
  std::vector<int64_t> out;
  out.reserve(a.size());
  for (const GgufValue& v : a) {
    if (v.i < kNormal || v.i > kByte) {
      return invalid_argument(f.path() + ": " + key + "[" + std::to_string(out.size()) + "] is " +
                              std::to_string(v.i) + ", not a token type (1..6)");
    }
    out.push_back(v.i);
  }
  return out;
}

Result<std::optional<int32_t>> special_id(const GgufFile& f, const std::string& name,
                                          size_t n_tokens) {
  const std::string key = "tokenizer.ggml." + name;
  if (f.find(key) == nullptr) return std::optional<int32_t>();
  auto v = f.get_int(key);
  if (!v.is_ok()) return v.status();
  if (*v < 0 || static_cast<uint64_t>(*v) >= n_tokens) {
    return invalid_argument(f.path() + ": " + key + " " + std::to_string(*v) +
                            " is outside tokenizer.ggml.tokens (" + std::to_string(n_tokens) +
                            " entries)");
  }
  return std::optional<int32_t>(static_cast<int32_t>(*v));
}

// model.vocab and added_tokens from the tokens and their types.
Status add_tokens(const GgufFile& f, const std::vector<std::string>& tokens,
                  const std::vector<int64_t>& types, Json* vocab, Json* added) {
  std::unordered_map<std::string, size_t> seen;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string& t = tokens[id];
    if (types[id] == kUnused) continue;
    auto [it, fresh] = seen.emplace(t, id);
    if (!fresh) {
      return invalid_argument(f.path() + ": tokenizer.ggml.tokens[" + std::to_string(id) + "] " +
                              in_quotes(t) + " repeats token " + std::to_string(it->second));
    }
    if (types[id] == kControl || types[id] == kUserDefined) {
      added->push_back({{"id", id},
                        {"content", t},
                        {"single_word", false},
                        {"lstrip", false},
                        {"rstrip", false},
                        {"normalized", false},
                        {"special", types[id] == kControl}});
    } else {
      (*vocab)[t] = id;
    }
  }
  return Status::ok();
}

// model.merges as [a, b] pairs; HF refuses a merge whose parts or result are not in the
// vocabulary (MergeTokenOutOfVocabulary), and so does this.
Result<Json> build_merges(const GgufFile& f, const Json& vocab) {
  MX_ASSIGN_OR_RETURN(std::vector<std::string> merges, read_strings(f, "tokenizer.ggml.merges"));
  Json out = Json::array();
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    const std::string where =
        f.path() + ": tokenizer.ggml.merges[" + std::to_string(i) + "] " + in_quotes(m);
    // As llama.cpp splits: at the first space after the first byte.
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) return invalid_argument(where + " is not 'a b'");
    std::string a = m.substr(0, sp), b = m.substr(sp + 1);
    for (const std::string& part : {a, b, a + b}) {
      if (!vocab.contains(part)) {
        return invalid_argument(where + ": " + in_quotes(part) + " is not in the vocabulary");
      }
    }
    out.push_back(Json::array({std::move(a), std::move(b)}));
  }
  return out;
}

Result<Json> build_tokenizer_json(const GgufFile& f) {
  MX_RETURN_IF_ERROR(check_supported(f));
  MX_ASSIGN_OR_RETURN(std::vector<std::string> tokens, read_strings(f, "tokenizer.ggml.tokens"));
  MX_ASSIGN_OR_RETURN(std::vector<int64_t> types, read_token_types(f, tokens.size()));
  MX_ASSIGN_OR_RETURN(GgufSpecialTokens specials, gguf_special_tokens(f));
  (void)specials;  // validated only: tokenizer.json has no bos/eos fields
  Json vocab = Json::object(), added = Json::array();
  MX_RETURN_IF_ERROR(add_tokens(f, tokens, types, &vocab, &added));
  MX_ASSIGN_OR_RETURN(Json merges, build_merges(f, vocab));
  Json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", std::move(vocab)},
                {"merges", std::move(merges)}};
  return Json{{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", std::move(added)},
              {"normalizer", {{"type", "NFC"}}},
              {"pre_tokenizer", qwen2_pre_tokenizer()},
              {"post_processor", byte_level()},
              {"decoder", byte_level()},
              {"model", std::move(model)}};
}

}  // namespace

Result<GgufSpecialTokens> gguf_special_tokens(const GgufFile& f) {
  auto tokens = f.get_array("tokenizer.ggml.tokens", GgufValueType::kString);
  if (!tokens.is_ok()) return tokens.status();
  const size_t n = (*tokens)->array.size();
  GgufSpecialTokens s;
  MX_ASSIGN_OR_RETURN(s.bos, special_id(f, "bos_token_id", n));
  MX_ASSIGN_OR_RETURN(s.eos, special_id(f, "eos_token_id", n));
  MX_ASSIGN_OR_RETURN(s.pad, special_id(f, "padding_token_id", n));
  if (f.find("tokenizer.ggml.add_bos_token") != nullptr) {
    auto b = f.get_bool("tokenizer.ggml.add_bos_token");
    if (!b.is_ok()) return b.status();
    s.add_bos = *b;
  }
  return s;
}

Result<std::string> gguf_tokenizer_json(const GgufFile& f) {
  MX_ASSIGN_OR_RETURN(Json j, build_tokenizer_json(f));
  // Every string was checked to be UTF-8, so the replace handler never acts; it only keeps
  // dump() from throwing.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<std::shared_ptr<const Tokenizer>> tokenizer_from_gguf(const GgufFile& f) {
  MX_ASSIGN_OR_RETURN(std::string text, gguf_tokenizer_json(f));
  return Tokenizer::from_json(text, f.path() + " (tokenizer.ggml.*)");
}

std::optional<std::string> chat_template_from_gguf(const GgufFile& f) {
  auto t = f.get_string("tokenizer.chat_template");
  if (!t.is_ok()) return std::nullopt;
  return *t;
}

std::string describe_gguf_tokenizer(const GgufFile& f) {
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model.is_ok()) return "none (no tokenizer.ggml.model)";
  auto pre = f.get_string("tokenizer.ggml.pre");
  std::string out = *model + " (pre " + (pre.is_ok() ? *pre : std::string("absent")) + ")";
  auto tokens = f.get_array("tokenizer.ggml.tokens", GgufValueType::kString);
  auto merges = f.get_array("tokenizer.ggml.merges", GgufValueType::kString);
  out += ", " + (tokens.is_ok() ? std::to_string((*tokens)->array.size()) : "no") + " tokens";
  out += ", " + (merges.is_ok() ? std::to_string((*merges)->array.size()) : "no") + " merges";
  auto specials = gguf_special_tokens(f);
  if (specials.is_ok()) {
    auto id = [](const std::optional<int32_t>& v) { return v ? std::to_string(*v) : "none"; };
    out += ", bos " + id(specials->bos) + ", eos " + id(specials->eos) + ", pad " +
           id(specials->pad) + ", add_bos_token " + (specials->add_bos ? "true" : "false");
  } else {
    out += ", special tokens invalid";
  }
  const auto tmpl = chat_template_from_gguf(f);
  out +=
      tmpl ? ", chat template (" + std::to_string(tmpl->size()) + " chars)" : ", no chat template";
  if (!check_supported(f).is_ok()) out += " [unsupported]";
  return out;
}

}  // namespace mx

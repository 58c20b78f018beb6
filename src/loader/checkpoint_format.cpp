#include "loader/checkpoint_format.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <utility>

#include "core/check.h"
#include "core/json_util.h"
#include "loader/gguf.h"
#include "loader/gguf_source.h"
#include "loader/gguf_tokenizer.h"
#include "loader/model_inventory.h"
#include "loader/quant_description.h"

namespace mx {

namespace fs = std::filesystem;

namespace {

bool is_directory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

bool is_msmodelslim_dir(const std::string& path) {
  return is_directory(path) && has_quant_description(path);
}

// ---- gguf ----

Result<Checkpoint> open_gguf(const std::string& path) {
  MX_ASSIGN_OR_RETURN(GgufCheckpoint g, open_gguf_source(path));
  Checkpoint ck;
  ck.config = std::move(g.config);
  ck.weights = std::move(g.weights);
  return ck;
}

Result<std::shared_ptr<const Tokenizer>> gguf_tokenizer(const std::string& path) {
  MX_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(path));
  return tokenizer_from_gguf(f);
}

Result<ChatTemplate> gguf_chat_template(const std::string& path) {
  MX_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(path));
  std::optional<std::string> src = chat_template_from_gguf(f);
  if (!src) return not_found(path + ": no tokenizer.chat_template");
  return ChatTemplate::parse(*src);
}

// llama.cpp ends generation on these control tokens by name as well as on the ids the
// metadata gives (llama-vocab.cpp), and converted files rely on it: Qwen's name <|im_end|> as
// eos and leave <|endoftext|> to this list.
constexpr std::string_view kLlamaCppEndNames[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",   "<|endoftext|>",
    "<|eom_id|>", "<EOT>",      "_<EOT>",  "<|end_of_text|>",
};

Result<std::vector<int32_t>> gguf_end_token_ids(const std::string& path, const Tokenizer& tok) {
  MX_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(path));
  std::vector<int32_t> ids;
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    if (f.find(key) == nullptr) continue;
    MX_ASSIGN_OR_RETURN(int64_t id, f.get_int(key));
    if (id < 0 || id >= tok.vocab_size()) {
      return invalid_argument(path + ": " + key + " " + std::to_string(id) +
                              " is outside the vocabulary of " + std::to_string(tok.vocab_size()) +
                              " tokens");
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  for (std::string_view name : kLlamaCppEndNames) {
    if (auto id = tok.token_id(name); id && tok.is_special(*id)) ids.push_back(*id);
  }
  return ids;
}

// ---- Hugging Face directories (safetensors, msmodelslim) ----

Result<Checkpoint> open_safetensors(const std::string& path) {
  Checkpoint ck;
  MX_ASSIGN_OR_RETURN(ck.config, load_model_config(path));
  MX_ASSIGN_OR_RETURN(ck.weights, open_safetensors_source(path));
  return ck;
}

Result<Checkpoint> open_msmodelslim(const std::string& path) {
  Checkpoint ck;
  MX_ASSIGN_OR_RETURN(ck.config, load_model_config(path));
  MX_ASSIGN_OR_RETURN(ck.weights, open_msmodelslim_source(path));
  return ck;
}

Result<std::shared_ptr<const Tokenizer>> directory_tokenizer(const std::string& path) {
  return Tokenizer::load(path);
}

Result<ChatTemplate> directory_chat_template(const std::string& path) {
  return ChatTemplate::load(path);
}

// eos_token_id as transformers reads it: an id, a list of ids (every one ends generation), or
// null.
Status append_eos_ids(const Json& obj, const std::string& what, std::vector<int32_t>* ids) {
  auto e = obj.find("eos_token_id");
  if (e == obj.end() || e->is_null()) return Status::ok();
  const std::vector<Json> values =
      e->is_array() ? std::vector<Json>(e->begin(), e->end()) : std::vector<Json>{*e};
  for (const Json& v : values) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
        v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return invalid_argument(what + ": field 'eos_token_id' must be a token id or a list of " +
                              "them, got " + e->dump());
    }
    ids->push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return Status::ok();
}

Result<Json> read_json_object(const std::string& path) {
  MX_ASSIGN_OR_RETURN(Json j, read_json_file(path));
  if (!j.is_object()) return invalid_argument(path + ": not a JSON object");
  return j;
}

// config.json (Qwen3.5 keeps its language model's ids in text_config) and, where present,
// generation_config.json, which is what transformers' generate() stops on.
Result<std::vector<int32_t>> directory_end_token_ids(const std::string& path, const Tokenizer&) {
  std::vector<int32_t> ids;
  const std::string config_path = (fs::path(path) / "config.json").string();
  MX_ASSIGN_OR_RETURN(Json config, read_json_object(config_path));
  MX_RETURN_IF_ERROR(append_eos_ids(config, config_path, &ids));
  if (auto t = config.find("text_config"); t != config.end() && t->is_object()) {
    MX_RETURN_IF_ERROR(append_eos_ids(*t, config_path + " (text_config)", &ids));
  }
  const std::string gen_path = (fs::path(path) / "generation_config.json").string();
  std::error_code ec;
  if (fs::exists(gen_path, ec)) {
    MX_ASSIGN_OR_RETURN(Json gen, read_json_object(gen_path));
    MX_RETURN_IF_ERROR(append_eos_ids(gen, gen_path, &ids));
  }
  return ids;
}

// ---- layouts ----

// {arch, config_object, weight_prefix, deltanet_fused_qkvz, deltanet_fused_ba, v_heads_tiled}

// Hugging Face's own layouts; msmodelslim keeps them.
constexpr ArchLayout kHfLayouts[] = {
    {Arch::kQwen3, "", "model.", false, false, false},
    {Arch::kQwen3Moe, "", "model.", false, false, false},
    {Arch::kQwen3_5, "text_config", "model.language_model.", false, false, false},
    {Arch::kQwen3_5Moe, "text_config", "model.language_model.", false, false, false},
    {Arch::kQwen3Next, "", "model.", true, true, false},
};

// What llama.cpp's converter writes, under the names the GGUF source maps its tensors back to:
// Qwen3.5's value heads tiled, Qwen3-Next's b and a fused as Hugging Face stores them.
constexpr ArchLayout kGgufLayouts[] = {
    {Arch::kQwen3, "", "model.", false, false, false},
    {Arch::kQwen3Moe, "", "model.", false, false, false},
    {Arch::kQwen3_5, "", "model.", false, false, true},
    {Arch::kQwen3_5Moe, "", "model.", false, false, true},
    {Arch::kQwen3Next, "", "model.", false, true, false},
};

}  // namespace

const std::vector<CheckpointFormat>& checkpoint_formats() {
  // GGUF by content, not by name: split parts and renamed downloads keep the magic, and a
  // tokenizer.json given where a checkpoint may go is then no GGUF.
  static const std::vector<CheckpointFormat> kFormats = {
      {"gguf", GgufFile::looks_like_gguf, open_gguf, inspect_gguf_checkpoint, gguf_tokenizer,
       gguf_chat_template, gguf_end_token_ids, kGgufLayouts},
      {"msmodelslim", is_msmodelslim_dir, open_msmodelslim, inspect_msmodelslim_checkpoint,
       directory_tokenizer, directory_chat_template, directory_end_token_ids, kHfLayouts},
      {"safetensors", is_directory, open_safetensors, inspect_safetensors_checkpoint,
       directory_tokenizer, directory_chat_template, directory_end_token_ids, kHfLayouts},
  };
  return kFormats;
}

Result<const CheckpointFormat*> find_checkpoint_format(const std::string& path) {
  for (const CheckpointFormat& f : checkpoint_formats()) {
    if (f.detect(path)) return &f;
  }
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return not_found(path + ": does not exist (a checkpoint is a model directory or a GGUF file)");
  }
  return invalid_argument(path +
                          ": not a model directory, and not a GGUF file (bad magic: it does not "
                          "begin with 'GGUF')");
}

const ArchLayout& checkpoint_arch_layout(std::string_view format, Arch arch) {
  const ArchLayout* found = nullptr;
  for (const CheckpointFormat& f : checkpoint_formats()) {
    if (f.name != format) continue;
    for (const ArchLayout& l : f.layouts) {
      if (l.arch == arch) found = &l;
    }
  }
  MX_CHECK_MSG(found != nullptr, "the checkpoint-format registry lacks a layout");
  return *found;
}

Result<Checkpoint> open_checkpoint(const std::string& path) {
  MX_ASSIGN_OR_RETURN(const CheckpointFormat* format, find_checkpoint_format(path));
  return format->open(path);
}

std::optional<int32_t> template_end_of_turn_token(const ChatTemplate& tmpl, const Tokenizer& tok) {
  // A user message, which no template rewrites, holding a word no special token contains.
  const std::string mark = "end-of-turn-probe";
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "user"}, {"content", mark}});
  auto text = tmpl.apply(messages, /*add_generation_prompt=*/false);
  if (!text.is_ok()) return std::nullopt;
  const size_t at = text->rfind(mark);
  if (at == std::string::npos) return std::nullopt;
  const std::string_view rest = std::string_view(*text).substr(at + mark.size());
  std::optional<int32_t> found;
  size_t found_size = 0;
  for (const AddedToken& t : tok.added_tokens()) {
    if (t.special && t.content.size() > found_size && rest.starts_with(t.content)) {
      found = t.id;
      found_size = t.content.size();
    }
  }
  return found;
}

Result<std::vector<int32_t>> checkpoint_stop_token_ids(const std::string& path,
                                                       const Tokenizer& tok,
                                                       const ChatTemplate* tmpl) {
  MX_ASSIGN_OR_RETURN(const CheckpointFormat* format, find_checkpoint_format(path));
  MX_ASSIGN_OR_RETURN(std::vector<int32_t> ids, format->end_token_ids(path, tok));
  if (tmpl != nullptr) {
    if (std::optional<int32_t> end = template_end_of_turn_token(*tmpl, tok)) ids.push_back(*end);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace mx

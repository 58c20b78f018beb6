#include "server/openai_fields.h"

#include <algorithm>
#include <cmath>
#include <string_view>

namespace mx {
namespace {

enum class Scope { kBoth, kChat, kCompletions };

struct Field {
  std::string_view name;
  Scope scope;
};

// What the server reads. Some are accepted and have no effect here (user, store, metadata,
// service_tier: bookkeeping for OpenAI's platform; the guided-decoding backend: there is one).
constexpr Field kSupported[] = {
    {"model", Scope::kBoth},
    {"max_tokens", Scope::kBoth},
    {"max_completion_tokens", Scope::kBoth},
    {"temperature", Scope::kBoth},
    {"top_p", Scope::kBoth},
    {"top_k", Scope::kBoth},
    {"min_p", Scope::kBoth},
    {"presence_penalty", Scope::kBoth},
    {"frequency_penalty", Scope::kBoth},
    {"repetition_penalty", Scope::kBoth},
    {"seed", Scope::kBoth},
    {"stop", Scope::kBoth},
    {"stop_token_ids", Scope::kBoth},
    {"ignore_eos", Scope::kBoth},
    {"min_tokens", Scope::kBoth},
    {"include_stop_str_in_output", Scope::kBoth},
    {"skip_special_tokens", Scope::kBoth},
    {"spaces_between_special_tokens", Scope::kBoth},
    {"logit_bias", Scope::kBoth},
    {"n", Scope::kBoth},
    {"best_of", Scope::kBoth},
    {"stream", Scope::kBoth},
    {"stream_options", Scope::kBoth},
    {"logprobs", Scope::kBoth},
    {"response_format", Scope::kBoth},
    {"guided_json", Scope::kBoth},
    {"guided_regex", Scope::kBoth},
    {"guided_choice", Scope::kBoth},
    {"guided_decoding_backend", Scope::kBoth},
    {"structured_outputs", Scope::kBoth},
    {"user", Scope::kBoth},
    {"store", Scope::kBoth},
    {"metadata", Scope::kBoth},
    {"service_tier", Scope::kBoth},
    {"request_id", Scope::kBoth},
    {"return_token_ids", Scope::kBoth},
    {"messages", Scope::kChat},
    {"top_logprobs", Scope::kChat},
    {"tools", Scope::kChat},
    {"tool_choice", Scope::kChat},
    {"parallel_tool_calls", Scope::kChat},
    {"chat_template_kwargs", Scope::kChat},
    {"add_generation_prompt", Scope::kChat},
    {"reasoning_effort", Scope::kChat},
    {"prompt", Scope::kCompletions},
    {"echo", Scope::kCompletions},
};

// Fields that change the output in ways this server does not implement: silently ignoring
// them would return something other than what was asked for.
constexpr std::string_view kUnsupported[] = {
    "suffix",
    "functions",
    "function_call",
    "prompt_logprobs",
    "guided_grammar",
    "guided_whitespace_pattern",
    "use_beam_search",
    "length_penalty",
    "audio",
    "modalities",
    "prediction",
    "web_search_options",
    "chat_template",
    "documents",
    "continue_final_message",
    "truncate_prompt_tokens",
    "allowed_token_ids",
    "bad_words",
    "logits_processors",
};

bool in_scope(Scope s, bool chat) { return s == Scope::kBoth || (s == Scope::kChat) == chat; }

// A value that asks for nothing: what a client sends for a field it does not use.
bool is_off(std::string_view name, const OJson& v) {
  if (v.is_null() || (v.is_boolean() && !v.get<bool>())) return true;
  return name == "length_penalty" && v.is_number() && v.get<double>() == 1.0;
}

HttpError field_error(const std::string& param, const std::string& message) {
  return {400, message, "invalid_request_error", param};
}

// A schema given as an object, or as a string holding one (vLLM takes both).
bool schema_of(const OJson& v, const std::string& param, OJson* out, HttpError* err) {
  if (v.is_string()) {
    *out = OJson::parse(v.get<std::string>(), nullptr, false);
    if (out->is_discarded()) {
      *err = field_error(param, "'" + param + "' is a string but not JSON");
      return false;
    }
  } else {
    *out = v;
  }
  if (!out->is_object() && !out->is_boolean()) {
    *err = field_error(param, "'" + param + "' must be a JSON schema object");
    return false;
  }
  return true;
}

bool compiled(Result<std::shared_ptr<const Grammar>> g, const std::string& param,
              std::shared_ptr<const Grammar>* out, HttpError* err) {
  if (!g.is_ok()) {
    *err = field_error(param, "'" + param + "': " + g.status().message());
    return false;
  }
  *out = std::move(*g);
  return true;
}

bool any_object(const std::string& param, std::shared_ptr<const Grammar>* out, HttpError* err) {
  return compiled(GrammarCache::shared().get("object", [] { return grammar_any_json_object(); }),
                  param, out, err);
}

bool choice_grammar(const OJson& v, const std::string& param, std::shared_ptr<const Grammar>* out,
                    HttpError* err) {
  std::vector<std::string> choices;
  if (v.is_array() && !v.empty()) {
    for (const OJson& c : v) {
      if (!c.is_string()) break;
      choices.push_back(c.get<std::string>());
    }
  }
  if (choices.empty() || choices.size() != v.size()) {
    *err = field_error(param, "'" + param + "' must be a non-empty list of strings");
    return false;
  }
  std::string key = "choice";
  for (const std::string& c : choices) key += '\0' + c;
  return compiled(GrammarCache::shared().get(key, [&] { return grammar_from_choices(choices); }),
                  param, out, err);
}

bool regex_grammar(const OJson& v, const std::string& param, std::shared_ptr<const Grammar>* out,
                   HttpError* err) {
  if (!v.is_string()) {
    *err = field_error(param, "'" + param + "' must be a string");
    return false;
  }
  const std::string& regex = v.get_ref<const std::string&>();
  return compiled(
      GrammarCache::shared().get("regex:" + regex, [&] { return grammar_from_regex(regex); }),
      param, out, err);
}

bool schema_grammar(const OJson& v, const std::string& param, std::shared_ptr<const Grammar>* out,
                    HttpError* err) {
  OJson schema;
  if (!schema_of(v, param, &schema, err)) return false;
  return compiled(GrammarCache::shared().get("json:" + schema.dump(),
                                             [&] { return grammar_from_json_schema(schema); }),
                  param, out, err);
}

bool response_format(const OJson& rf, std::shared_ptr<const Grammar>* out, HttpError* err) {
  const std::string param = "response_format";
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string()) {
    *err = field_error(param, "'response_format' must be an object with a string 'type'");
    return false;
  }
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return true;
  if (type == "json_object") return any_object(param, out, err);
  if (type != "json_schema") {
    *err = field_error(param,
                       "'response_format.type' must be text, json_object or json_schema, "
                       "got '" +
                           type + "'");
    return false;
  }
  auto js = rf.find("json_schema");
  if (js == rf.end() || !js->is_object() || !js->contains("schema")) {
    *err = field_error(param, "'response_format' of type json_schema needs 'json_schema.schema'");
    return false;
  }
  return schema_grammar((*js)["schema"], "response_format.json_schema.schema", out, err);
}

bool structured_outputs(const OJson& so, std::shared_ptr<const Grammar>* out, HttpError* err) {
  if (!so.is_object()) {
    *err = field_error("structured_outputs", "'structured_outputs' must be an object");
    return false;
  }
  int given = 0;
  for (auto it = so.begin(); it != so.end(); ++it) {
    if (it->is_null() || (it->is_boolean() && !it->get<bool>())) continue;
    const std::string key = it.key(), param = "structured_outputs." + key;
    bool ok = true;
    if (key == "json") {
      ok = schema_grammar(*it, param, out, err);
    } else if (key == "regex") {
      ok = regex_grammar(*it, param, out, err);
    } else if (key == "choice") {
      ok = choice_grammar(*it, param, out, err);
    } else if (key == "json_object") {
      ok = any_object(param, out, err);
    } else if (key == "disable_fallback" || key == "disable_any_whitespace" ||
               key == "disable_additional_properties" || key == "whitespace_pattern") {
      continue;
    } else {
      *err = field_error(param, "'" + param + "' is not supported");
      return false;
    }
    if (!ok) return false;
    ++given;
  }
  if (given > 1) {
    *err = field_error("structured_outputs",
                       "'structured_outputs' takes one of json, regex, "
                       "choice and json_object");
    return false;
  }
  return true;
}

}  // namespace

bool check_fields(const OJson& body, bool chat, std::vector<std::string>* ignored, HttpError* err) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& key = it.key();
    const auto known = std::find_if(std::begin(kSupported), std::end(kSupported),
                                    [&](const Field& f) { return f.name == key; });
    if (known != std::end(kSupported)) {
      if (in_scope(known->scope, chat) || is_off(key, *it)) continue;
      *err = field_error(key, "'" + key + "' is not supported on " +
                                  (chat ? "/v1/chat/completions" : "/v1/completions"));
      return false;
    }
    const auto refused = std::find(std::begin(kUnsupported), std::end(kUnsupported), key);
    if (refused != std::end(kUnsupported)) {
      if (is_off(key, *it)) continue;
      *err = field_error(key, "'" + key + "' is not supported by this server");
      return false;
    }
    ignored->push_back(key);
  }
  return true;
}

bool parse_logit_bias(const OJson& body, const ProtocolContext& ctx, SamplingParams* p,
                      HttpError* err) {
  auto lb = body.find("logit_bias");
  if (lb == body.end() || lb->is_null()) return true;
  if (!lb->is_object()) {
    *err = field_error("logit_bias", "'logit_bias' must be an object of token id to bias");
    return false;
  }
  for (auto it = lb->begin(); it != lb->end(); ++it) {
    const std::string& key = it.key();
    const bool digits =
        !key.empty() && key.size() <= 10 &&
        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    const int64_t id = digits ? std::stoll(key) : -1;
    if (id < 0 || id >= ctx.tok->vocab_size()) {
      *err = field_error("logit_bias", "'logit_bias' key '" + key +
                                           "' is not a token id of the vocabulary (0.." +
                                           std::to_string(ctx.tok->vocab_size() - 1) + ")");
      return false;
    }
    if (!it->is_number() || !(std::fabs(it->get<double>()) <= 100.0)) {
      *err = field_error("logit_bias", "'logit_bias' values must be numbers in [-100, 100], got " +
                                           it->dump() + " for token " + key);
      return false;
    }
    p->logit_bias.emplace_back(static_cast<int32_t>(id), it->get<float>());
  }
  return true;
}

bool parse_structured_output(const OJson& body, std::shared_ptr<const Grammar>* grammar,
                             HttpError* err) {
  int given = 0;
  for (const char* key :
       {"response_format", "guided_json", "guided_regex", "guided_choice", "structured_outputs"}) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) continue;
    std::shared_ptr<const Grammar> g;
    const std::string k = key;
    const bool ok = k == "response_format" ? response_format(*it, &g, err)
                    : k == "guided_json"   ? schema_grammar(*it, k, &g, err)
                    : k == "guided_regex"  ? regex_grammar(*it, k, &g, err)
                    : k == "guided_choice" ? choice_grammar(*it, k, &g, err)
                                           : structured_outputs(*it, &g, err);
    if (!ok) return false;
    if (!g) continue;
    if (++given > 1) {
      *err = field_error(k, "'" + k + "' cannot be combined with another structured output field");
      return false;
    }
    *grammar = std::move(g);
  }
  return true;
}

bool parse_tools(const OJson& body, ParsedRequest* out, HttpError* err) {
  if (auto t = body.find("tools"); t != body.end() && !t->is_null()) {
    if (!t->is_array()) {
      *err = field_error("tools", "'tools' must be a list");
      return false;
    }
    if (!t->empty()) out->tools = *t;
  }
  if (auto c = body.find("tool_choice"); c != body.end() && !c->is_null()) {
    if (!c->is_string() && !c->is_object()) {
      *err = field_error("tool_choice", "'tool_choice' must be a string or an object");
      return false;
    }
    out->tool_choice = *c;
  }
  if (auto ptc = body.find("parallel_tool_calls"); ptc != body.end() && !ptc->is_null()) {
    if (!ptc->is_boolean()) {
      *err = field_error("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
      return false;
    }
    out->parallel_tool_calls = ptc->get<bool>();
  }
  return true;
}

}  // namespace mx

// Requests with tools: validation of tools and tool_choice, the grammars that force a call,
// and the conversation as the chat templates expect it.
#include <algorithm>

#include "server/tool_parser.h"
#include "server/tool_parser_internal.h"

namespace mx {

using namespace tool_internal;

namespace {

// A name the tool-call forms can carry between their tags: no whitespace, no < or >.
bool writable_name(const std::string& name) {
  return !name.empty() && std::none_of(name.begin(), name.end(), [](char c) {
    return is_ws(c) || c == '<' || c == '>' || static_cast<unsigned char>(c) < 0x20;
  });
}

Status validate_tool(const OJson& tool, const std::string& at) {
  if (!tool.is_object()) return invalid_argument(at + ": must be an object");
  auto type = tool.find("type");
  if (type == tool.end() || !type->is_string() || *type != "function")
    return invalid_argument(at + ".type: must be \"function\"");
  auto fn = tool.find("function");
  if (fn == tool.end() || !fn->is_object())
    return invalid_argument(at + ".function: must be an object");
  auto name = fn->find("name");
  if (name == fn->end() || !name->is_string())
    return invalid_argument(at + ".function.name: must be a string");
  if (!writable_name(name->get<std::string>()))
    return invalid_argument(at + ".function.name: must be non-empty, without whitespace, < or >");
  auto params = fn->find("parameters");
  if (params == fn->end() || params->is_null()) return Status::ok();
  if (!params->is_object()) return invalid_argument(at + ".function.parameters: must be an object");
  auto props = params->find("properties");
  if (props != params->end() && !props->is_object())
    return invalid_argument(at + ".function.parameters.properties: must be an object");
  auto required = params->find("required");
  if (required != params->end()) {
    if (!required->is_array())
      return invalid_argument(at + ".function.parameters.required: must be a list of strings");
    for (const OJson& r : *required)
      if (!r.is_string())
        return invalid_argument(at + ".function.parameters.required: must be a list of strings");
  }
  return Status::ok();
}

const OJson* function_of(const OJson& tool) { return &tool["function"]; }

std::string function_name(const OJson& tool) {
  return (*function_of(tool))["name"].get<std::string>();
}

// The arguments schema the hermes form writes: the tool's parameters, or any object.
OJson arguments_schema(const OJson& tool) {
  const OJson& fn = *function_of(tool);
  auto p = fn.find("parameters");
  if (p == fn.end() || !p->is_object() || p->empty()) return {{"type", "object"}};
  return *p;
}

std::string escape_regex(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// A qwen3_coder value: strings are raw text (no "</", so that </parameter> cannot hide in
// one), other types the JSON of their schema, which coerce_value reads back.
GrammarPiece value_piece(const OJson* schema) {
  const ValueType t = value_type(schema);
  if (t.type != "string") {
    if (t.schema != nullptr) return GrammarPiece::json(*t.schema);
    return GrammarPiece::json(OJson{{"type", t.type}});
  }
  if (t.schema != nullptr && t.schema->contains("enum") && (*t.schema)["enum"].is_array()) {
    std::string alts;
    for (const OJson& e : (*t.schema)["enum"]) {
      if (!e.is_string()) continue;
      if (!alts.empty()) alts += '|';
      alts += escape_regex(e.get<std::string>());
    }
    if (!alts.empty()) return GrammarPiece::regex("(" + alts + ")");
  }
  return GrammarPiece::regex("([^<]|<[^/])*");
}

struct Param {
  std::string name;
  const OJson* schema = nullptr;
  bool required = false;
};

std::vector<Param> params_of(const OJson& tool) {
  std::vector<Param> out;
  const OJson& fn = *function_of(tool);
  auto p = fn.find("parameters");
  if (p == fn.end() || !p->is_object()) return out;
  std::vector<std::string> required;
  if (p->contains("required"))
    for (const OJson& r : (*p)["required"]) required.push_back(r.get<std::string>());
  auto is_required = [&](const std::string& n) {
    return std::find(required.begin(), required.end(), n) != required.end();
  };
  if (p->contains("properties"))
    for (const auto& [name, schema] : (*p)["properties"].items())
      out.push_back({name, &schema, is_required(name)});
  // Required but not described: written as strings, after the described ones.
  for (const std::string& r : required)
    if (std::none_of(out.begin(), out.end(), [&](const Param& q) { return q.name == r; }))
      out.push_back({r, nullptr, true});
  return out;
}

void coder_sequences(const OJson& tool, std::vector<GrammarSequence>* out) {
  const std::vector<Param> params = params_of(tool);
  std::vector<size_t> optional;
  for (size_t i = 0; i < params.size(); ++i)
    if (!params[i].required) optional.push_back(i);
  const bool enumerate = optional.size() <= static_cast<size_t>(kMaxEnumeratedOptional);
  const size_t subsets = enumerate ? size_t{1} << optional.size() : 1;
  for (size_t mask = 0; mask < subsets; ++mask) {
    GrammarSequence seq;
    seq.push_back(GrammarPiece::literal("<tool_call>\n<function=" + function_name(tool) + ">\n"));
    for (size_t i = 0, opt = 0; i < params.size(); ++i) {
      if (!params[i].required) {
        const bool on = enumerate && ((mask >> opt) & 1) != 0;
        ++opt;
        if (!on) continue;
      }
      seq.push_back(GrammarPiece::literal("<parameter=" + params[i].name + ">\n"));
      seq.push_back(value_piece(params[i].schema));
      seq.push_back(GrammarPiece::literal("\n</parameter>\n"));
    }
    seq.push_back(GrammarPiece::literal("</function>\n</tool_call>"));
    out->push_back(std::move(seq));
  }
}

}  // namespace

Status validate_tools(const OJson& tools) {
  if (tools.is_null()) return Status::ok();
  if (!tools.is_array()) return invalid_argument("tools: must be a list");
  for (size_t i = 0; i < tools.size(); ++i)
    MX_RETURN_IF_ERROR(validate_tool(tools[i], "tools[" + std::to_string(i) + "]"));
  return Status::ok();
}

Result<ToolChoice> parse_tool_choice(const OJson& tool_choice, const OJson& tools) {
  const bool have_tools = tools.is_array() && !tools.empty();
  ToolChoice c;
  if (tool_choice.is_null()) {
    c.mode = have_tools ? ToolChoice::Mode::kAuto : ToolChoice::Mode::kNone;
    return c;
  }
  const char* kForms =
      "tool_choice: must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
      "\"function\": {\"name\": ...}}";
  if (tool_choice.is_string()) {
    const std::string& s = tool_choice.get_ref<const std::string&>();
    if (s == "none") {
      c.mode = ToolChoice::Mode::kNone;
    } else if (s == "auto") {
      c.mode = ToolChoice::Mode::kAuto;
    } else if (s == "required") {
      c.mode = ToolChoice::Mode::kRequired;
    } else {
      return invalid_argument(std::string(kForms) + ", got \"" + s + "\"");
    }
    if (c.mode == ToolChoice::Mode::kRequired && !have_tools)
      return invalid_argument("tool_choice: \"required\" needs tools");
    return c;
  }
  if (!tool_choice.is_object()) return invalid_argument(kForms);
  auto type = tool_choice.find("type");
  if (type == tool_choice.end() || *type != "function")
    return invalid_argument("tool_choice.type: must be \"function\"");
  auto fn = tool_choice.find("function");
  if (fn == tool_choice.end() || !fn->is_object() || !fn->contains("name") ||
      !(*fn)["name"].is_string())
    return invalid_argument("tool_choice.function.name: must be a string");
  c.mode = ToolChoice::Mode::kNamed;
  c.function = (*fn)["name"].get<std::string>();
  if (have_tools)
    for (size_t i = 0; i < tools.size(); ++i)
      if (validate_tool(tools[i], "tools").is_ok() && function_name(tools[i]) == c.function)
        return c;
  return invalid_argument("tool_choice.function.name: no tool named '" + c.function + "' in tools");
}

std::vector<GrammarSequence> tool_call_sequences(const OJson& tools, const std::string& parser,
                                                 std::optional<std::string> only_function) {
  std::vector<GrammarSequence> out;
  if (!tools.is_array() || (parser != "hermes" && parser != "qwen3_coder")) return out;
  for (const OJson& tool : tools) {
    if (!validate_tool(tool, "tool").is_ok()) continue;
    const std::string name = function_name(tool);
    if (only_function && name != *only_function) continue;
    if (parser == "hermes") {
      out.push_back({GrammarPiece::literal("<tool_call>\n{\"name\": " + dump_json(name) +
                                           ", \"arguments\": "),
                     GrammarPiece::json(arguments_schema(tool)),
                     GrammarPiece::literal("}\n</tool_call>")});
    } else {
      coder_sequences(tool, &out);
    }
  }
  return out;
}

Result<std::optional<ToolCallGrammar>> tool_call_grammar(const OJson& tools,
                                                         const OJson& tool_choice,
                                                         const std::string& parser) {
  MX_RETURN_IF_ERROR(validate_tools(tools));
  MX_ASSIGN_OR_RETURN(ToolChoice choice, parse_tool_choice(tool_choice, tools));
  MX_ASSIGN_OR_RETURN(ToolCallFormat format, tool_call_format_from_name(parser));
  if (choice.mode == ToolChoice::Mode::kNone || choice.mode == ToolChoice::Mode::kAuto)
    return std::optional<ToolCallGrammar>();
  if (format == ToolCallFormat::kQwen3Coder) {
    for (size_t i = 0; i < tools.size(); ++i)
      for (const Param& p : params_of(tools[i]))
        if (!writable_name(p.name))
          return invalid_argument("tools[" + std::to_string(i) +
                                  "].function.parameters.properties: the name '" + p.name +
                                  "' cannot be written in a <parameter=...> tag");
  }
  ToolCallGrammar g;
  const bool named = choice.mode == ToolChoice::Mode::kNamed;
  g.alternatives = tool_call_sequences(
      tools, parser, named ? std::optional<std::string>(choice.function) : std::nullopt);
  g.min_repeat = 1;
  g.max_repeat = named ? 1 : -1;
  g.separator = "\n";
  return std::optional<ToolCallGrammar>(std::move(g));
}

OJson messages_for_template(const OJson& messages) {
  OJson out = messages;
  if (!out.is_array()) return out;
  for (OJson& m : out) {
    if (!m.is_object() || m.value("role", OJson()) != "assistant") continue;
    auto calls = m.find("tool_calls");
    if (calls == m.end() || !calls->is_array()) continue;
    for (OJson& call : *calls) {
      if (!call.is_object()) continue;
      auto fn = call.find("function");
      if (fn == call.end() || !fn->is_object()) continue;
      auto args = fn->find("arguments");
      if (args == fn->end() || args->is_null() ||
          (args->is_string() && args->get_ref<const std::string&>().empty())) {
        (*fn)["arguments"] = OJson::object();
        continue;
      }
      if (!args->is_string()) continue;
      if (auto decoded = parse_json(args->get_ref<const std::string&>());
          decoded && decoded->is_object())
        *args = std::move(*decoded);
    }
  }
  return out;
}

}  // namespace mx

#include "server/tool_parser.h"

#include <algorithm>
#include <cctype>

#include "server/tool_parser_internal.h"

namespace mx {

namespace tool_internal {

std::string_view trim_ws(std::string_view s, bool left, bool right) {
  if (left)
    while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  if (right)
    while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  for (size_t k = std::min(text.size(), tag.size() - 1); k > 0; --k)
    if (text.substr(text.size() - k) == tag.substr(0, k)) return k;
  return 0;
}

bool json_depth_ok(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

std::optional<OJson> parse_json(std::string_view text) {
  if (!json_depth_ok(text)) return std::nullopt;
  OJson j = OJson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

std::string dump_json(const OJson& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, OJson::error_handler_t::replace);
}

const OJson* tool_properties(const OJson& tools, std::string_view name) {
  if (!tools.is_array()) return nullptr;
  for (const OJson& t : tools) {
    if (!t.is_object()) continue;
    auto f = t.find("function");
    if (f == t.end() || !f->is_object()) continue;
    auto n = f->find("name");
    if (n == f->end() || !n->is_string() || n->get_ref<const std::string&>() != name) continue;
    auto p = f->find("parameters");
    if (p == f->end() || !p->is_object()) return nullptr;
    auto props = p->find("properties");
    return props != p->end() && props->is_object() ? &*props : nullptr;
  }
  return nullptr;
}

ValueType value_type(const OJson* schema) {
  ValueType v;
  if (schema == nullptr || !schema->is_object()) return v;
  auto type = schema->find("type");
  if (type != schema->end() && type->is_string()) {
    v.type = type->get<std::string>();
    v.nullable = v.type == "null";
    v.schema = schema;
    return v;
  }
  if (type != schema->end() && type->is_array()) {
    // ["integer", "null"]: the first type that is not null, and null admitted.
    v.type.clear();
    for (const OJson& t : *type) {
      if (!t.is_string()) continue;
      if (t == "null") {
        v.nullable = true;
      } else if (v.type.empty()) {
        v.type = t.get<std::string>();
      }
    }
    if (v.type.empty()) v.type = v.nullable ? "null" : "string";
    v.schema = schema;
    return v;
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    auto opts = schema->find(key);
    if (opts == schema->end() || !opts->is_array()) continue;
    for (const OJson& o : *opts) {
      if (!o.is_object() || !o.contains("type") || !o["type"].is_string()) continue;
      if (o["type"] == "null") {
        v.nullable = true;
      } else if (v.schema == nullptr) {
        v.type = o["type"].get<std::string>();
        v.schema = &o;
      }
    }
    if (v.schema != nullptr) return v;
  }
  return v;
}

namespace {

bool equals_lower(std::string_view s, std::string_view lower) {
  if (s.size() != lower.size()) return false;
  for (size_t i = 0; i < s.size(); ++i)
    if (static_cast<char>(std::tolower(static_cast<unsigned char>(s[i]))) != lower[i]) return false;
  return true;
}

}  // namespace

OJson coerce_value(std::string_view value, const OJson* schema) {
  const ValueType t = value_type(schema);
  const bool null_word = equals_lower(value, "null") || equals_lower(value, "none");
  if (t.nullable && null_word) return nullptr;
  if (t.type == "string") return std::string(value);
  if (null_word) return nullptr;
  if (t.type == "boolean") {
    if (equals_lower(value, "true")) return true;
    if (equals_lower(value, "false")) return false;
    return std::string(value);
  }
  if (t.type == "integer" || t.type == "number" || t.type == "object" || t.type == "array") {
    auto j = parse_json(value);
    if (!j) return std::string(value);
    if (t.type == "integer" && !j->is_number_integer()) return std::string(value);
    if (t.type == "number" && !j->is_number()) return std::string(value);
    return *j;
  }
  return std::string(value);
}

}  // namespace tool_internal

using namespace tool_internal;

Result<ToolCallFormat> tool_call_format_from_name(std::string_view name) {
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "qwen3_coder") return ToolCallFormat::kQwen3Coder;
  return invalid_argument("tool-call parser '" + std::string(name) +
                          "': not one of auto, hermes, qwen3_coder");
}

const char* tool_call_format_name(ToolCallFormat format) {
  return format == ToolCallFormat::kHermes ? "hermes" : "qwen3_coder";
}

std::string tool_parser_for_template(std::string_view template_text) {
  if (template_text.find(kFuncOpen) != std::string_view::npos ||
      template_text.find(kParamOpen) != std::string_view::npos)
    return "qwen3_coder";
  if (template_text.find(kOpen) != std::string_view::npos) return "hermes";
  return "";
}

Result<ToolCallFormat> resolve_tool_parser(std::string_view name, std::string_view template_text) {
  if (name != "auto") return tool_call_format_from_name(name);
  const std::string found = tool_parser_for_template(template_text);
  if (found.empty())
    return invalid_argument(
        "tool-call parser auto: the chat template shows neither <tool_call> nor <function=; "
        "name one (hermes, qwen3_coder)");
  return tool_call_format_from_name(found);
}

ToolCallParser::ToolCallParser(ToolCallFormat format, OJson tools, std::optional<uint64_t> seed)
    : format_(format), tools_(std::move(tools)) {
  if (seed) {
    rng_.seed(*seed);
  } else {
    std::random_device rd;
    rng_.seed((static_cast<uint64_t>(rd()) << 32) ^ rd());
  }
}

std::string ToolCallParser::new_id() {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::uniform_int_distribution<int> pick(0, 61);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlnum[pick(rng_)];
  return id;
}

namespace {

std::optional<std::pair<std::string, std::string>> parse_hermes(std::string_view body) {
  auto j = parse_json(trim_ws(body, true, true));
  if (!j || !j->is_object()) return std::nullopt;
  auto name = j->find("name");
  if (name == j->end() || !name->is_string() || name->get_ref<const std::string&>().empty())
    return std::nullopt;
  auto args = j->find("arguments");
  if (args == j->end()) return std::nullopt;
  OJson a = *args;
  if (a.is_string()) {
    auto inner = parse_json(a.get_ref<const std::string&>());
    if (!inner) return std::nullopt;
    a = std::move(*inner);
  }
  if (!a.is_object()) return std::nullopt;
  return std::make_pair(name->get<std::string>(), dump_json(a));
}

size_t skip_ws(std::string_view s, size_t p) {
  while (p < s.size() && is_ws(s[p])) ++p;
  return p;
}

bool valid_tag_name(std::string_view name) {
  if (name.empty()) return false;
  return std::none_of(name.begin(), name.end(), [](char c) { return is_ws(c) || c == '<'; });
}

// <function=NAME> then <parameter=P>VALUE</parameter>... then </function>, whitespace between.
std::optional<std::pair<std::string, std::string>> parse_coder(std::string_view body, bool closed,
                                                               const OJson& tools) {
  size_t p = skip_ws(body, 0);
  if (body.substr(p, kFuncOpen.size()) != kFuncOpen) return std::nullopt;
  p += kFuncOpen.size();
  const size_t gt = body.find('>', p);
  if (gt == std::string_view::npos || !valid_tag_name(body.substr(p, gt - p))) return std::nullopt;
  std::string name(body.substr(p, gt - p));
  const OJson* props = tool_properties(tools, name);
  OJson args = OJson::object();
  p = gt + 1;
  for (;;) {
    p = skip_ws(body, p);
    std::string_view rest = body.substr(p);
    if (rest.substr(0, kFuncClose.size()) == kFuncClose) {
      if (!trim_ws(rest.substr(kFuncClose.size()), true, true).empty()) return std::nullopt;
      break;
    }
    // A closed block may leave out </function>; an open one must have it to count as whole.
    if (rest.empty()) {
      if (!closed) return std::nullopt;
      break;
    }
    if (rest.substr(0, kParamOpen.size()) != kParamOpen) return std::nullopt;
    const size_t name_at = p + kParamOpen.size();
    const size_t name_end = body.find('>', name_at);
    if (name_end == std::string_view::npos) return std::nullopt;
    std::string pname(body.substr(name_at, name_end - name_at));
    if (pname.empty()) return std::nullopt;
    const size_t value_end = body.find(kParamClose, name_end + 1);
    if (value_end == std::string_view::npos) return std::nullopt;
    std::string_view value = body.substr(name_end + 1, value_end - name_end - 1);
    if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
    if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
    const OJson* schema = nullptr;
    if (props != nullptr) {
      auto it = props->find(pname);
      if (it != props->end()) schema = &*it;
    }
    args[pname] = coerce_value(value, schema);
    p = value_end + kParamClose.size();
  }
  return std::make_pair(std::move(name), dump_json(args));
}

}  // namespace

std::optional<ToolCallParser::Parsed> ToolCallParser::parse_block(std::string_view block,
                                                                  bool closed) const {
  std::string_view body = block.substr(kOpen.size());
  if (closed) {
    body.remove_suffix(kClose.size());
  } else {
    body.remove_suffix(partial_tag_suffix(body, kClose));
  }
  auto r =
      format_ == ToolCallFormat::kHermes ? parse_hermes(body) : parse_coder(body, closed, tools_);
  if (!r) return std::nullopt;
  return Parsed{std::move(r->first), std::move(r->second)};
}

// Past the </tool_call> that closes the block opened at `open`, or npos when none does. In
// qwen3_coder a parameter value is skipped whole, so only </parameter> ends it.
size_t ToolCallParser::block_end(std::string_view text, size_t open) const {
  const bool coder = format_ == ToolCallFormat::kQwen3Coder;
  size_t p = open + kOpen.size();
  for (;;) {
    p = text.find('<', p);
    if (p == std::string_view::npos) return p;
    std::string_view at = text.substr(p);
    if (at.substr(0, kClose.size()) == kClose) return p + kClose.size();
    if (coder && at.substr(0, kParamOpen.size()) == kParamOpen) {
      const size_t gt = text.find('>', p + kParamOpen.size());
      if (gt == std::string_view::npos) return gt;
      const size_t end = text.find(kParamClose, gt + 1);
      if (end == std::string_view::npos) return end;
      p = end + kParamClose.size();
      continue;
    }
    ++p;
  }
}

ParsedToolCalls ToolCallParser::parse(std::string_view text) {
  ParsedToolCalls r;
  std::string run;  // content since the last call: text and blocks that are not calls
  bool run_after_call = false;
  auto flush_run = [&](bool before_call) {
    r.content += trim_ws(run, run_after_call, before_call);
    run.clear();
  };
  size_t pos = 0;
  for (;;) {
    const size_t open = text.find(kOpen, pos);
    if (open == std::string_view::npos) {
      run += text.substr(pos);
      break;
    }
    run += text.substr(pos, open - pos);
    const size_t end = block_end(text, open);
    const bool closed = end != std::string_view::npos;
    std::string_view block = text.substr(open, closed ? end - open : std::string_view::npos);
    if (auto call = parse_block(block, closed)) {
      flush_run(true);
      run_after_call = true;
      r.calls.push_back({new_id(), std::move(call->name), std::move(call->arguments)});
    } else if (closed || block.find(kClose) != std::string_view::npos) {
      run += block;
    } else {
      flush_run(true);  // a block cut short: whitespace before it touched a call
    }
    if (!closed) break;
    pos = end;
  }
  flush_run(false);
  return r;
}

namespace {

void emit_content(std::string s, std::vector<ToolStreamEvent>* out) {
  if (s.empty()) return;
  if (!out->empty() && !out->back().is_call) {
    out->back().content += s;
    return;
  }
  ToolStreamEvent e;
  e.content = std::move(s);
  out->push_back(std::move(e));
}

}  // namespace

void ToolCallParser::add_content(std::string_view text, std::vector<ToolStreamEvent>* out) {
  if (after_call_) {
    text = trim_ws(text, true, false);
    if (text.empty()) return;
    after_call_ = false;
  }
  std::string_view body = trim_ws(text, false, true);
  if (body.empty()) {
    pending_ws_ += text;
    return;
  }
  std::string s = std::move(pending_ws_);
  s += body;
  pending_ws_ = std::string(text.substr(body.size()));
  emit_content(std::move(s), out);
}

void ToolCallParser::close_block(size_t end, bool closed, std::vector<ToolStreamEvent>* out) {
  std::string_view block(buf_.data(), end);
  if (auto call = parse_block(block, closed)) {
    pending_ws_.clear();
    after_call_ = true;
    ToolStreamEvent head;
    head.is_call = true;
    head.index = calls_;
    head.first = true;
    head.id = new_id();
    head.name = std::move(call->name);
    out->push_back(std::move(head));
    ToolStreamEvent args;
    args.is_call = true;
    args.index = calls_++;
    args.arguments = std::move(call->arguments);
    out->push_back(std::move(args));
  } else if (closed || block.find(kClose) != std::string_view::npos) {
    add_content(block, out);
  } else {
    pending_ws_.clear();
  }
  buf_.erase(0, end);
  where_ = Where::kText;
  scan_ = 0;
}

// One move of the streaming scanner over buf_; false when it needs more text.
bool ToolCallParser::step(std::vector<ToolStreamEvent>* out) {
  constexpr size_t kRescan = std::max(kClose.size(), kParamOpen.size()) - 1;
  switch (where_) {
    case Where::kText: {
      const size_t open = buf_.find(kOpen);
      if (open == std::string::npos) {
        const size_t keep = partial_tag_suffix(buf_, kOpen);
        add_content(std::string_view(buf_).substr(0, buf_.size() - keep), out);
        buf_.erase(0, buf_.size() - keep);
        return false;
      }
      add_content(std::string_view(buf_).substr(0, open), out);
      buf_.erase(0, open);
      where_ = Where::kBlock;
      scan_ = kOpen.size();
      return true;
    }
    case Where::kBlock: {
      const size_t close = buf_.find(kClose, scan_);
      const size_t param =
          format_ == ToolCallFormat::kQwen3Coder ? buf_.find(kParamOpen, scan_) : std::string::npos;
      if (param < close) {
        where_ = Where::kParamName;
        scan_ = param + kParamOpen.size();
        return true;
      }
      if (close != std::string::npos) {
        close_block(close + kClose.size(), true, out);
        return true;
      }
      scan_ = std::max(scan_, buf_.size() - std::min(buf_.size(), kRescan));
      return false;
    }
    case Where::kParamName: {
      const size_t gt = buf_.find('>', scan_);
      if (gt == std::string::npos) {
        scan_ = buf_.size();
        return false;
      }
      where_ = Where::kValue;
      scan_ = gt + 1;
      return true;
    }
    case Where::kValue: {
      const size_t end = buf_.find(kParamClose, scan_);
      if (end == std::string::npos) {
        scan_ = std::max(scan_, buf_.size() - std::min(buf_.size(), kParamClose.size() - 1));
        return false;
      }
      where_ = Where::kBlock;
      scan_ = end + kParamClose.size();
      return true;
    }
  }
  return false;
}

std::vector<ToolStreamEvent> ToolCallParser::push(std::string_view delta) {
  std::vector<ToolStreamEvent> out;
  buf_ += delta;
  while (step(&out)) {
  }
  return out;
}

std::vector<ToolStreamEvent> ToolCallParser::finish() {
  std::vector<ToolStreamEvent> out;
  if (where_ == Where::kText) {
    add_content(buf_, &out);
    buf_.clear();
  } else {
    close_block(buf_.size(), false, &out);
  }
  emit_content(std::move(pending_ws_), &out);
  pending_ws_.clear();
  return out;
}

OJson tool_stream_delta_json(const ToolStreamEvent& event) {
  if (!event.is_call) return OJson{{"content", event.content}};
  OJson call = OJson::object();
  call["index"] = event.index;
  if (event.first) {
    call["id"] = event.id;
    call["type"] = "function";
    call["function"] = OJson{{"name", event.name}, {"arguments", event.arguments}};
  } else {
    call["function"] = OJson{{"arguments", event.arguments}};
  }
  OJson delta = OJson::object();
  delta["tool_calls"] = OJson::array({std::move(call)});
  return delta;
}

OJson tool_calls_json(const std::vector<ToolCall>& calls) {
  OJson list = OJson::array();
  for (const ToolCall& c : calls) {
    OJson call = OJson::object();
    call["id"] = c.id;
    call["type"] = "function";
    call["function"] = OJson{{"name", c.name}, {"arguments", c.arguments}};
    list.push_back(std::move(call));
  }
  return list;
}

}  // namespace mx

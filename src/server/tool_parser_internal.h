// Pieces the tool-call parser and the tool-call grammars share; not part of the interface.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "server/openai_protocol.h"

namespace mx::tool_internal {

inline constexpr std::string_view kOpen = "<tool_call>";
inline constexpr std::string_view kClose = "</tool_call>";
inline constexpr std::string_view kFuncOpen = "<function=";
inline constexpr std::string_view kFuncClose = "</function>";
inline constexpr std::string_view kParamOpen = "<parameter=";
inline constexpr std::string_view kParamClose = "</parameter>";

// nlohmann's serializer recurses once per level, so text nested deeper than this is not
// decoded at all (a reply or a request of a million '[' must not exhaust the stack).
inline constexpr int kMaxJsonDepth = 256;

inline bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
std::string_view trim_ws(std::string_view s, bool left, bool right);
// The longest proper suffix of `text` that `tag` starts with (a tag still arriving).
size_t partial_tag_suffix(std::string_view text, std::string_view tag);
bool json_depth_ok(std::string_view text);
// nullopt when `text` is not one JSON value (or nests too deep).
std::optional<OJson> parse_json(std::string_view text);
// Compact, with invalid UTF-8 replaced rather than thrown on.
std::string dump_json(const OJson& j);

// tools[i].function.parameters.properties of the tool named `name`, or null.
const OJson* tool_properties(const OJson& tools, std::string_view name);

// How a qwen3_coder parameter is written and read: its schema's type (the first that is not
// "null" of a list or of anyOf/oneOf; "string" when none is given), whether null is
// admitted, and the schema (or anyOf option) that type comes from.
struct ValueType {
  std::string type = "string";
  bool nullable = false;
  const OJson* schema = nullptr;
};
ValueType value_type(const OJson* schema);
// A parameter's text as the JSON value its schema asks for; a string when it does not parse.
OJson coerce_value(std::string_view value, const OJson* schema);

}  // namespace mx::tool_internal

// Typed access to parsed JSON with errors that name the file and field. Parsing never throws
// out of this layer.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mx {

using Json = nlohmann::json;

// Whether `text` nests arrays and objects deeper than `limit`, found by one scan outside string
// literals. nlohmann::json parses iteratively but copies, compares and dumps recursively: a
// document nested a million deep would overflow the stack there, so it is refused first.
bool json_nests_deeper_than(std::string_view text, int limit);
constexpr int kMaxJsonDepth = 256;

// Parses `text`; `what` names the source in errors ("config.json"). Nesting past kMaxJsonDepth
// is an error.
Result<Json> parse_json(const std::string& text, const std::string& what);
Result<Json> read_json_file(const std::string& path);

// Field readers: `what` is the file for messages. The *_or variants return the fallback when
// the field is absent or null; present with the wrong type is an error either way.
Result<int64_t> json_int(const Json& obj, const char* key, const std::string& what);
Result<int64_t> json_int_or(const Json& obj, const char* key, int64_t fallback,
                            const std::string& what);
Result<double> json_number_or(const Json& obj, const char* key, double fallback,
                              const std::string& what);
Result<bool> json_bool_or(const Json& obj, const char* key, bool fallback, const std::string& what);
Result<std::string> json_string(const Json& obj, const char* key, const std::string& what);
Result<std::vector<int64_t>> json_int_list_or(const Json& obj, const char* key,
                                              const std::string& what);

std::string json_type_name(const Json& v);

}  // namespace mx

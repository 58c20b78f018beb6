#include "core/json_util.h"

#include "core/mapped_file.h"

namespace mx {

std::string json_type_name(const Json& v) { return v.type_name(); }

bool json_nests_deeper_than(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

Result<Json> parse_json(const std::string& text, const std::string& what) {
  if (json_nests_deeper_than(text, kMaxJsonDepth)) {
    return invalid_argument(what + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                            " levels");
  }
  // The non-throwing overload reports failure as a discarded value; the exception text would
  // give the byte offset, so parse once more with exceptions only to describe the error.
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded()) return j;
  std::string detail = "syntax error";
  try {
    Json ignored = Json::parse(text);
    (void)ignored;
  } catch (const Json::exception& e) {
    detail = e.what();
  }
  return invalid_argument(what + ": malformed JSON: " + detail);
}

Result<Json> read_json_file(const std::string& path) {
  MX_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return parse_json(text, path);
}

namespace {
Status wrong_type(const std::string& what, const char* key, const char* want, const Json& v) {
  return invalid_argument(what + ": field '" + key + "' must be " + want + " (got " +
                          json_type_name(v) + ")");
}
const Json* field(const Json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}
}  // namespace

Result<int64_t> json_int(const Json& obj, const char* key, const std::string& what) {
  const Json* v = field(obj, key);
  if (v == nullptr) return invalid_argument(what + ": missing field '" + key + "'");
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return wrong_type(what, key, "an int64", *v);
    return static_cast<int64_t>(u);
  }
  if (v->is_number_integer()) return v->get<int64_t>();
  return wrong_type(what, key, "an integer", *v);
}

Result<int64_t> json_int_or(const Json& obj, const char* key, int64_t fallback,
                            const std::string& what) {
  if (field(obj, key) == nullptr) return fallback;
  return json_int(obj, key, what);
}

Result<double> json_number_or(const Json& obj, const char* key, double fallback,
                              const std::string& what) {
  const Json* v = field(obj, key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) return wrong_type(what, key, "a number", *v);
  return v->get<double>();
}

Result<bool> json_bool_or(const Json& obj, const char* key, bool fallback,
                          const std::string& what) {
  const Json* v = field(obj, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) return wrong_type(what, key, "a boolean", *v);
  return v->get<bool>();
}

Result<std::string> json_string(const Json& obj, const char* key, const std::string& what) {
  const Json* v = field(obj, key);
  if (v == nullptr) return invalid_argument(what + ": missing field '" + key + "'");
  if (!v->is_string()) return wrong_type(what, key, "a string", *v);
  return v->get<std::string>();
}

Result<std::vector<int64_t>> json_int_list_or(const Json& obj, const char* key,
                                              const std::string& what) {
  std::vector<int64_t> out;
  const Json* v = field(obj, key);
  if (v == nullptr) return out;
  if (!v->is_array()) return wrong_type(what, key, "a list of integers", *v);
  for (const Json& e : *v) {
    if (!e.is_number_integer()) return wrong_type(what, key, "a list of integers", *v);
    out.push_back(e.get<int64_t>());
  }
  return out;
}

}  // namespace mx

// allOf as one schema: the conjunction folded keyword by keyword, the way pydantic and
// OpenAPI generators use it (a base model's properties plus a subclass's, a $ref plus local
// constraints). Where two schemas constrain one keyword in ways a single schema cannot state,
// the keyword is named in the error rather than loosened.
#include <algorithm>
#include <set>
#include <string>

#include "text/grammar_internal.h"

namespace mx::grammar {
namespace {

using json = nlohmann::ordered_json;

constexpr int kMaxRefHops = 32;

bool is_lower_bound(const std::string& k) {
  return k == "minimum" || k == "minLength" || k == "minItems" || k == "exclusiveMinimum";
}
bool is_upper_bound(const std::string& k) {
  return k == "maximum" || k == "maxLength" || k == "maxItems" || k == "exclusiveMaximum";
}
bool is_note(const std::string& k) {
  return k == "title" || k == "description" || k == "default" || k == "examples" ||
         k == "example" || k == "$schema" || k == "$id" || k == "$comment" || k == "$defs" ||
         k == "definitions" || k.rfind("x-", 0) == 0;
}

std::vector<std::string> type_list(const json& t) {
  if (t.is_string()) return {t.get<std::string>()};
  std::vector<std::string> out;
  if (t.is_array()) {
    for (const json& x : t) {
      if (x.is_string()) out.push_back(x.get<std::string>());
    }
  }
  return out;
}

Status merge_types(json& into, const json& t, const std::string& path) {
  std::vector<std::string> a = type_list(into), b = type_list(t), both;
  for (const std::string& x : a) {
    const bool integer_in_number = x == "integer" && std::count(b.begin(), b.end(), "number");
    if (std::count(b.begin(), b.end(), x) || integer_in_number) both.push_back(x);
  }
  for (const std::string& x : b) {
    if (x == "integer" && std::count(a.begin(), a.end(), "number")) both.push_back(x);
  }
  if (both.empty()) return invalid_argument(path + ": allOf: no value has all the types");
  into = both.size() == 1 ? json(both[0]) : json(both);
  return Status::ok();
}

Status merge_keyword(json& out, const std::string& k, const json& v, const std::string& path) {
  if (!out.contains(k) || is_note(k)) {
    if (!out.contains(k)) out[k] = v;
    return Status::ok();
  }
  json& cur = out[k];
  if (cur == v) return Status::ok();
  if (k == "properties" && cur.is_object() && v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!cur.contains(it.key())) {
        cur[it.key()] = it.value();
      } else if (cur[it.key()] != it.value()) {
        cur[it.key()] = json{{"allOf", json::array({cur[it.key()], it.value()})}};
      }
    }
    return Status::ok();
  }
  if (k == "required" && cur.is_array() && v.is_array()) {
    for (const json& r : v) {
      if (std::find(cur.begin(), cur.end(), r) == cur.end()) cur.push_back(r);
    }
    return Status::ok();
  }
  if (k == "type") return merge_types(cur, v, path);
  if ((is_lower_bound(k) || is_upper_bound(k)) && cur.is_number() && v.is_number()) {
    const bool take = is_lower_bound(k) ? v.get<double>() > cur.get<double>()
                                        : v.get<double>() < cur.get<double>();
    if (take) cur = v;
    return Status::ok();
  }
  if (k == "enum" && cur.is_array() && v.is_array()) {
    json keep = json::array();
    for (const json& x : cur) {
      if (std::find(v.begin(), v.end(), x) != v.end()) keep.push_back(x);
    }
    if (keep.empty()) return invalid_argument(path + ": allOf: no value is in every 'enum'");
    cur = keep;
    return Status::ok();
  }
  if (k == "additionalProperties" && (cur == false || v == false)) {
    cur = false;
    return Status::ok();
  }
  return invalid_argument(path + ": allOf: conflicting '" + k + "' cannot be merged");
}

}  // namespace

Result<const json*> resolve_ref(const json& root, const json& s, const std::string& path) {
  const json* cur = &s;
  for (int hop = 0; hop < kMaxRefHops; ++hop) {
    if (!cur->is_object() || !cur->contains("$ref")) return cur;
    const json& ref = (*cur)["$ref"];
    if (!ref.is_string() || ref.get<std::string>().empty() || ref.get<std::string>()[0] != '#') {
      return invalid_argument(path + ": only local $refs are supported");
    }
    try {
      const json::json_pointer ptr(ref.get<std::string>().substr(1));
      if (!root.contains(ptr)) {
        return invalid_argument(path + ": $ref '" + ref.get<std::string>() + "' not found");
      }
      cur = &root.at(ptr);
    } catch (const json::exception&) {
      return invalid_argument(path + ": bad $ref '" + ref.get<std::string>() + "'");
    }
  }
  return invalid_argument(path + ": $refs chained more than " + std::to_string(kMaxRefHops) +
                          " times");
}

Result<json> merge_all_of(const json& root, const json& s, int depth, const std::string& path) {
  if (depth > kMaxSchemaDepth) {
    return invalid_argument(path + ": allOf nested deeper than " + std::to_string(kMaxSchemaDepth));
  }
  json out = json::object();
  json host = s;
  host.erase("allOf");
  std::vector<json> parts;
  if (!host.empty()) parts.push_back(std::move(host));
  for (size_t i = 0; i < s["allOf"].size(); ++i) {
    const std::string at = path + "/allOf/" + std::to_string(i);
    MX_ASSIGN_OR_RETURN(const json* r, resolve_ref(root, s["allOf"][i], at));
    if (r->is_boolean()) {
      if (*r == false) return invalid_argument(at + ": schema 'false' admits no value");
      continue;
    }
    if (!r->is_object()) return invalid_argument(at + ": a schema must be an object");
    if (r->contains("allOf") && (*r)["allOf"].is_array()) {
      MX_ASSIGN_OR_RETURN(json m, merge_all_of(root, *r, depth + 1, at));
      parts.push_back(std::move(m));
    } else {
      parts.push_back(*r);
    }
  }
  for (const json& part : parts) {
    for (auto it = part.begin(); it != part.end(); ++it) {
      if (it.key() == "$ref" || it.key() == "anyOf" || it.key() == "oneOf") {
        if (out.contains(it.key()) && out[it.key()] != it.value()) {
          return invalid_argument(path + ": allOf: more than one '" + it.key() + "'");
        }
      }
      MX_RETURN_IF_ERROR(merge_keyword(out, it.key(), it.value(), path));
    }
  }
  return out;
}

}  // namespace mx::grammar

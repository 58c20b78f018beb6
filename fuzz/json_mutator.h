// A structure-aware mutator for the JSON targets: libFuzzer's byte mutations rarely turn a
// string into a number or an object into a list without breaking the syntax, which is where
// typed readers go wrong (nlohmann's get<T>() and value() throw on a type mismatch). Three
// times in four a parsable input gets one JSON-level change: a value replaced by one of
// another type or an edge number, a member removed or duplicated, a subtree moved elsewhere,
// a value wrapped in a list or object, a known key added to an object, a string's bytes
// mutated. Otherwise, and for text that does not parse, libFuzzer's own mutations apply.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace mx::fuzz {

using MJson = nlohmann::ordered_json;

inline MJson edge_value(std::mt19937& rng, const std::vector<MJson*>& nodes) {
  switch (rng() % 19) {
    case 0:
      return 0;
    case 1:
      return -1;
    case 2:
      return 1;
    case 3:
      return int64_t{1} << 31;
    case 4:
      return INT64_MAX;
    case 5:
      return INT64_MIN;
    case 6:
      return UINT64_MAX;
    case 7:
      return 1e300;
    case 8:
      return -0.5;
    case 9:
      return "";
    case 10:
      return std::string("\0x", 2);
    case 11:
      return rng() % 2 == 0;
    case 12:
      return nullptr;
    case 13:
      return MJson::array();
    case 14:
      return MJson::object();
    case 16:
      return INT32_MAX;
    case 17:
      return int64_t{1} << 30;
    case 18:
      return int64_t{1} << 32;
    default:
      return *nodes[rng() % nodes.size()];  // a copy of some other value
  }
}

// One structural change to `doc`; false when none applied.
inline bool mutate_json_value(MJson& doc, std::mt19937& rng) {
  std::vector<MJson*> nodes;
  std::vector<std::string> keys;
  std::vector<MJson*> stack = {&doc};
  while (!stack.empty() && nodes.size() < 4096) {
    MJson* n = stack.back();
    stack.pop_back();
    nodes.push_back(n);
    if (n->is_object()) {
      for (auto it = n->begin(); it != n->end(); ++it) {
        if (keys.size() < 256) keys.push_back(it.key());
        stack.push_back(&*it);
      }
    } else if (n->is_array()) {
      for (auto& e : *n) stack.push_back(&e);
    }
  }
  MJson& n = *nodes[rng() % nodes.size()];
  switch (rng() % 8) {
    case 0:
    case 1:  // replace by another type or an edge value
      n = edge_value(rng, nodes);
      return true;
    case 2:  // remove a member
      if (n.is_object() && !n.empty()) {
        auto it = n.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(rng() % n.size()));
        n.erase(it);
        return true;
      }
      if (n.is_array() && !n.empty()) {
        n.erase(n.begin() + static_cast<std::ptrdiff_t>(rng() % n.size()));
        return true;
      }
      return false;
    case 3:  // duplicate a member
      if (n.is_array() && !n.empty()) {
        const MJson e = n[rng() % n.size()];
        n.insert(n.begin() + static_cast<std::ptrdiff_t>(rng() % (n.size() + 1)), e);
        return true;
      }
      return false;
    case 4:  // wrap
      n = rng() % 2 ? MJson::array({n})
                    : MJson{{keys.empty() ? "k" : keys[rng() % keys.size()], n}};
      return true;
    case 5:  // add a known key (or set one) with some value
      if (n.is_object()) {
        n[keys.empty() ? std::string("k") : keys[rng() % keys.size()]] = edge_value(rng, nodes);
        return true;
      }
      return false;
    case 6:  // mutate a string's bytes
      if (n.is_string()) {
        std::string s = n.get<std::string>();
        if (s.empty()) s = "x";
        const size_t cap = s.size() + 16;
        s.resize(cap);
        const size_t len = LLVMFuzzerMutate(reinterpret_cast<uint8_t*>(s.data()), cap - 16, cap);
        s.resize(len);
        n = s;  // may be invalid UTF-8: dumped with replacement below
        return true;
      }
      return false;
    default:  // a number nudged
      if (n.is_number_integer()) {
        // Wraps around at the ends (unsigned arithmetic, so no overflow).
        n = static_cast<int64_t>(static_cast<uint64_t>(n.get<int64_t>()) +
                                 static_cast<uint64_t>(rng() % 5) - 2u);
        return true;
      }
      if (n.is_number_float()) {
        n = n.get<double>() * (rng() % 2 ? 2 : -1);
        return true;
      }
      return false;
  }
}

// Mutates JSON text in place (data[0, size) of capacity max_size); returns the new size.
inline size_t mutate_json_text(uint8_t* data, size_t size, size_t max_size, unsigned seed) {
  std::mt19937 rng(seed);
  if (rng() % 4 != 0) {
    MJson doc = MJson::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_discarded()) {
      for (int tries = 0; tries < 4; ++tries) {
        if (!mutate_json_value(doc, rng)) continue;
        const std::string text =
            doc.dump(rng() % 4 == 0 ? 1 : -1, ' ', false, MJson::error_handler_t::replace);
        if (text.size() > max_size) break;
        std::memcpy(data, text.data(), text.size());
        return text.size();
      }
    }
  }
  return LLVMFuzzerMutate(data, size, max_size);
}

}  // namespace mx::fuzz

// For a target whose whole input is JSON text.
#define MX_FUZZ_JSON_MUTATOR                                                             \
  extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, \
                                            unsigned int seed) {                         \
    return mx::fuzz::mutate_json_text(data, size, max_size, seed);                       \
  }

// What the grammar tests share: a small vocabulary (every byte a token, and a few longer ones,
// a stop, a special and an empty token), and feeding a text to a grammar one byte at a time.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "text/grammar.h"

namespace mx::grammar_test {

using json = nlohmann::ordered_json;

inline std::shared_ptr<const Grammar> must(Result<std::shared_ptr<const Grammar>> r) {
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? *r : nullptr;
}

// Every byte as a token (id = byte), some multi-byte tokens, a stop token, a special token
// and an empty token.
struct SmallVocab {
  std::vector<std::string> tokens;
  int32_t stop = 0, special = 0, empty = 0;
  std::shared_ptr<const TokenVocab> vocab;

  explicit SmallVocab(std::vector<std::string> extra = {}) {
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
    for (const char* t : {"{\"", "\":", "\"}", "true", " \"", "\", \"", "null", "12", "\": ", "}}",
                          "},", "\"]", "\xe6\x97", "\xa5\xe6", "<tool_call>", "\n{"}) {
      tokens.emplace_back(t);
    }
    for (auto& t : extra) tokens.push_back(std::move(t));
    stop = static_cast<int32_t>(tokens.size());
    tokens.emplace_back("<|im_end|>");
    special = static_cast<int32_t>(tokens.size());
    tokens.emplace_back("<|special|>");
    empty = static_cast<int32_t>(tokens.size());
    tokens.emplace_back("");
    vocab = std::make_shared<TokenVocab>(tokens, std::vector<int32_t>{stop},
                                         std::vector<int32_t>{stop, special});
  }
  int32_t id_of(const std::string& s) const {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == s) return static_cast<int32_t>(i);
    }
    return -1;
  }
};

inline const SmallVocab& small_vocab() {
  static const SmallVocab v;
  return v;
}

enum class Verdict { kComplete, kPrefix, kReject };

// Feeds `text` one byte token at a time.
inline Verdict feed(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m(g, small_vocab().vocab);
  for (unsigned char c : text) {
    if (!m.accept(c)) return Verdict::kReject;
  }
  return m.can_end() ? Verdict::kComplete : Verdict::kPrefix;
}

inline Verdict feed_schema(const json& schema, const std::string& text) {
  return feed(must(grammar_from_json_schema(schema)), text);
}

inline void expect_error(const json& schema, const std::string& needle) {
  auto r = grammar_from_json_schema(schema);
  ASSERT_FALSE(r.is_ok()) << schema.dump();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

}  // namespace mx::grammar_test

// Constrained decoding: a grammar compiled once per request (JSON schema, any JSON, regex,
// a choice of strings, or sequences of those for tool calls) and a matcher that, token by
// token, says which vocabulary entries keep the output inside the grammar. The vocabulary is
// a byte trie built once per tokenizer and shared by every request.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace mx {

class Grammar;  // immutable once compiled; shared by the matchers of one request

// One part of a sequence: literal bytes, a value of a JSON schema, or text a regex matches.
struct GrammarPiece {
  enum class Kind { kLiteral, kJsonSchema, kRegex };
  Kind kind = Kind::kLiteral;
  std::string text;               // the literal or the regex
  nlohmann::ordered_json schema;  // kJsonSchema; an empty object is any JSON value
  static GrammarPiece literal(std::string s) { return {Kind::kLiteral, std::move(s), {}}; }
  static GrammarPiece json(nlohmann::ordered_json s) {
    return {Kind::kJsonSchema, {}, std::move(s)};
  }
  static GrammarPiece regex(std::string r) { return {Kind::kRegex, std::move(r), {}}; }
};
using GrammarSequence = std::vector<GrammarPiece>;

// JSON text valid against `schema`. The subset: type object/array/string/number/integer/
// boolean/null (and lists of types), properties, required, additionalProperties,
// propertyNames, items, prefixItems, enum, const, anyOf/oneOf/allOf, nullable,
// $defs/definitions/components with local $ref (recursion allowed), minLength/maxLength,
// minItems/maxItems, minimum/maximum and their exclusive forms, pattern and the common
// formats on strings. Anything outside it fails naming the keyword, so no schema is silently
// loosened.
Result<std::shared_ptr<const Grammar>> grammar_from_json_schema(
    const nlohmann::ordered_json& schema);
// Any JSON object (response_format json_object).
Result<std::shared_ptr<const Grammar>> grammar_any_json_object();
// A regex (ECMAScript-like subset: literals, escapes, classes, . | ( ) ? * + {m,n}).
Result<std::shared_ptr<const Grammar>> grammar_from_regex(std::string_view regex);
// Exactly one of `choices`.
Result<std::shared_ptr<const Grammar>> grammar_from_choices(
    const std::vector<std::string>& choices);
// Between min_repeat and max_repeat occurrences (max_repeat < 0: unbounded) of any one of
// `alternatives`, consecutive occurrences joined by `separator`; the tool-call forms.
Result<std::shared_ptr<const Grammar>> grammar_from_sequences(
    const std::vector<GrammarSequence>& alternatives, int min_repeat, int max_repeat,
    const std::string& separator);

// Compiled grammars by a key naming their source (the schema's text, the regex, the tool
// list). A Grammar keeps the token masks it has computed, so a schema sent again (an agent's
// tools, a service's response format) is masked from the cache rather than from the trie.
// Thread-safe; the least recently used entry goes first past `capacity`.
class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity = 64) : capacity_(capacity) {}
  Result<std::shared_ptr<const Grammar>> get(
      const std::string& key,
      const std::function<Result<std::shared_ptr<const Grammar>>()>& compile);
  // The process-wide cache the server's requests share.
  static GrammarCache& shared();

 private:
  size_t capacity_;
  std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<const Grammar>>> lru_;
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
};

// The vocabulary as a byte trie. Tokens listed in `stop_ids` end the output: they are allowed
// exactly when the grammar can end. Special tokens not listed and empty tokens are never
// allowed inside a grammar.
class TokenVocab {
 public:
  TokenVocab(const std::vector<std::string>& token_bytes, const std::vector<int32_t>& stop_ids,
             const std::vector<int32_t>& special_ids);
  ~TokenVocab();
  int32_t size() const;
  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Computes the token masks of the grammar's positions ahead of its first document, so that
// no mask is computed while the engine waits: the outermost rules first, until all are done
// or `budget` has passed (true when all are). A later call resumes; positions left are
// computed by a matcher when first met. Safe to call from several threads.
bool precompute_masks(const Grammar& g, const TokenVocab& vocab, std::chrono::microseconds budget);
// What the server grants a new grammar before its request starts decoding.
constexpr std::chrono::milliseconds kMaskAheadBudget{1000};

class GrammarMatcher {
 public:
  GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab);
  ~GrammarMatcher();
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;

  // Words of (vocab size + 31) / 32 bits: bit t set when token t may come next.
  void fill_mask(uint32_t* mask);
  // Advances past `token`; false (and unchanged) when the grammar does not allow it.
  bool accept(int32_t token);
  // How many of `tokens` the grammar takes one after another from here (a stop token where
  // the output may end counts, and nothing after it does), leaving the matcher as it was: the
  // part of a speculative draft worth verifying.
  size_t allowed_prefix(const std::vector<int32_t>& tokens);
  // The output so far is a complete sentence of the grammar (a stop token may come).
  bool can_end() const;
  // Nothing but a stop token may come.
  bool must_end() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mx

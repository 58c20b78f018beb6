// Hugging Face tokenizer.json byte-level BPE as Qwen2/Qwen3 use it: added tokens matched first
// on the raw text, NFC, the Split regex (PCRE2, UTF + UCP, JIT), byte-level mapping, merges
// by rank. Input that is not valid UTF-8 is repaired first: each maximal invalid subpart
// becomes U+FFFD (what a WHATWG TextDecoder does), so every byte string encodes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mx {

struct AddedToken {
  std::string content;
  int32_t id;
  bool special;
};

class Tokenizer {
 public:
  // `path` is a tokenizer.json or a directory holding one.
  static Result<std::shared_ptr<const Tokenizer>> load(const std::string& path);
  static Result<std::shared_ptr<const Tokenizer>> from_json(const std::string& json_text,
                                                            const std::string& label);
  ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text) const;
  // Lossy: byte sequences that are not UTF-8 become U+FFFD, as HF's decode does.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  // The raw bytes a token stands for (an added token's content verbatim).
  const std::string& token_bytes(int32_t id) const;
  bool is_special(int32_t id) const;
  std::optional<int32_t> token_id(std::string_view token_text) const;
  int32_t vocab_size() const;  // one past the highest id
  // The most bytes one token stands for, added tokens included: text longer than
  // 3 * max_token_bytes() * n (3 for what normalization can merge) is more than n tokens.
  size_t max_token_bytes() const;
  const std::vector<AddedToken>& added_tokens() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Replaces each maximal invalid UTF-8 subpart with U+FFFD (EF BF BD).
std::string repair_utf8(std::string_view s);
// Length of the longest prefix of `s` that ends on a complete UTF-8 sequence boundary,
// treating a trailing incomplete (but so far valid) sequence as not yet complete.
size_t utf8_complete_prefix(std::string_view s);

// Streams text for generated tokens: push() returns what can be shown now and holds back a
// trailing incomplete UTF-8 sequence until the tokens that complete it arrive.
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tok, bool skip_special = true)
      : tok_(tok), skip_special_(skip_special) {}
  std::string push(int32_t id);
  // Whatever is held back, repaired.
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace mx

// The tokenizer and chat template a GGUF carries in its metadata: `tokenizer.ggml.model`
// gpt2 with `tokenizer.ggml.pre` qwen2 (tokens, merges, token types, special ids,
// add_bos_token) builds the same byte-level BPE that the model's tokenizer.json gives,
// NFC normalization included; `tokenizer.chat_template` is the template.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "loader/gguf.h"
#include "text/tokenizer.h"

namespace mx {

// Fails naming the key for a tokenizer model or pre-tokenizer mxserve does not implement.
// CONTROL tokens become special added tokens, USER_DEFINED ones non-special added tokens,
// UNUSED ones are left out (they decode to nothing, as in llama.cpp), the rest form the vocab.
Result<std::shared_ptr<const Tokenizer>> tokenizer_from_gguf(const GgufFile& f);
// The tokenizer.json text HF's Qwen2 tokenizer has for this vocabulary (merges as pairs),
// which tokenizer_from_gguf loads; `mxserve` can write it out beside a converted model.
Result<std::string> gguf_tokenizer_json(const GgufFile& f);
// The text of tokenizer.chat_template; nullopt when the file has none.
std::optional<std::string> chat_template_from_gguf(const GgufFile& f);

// tokenizer.ggml.{bos,eos,padding}_token_id (nullopt when absent) and add_bos_token (false
// when absent: Qwen2's HF tokenizer never adds one). Ids outside tokenizer.ggml.tokens fail.
struct GgufSpecialTokens {
  std::optional<int32_t> bos, eos, pad;
  bool add_bos = false;
};
Result<GgufSpecialTokens> gguf_special_tokens(const GgufFile& f);

// What `inspect` prints about the tokenizer: model, pre, vocab size, merges, special ids.
std::string describe_gguf_tokenizer(const GgufFile& f);

}  // namespace mx

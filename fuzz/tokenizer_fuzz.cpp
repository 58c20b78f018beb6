// libFuzzer target: a tokenizer.json. Whatever loads encodes a short text (fixed, plus the
// input's first bytes) to ids inside the vocabulary, and decodes them, plain, with special
// tokens skipped and incrementally.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "json_mutator.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mx::fuzz::guarded("tokenizer", [&] {
    static const std::string kLabel = "fuzz/tokenizer.json";
    const std::string json = mx::fuzz::as_string(data, size);
    auto tok = mx::Tokenizer::from_json(json, kLabel);
    if (!mx::fuzz::accepted("Tokenizer::from_json", tok, kLabel)) return;
    const mx::Tokenizer& t = **tok;
    std::string text =
        "Hello, world! It's 2024: caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x99\x82 "
        "<|im_start|>user\n  x  \r\n\t<|im_end|> \xFF\xC3";
    text += json.substr(0, 64);
    const std::vector<int32_t> ids = t.encode(text);
    for (int32_t id : ids) {
      MX_FUZZ_CHECK(id >= 0 && id < t.vocab_size(), std::to_string(id));
      (void)t.token_bytes(id);
      (void)t.is_special(id);
    }
    const std::string plain = t.decode(ids);
    MX_FUZZ_CHECK(mx::repair_utf8(plain) == plain, "decode gave invalid UTF-8");
    (void)t.decode(ids, /*skip_special=*/true);
    mx::IncrementalDecoder inc(t);
    std::string streamed;
    for (int32_t id : ids) streamed += inc.push(id);
    streamed += inc.flush();
    MX_FUZZ_CHECK(mx::repair_utf8(streamed) == streamed, "streamed invalid UTF-8");
    for (const mx::AddedToken& a : t.added_tokens()) {
      MX_FUZZ_CHECK(t.token_id(a.content).has_value(), a.content);
    }
  });
  return 0;
}

MX_FUZZ_JSON_MUTATOR

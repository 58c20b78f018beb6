// Speculative decoding against plain decoding: greedy output (token ids and log-probs) bit for
// bit on every fixture family, with drafts rejected at every position so that the paged KV and
// the DeltaNet states roll back; sampled tokens against the model's exact distribution
// (chi-square); the n-gram drafter and the draft-length policy against hand-worked cases.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <optional>

#include "greedy_params.h"
#include "loader/model_text.h"
#include "runtime/generate.h"
#include "runtime/speculative.h"
#include "test_util.h"

namespace mx {
namespace {

struct Loaded {
  std::unique_ptr<DecoderModel> model;
  std::shared_ptr<const Tokenizer> tok;
};

Loaded load(const std::string& path, std::optional<Scheme> scheme = std::nullopt) {
  LoadOptions opt;
  opt.threads = 2;
  opt.quantization = scheme;
  auto m = load_model(path, opt);
  EXPECT_TRUE(m.is_ok()) << path << ": " << m.status().to_string();
  auto t = load_model_tokenizer(path);
  EXPECT_TRUE(t.is_ok()) << path;
  if (!m.is_ok() || !t.is_ok()) return {};
  return {std::move(*m), *t};
}

using test::greedy;

GenerateResult gen(Loaded& l, const std::vector<int32_t>& prompt, const SamplingParams& p,
                   const GenerateOptions& o) {
  auto r = generate(*l.model, *l.tok, prompt, p, 1024, {}, o);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? *r : GenerateResult{};
}

// Proposes the reference continuation with one token spoiled: the first, then the second, ...
// then none, round after round, so that verification rejects at every draft position and
// also accepts whole drafts.
class ScriptedDrafter : public Drafter {
 public:
  ScriptedDrafter(std::vector<int32_t> ref, size_t prompt_len, int32_t vocab)
      : ref_(std::move(ref)), prompt_len_(prompt_len), vocab_(vocab) {}
  Status propose(std::span<const int32_t> history, int max, std::vector<int32_t>* out) override {
    out->clear();
    const size_t at = history.size() - prompt_len_;
    for (size_t i = at; i < ref_.size() && out->size() < static_cast<size_t>(max); ++i)
      out->push_back(ref_[i]);
    const int spoil = round_++ % (max + 1);
    if (spoil < static_cast<int>(out->size())) {
      int32_t& t = (*out)[static_cast<size_t>(spoil)];
      t = (t + 1) % vocab_;
    }
    return Status::ok();
  }

 private:
  std::vector<int32_t> ref_;
  size_t prompt_len_;
  int32_t vocab_;
  int round_ = 0;
};

const char* const kRepeat =
    "Repeat after me: the quick brown fox jumps over the lazy dog. The quick brown fox jumps "
    "over the lazy dog. The quick brown fox";

void check_lossless(const std::string& path, std::optional<Scheme> scheme = std::nullopt) {
  SCOPED_TRACE(path);
  Loaded l = load(path, scheme);
  ASSERT_TRUE(l.model);
  const std::vector<int32_t> prompt = l.tok->encode(kRepeat);
  const SamplingParams p = greedy(80);
  GenerateOptions plain;
  plain.logprobs = true;
  const GenerateResult ref = gen(l, prompt, p, plain);
  ASSERT_EQ(ref.token_ids.size(), 80u);
  const auto same = [&](const GenerateResult& r, const std::string& what) {
    EXPECT_EQ(r.token_ids, ref.token_ids) << what;
    ASSERT_EQ(r.logprobs.size(), ref.logprobs.size()) << what;
    EXPECT_EQ(
        0, std::memcmp(r.logprobs.data(), ref.logprobs.data(), ref.logprobs.size() * sizeof(float)))
        << what << ": log-probs differ";
  };
  for (int k : {1, 4}) {
    GenerateOptions o = plain;
    o.spec = {SpecAlgorithm::kNgram, k};
    same(gen(l, prompt, p, o), "ngram K=" + std::to_string(k));
  }
  for (int k : {3, 6}) {
    ScriptedDrafter d(ref.token_ids, prompt.size(),
                      static_cast<int32_t>(l.model->config().vocab_size));
    GenerateOptions o = plain;
    o.spec.num_draft_tokens = k;
    o.spec.adaptive = false;  // every step drafts: rejections at every position
    o.drafter = &d;
    const GenerateResult r = gen(l, prompt, p, o);
    same(r, "scripted K=" + std::to_string(k));
    EXPECT_GT(r.spec.accepted, 0);
    EXPECT_LT(r.spec.accepted, r.spec.drafted);
  }
  // A draft model: the target itself, whose greedy guesses verification keeps.
  DraftModelDrafter self(*l.model, l.model->config().vocab_size);
  GenerateOptions o = plain;
  o.spec = {SpecAlgorithm::kDraft, 4};
  o.spec.adaptive = false;
  o.drafter = &self;
  const GenerateResult r = gen(l, prompt, p, o);
  same(r, "draft model (the target)");
  EXPECT_GT(r.spec.accepted, r.spec.drafted / 2);
}

TEST(Speculative, GreedyEqualsPlainQwen3Moe) {
  check_lossless(test::source_dir() + "/models/tiny-qwen3-moe");
}
TEST(Speculative, GreedyEqualsPlainQwen3MoeW4A4) {
  check_lossless(test::source_dir() + "/models/tiny-qwen3-moe", Scheme::kW4A4Mxfp4Dual);
}
TEST(Speculative, GreedyEqualsPlainQwen3Dense) {
  check_lossless(test::shared_dir() + "/fixtures/tiny-qwen3-dense");
}
// The hybrid models roll back their conv and delta-rule states to each rejected position.
TEST(Speculative, GreedyEqualsPlainQwen3_5Moe) {
  check_lossless(test::shared_dir() + "/fixtures/tiny-qwen3_5-moe");
}
TEST(Speculative, GreedyEqualsPlainQwen3_5MoeW8A8) {
  check_lossless(test::shared_dir() + "/fixtures/tiny-qwen3_5-moe", Scheme::kW8A8Mxfp8);
}
TEST(Speculative, GreedyEqualsPlainQwen3_5Dense) {
  check_lossless(test::shared_dir() + "/fixtures/tiny-qwen3_5-dense");
}
TEST(Speculative, GreedyEqualsPlainGgufQ4KM) {
  check_lossless(test::shared_dir() + "/fixtures/gguf/tiny-qwen3-moe-allmoe.Q4_K_M.gguf");
}
TEST(Speculative, GreedyEqualsPlainGgufQwen3_5Q8_0) {
  check_lossless(test::shared_dir() + "/fixtures/gguf/tiny-qwen3_5-moe.Q8_0.gguf");
}

// Draft models of other families than the target, sharing its tokenizer: their guesses are
// mostly rejected, at every position, and a hybrid draft model's recurrent state goes back to
// the one after the confirmed tokens each time; the output is plain decoding's.
void check_draft_models(const std::string& target, const std::vector<std::string>& drafts) {
  SCOPED_TRACE(target);
  Loaded l = load(target);
  ASSERT_TRUE(l.model);
  const std::vector<int32_t> prompt = l.tok->encode(kRepeat);
  const SamplingParams p = greedy(48);
  GenerateOptions plain;
  plain.logprobs = true;
  const GenerateResult ref = gen(l, prompt, p, plain);
  for (const std::string& path : drafts) {
    Loaded d = load(path);
    ASSERT_TRUE(d.model);
    for (int k : {2, 5}) {
      DraftModelDrafter drafter(*d.model, l.model->config().vocab_size);
      GenerateOptions o = plain;
      o.spec = {SpecAlgorithm::kDraft, k};
      o.spec.adaptive = false;
      o.drafter = &drafter;
      const GenerateResult r = gen(l, prompt, p, o);
      EXPECT_EQ(r.token_ids, ref.token_ids) << path << " K=" << k;
      EXPECT_EQ(r.logprobs, ref.logprobs) << path << " K=" << k;
      EXPECT_GT(r.spec.drafted, 0) << path;
      EXPECT_LT(r.spec.accepted, r.spec.drafted) << path;
    }
  }
}

TEST(Speculative, DraftModelsOfOtherFamiliesEqualPlain) {
  const std::string f = test::shared_dir() + "/fixtures/";
  check_draft_models(test::source_dir() + "/models/tiny-qwen3-moe",
                     {f + "tiny-qwen3_5-dense", f + "tiny-qwen3-dense"});
  check_draft_models(f + "tiny-qwen3_5-moe", {f + "tiny-qwen3_5-dense"});
}

// A draft model's guesses are its own greedy continuation of the history, whatever the target
// kept of the last guesses: after a history that took two of them and then another token, after
// one that took none, and after a history that is not a continuation at all.
TEST(Speculative, DraftModelGuessesItsOwnGreedyContinuation) {
  const std::string f = test::shared_dir() + "/fixtures/";
  for (const std::string& path : {f + "tiny-qwen3_5-dense", f + "tiny-qwen3-dense"}) {
    SCOPED_TRACE(path);
    Loaded d = load(path);
    ASSERT_TRUE(d.model);
    const auto vocab = static_cast<int32_t>(d.model->config().vocab_size);
    DraftModelDrafter drafter(*d.model, vocab);
    ASSERT_TRUE(drafter.begin(256).is_ok());
    const auto continuation = [&](const std::vector<int32_t>& history, int n) {
      return gen(d, history, greedy(n), {}).token_ids;
    };
    std::vector<int32_t> history = d.tok->encode(kRepeat), guesses;
    ASSERT_TRUE(drafter.propose(history, 4, &guesses).is_ok());
    EXPECT_EQ(guesses, continuation(history, 4));
    history.insert(history.end(), guesses.begin(), guesses.begin() + 2);
    history.push_back((guesses[2] + 1) % vocab);  // the target's own token after two guesses
    ASSERT_TRUE(drafter.propose(history, 3, &guesses).is_ok());
    EXPECT_EQ(guesses, continuation(history, 3));
    history.push_back((guesses[0] + 7) % vocab);  // none kept
    ASSERT_TRUE(drafter.propose(history, 5, &guesses).is_ok());
    EXPECT_EQ(guesses, continuation(history, 5));
    history = d.tok->encode("An entirely different history.");
    ASSERT_TRUE(drafter.propose(history, 2, &guesses).is_ok());
    EXPECT_EQ(guesses, continuation(history, 2));
  }
}

// The request's processors see each verified row as plain decoding sees that position:
// penalties over the tokens kept so far, logit_bias, min_tokens, a stop string and a stop
// token, with drafts rejected at every position.
TEST(Speculative, ProcessorsAndStopsEqualPlain) {
  Loaded l = load(test::source_dir() + "/models/tiny-qwen3-moe");
  ASSERT_TRUE(l.model);
  const std::vector<int32_t> prompt = l.tok->encode(kRepeat);
  for (int variant = 0; variant < 3; ++variant) {
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 60;
    if (variant == 0) {
      p.repetition_penalty = 1.3f;
      p.frequency_penalty = 0.4f;
      p.logit_bias = {{275, 3.0f}};
    } else if (variant == 1) {
      p.stop = {" the most"};
      p.min_tokens = 5;
    } else {
      p.presence_penalty = 0.8f;
      p.stop_token_ids = {318};
      p.min_tokens = 3;
    }
    GenerateOptions plain;
    plain.logprobs = true;
    const GenerateResult ref = gen(l, prompt, p, plain);
    // The stop variants do stop, and before the budget.
    if (variant > 0) {
      EXPECT_EQ(ref.finish_reason, "stop") << "variant " << variant;
    }
    ScriptedDrafter d(ref.token_ids, prompt.size(),
                      static_cast<int32_t>(l.model->config().vocab_size));
    GenerateOptions o = plain;
    o.spec.num_draft_tokens = 4;
    o.spec.adaptive = false;
    o.drafter = &d;
    const GenerateResult r = gen(l, prompt, p, o);
    EXPECT_EQ(r.token_ids, ref.token_ids) << "variant " << variant;
    EXPECT_EQ(r.text, ref.text) << "variant " << variant;
    EXPECT_EQ(r.finish_reason, ref.finish_reason) << "variant " << variant;
    EXPECT_EQ(r.logprobs, ref.logprobs) << "variant " << variant;
  }
}

std::vector<double> softmax(const std::vector<float>& logits) {
  double mx = -INFINITY;
  for (float x : logits) mx = std::max(mx, static_cast<double>(x));
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp(static_cast<double>(logits[i]) - mx);
  for (double& x : p) x /= sum;
  return p;
}

// The model's next-token distribution after `tokens`, from a plain forward.
std::vector<double> next_probs(DecoderModel& m, const std::vector<int32_t>& tokens) {
  KvCache cache(m.config(), static_cast<int64_t>(tokens.size()));
  std::vector<float> logits(static_cast<size_t>(m.config().vocab_size));
  EXPECT_TRUE(
      m.forward(tokens.data(), static_cast<int64_t>(tokens.size()), cache, false, logits.data())
          .is_ok());
  return softmax(logits);
}

// Always proposes the same two tokens after the first generated one.
class FixedDrafter : public Drafter {
 public:
  FixedDrafter(std::vector<int32_t> d, size_t prompt_len) : d_(std::move(d)), at_(prompt_len + 1) {}
  Status propose(std::span<const int32_t> history, int max, std::vector<int32_t>* out) override {
    out->clear();
    if (history.size() != at_) return Status::ok();
    for (size_t i = 0; i < d_.size() && out->size() < static_cast<size_t>(max); ++i)
      out->push_back(d_[i]);
    return Status::ok();
  }

 private:
  std::vector<int32_t> d_;
  size_t at_;
};

// Temperature 1: the first three generated tokens, the second and third verified against
// drafts, follow the model's exact joint distribution. Exact probabilities come from plain
// forwards; every (t1, t2, t3) expected at least 5 times is a bin, the rest one more bin.
// The test fails when the statistic exceeds the chi-square quantile at p = 0.001 (Wilson-
// Hilferty); the seeds are fixed, so the outcome is too.
TEST(Speculative, SamplingFollowsTheModelsDistribution) {
  Loaded l = load(test::source_dir() + "/models/tiny-qwen3-moe");
  ASSERT_TRUE(l.model);
  DecoderModel& m = *l.model;
  const std::vector<int32_t> prompt = l.tok->encode("She said");
  // A quarter of the samples under the sanitizers (the statistic passes there by a wide margin
  // too: 10.4 against 26.3 over 9 bins); the full count in the release run.
  constexpr int kSamples = test::kSanitized ? 500 : 2000;
  std::map<std::vector<int32_t>, double> exact;
  const auto p1 = next_probs(m, prompt);
  for (size_t a = 0; a < p1.size(); ++a) {
    if (p1[a] * kSamples < 5) continue;
    std::vector<int32_t> s1 = prompt;
    s1.push_back(static_cast<int32_t>(a));
    const auto p2 = next_probs(m, s1);
    for (size_t b = 0; b < p2.size(); ++b) {
      if (p1[a] * p2[b] * kSamples < 5) continue;
      std::vector<int32_t> s2 = s1;
      s2.push_back(static_cast<int32_t>(b));
      const auto p3 = next_probs(m, s2);
      for (size_t c = 0; c < p3.size(); ++c) {
        const double pr = p1[a] * p2[b] * p3[c];
        if (pr * kSamples >= 5)
          exact[{static_cast<int32_t>(a), static_cast<int32_t>(b), static_cast<int32_t>(c)}] = pr;
      }
    }
  }
  ASSERT_GE(exact.size(), 4u);
  // Drafts: the most likely second and third tokens after the most likely first.
  std::vector<int32_t> top = exact.begin()->first;
  for (const auto& [k, v] : exact) top = v > exact[top] ? k : top;
  FixedDrafter d({top[1], top[2]}, prompt.size());
  SamplingParams p;
  p.temperature = 1;
  p.max_tokens = 4;  // room for two drafts after the first token
  p.ignore_eos = true;
  GenerateOptions o;
  o.drafter = &d;
  o.spec.num_draft_tokens = 2;
  o.spec.adaptive = false;
  std::map<std::vector<int32_t>, int> seen;
  int other = 0;
  SpecStats total;
  for (int i = 0; i < kSamples; ++i) {
    p.seed = static_cast<uint64_t>(i + 1);
    const GenerateResult r = gen(l, prompt, p, o);
    ASSERT_GE(r.token_ids.size(), 3u);
    const std::vector<int32_t> key(r.token_ids.begin(), r.token_ids.begin() + 3);
    if (exact.count(key)) {
      ++seen[key];
    } else {
      ++other;
    }
    total.drafted += r.spec.drafted;
    total.accepted += r.spec.accepted;
  }
  // Both outcomes of verification took place.
  EXPECT_GT(total.accepted, kSamples / 10);
  EXPECT_LT(total.accepted, total.drafted - kSamples / 10);
  double chi2 = 0, in_bins = 0;
  for (const auto& [k, pr] : exact) {
    const double e = pr * kSamples;
    const double o_k = seen.count(k) ? seen[k] : 0;
    chi2 += (o_k - e) * (o_k - e) / e;
    in_bins += pr;
  }
  const double e_other = (1 - in_bins) * kSamples;
  ASSERT_GE(e_other, 5);
  chi2 += (other - e_other) * (other - e_other) / e_other;
  const double df = static_cast<double>(exact.size());  // bins - 1, the "other" bin included
  const double z = 3.0902;                              // the standard normal's 0.999 quantile
  const double h = 2.0 / (9.0 * df);
  const double limit = df * std::pow(1 - h + z * std::sqrt(h), 3);
  EXPECT_LT(chi2, limit) << exact.size() + 1 << " bins";
  std::printf("chi-square %.1f over %zu bins (limit %.1f at p = 0.001); drafts %lld, kept %lld\n",
              chi2, exact.size() + 1, limit, static_cast<long long>(total.drafted),
              static_cast<long long>(total.accepted));
}

TEST(Speculative, NgramProposesWhatFollowedTheLatestMatch) {
  NgramDrafter d(2, 4);
  std::vector<int32_t> out;
  // "1 2 3 9 ... 1 2 3 7 8 ... 1 2 3": the latest "1 2 3" was followed by 7 8.
  ASSERT_TRUE(
      d.propose(std::vector<int32_t>{1, 2, 3, 9, 5, 1, 2, 3, 7, 8, 6, 1, 2, 3}, 3, &out).is_ok());
  EXPECT_EQ(out, (std::vector<int32_t>{7, 8, 6}));
  // Only the last two tokens recur; the continuation stops at the end of the history.
  ASSERT_TRUE(d.propose(std::vector<int32_t>{4, 5, 6, 9, 5, 6}, 5, &out).is_ok());
  EXPECT_EQ(out, (std::vector<int32_t>{9, 5, 6}));
  // No suffix of two or more tokens occurred before.
  ASSERT_TRUE(d.propose(std::vector<int32_t>{1, 2, 3, 4, 3}, 4, &out).is_ok());
  EXPECT_TRUE(out.empty());
  ASSERT_TRUE(d.propose(std::vector<int32_t>{1, 2, 1, 2}, 0, &out).is_ok());
  EXPECT_TRUE(out.empty());
}

TEST(Speculative, PolicyDraftsOnlyWhatPays) {
  // Rows cost as many times one row as they are: drafting can never pay.
  RowCost linear;
  for (int r = 1; r <= 5; ++r) linear.record(r, 0.001 * r);
  DraftPolicy sure(4);
  for (int i = 0; i < 20; ++i) sure.record_acceptance(4, 4);
  EXPECT_EQ(sure.choose(linear), 0);
  // Rows nearly free and guesses usually kept: draft the most.
  RowCost flat;
  for (int r = 1; r <= 5; ++r) flat.record(r, 0.001 * (1 + 0.02 * r));
  EXPECT_EQ(sure.choose(flat), 4);
  // In a step of 8 rows, the cost at 9..12 rows decides, not at 2..5.
  RowCost batch;
  for (int r = 1; r <= 12; ++r) batch.record(r, r <= 8 ? 0.001 * (1 + 0.02 * r) : 0.001 * r);
  EXPECT_EQ(sure.choose(batch, 1), 4);
  EXPECT_EQ(sure.choose(batch, 8), 0);
  // Guesses always rejected: plain decode, with a probe of one guess every 32 steps.
  RowCost mild;
  for (int r = 1; r <= 5; ++r) mild.record(r, 0.001 * (1 + 0.1 * r));
  DraftPolicy rejected(4);
  for (int i = 0; i < 40; ++i) rejected.record_acceptance(4, 0);
  int drafted_steps = 0;
  for (int i = 0; i < 64; ++i) drafted_steps += rejected.choose(mild) > 0 ? 1 : 0;
  EXPECT_EQ(drafted_steps, 2);
  // A drafter whose guess costs two steps (a draft model as slow as the target): not even
  // every guess kept would pay, so it is not probed either. Its cost past the one measured
  // guess grows with the guesses.
  RowCost slow_draft;
  slow_draft.record(1, 0.002);
  EXPECT_DOUBLE_EQ(slow_draft.at_scaled(4), 0.008);
  EXPECT_DOUBLE_EQ(slow_draft.at(4), 0.002);
  DraftPolicy unpaid(4);
  for (int i = 0; i < 40; ++i) unpaid.record_acceptance(4, 0);
  int probes = 0;
  for (int i = 0; i < 64; ++i) probes += unpaid.choose(mild, 1, &slow_draft) > 0 ? 1 : 0;
  EXPECT_EQ(probes, 0);
}

TEST(Speculative, FlagsNameWhatIsMissing) {
  EXPECT_EQ(*parse_spec_algorithm("ngram"), SpecAlgorithm::kNgram);
  EXPECT_EQ(*parse_spec_algorithm(""), SpecAlgorithm::kNone);
  EXPECT_EQ(*parse_spec_algorithm("mtp"), SpecAlgorithm::kMtp);
  EXPECT_EQ(*parse_spec_algorithm("nextn"), SpecAlgorithm::kMtp);
  EXPECT_EQ(*parse_spec_algorithm("draft"), SpecAlgorithm::kDraft);
  EXPECT_EQ(*parse_spec_algorithm("STANDALONE"), SpecAlgorithm::kDraft);
  EXPECT_EQ(parse_spec_algorithm("dflash").status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(parse_spec_algorithm("magic").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mx

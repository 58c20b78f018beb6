// The serving engine on the bundled model: 16 concurrent greedy requests give exactly the
// tokens each gives alone (also when a small KV budget forces preemption); a cancelled
// request frees its blocks; a full queue refuses work.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>

#include "core/mapped_file.h"
#include "engine_collector.h"
#include "runtime/engine.h"
#include "test_util.h"
#include "text/grammar.h"

namespace mx {
namespace {

using test::Collector;

struct Fixture {
  std::unique_ptr<DecoderModel> model;
  std::shared_ptr<const Tokenizer> tok;
  std::vector<std::vector<int32_t>> prompts;
};

Fixture make_fixture(const std::string& dir = test::source_dir() + "/models/tiny-qwen3-moe") {
  Fixture f;
  LoadOptions opt;
  opt.threads = 2;
  auto m = load_model(dir, opt);
  EXPECT_TRUE(m.is_ok());
  f.model = std::move(m).value();
  f.tok = *Tokenizer::load(dir);
  auto prose = read_text_file(test::source_dir() + "/models/tiny-qwen3-moe/eval/prose_heldout.txt");
  for (int i = 0; i < 16; ++i) {
    f.prompts.push_back(f.tok->encode(
        prose->substr(static_cast<size_t>(i) * 997, 20 + static_cast<size_t>(i) * 13)));
  }
  return f;
}

// Returns the engine's stats. With `spec`, the engine decodes speculatively and each request
// runs longer, so that the bundled model's loops give the drafter something to find; the
// reference is always plain decoding alone, log-probs included.
EngineStats run_concurrent(Fixture& f, const SchedulerConfig& cfg, SpeculativeOptions spec = {},
                           DecoderModel* draft = nullptr) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = spec.algorithm == SpecAlgorithm::kNone ? 24 : 64;
  p.stop = {". "};  // prose hits it: both paths must stop at the same place
  Collector c;
  EngineStats stats;
  {
    Engine engine(*f.model, *f.tok, cfg, spec, draft);
    for (size_t i = 0; i < f.prompts.size(); ++i) {
      EngineRequest req{f.prompts[i], p, c.sink(i)};
      req.top_logprobs = 0;
      auto r = engine.submit(std::move(req));
      EXPECT_TRUE(r.is_ok()) << r.status().to_string();
      if (!r.is_ok()) return stats;
    }
    EXPECT_TRUE(c.wait_for(static_cast<int>(f.prompts.size())));
    EXPECT_EQ(engine.stats().kv_blocks_used, 0);
    stats = engine.stats();
  }
  GenerateOptions plain;
  plain.logprobs = true;
  for (size_t i = 0; i < f.prompts.size(); ++i) {
    auto alone = generate(*f.model, *f.tok, f.prompts[i], p, 1024, {}, plain);
    EXPECT_TRUE(alone.is_ok());
    if (!alone.is_ok()) return stats;
    EXPECT_EQ(c.tokens[i], alone->token_ids) << "request " << i;
    // Hybrid models too: their prefill chunks start at the delta rule's chunk boundaries, so
    // that every split of a prompt rounds alike.
    EXPECT_EQ(c.logprobs[i], alone->logprobs) << "request " << i;
    EXPECT_EQ(c.text[i], alone->text) << "request " << i;
    EXPECT_EQ(c.reason[i], alone->finish_reason);
  }
  return stats;
}

// 16 running requests; with `tight` blocks (384 slots for ~1,900 needed) requests get
// preempted and recomputed.
SchedulerConfig concurrency(bool tight) {
  SchedulerConfig cfg;
  cfg.max_running_requests = 16;
  cfg.chunked_prefill_size = tight ? 64 : 128;
  cfg.num_blocks = tight ? 24 : 256;
  cfg.block_size = 16;
  return cfg;
}

TEST(Engine, ConcurrentGreedyEqualsOneAtATime) {
  Fixture f = make_fixture();
  EXPECT_EQ(run_concurrent(f, concurrency(false)).preemptions, 0);
}

TEST(Engine, PreemptionKeepsResultsExact) {
  Fixture f = make_fixture();
  EXPECT_GT(run_concurrent(f, concurrency(true)).preemptions, 0);
}

// Speculative decoding under 16 concurrent requests: the tokens and log-probs of plain
// decoding alone, with and without the prefix cache and preemption.
void check_speculative(Fixture& f, SchedulerConfig cfg, bool expect_preemption,
                       SpecAlgorithm a = SpecAlgorithm::kNgram, DecoderModel* draft = nullptr) {
  const EngineStats s = run_concurrent(f, cfg, {a, 4}, draft);
  // The fixtures' MTP weights and draft models are random: their guesses are drafted and
  // mostly rejected.
  if (draft == nullptr) {
    EXPECT_GT(s.spec_accepted_tokens, 0);
  }
  EXPECT_GT(s.spec_draft_tokens, 0);
  EXPECT_LT(s.spec_accepted_tokens, s.spec_draft_tokens);
  int64_t per_pos = 0;
  for (int64_t n : s.spec_accepted_per_pos) per_pos += n;
  EXPECT_EQ(per_pos, s.spec_accepted_tokens);
  if (expect_preemption) {
    EXPECT_GT(s.preemptions, 0);
  }
}

TEST(Engine, SpeculativeEqualsPlain) {
  Fixture f = make_fixture();
  check_speculative(f, concurrency(false), false);
  SchedulerConfig no_cache = concurrency(false);
  no_cache.prefix_caching = false;
  check_speculative(f, no_cache, false);
  check_speculative(f, concurrency(true), true);
}

// A draft model of another family (hybrid: its recurrent state goes back after each draft) for
// every request, with and without preemption.
TEST(Engine, DraftModelSpeculativeEqualsPlain) {
  Fixture f = make_fixture();
  LoadOptions opt;
  opt.threads = 2;
  auto draft = load_model(test::shared_dir() + "/fixtures/tiny-qwen3_5-dense", opt);
  ASSERT_TRUE(draft.is_ok()) << draft.status().to_string();
  check_speculative(f, concurrency(false), false, SpecAlgorithm::kDraft, draft->get());
  check_speculative(f, concurrency(true), true, SpecAlgorithm::kDraft, draft->get());
}

// Runs the 16 prompts greedily, each under its own matcher of `g`, with `spec`.
EngineStats run_under_grammar(Fixture& f, const std::shared_ptr<const Grammar>& g,
                              const std::shared_ptr<const TokenVocab>& vocab,
                              const SpeculativeOptions& spec, Collector& c) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 64;
  Engine engine(*f.model, *f.tok, concurrency(false), spec);
  for (size_t i = 0; i < f.prompts.size(); ++i) {
    EngineRequest req{f.prompts[i], p, c.sink(i)};
    req.top_logprobs = 0;
    req.grammar = std::make_shared<GrammarMatcher>(g, vocab);
    auto r = engine.submit(std::move(req));
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  }
  EXPECT_TRUE(c.wait_for(static_cast<int>(f.prompts.size())));
  return engine.stats();
}

// Under a grammar each verified row is masked by the grammar as it stands after the rows
// before it, and drafts stop where the grammar refuses them: plain decoding's tokens and
// log-probs, and documents the grammar accepts.
TEST(Engine, SpeculativeUnderAGrammarEqualsPlain) {
  Fixture f = make_fixture();
  std::vector<std::string> bytes;
  std::vector<int32_t> stops, specials;
  for (int32_t id = 0; id < f.tok->vocab_size(); ++id) {
    bytes.push_back(f.tok->token_bytes(id));
    if (f.tok->is_special(id)) specials.push_back(id);
  }
  for (const char* s : {"<|im_end|>", "<|endoftext|>"}) {
    if (auto id = f.tok->token_id(s)) stops.push_back(*id);
  }
  const auto vocab = std::make_shared<const TokenVocab>(bytes, stops, specials);
  // Open strings, where the model's loops give the drafter guesses to keep; bounded ones,
  // whose documents end inside verified rows.
  for (const bool bounded : {false, true}) {
    auto g = grammar_from_json_schema(nlohmann::ordered_json::parse(
        bounded ? R"({"type": "object", "properties": {"text": {"type": "string", "maxLength": 40},
                     "more": {"type": "array", "items": {"type": "string", "maxLength": 12},
                     "maxItems": 2}}, "required": ["text"]})"
                : R"({"type": "object", "properties": {"text": {"type": "string"}},
                     "required": ["text"]})"));
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    Collector plain, spec;
    run_under_grammar(f, *g, vocab, {}, plain);
    const EngineStats s = run_under_grammar(f, *g, vocab, {SpecAlgorithm::kNgram, 4}, spec);
    EXPECT_GT(s.spec_draft_tokens, 0);
    if (!bounded) {
      EXPECT_GT(s.spec_accepted_tokens, 0);
      EXPECT_LT(s.spec_accepted_tokens, s.spec_draft_tokens);
    }
    size_t complete = 0;
    for (size_t i = 0; i < f.prompts.size(); ++i) {
      EXPECT_EQ(spec.tokens[i], plain.tokens[i]) << "request " << i;
      EXPECT_EQ(spec.logprobs[i], plain.logprobs[i]) << "request " << i;
      EXPECT_EQ(spec.text[i], plain.text[i]) << "request " << i;
      EXPECT_EQ(spec.reason[i], plain.reason[i]) << "request " << i;
      ASSERT_EQ(spec.text[i].rfind("{\"text\":", 0), 0u) << spec.text[i];
      if (spec.reason[i] == "stop") {
        const auto doc = nlohmann::json::parse(spec.text[i], nullptr, false);
        EXPECT_TRUE(doc.is_object() && doc["text"].is_string()) << spec.text[i];
        ++complete;
      }
    }
    if (bounded) {
      EXPECT_EQ(complete, f.prompts.size());
    }
    std::printf("%s strings: %zu of %zu documents complete; %lld of %lld guesses kept\n",
                bounded ? "bounded" : "open", complete, f.prompts.size(),
                static_cast<long long>(s.spec_accepted_tokens),
                static_cast<long long>(s.spec_draft_tokens));
  }
}

// Qwen3.5: each running request's recurrent state in its own slot, carried across prefill
// chunks, reset on readmission after preemption.
std::string qwen3_5_dir() { return test::shared_dir() + "/fixtures/tiny-qwen3_5-moe"; }

TEST(Engine, HybridConcurrentGreedyEqualsOneAtATime) {
  Fixture f = make_fixture(qwen3_5_dir());
  EXPECT_EQ(run_concurrent(f, concurrency(false)).preemptions, 0);
}

TEST(Engine, HybridPreemptionKeepsResults) {
  Fixture f = make_fixture(qwen3_5_dir());
  EXPECT_GT(run_concurrent(f, concurrency(true)).preemptions, 0);
}

// Each request's recurrent state returns to its last kept position in its own slot.
TEST(Engine, HybridSpeculativeEqualsPlain) {
  Fixture f = make_fixture(qwen3_5_dir());
  check_speculative(f, concurrency(false), false);
  check_speculative(f, concurrency(true), true);
}

// The MTP head, one drafter per request fed the rows that stood; restarted after preemption.
TEST(Engine, HybridMtpEqualsPlain) {
  Fixture f = make_fixture(qwen3_5_dir());
  LoadOptions opt;
  opt.threads = 2;
  auto head = load_mtp_head(qwen3_5_dir(), *f.model, opt);
  ASSERT_TRUE(head.is_ok()) << head.status().to_string();
  check_speculative(f, concurrency(false), false, SpecAlgorithm::kMtp, head->get());
  check_speculative(f, concurrency(true), true, SpecAlgorithm::kMtp, head->get());
}

// Prefix caching on a hybrid model: a request that shares a long prefix with an earlier one
// loads the recurrent state saved where its cached blocks end, and its tokens and log-probs
// equal those of the request alone.
TEST(Engine, HybridPrefixCacheEqualsAlone) {
  Fixture f = make_fixture(qwen3_5_dir());
  auto prose = read_text_file(test::source_dir() + "/models/tiny-qwen3-moe/eval/prose_heldout.txt");
  const std::string common = prose->substr(0, 1400);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(
        f.tok->encode(common + prose->substr(5000 + static_cast<size_t>(i) * 300, 80)));
  }
  SchedulerConfig cfg = concurrency(false);
  cfg.chunked_prefill_size = 512;
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 16;
  Collector c;
  EngineStats s;
  {
    Engine engine(*f.model, *f.tok, cfg);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EngineRequest req{prompts[i], p, c.sink(i)};
      req.top_logprobs = 0;
      ASSERT_TRUE(engine.submit(std::move(req)).is_ok());
      // The first alone, so that its states are kept before the others look.
      if (i == 0) {
        ASSERT_TRUE(c.wait_for(1));
      }
    }
    ASSERT_TRUE(c.wait_for(static_cast<int>(prompts.size())));
    s = engine.stats();
  }
  EXPECT_GE(s.prefix_cache_hits, 3 * 256);
  GenerateOptions plain;
  plain.logprobs = true;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto alone = generate(*f.model, *f.tok, prompts[i], p, 1024, {}, plain);
    ASSERT_TRUE(alone.is_ok());
    EXPECT_EQ(c.tokens[i], alone->token_ids) << "request " << i;
    EXPECT_EQ(c.logprobs[i], alone->logprobs) << "request " << i;
  }
}

TEST(Engine, CancelFreesBlocksAndFullQueueRefuses) {
  Fixture f = make_fixture();
  SchedulerConfig cfg;
  cfg.max_waiting_requests = 1;
  cfg.max_running_requests = 1;
  Engine engine(*f.model, *f.tok, cfg);
  SamplingParams p;
  p.max_tokens = 500;
  p.ignore_eos = true;
  Collector c;
  auto r = engine.submit({f.prompts[0], p, c.sink(0)});
  ASSERT_TRUE(r.is_ok());
  // Wait for generation to start, then fill the queue past its bound.
  for (int i = 0; i < 1000 && engine.stats().running == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  auto r2 = engine.submit({f.prompts[1], p, c.sink(1)});
  ASSERT_TRUE(r2.is_ok());
  auto r3 = engine.submit({f.prompts[2], p, c.sink(2)});
  EXPECT_EQ(r3.status().code(), StatusCode::kOutOfRange);  // the waiting queue holds one
  // A request that can never run is the client's error (400), even while the queue is full.
  SamplingParams past = p;
  past.max_tokens = 5000;
  EXPECT_EQ(engine.submit({f.prompts[2], past, nullptr}).status().code(),
            StatusCode::kInvalidArgument);
  engine.cancel(*r);
  engine.cancel(*r2);
  ASSERT_TRUE(c.wait_for(2));
  EXPECT_EQ(c.reason[0], "cancelled");
  for (int i = 0; i < 1000 && engine.stats().kv_blocks_used != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
  SamplingParams big = p;
  big.max_tokens = 5000;
  EXPECT_FALSE(engine.submit({f.prompts[0], big, nullptr}).is_ok());  // beyond the context
}

// Within the context but beyond the whole KV cache: kInvalidArgument (a 400), not the full
// queue's kOutOfRange (a 503 that invites a retry that can never succeed).
TEST(Engine, RequestBeyondTheKvCacheIsInvalid) {
  Fixture f = make_fixture();
  SchedulerConfig cfg;
  cfg.num_blocks = 4;
  cfg.block_size = 16;
  Engine engine(*f.model, *f.tok, cfg);
  SamplingParams p;
  p.max_tokens = 100;
  auto r = engine.submit({f.prompts[0], p, nullptr});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find("exceeds the KV cache of 64 tokens"), std::string::npos);
  p.max_tokens = 0;
  EXPECT_EQ(engine.submit({f.prompts[0], p, nullptr}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mx

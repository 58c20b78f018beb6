// The prefix cache's radix tree as pure logic (match, insert, references, LRU eviction) against
// hand-derived expectations, and the engine on the bundled model: requests sharing prefixes
// give the same greedy tokens and bit-identical log-probs with the cache and without it (BF16,
// MXFP8, and a BF16 KV cache), although a cached prefix was computed in other chunks by other
// requests. A hybrid model runs without the cache.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>

#include "core/mapped_file.h"
#include "runtime/engine.h"
#include "runtime/prefix_cache.h"
#include "test_util.h"

namespace mx {
namespace {

// Block size 4: X = [1..8] in blocks {7, 3}.
TEST(PrefixCache, MatchFollowsWholeBlocksOfThePrefix) {
  PrefixCache c(4);
  const std::vector<int32_t> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<int32_t> table = {7, 3, 5}, dup;
  c.insert(x.data(), 2, 0, &table, &dup);
  EXPECT_TRUE(dup.empty());
  EXPECT_EQ(table, (std::vector<int32_t>{7, 3, 5}));
  EXPECT_EQ(c.cached_blocks(), 2);
  EXPECT_EQ(c.evictable_blocks(), 0);  // the inserting request references both
  EXPECT_EQ(c.refs(7), 1);
  EXPECT_FALSE(c.contains(5));
  EXPECT_EQ(c.match(x.data(), 10), (std::vector<int32_t>{7, 3}));
  EXPECT_EQ(c.match(x.data(), 8), (std::vector<int32_t>{7, 3}));
  EXPECT_EQ(c.match(x.data(), 7), (std::vector<int32_t>{7}));  // the second block is partial
  EXPECT_TRUE(c.match(x.data(), 3).empty());
  const std::vector<int32_t> other = {1, 2, 3, 4, 5, 6, 7, 0};
  EXPECT_EQ(c.match(other.data(), 8), (std::vector<int32_t>{7}));
  // [5..8] after a different first block is a different node.
  const std::vector<int32_t> y = {9, 9, 9, 9, 5, 6, 7, 8};
  EXPECT_TRUE(c.match(y.data(), 8).empty());
  std::vector<int32_t> ty = {2, 4};
  c.insert(y.data(), 2, 0, &ty, &dup);
  EXPECT_EQ(c.match(y.data(), 8), (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(c.match(x.data(), 8), (std::vector<int32_t>{7, 3}));
  EXPECT_EQ(c.cached_blocks(), 4);
}

// A request that computed cached blocks again (it started before they were cached) swaps its
// copies for the cached ones and gives its own back; one that matched extends the path.
TEST(PrefixCache, InsertDedupsAndExtendsAMatchedPath) {
  PrefixCache c(2);
  const std::vector<int32_t> x = {1, 2, 3, 4, 5, 6};
  std::vector<int32_t> a = {10, 11}, b = {20, 21, 22}, dup;
  c.insert(x.data(), 2, 0, &a, &dup);
  c.insert(x.data(), 3, 0, &b, &dup);
  EXPECT_EQ(dup, (std::vector<int32_t>{20, 21}));
  EXPECT_EQ(b, (std::vector<int32_t>{10, 11, 22}));
  EXPECT_EQ(c.refs(10), 2);
  EXPECT_EQ(c.refs(11), 2);
  EXPECT_EQ(c.refs(22), 1);
  EXPECT_EQ(c.cached_blocks(), 3);
  const std::vector<int32_t> y = {1, 2, 7, 8};
  std::vector<int32_t> m = c.match(y.data(), 4);
  ASSERT_EQ(m, (std::vector<int32_t>{10}));
  ASSERT_TRUE(c.acquire(m).is_ok());
  m.push_back(30);
  dup.clear();
  c.insert(y.data(), 2, 1, &m, &dup);
  EXPECT_TRUE(dup.empty());
  EXPECT_EQ(c.refs(10), 3);
  EXPECT_EQ(c.match(y.data(), 4), (std::vector<int32_t>{10, 30}));
}

TEST(PrefixCache, ReleaseWithoutAReferenceIsRefusedAndChangesNothing) {
  PrefixCache c(2);
  const std::vector<int32_t> x = {1, 2, 3, 4};
  std::vector<int32_t> a = {0, 1}, dup;
  c.insert(x.data(), 2, 0, &a, &dup);
  EXPECT_FALSE(c.release({0, 0}).is_ok());  // one reference, released twice
  EXPECT_EQ(c.refs(0), 1);
  EXPECT_FALSE(c.release({5}).is_ok());  // not cached
  EXPECT_FALSE(c.acquire({1, 5}).is_ok());
  EXPECT_EQ(c.refs(1), 1);
  EXPECT_TRUE(c.release({0, 1}).is_ok());
  EXPECT_EQ(c.evictable_blocks(), 2);
  EXPECT_FALSE(c.release({1}).is_ok());
  EXPECT_EQ(c.evictable_blocks(), 2);
}

// Block size 2. X = [1,2,3,4] in {10, 11}; Y = [1,2,5,6] matches 10 and adds 12; Z = [7,8] in
// {13}. Released in the order X, Z, Y: the unreferenced leaves by last use are 11, 13, 12, and
// 10 becomes a leaf once 11 and 12 are gone.
TEST(PrefixCache, EvictsUnreferencedLeavesLeastRecentlyUsedFirst) {
  PrefixCache c(2);
  const std::vector<int32_t> x = {1, 2, 3, 4}, y = {1, 2, 5, 6}, z = {7, 8};
  std::vector<int32_t> tx = {10, 11}, tz = {13}, dup;
  c.insert(x.data(), 2, 0, &tx, &dup);
  std::vector<int32_t> ty = c.match(y.data(), 4);
  ASSERT_EQ(ty, (std::vector<int32_t>{10}));
  ASSERT_TRUE(c.acquire(ty).is_ok());
  ty.push_back(12);
  c.insert(y.data(), 2, 1, &ty, &dup);
  c.insert(z.data(), 1, 0, &tz, &dup);
  ASSERT_TRUE(dup.empty());
  std::vector<int32_t> freed;
  EXPECT_EQ(c.evict(4, &freed), 0);  // everything referenced
  ASSERT_TRUE(c.release(tx).is_ok());
  ASSERT_TRUE(c.release(tz).is_ok());
  EXPECT_EQ(c.evictable_blocks(), 2);  // 11 and 13; 10 is still Y's
  EXPECT_EQ(c.evict(4, &freed), 2);
  EXPECT_EQ(freed, (std::vector<int32_t>{11, 13}));
  ASSERT_TRUE(c.release(ty).is_ok());
  EXPECT_EQ(c.evict(1, &freed), 1);
  EXPECT_EQ(c.evict(0, &freed), 0);
  EXPECT_EQ(c.evict(5, &freed), 1);
  EXPECT_EQ(freed, (std::vector<int32_t>{11, 13, 12, 10}));
  EXPECT_EQ(c.cached_blocks(), 0);
  EXPECT_TRUE(c.match(x.data(), 4).empty());
  // An evicted block id can come back as a new node.
  std::vector<int32_t> again = {11};
  c.insert(z.data(), 1, 0, &again, &dup);
  EXPECT_EQ(c.match(z.data(), 2), (std::vector<int32_t>{11}));
}

// Referenced blocks survive any eviction; a reference taken refreshes a block's last use.
TEST(PrefixCache, EvictionNeverTouchesReferencedBlocks) {
  PrefixCache c(1);
  std::vector<int32_t> dup;
  for (int32_t b = 0; b < 4; ++b) {
    const int32_t t = 100 + b;
    std::vector<int32_t> table = {b};
    c.insert(&t, 1, 0, &table, &dup);
    ASSERT_TRUE(c.release(table).is_ok());
  }
  ASSERT_TRUE(c.acquire({1}).is_ok());
  ASSERT_TRUE(c.acquire({0}).is_ok());
  ASSERT_TRUE(c.release({0}).is_ok());  // 0 now used after 2 and 3
  std::vector<int32_t> freed;
  EXPECT_EQ(c.evict(10, &freed), 3);
  EXPECT_EQ(freed, (std::vector<int32_t>{2, 3, 0}));
  EXPECT_TRUE(c.contains(1));
  EXPECT_EQ(c.evictable_blocks(), 0);
}

// ---- The engine with and without the cache ----

struct Result1 {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
};

struct Runner {
  DecoderModel& model;
  const Tokenizer& tok;
  Engine engine;
  std::mutex mu;
  std::condition_variable cv;
  Runner(DecoderModel& m, const Tokenizer& t, const SchedulerConfig& c)
      : model(m), tok(t), engine(m, t, c) {}

  // Submits all prompts at once and waits for every one.
  std::vector<Result1> run(const std::vector<std::vector<int32_t>>& prompts) {
    std::vector<Result1> out(prompts.size());
    size_t done = 0;
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 12;
    p.ignore_eos = true;
    for (size_t i = 0; i < prompts.size(); ++i) {
      EngineRequest r;
      r.prompt = prompts[i];
      r.params = p;
      r.on_event = [this, &out, &done, i](const StreamEvent& e) {
        std::lock_guard<std::mutex> lock(mu);
        Result1& o = out[i];
        o.tokens.insert(o.tokens.end(), e.tokens.begin(), e.tokens.end());
        o.logprobs.insert(o.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
        if (e.finished) {
          ++done;
          cv.notify_all();
        }
      };
      r.top_logprobs = 3;
      EXPECT_TRUE(engine.submit(std::move(r)).is_ok());
    }
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, std::chrono::minutes(5), [&] { return done == prompts.size(); }));
    return out;
  }
};

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Rounds of requests, each round submitted once the previous finished: a 600-token prefix
// (prefilled by the first request in chunks [0, 512) and [512, 640)), then requests that
// resume at 592 alone, several at once, two copies of a new prompt submitted together, and a
// second turn that also reuses generated tokens.
void check_same_outputs(std::optional<Scheme> scheme, KvDtype kv = KvDtype::kF32) {
  const std::string dir = test::source_dir() + "/models/tiny-qwen3-moe";
  LoadOptions opt;
  opt.threads = 2;
  opt.quantization = scheme;
  opt.kv_dtype = kv;
  auto m = load_model(dir, opt);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  auto tok = Tokenizer::load(dir);
  ASSERT_TRUE(tok.is_ok());
  auto prose = read_text_file(dir + "/eval/prose_heldout.txt");
  ASSERT_TRUE(prose.is_ok());
  auto piece = [&](size_t at, size_t n) {
    std::vector<int32_t> t = (*tok)->encode(prose->substr(at, 8 * n));
    EXPECT_GE(t.size(), n);
    t.resize(n);
    return t;
  };
  const std::vector<int32_t> system = piece(0, 600);
  std::vector<std::vector<std::vector<int32_t>>> rounds = {
      {concat(system, piece(9000, 40))},
      {concat(system, piece(11000, 100))},
      {concat(system, piece(13000, 7)), concat(system, piece(14000, 150)),
       concat(system, piece(15000, 33)),
       std::vector<int32_t>(system.begin(), system.begin() + 592)},
      {piece(19000, 300), piece(19000, 300)},  // n = 2: the second waits a step, then reads
  };
  SchedulerConfig on;
  on.num_blocks = 256;
  on.block_size = 16;
  on.chunked_prefill_size = 512;
  SchedulerConfig off = on;
  off.prefix_caching = false;
  Runner with(**m, **tok, on), without(**m, **tok, off);
  std::vector<Result1> first_turn;
  for (size_t r = 0; r <= rounds.size(); ++r) {
    std::vector<std::vector<int32_t>> prompts;
    if (r < rounds.size()) {
      prompts = rounds[r];
    } else {  // the first request's next turn: its prompt, its reply, a new message
      prompts = {concat(concat(rounds[0][0], first_turn[0].tokens), piece(17000, 60))};
    }
    const std::vector<Result1> a = with.run(prompts), b = without.run(prompts);
    if (r == 0) first_turn = a;
    for (size_t i = 0; i < prompts.size(); ++i) {
      SCOPED_TRACE("round " + std::to_string(r) + " request " + std::to_string(i));
      ASSERT_EQ(a[i].tokens, b[i].tokens);
      ASSERT_EQ(a[i].logprobs.size(), b[i].logprobs.size());
      for (size_t k = 0; k < a[i].logprobs.size(); ++k) {
        const TokenLogprob &x = a[i].logprobs[k], &y = b[i].logprobs[k];
        EXPECT_EQ(0, std::memcmp(&x.logprob, &y.logprob, sizeof(float))) << "token " << k;
        ASSERT_EQ(x.top.size(), y.top.size());
        for (size_t j = 0; j < x.top.size(); ++j) {
          EXPECT_EQ(x.top[j].first, y.top[j].first);
          EXPECT_EQ(0, std::memcmp(&x.top[j].second, &y.top[j].second, sizeof(float)));
        }
      }
    }
  }
  const EngineStats s = with.engine.stats();
  // Hand-derived: round 0 finds nothing; rounds 1 and 2 find the system prompt's 37 whole
  // blocks (592 tokens), except the 592-token prompt, which stops a block short (576); the
  // two copies of a new 300-token prompt share 288 (18 blocks); the second turn finds the first
  // request's 40 full blocks (640 of its 651 computed tokens).
  EXPECT_EQ(s.prefix_cache_hits, 592 + 3 * 592 + 576 + 288 + 640);
  EXPECT_EQ(s.prefix_cache_queries, 640 + 700 + (607 + 750 + 633 + 592) + 600 + 712);
  EXPECT_EQ(without.engine.stats().prefix_cache_hits, 0);
  EXPECT_EQ(without.engine.stats().kv_blocks_cached, 0);
  EXPECT_GT(s.kv_blocks_cached, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
}

// A hybrid model resumes a cached prefix only where the recurrent state was kept: at a
// 300-token prompt's multiples of 256 and its last multiple of 64 (the chunked rule's chunks).
// A 40-token prompt has no such position and finds nothing; the 300-token one, again, resumes
// at 256; one that shares its first 270 tokens, at 256 too. Outputs equal a server without the
// cache, log-probs included.
TEST(PrefixCacheEngine, HybridModelsResumeWhereStatesWereKept) {
  const std::string dir = test::shared_dir() + "/fixtures/tiny-qwen3_5-moe";
  auto m = load_model(dir, LoadOptions{});
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  auto tok = Tokenizer::load(dir);
  ASSERT_TRUE(tok.is_ok());
  SchedulerConfig c;
  ASSERT_TRUE(c.prefix_caching);
  std::vector<int32_t> shortp, longp, other;
  for (int32_t i = 0; i < 40; ++i) shortp.push_back(100 + i);
  for (int32_t i = 0; i < 300; ++i) longp.push_back(100 + (i * 37) % 3000);
  other.assign(longp.begin(), longp.begin() + 270);
  for (int32_t i = 0; i < 30; ++i) other.push_back(3000 + i);
  Runner r(**m, **tok, c);
  std::vector<std::vector<Result1>> got;
  for (const auto& p : {shortp, shortp, longp, longp, other}) got.push_back(r.run({p}));
  const EngineStats s = r.engine.stats();
  // 256 for the second long prompt (its last multiple of 64, 256, holds the state at the end of
  // its first chunk as well) and 256 for the other.
  EXPECT_EQ(s.prefix_cache_hits, 512);
  SchedulerConfig off = c;
  off.prefix_caching = false;
  Runner plain(**m, **tok, off);
  size_t k = 0;
  for (const auto& p : {shortp, shortp, longp, longp, other}) {
    const std::vector<Result1> want = plain.run({p});
    EXPECT_EQ(got[k][0].tokens, want[0].tokens) << "request " << k;
    ASSERT_EQ(got[k][0].logprobs.size(), want[0].logprobs.size());
    for (size_t i = 0; i < want[0].logprobs.size(); ++i) {
      EXPECT_EQ(got[k][0].logprobs[i].logprob, want[0].logprobs[i].logprob) << "request " << k;
    }
    ++k;
  }
}

TEST(PrefixCacheEngine, SameOutputsWithAndWithoutBf16) { check_same_outputs(std::nullopt); }
TEST(PrefixCacheEngine, SameOutputsWithAndWithoutMxfp8) { check_same_outputs(Scheme::kW8A8Mxfp8); }
TEST(PrefixCacheEngine, SameOutputsWithAndWithoutBf16KvCache) {
  check_same_outputs(std::nullopt, KvDtype::kBF16);
}

}  // namespace
}  // namespace mx

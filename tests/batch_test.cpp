// Continuous batching at the model level: sequences in one batch over a paged cache (blocks
// shuffled, prefill in chunks beside decoding sequences) give bit-identical logits to each
// sequence run alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>

#include "model/model.h"
#include "test_util.h"

namespace mx {
namespace {

std::vector<float> alone(DecoderModel& m, const std::vector<int32_t>& tokens) {
  KvCache cache(m.config(), static_cast<int64_t>(tokens.size()));
  std::vector<float> out(tokens.size() * static_cast<size_t>(m.config().vocab_size));
  EXPECT_TRUE(m.forward(tokens.data(), static_cast<int64_t>(tokens.size()), cache, true, out.data())
                  .is_ok());
  return out;
}

// The same sequence alone, in the chunks it had in the batch.
std::vector<float> alone_split(DecoderModel& m, const std::vector<int32_t>& tokens,
                               const std::vector<int64_t>& chunks) {
  KvCache cache(m.config(), static_cast<int64_t>(tokens.size()) + 1);
  std::vector<float> out(tokens.size() * static_cast<size_t>(m.config().vocab_size));
  int64_t at = 0;
  for (int64_t c : chunks) {
    EXPECT_TRUE(
        m.forward(tokens.data() + at, c, cache, true, out.data() + at * m.config().vocab_size)
            .is_ok());
    at += c;
  }
  return out;
}

// `same_split`: compare with each sequence alone in the chunks it had in the batch (a hybrid
// model's chunked delta rule rounds differently for other splits); otherwise with the whole
// sequence at once.
void check_scheme(std::optional<Scheme> scheme,
                  const std::string& dir = test::source_dir() + "/models/tiny-qwen3-moe",
                  bool same_split = false) {
  LoadOptions opt;
  opt.threads = 2;
  opt.quantization = scheme;
  auto m = load_model(dir, opt);
  ASSERT_TRUE(m.is_ok());
  DecoderModel& model = **m;
  const int64_t vocab = model.config().vocab_size;
  std::mt19937 rng(3);
  // Five sequences of different lengths.
  std::vector<std::vector<int32_t>> seqs;
  for (int64_t len : {1, 7, 16, 29, 40}) {
    std::vector<int32_t> s;
    for (int64_t i = 0; i < len; ++i) s.push_back(static_cast<int32_t>(rng() % 4000));
    seqs.push_back(s);
  }
  const int32_t bs = 8;
  PagedKv kv(model.config(), 40, bs, KvDtype::kF32, static_cast<int32_t>(seqs.size()));
  std::vector<std::vector<int64_t>> chunks(seqs.size());
  std::vector<int32_t> pool(40);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<std::vector<int32_t>> tables(seqs.size());
  size_t next = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int64_t b = 0; b < (static_cast<int64_t>(seqs[s].size()) + bs - 1) / bs; ++b)
      tables[s].push_back(pool[next++]);
  }
  // Step plan: sequences 0..3 prefill whole in step 1 except the last 3 tokens, which go one
  // per step (decode-like); sequence 4 prefills in chunks of 16 meanwhile.
  std::vector<int64_t> done(seqs.size(), 0);
  std::vector<std::vector<float>> got(seqs.size());
  for (int step = 0; step < 8; ++step) {
    std::vector<SeqSlice> batch;
    std::vector<size_t> who;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const int64_t len = static_cast<int64_t>(seqs[s].size());
      if (done[s] >= len) continue;
      int64_t count;
      if (s == 4)
        count = std::min<int64_t>(16, len - done[s]);
      else
        count = done[s] == 0 ? std::max<int64_t>(1, len - 3) : 1;
      SeqSlice sl;
      sl.tokens = seqs[s].data() + done[s];
      sl.count = count;
      sl.start = done[s];
      sl.blocks = tables[s].data();
      sl.logits = SeqSlice::Logits::kAll;
      sl.slot = static_cast<int32_t>(s);
      chunks[s].push_back(count);
      batch.push_back(sl);
      who.push_back(s);
    }
    if (batch.empty()) break;
    int64_t rows = 0;
    for (const SeqSlice& sl : batch) rows += sl.count;
    std::vector<float> logits(static_cast<size_t>(rows * vocab));
    ASSERT_TRUE(model.forward_batch(batch, kv, logits.data()).is_ok());
    int64_t r = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      got[who[i]].insert(got[who[i]].end(), logits.begin() + r * vocab,
                         logits.begin() + (r + batch[i].count) * vocab);
      r += batch[i].count;
      done[who[i]] += batch[i].count;
    }
  }
  for (size_t s = 0; s < seqs.size(); ++s) {
    const auto ref = same_split ? alone_split(model, seqs[s], chunks[s]) : alone(model, seqs[s]);
    ASSERT_EQ(got[s].size(), ref.size()) << "sequence " << s;
    EXPECT_EQ(0, std::memcmp(got[s].data(), ref.data(), ref.size() * sizeof(float)))
        << (scheme ? scheme_info(*scheme).name : "bf16") << ": sequence " << s
        << " differs when batched";
  }
}

TEST(Batch, BatchedEqualsAloneBf16) { check_scheme(std::nullopt); }

// Each sequence of a hybrid batch needs its own recurrent-state slot.
TEST(Batch, HybridSlotsMustBeDistinctAndInRange) {
  auto m = load_model(test::shared_dir() + "/fixtures/tiny-qwen3_5-dense", LoadOptions{});
  ASSERT_TRUE(m.is_ok());
  PagedKv kv((*m)->config(), 4, 8, KvDtype::kF32, 2);
  const std::vector<int32_t> tok = {1277, 278};
  const int32_t b0 = 0, b1 = 1;
  std::vector<float> logits(static_cast<size_t>(2 * (*m)->config().vocab_size));
  SeqSlice a{tok.data(), 2, 0, &b0, SeqSlice::Logits::kLast, 0};
  SeqSlice b{tok.data(), 2, 0, &b1, SeqSlice::Logits::kLast, 0};
  EXPECT_FALSE((*m)->forward_batch(std::vector<SeqSlice>{a, b}, kv, logits.data()).is_ok());
  b.slot = 2;
  EXPECT_FALSE((*m)->forward_batch(std::vector<SeqSlice>{a, b}, kv, logits.data()).is_ok());
  b.slot = 1;
  EXPECT_TRUE((*m)->forward_batch(std::vector<SeqSlice>{a, b}, kv, logits.data()).is_ok());
}
TEST(Batch, HybridBatchedEqualsAlone) {
  const std::string dir = test::shared_dir() + "/fixtures/tiny-qwen3_5-moe";
  check_scheme(std::nullopt, dir, true);
  check_scheme(Scheme::kW8A8Mxfp8, dir, true);
}
TEST(Batch, BatchedEqualsAloneMxfp8) { check_scheme(Scheme::kW8A8Mxfp8); }
TEST(Batch, BatchedEqualsAloneMxfp4Dual) { check_scheme(Scheme::kW4A4Mxfp4Dual); }

}  // namespace
}  // namespace mx

namespace mx {
namespace {
// A hybrid model's prompt split where the chunked delta rule's chunks begin (multiples of 64)
// gives the bits of the prompt in one call: what lets the engine and the prefix cache split
// hybrid prompts freely at those positions.
TEST(Batch, HybridSplitsAtChunkBoundariesEqualWhole) {
  LoadOptions opt;
  opt.threads = 2;
  auto m = load_model(test::shared_dir() + "/fixtures/tiny-qwen3_5-moe", opt);
  ASSERT_TRUE(m.is_ok());
  std::mt19937 rng(5);
  // 385 = 6 chunks and a lone token, which runs as a decode step would.
  std::vector<int32_t> seq(385);
  for (int32_t& t : seq) t = static_cast<int32_t>(rng() % 4000);
  const auto whole = alone(**m, seq);
  for (const std::vector<int64_t>& split :
       {std::vector<int64_t>{256, 128, 1}, std::vector<int64_t>{64, 321},
        std::vector<int64_t>{320, 65}, std::vector<int64_t>{128, 128, 129}}) {
    const auto parts = alone_split(**m, seq, split);
    EXPECT_EQ(0, std::memcmp(parts.data(), whole.data(), whole.size() * sizeof(float)))
        << "split " << split[0] << "+" << split[1];
  }
}
}  // namespace
}  // namespace mx

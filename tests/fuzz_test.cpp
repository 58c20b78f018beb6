// Mutation fuzzing of everything that parses untrusted bytes: safetensors headers, config.json,
// quant_model_description.json and shard indexes. Each case must either parse or fail with a
// message naming its source; the sanitizer build turns any memory error into a failure.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "loader/model_config.h"
#include "loader/quant_description.h"
#include "loader/safetensors.h"
#include "test_util.h"

namespace mx {
namespace {

constexpr int kCasesPerTarget = 12000;

// Byte-level and token-level mutations: flips, inserts, deletes, truncation, duplication of
// a range, and numbers swapped for edge values.
std::string mutate(const std::string& seed, std::mt19937_64& rng, size_t protect_prefix = 0) {
  std::string s = seed;
  std::uniform_int_distribution<int> op_dist(0, 7);
  const int rounds = 1 + static_cast<int>(rng() % 4);
  static const char* kTokens[] = {"-1",
                                  "0",
                                  "18446744073709551615",
                                  "9223372036854775808",
                                  "1e308",
                                  "null",
                                  "\"\"",
                                  "[]",
                                  "{}",
                                  "\"F32\"",
                                  "\"U8\"",
                                  "[0,0]",
                                  "[1,99999999999]",
                                  "\"\\u0000\"",
                                  "true",
                                  "3.5"};
  for (int r = 0; r < rounds && !s.empty(); ++r) {
    const size_t lo = std::min(protect_prefix, s.size() - 1);
    std::uniform_int_distribution<size_t> pos(lo, s.size() - 1);
    switch (op_dist(rng)) {
      case 0:
        s[pos(rng)] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:
        s[pos(rng)] = static_cast<char>(rng() % 256);
        break;
      case 2:
        s.insert(pos(rng), 1, "{}[]\",:0123456789-e"[rng() % 19]);
        break;
      case 3: {
        const size_t p = pos(rng);
        s.erase(p, 1 + rng() % 8);
        break;
      }
      case 4:
        s.resize(pos(rng));
        break;
      case 5: {
        const size_t p = pos(rng);
        const size_t n = 1 + rng() % 32;
        s.insert(p, s.substr(p, n));
        break;
      }
      case 6: {  // replace a run of digits with an edge-value token
        const size_t p = s.find_first_of("0123456789", pos(rng));
        if (p == std::string::npos) break;
        const size_t e = s.find_first_not_of("0123456789", p);
        s.replace(p, (e == std::string::npos ? s.size() : e) - p,
                  kTokens[rng() % std::size(kTokens)]);
        break;
      }
      default:
        s.insert(pos(rng), kTokens[rng() % std::size(kTokens)]);
        break;
    }
  }
  return s;
}

std::string small_checkpoint() {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  std::vector<uint8_t> b(64 * 4);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i);
  EXPECT_TRUE(w.add("model.embed_tokens.weight", DType::kBF16, {4, 8}, b.data(), 64).is_ok());
  EXPECT_TRUE(w.add("model.layers.0.q_proj.weight", DType::kF8E4M3, {2, 32}, b.data(), 64).is_ok());
  EXPECT_TRUE(w.add("model.layers.0.q_proj.weight_scale", DType::kU8, {2, 1}, b.data(), 2).is_ok());
  EXPECT_TRUE(w.add("x.f32", DType::kF32, {3, 5}, b.data(), 60).is_ok());
  EXPECT_TRUE(w.add("x.i64", DType::kI64, {2}, b.data(), 16).is_ok());
  return w.serialize();
}

TEST(Fuzz, SafetensorsHeaders) {
  const std::string seed = small_checkpoint();
  std::mt19937_64 rng(20261130);
  int accepted = 0;
  for (int i = 0; i < kCasesPerTarget; ++i) {
    // Most cases keep the length prefix so mutations reach the JSON and the offsets checks.
    const std::string bytes = mutate(seed, rng, (i % 4 == 0) ? 0 : 8);
    auto r = parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                               "fuzz.safetensors");
    if (r.is_ok()) {
      ++accepted;
      // Whatever was accepted must lie inside the buffer.
      for (const TensorInfo& t : r->tensors) {
        ASSERT_LE(r->data_start + t.end, bytes.size()) << "case " << i;
      }
    } else {
      ASSERT_NE(r.status().message().find("fuzz.safetensors"), std::string::npos)
          << "case " << i << ": " << r.status().message();
    }
  }
  std::printf("safetensors fuzz: %d cases, %d accepted\n", kCasesPerTarget, accepted);
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, kCasesPerTarget);
}

void fuzz_text(const std::vector<std::string>& seeds, uint64_t seed_value,
               const std::function<Status(const std::string&)>& parse) {
  std::mt19937_64 rng(seed_value);
  int accepted = 0;
  for (int i = 0; i < kCasesPerTarget; ++i) {
    const std::string text = mutate(seeds[static_cast<size_t>(i) % seeds.size()], rng);
    const Status s = parse(text);
    if (s.is_ok()) {
      ++accepted;
    } else {
      ASSERT_NE(s.message().find("fuzz.json"), std::string::npos)
          << "case " << i << ": " << s.message();
    }
  }
  std::printf("json fuzz: %d cases, %d accepted\n", kCasesPerTarget, accepted);
  EXPECT_LT(accepted, kCasesPerTarget);
}

TEST(Fuzz, ModelConfigs) {
  std::vector<std::string> seeds;
  for (const char* m : {"tiny-qwen3-moe", "tiny-qwen3-dense"}) {
    auto t = read_text_file(test::shared_dir() + "/fixtures/" + m + "/config.json");
    ASSERT_TRUE(t.is_ok());
    seeds.push_back(*t);
  }
  fuzz_text(seeds, 7, [](const std::string& text) {
    auto c = parse_model_config(text, "fuzz.json");
    return c.is_ok() ? Status::ok() : c.status();
  });
}

TEST(Fuzz, QuantDescriptions) {
  const std::vector<std::string> seeds = {
      R"({"version":"1.0.0","model_quant_type":"W8A8_MXFP8","group_size":32,)"
      R"("model.layers.0.self_attn.q_proj.weight":"W8A8_MXFP8",)"
      R"("model.layers.0.self_attn.q_proj.weight_scale":"W8A8_MXFP8",)"
      R"("model.layers.0.mlp.gate.weight":"FLOAT","metadata":{"a":[1,2]}})"};
  fuzz_text(seeds, 8, [](const std::string& text) {
    auto d = parse_quant_description(text, "fuzz.json");
    return d.is_ok() ? Status::ok() : d.status();
  });
}

}  // namespace
}  // namespace mx

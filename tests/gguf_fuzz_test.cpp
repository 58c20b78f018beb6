// Mutation fuzzing of parse_gguf over the shipped fixtures' headers, the whole small synthetic
// fixture and hand-made small files: bit flips, random bytes, edge-value integers written over
// any u32/u64, truncation, inserted, deleted and duplicated ranges. Each case must either parse
// (then every tensor's first and last byte and every metadata value are touched) or fail with
// a message naming the file; the sanitizer build turns any memory error into a failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "loader/gguf.h"
#include "test_util.h"

namespace mx {
namespace {

using VT = GgufValueType;
using Bytes = std::vector<uint8_t>;

constexpr int kCases = 12000;
constexpr char kLabel[] = "fuzz.gguf";

// ---- Hand-made seeds, written field by field ----

template <typename T>
void put(Bytes& b, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b.insert(b.end(), p, p + sizeof(T));
}
void put_str(Bytes& b, std::string_view s) {
  put<uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}
void put_key(Bytes& b, std::string_view key, VT t) {
  put_str(b, key);
  put(b, static_cast<uint32_t>(t));
}

struct SeedTensor {
  const char* name;
  std::vector<uint64_t> ne;
  uint32_t type;
  uint64_t bytes;  // by hand from the ggml block layouts
};

// A file with the given metadata bytes (`n_kv` entries) and tensors packed at `align`.
Bytes seed_file(uint32_t version, uint32_t n_kv, const Bytes& kvs,
                const std::vector<SeedTensor>& tensors, uint64_t align) {
  Bytes b = {'G', 'G', 'U', 'F'};
  put(b, version);
  put<uint64_t>(b, tensors.size());
  put<uint64_t>(b, n_kv);
  b.insert(b.end(), kvs.begin(), kvs.end());
  uint64_t off = 0;
  for (const SeedTensor& t : tensors) {
    put_str(b, t.name);
    put<uint32_t>(b, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) put(b, d);
    put(b, t.type);
    put(b, off);
    off = (off + t.bytes + align - 1) / align * align;
  }
  b.resize((b.size() + align - 1) / align * align, 0);
  for (uint64_t i = 0; i < off; ++i) b.push_back(static_cast<uint8_t>(i * 29 + 1));
  return b;
}

std::vector<Bytes> hand_made_seeds() {
  std::vector<Bytes> out;
  Bytes kv;  // every value type, nested arrays, and a 64-byte alignment
  put_key(kv, "general.alignment", VT::kU32);
  put<uint32_t>(kv, 64);
  put_key(kv, "general.architecture", VT::kString);
  put_str(kv, "fuzz");
  put_key(kv, "i8", VT::kI8);
  put<int8_t>(kv, -3);
  put_key(kv, "u16", VT::kU16);
  put<uint16_t>(kv, 9);
  put_key(kv, "i16", VT::kI16);
  put<int16_t>(kv, -9);
  put_key(kv, "i32", VT::kI32);
  put<int32_t>(kv, -1);
  put_key(kv, "u64", VT::kU64);
  put<uint64_t>(kv, 1ull << 40);
  put_key(kv, "i64", VT::kI64);
  put<int64_t>(kv, -5);
  put_key(kv, "f32", VT::kF32);
  put<float>(kv, 1e-6f);
  put_key(kv, "f64", VT::kF64);
  put<double>(kv, 1e4);
  put_key(kv, "b", VT::kBool);
  put<uint8_t>(kv, 1);
  put_key(kv, "tokens", VT::kArray);
  put(kv, static_cast<uint32_t>(VT::kString));
  put<uint64_t>(kv, 3);
  for (const char* s : {"a", "b c", "<|x|>"}) put_str(kv, s);
  put_key(kv, "nested", VT::kArray);
  put(kv, static_cast<uint32_t>(VT::kArray));
  put<uint64_t>(kv, 2);
  for (int i = 0; i < 2; ++i) {
    put(kv, static_cast<uint32_t>(VT::kI32));
    put<uint64_t>(kv, 2);
    put<int32_t>(kv, i);
    put<int32_t>(kv, -i);
  }
  const std::vector<SeedTensor> tensors = {{"q8", {64, 2}, 8, 136},
                                           {"norm", {16}, 0, 64},
                                           {"k4", {256, 1}, 12, 144},
                                           {"mx", {32, 2, 2}, 39, 68},
                                           {"bf", {8, 3}, 30, 48}};
  out.push_back(seed_file(3, 13, kv, tensors, 64));
  Bytes small;
  put_key(small, "split.count", VT::kU16);
  put<uint16_t>(small, 1);
  out.push_back(seed_file(2, 1, small, {{"t", {32}, 1, 64}, {"u", {32, 4}, 2, 72}}, 32));
  out.push_back(seed_file(3, 0, {}, {{"only", {4, 4}, 0, 64}}, 32));
  return out;
}

// ---- Seeds from the fixtures ----

struct Seed {
  std::string name;
  Bytes bytes;
};

std::vector<Seed> all_seeds() {
  std::vector<Seed> seeds;
  const std::string dir = test::shared_dir() + "/fixtures/gguf/";
  // The whole small file parses; of the model files only the header region (metadata with the
  // tokenizer, then the tensor infos) is kept, so cases stay cheap under the sanitizers.
  for (const char* f :
       {"synthetic-types.gguf", "tiny-qwen3-dense.Q2_K.gguf", "tiny-qwen3-dense.BF16.gguf",
        "tiny-qwen3-moe-allmoe.Q4_K_M.gguf", "tiny-qwen3-moe-allmoe.MXFP4_MOE.gguf"}) {
    auto m = MappedFile::open(dir + f);
    EXPECT_TRUE(m.is_ok()) << m.status().to_string();
    if (!m.is_ok()) continue;
    size_t keep = (*m)->size();
    if (keep > (1u << 20)) {
      auto h = parse_gguf((*m)->data(), (*m)->size(), f);
      EXPECT_TRUE(h.is_ok()) << h.status().to_string();
      keep = h.is_ok() ? h->data_start : size_t{64} << 10;
    }
    seeds.push_back({f, Bytes((*m)->data(), (*m)->data() + keep)});
  }
  int i = 0;
  for (Bytes& b : hand_made_seeds()) {
    // Unmutated, each must parse: otherwise the cases built on it test little.
    auto h = parse_gguf(b.data(), b.size(), "hand-made");
    EXPECT_TRUE(h.is_ok()) << h.status().to_string();
    seeds.push_back({"hand-made " + std::to_string(i++), b});
  }
  return seeds;
}

// ---- Mutations ----

constexpr uint64_t kEdge64[] = {
    0,  1,  2,   3,          4,          8,          12,         13,         31,    32,
    33, 64, 255, 1ull << 31, 1ull << 32, 1ull << 62, 1ull << 63, ~0ull >> 1, ~0ull, ~0ull - 1};
constexpr uint32_t kEdge32[] = {0,  1,  2,          3,          4,          5,         7,  8,
                                9,  10, 12,         13,         23,         30,        34, 39,
                                40, 64, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff};

// Positions favour the front (preamble, first keys) and the back (tensor infos of a header
// region), where one changed byte reaches the most checks.
size_t pick_pos(const Bytes& b, std::mt19937_64& rng) {
  const size_t n = b.size();
  switch (rng() % 3) {
    case 0:
      return rng() % std::min<size_t>(n, 256);
    case 1:
      return n - 1 - rng() % std::min<size_t>(n, 4096);
    default:
      return rng() % n;
  }
}

void mutate_once(Bytes& b, std::mt19937_64& rng) {
  const size_t p = pick_pos(b, rng);
  const size_t len = 1 + rng() % 64;
  switch (rng() % 8) {
    case 0:
      b[p] ^= static_cast<uint8_t>(1u << (rng() % 8));
      break;
    case 1:
      b[p] = static_cast<uint8_t>(rng());
      break;
    case 2: {  // an edge u32, aligned to 4 half the time
      const size_t q = rng() % 2 ? p & ~size_t{3} : p;
      const uint32_t v = rng() % 4 ? kEdge32[rng() % std::size(kEdge32)] : uint32_t(rng() % 300);
      std::memcpy(b.data() + q, &v, std::min<size_t>(4, b.size() - q));
      break;
    }
    case 3: {
      const size_t q = rng() % 2 ? p & ~size_t{7} : p;
      const uint64_t v = rng() % 4 ? kEdge64[rng() % std::size(kEdge64)] : rng() % 100000;
      std::memcpy(b.data() + q, &v, std::min<size_t>(8, b.size() - q));
      break;
    }
    case 4:
      b.resize(p);
      break;
    case 5: {
      Bytes ins(len);
      for (uint8_t& x : ins) x = static_cast<uint8_t>(rng());
      b.insert(b.begin() + static_cast<ptrdiff_t>(p), ins.begin(), ins.end());
      break;
    }
    case 6:
      b.erase(b.begin() + static_cast<ptrdiff_t>(p),
              b.begin() + static_cast<ptrdiff_t>(std::min(b.size(), p + len)));
      break;
    default: {  // duplicate a range somewhere else
      const Bytes range(b.begin() + static_cast<ptrdiff_t>(p),
                        b.begin() + static_cast<ptrdiff_t>(std::min(b.size(), p + len)));
      const size_t q = pick_pos(b, rng);
      b.insert(b.begin() + static_cast<ptrdiff_t>(q), range.begin(), range.end());
      break;
    }
  }
}

// Touches every value so that a dangling or garbage value trips the sanitizers.
uint64_t walk(const GgufValue& v, int depth) {
  EXPECT_LE(depth, 8);
  uint64_t h = static_cast<uint64_t>(v.type) + v.u + static_cast<uint64_t>(v.i) + v.b;
  h += static_cast<uint64_t>(v.f == v.f);
  for (char c : v.str) h += static_cast<uint8_t>(c);
  for (const GgufValue& e : v.array) {
    EXPECT_EQ(e.type, v.elem_type);
    h += walk(e, depth + 1);
  }
  return h;
}

TEST(GgufFuzz, MutatedFiles) {
  const std::vector<Seed> seeds = all_seeds();
  ASSERT_EQ(seeds.size(), 8u);
  const uint64_t base =
      std::strtoull(test::env_or("MX_FUZZ_SEED", "20261201").c_str(), nullptr, 10);
  std::printf("gguf fuzz: seed %llu (MX_FUZZ_SEED), %d cases\n",
              static_cast<unsigned long long>(base), kCases);
  std::vector<int> accepted(seeds.size(), 0);
  uint64_t sink = 0;
  for (int i = 0; i < kCases; ++i) {
    const size_t which = static_cast<size_t>(i) % seeds.size();
    std::mt19937_64 rng(base * 1000003 + static_cast<uint64_t>(i));
    Bytes b = seeds[which].bytes;
    const int rounds = 1 + static_cast<int>(rng() % 4);
    for (int r = 0; r < rounds && !b.empty(); ++r) mutate_once(b, rng);
    // An exact-size copy, so that any read past the end is a heap overflow under ASan.
    std::unique_ptr<uint8_t[]> exact(new uint8_t[b.size()]);
    if (!b.empty()) std::memcpy(exact.get(), b.data(), b.size());
    auto r = parse_gguf(exact.get(), b.size(), kLabel);
    const std::string where = "seed " + std::to_string(base) + " case " + std::to_string(i) + " (" +
                              seeds[which].name + ")";
    if (!r.is_ok()) {
      const std::string& m = r.status().message();
      ASSERT_NE(m.find(kLabel), std::string::npos) << where << ": " << m;
      ASSERT_GT(m.size(), sizeof(kLabel) + 2) << where;
      continue;
    }
    ++accepted[which];
    for (const GgufTensorInfo& t : r->tensors) {
      ASSERT_GT(t.bytes, 0u) << where;
      ASSERT_GE(t.data, exact.get()) << where;
      ASSERT_LE(t.data + t.bytes, exact.get() + b.size()) << where << ": " << t.name;
      sink += t.data[0] + t.data[t.bytes - 1];
    }
    for (const auto& [key, v] : r->metadata) sink += key.size() + walk(v, 0);
  }
  int total = 0;
  for (size_t s = 0; s < seeds.size(); ++s) {
    std::printf("  %-40s %5d accepted\n", seeds[s].name.c_str(), accepted[s]);
    total += accepted[s];
  }
  std::printf("gguf fuzz: %d of %d accepted (checksum %llu)\n", total, kCases,
              static_cast<unsigned long long>(sink % 1000));
  EXPECT_GT(accepted[0], 0);  // the whole synthetic fixture survives some mutations
  EXPECT_LT(total, kCases);
}

}  // namespace
}  // namespace mx

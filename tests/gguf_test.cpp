// GGUF reading: the shipped llama.cpp fixtures against their goldens, every kind of damage
// built byte by byte, typed metadata reads and split checkpoints.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "core/json_util.h"
#include "loader/gguf.h"
#include "test_util.h"

namespace mx {
namespace {

namespace fs = std::filesystem;
using VT = GgufValueType;

// ---- ggml facts written down independently of the code under test (ggml.h, ggml-quants.h) ----

struct TypeFact {
  const char* name;
  uint32_t id;
  int64_t block;
  int64_t block_bytes;
};
constexpr TypeFact kTypeFacts[] = {
    {"F32", 0, 1, 4},       {"F16", 1, 1, 2},       {"Q4_0", 2, 32, 18},    {"Q4_1", 3, 32, 20},
    {"Q5_0", 6, 32, 22},    {"Q5_1", 7, 32, 24},    {"Q8_0", 8, 32, 34},    {"Q2_K", 10, 256, 84},
    {"Q3_K", 11, 256, 110}, {"Q4_K", 12, 256, 144}, {"Q5_K", 13, 256, 176}, {"Q6_K", 14, 256, 210},
    {"BF16", 30, 1, 2},     {"MXFP4", 39, 32, 17},
};

const TypeFact* fact_by_id(uint32_t id) {
  for (const TypeFact& f : kTypeFacts)
    if (f.id == id) return &f;
  return nullptr;
}
const TypeFact* fact_by_name(const std::string& name) {
  for (const TypeFact& f : kTypeFacts)
    if (name == f.name) return &f;
  return nullptr;
}

// Bytes of a tensor by the facts above; 0 when unknown or overflowing.
uint64_t expected_bytes(uint32_t type, const std::vector<uint64_t>& ne) {
  const TypeFact* f = fact_by_id(type);
  if (f == nullptr || ne.empty() || ne[0] % static_cast<uint64_t>(f->block) != 0) return 0;
  uint64_t b = ne[0] / static_cast<uint64_t>(f->block) * static_cast<uint64_t>(f->block_bytes);
  for (size_t i = 1; i < ne.size(); ++i)
    if (__builtin_mul_overflow(b, ne[i], &b)) return 0;
  return b;
}

// ---- A GGUF writer for test cases: every field by hand, so a case can break any of them ----

template <typename T>
std::string le(T v) {
  std::string s(sizeof(T), '\0');
  std::memcpy(s.data(), &v, sizeof(T));
  return s;
}
std::string gstr(std::string_view s) { return le<uint64_t>(s.size()) + std::string(s); }
std::string kv(std::string_view key, VT type, const std::string& value) {
  return gstr(key) + le(static_cast<uint32_t>(type)) + value;
}
std::string kv_u32(std::string_view key, uint32_t v) { return kv(key, VT::kU32, le(v)); }
std::string kv_str(std::string_view key, std::string_view v) {
  return kv(key, VT::kString, gstr(v));
}
// The payload of an array value: element type, count, then the elements as given.
std::string arr(VT elem, uint64_t n, const std::string& elems) {
  return le(static_cast<uint32_t>(elem)) + le(n) + elems;
}

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type = 0;  // ggml id
  // Absent: the next aligned offset after the previous tensor.
  std::optional<uint64_t> offset = std::nullopt;
};

struct Spec {
  uint32_t version = 3;
  std::vector<std::string> kvs;  // serialized entries
  std::vector<TensorSpec> tensors;
  uint64_t align = 32;  // what the writer pads with; general.alignment is an entry of `kvs`
  int64_t tensor_count = -1;
  int64_t kv_count = -1;
  int64_t data_bytes = -1;  // -1: up to the end of the last tensor
};

struct Built {
  std::string bytes;
  uint64_t data_start = 0;
};

uint8_t pattern(uint64_t i) { return static_cast<uint8_t>(i * 131 + 7); }

Built build(const Spec& s) {
  Built b;
  std::string& o = b.bytes;
  o = "GGUF" + le(s.version);
  o += le<uint64_t>(s.tensor_count >= 0 ? uint64_t(s.tensor_count) : s.tensors.size());
  o += le<uint64_t>(s.kv_count >= 0 ? uint64_t(s.kv_count) : s.kvs.size());
  for (const std::string& e : s.kvs) o += e;
  uint64_t next = 0;
  uint64_t end = 0;
  for (const TensorSpec& t : s.tensors) {
    const uint64_t off = t.offset ? *t.offset : (next + s.align - 1) / s.align * s.align;
    o += gstr(t.name) + le<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) o += le(d);
    o += le(t.type) + le(off);
    next = off + expected_bytes(t.type, t.ne);
    if (next < (1u << 20)) end = std::max(end, next);  // huge (broken) tensors get no data
  }
  o.resize((o.size() + s.align - 1) / s.align * s.align, '\0');
  b.data_start = o.size();
  const uint64_t data = s.data_bytes >= 0 ? uint64_t(s.data_bytes) : end;
  for (uint64_t i = 0; i < data; ++i) o.push_back(static_cast<char>(pattern(i)));
  return b;
}

Result<GgufHeader> parse(const std::string& bytes) {
  return parse_gguf(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "t.gguf");
}

void expect_error(const std::string& bytes, std::initializer_list<std::string> needles) {
  auto r = parse(bytes);
  ASSERT_FALSE(r.is_ok()) << "accepted; wanted: " << *needles.begin();
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("t.gguf"), std::string::npos) << m;
  for (const std::string& n : needles) EXPECT_NE(m.find(n), std::string::npos) << m;
}

// A small valid file: two tensors and a few keys.
Spec good_spec() {
  Spec s;
  s.kvs = {kv_str("general.architecture", "synthetic"), kv_u32("general.alignment", 32)};
  s.tensors = {{"w.q8", {64, 3}, 8}, {"n.f32", {5}, 0}};
  return s;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// ---- The shipped fixtures ----

std::string fixture_dir() { return test::shared_dir() + "/fixtures/gguf"; }

std::vector<std::string> shipped_files() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(fixture_dir()))
    if (e.path().extension() == ".gguf") names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Type, ne and byte size of every tensor, and that the tensors tile the file without overlap.
void check_tensors(const GgufFile& f,
                   const std::map<std::string, std::pair<std::string, std::vector<uint64_t>>>& want,
                   uint64_t file_size) {
  ASSERT_EQ(f.tensors().size(), want.size());
  std::vector<std::pair<const uint8_t*, uint64_t>> ranges;
  const uint8_t* base = f.files()[0]->data();
  for (const GgufTensorInfo& t : f.tensors()) {
    SCOPED_TRACE(t.name);
    auto it = want.find(t.name);
    ASSERT_NE(it, want.end());
    const TypeFact* fact = fact_by_name(it->second.first);
    ASSERT_NE(fact, nullptr) << it->second.first;
    EXPECT_EQ(static_cast<uint32_t>(t.type), fact->id);
    EXPECT_EQ(ggml_type_info(t.type).name, it->second.first);
    EXPECT_EQ(std::vector<uint64_t>(t.ne.begin(), t.ne.end()), it->second.second);
    EXPECT_EQ(t.bytes, expected_bytes(fact->id, it->second.second));
    EXPECT_EQ(t.file, 0);
    ASSERT_GE(t.data, base);
    ASSERT_LE(static_cast<uint64_t>(t.data - base) + t.bytes, file_size);
    EXPECT_EQ(static_cast<uint64_t>(t.data - base) % 32, 0u);
    ranges.emplace_back(t.data, t.bytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    EXPECT_LE(ranges[i - 1].first + ranges[i - 1].second, ranges[i].first);
}

TEST(GgufFixtures, TensorsMatchTypesJson) {
  // The Qwen3 files and the Qwen3.5 hybrids each have their own list (README).
  auto qwen3 = read_json_file(fixture_dir() + "/golden/types.json");
  ASSERT_TRUE(qwen3.is_ok()) << qwen3.status().to_string();
  auto qwen3_5 = read_json_file(fixture_dir() + "/golden/types-qwen3_5.json");
  ASSERT_TRUE(qwen3_5.is_ok()) << qwen3_5.status().to_string();
  const std::vector<std::string> files = shipped_files();
  ASSERT_EQ(files.size(), 14u);
  for (const std::string& name : files) {
    SCOPED_TRACE(name);
    const std::string path = fixture_dir() + "/" + name;
    ASSERT_TRUE(GgufFile::looks_like_gguf(path));
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    EXPECT_EQ(f->version(), 3u);
    const uint64_t size = fs::file_size(path);
    std::map<std::string, std::pair<std::string, std::vector<uint64_t>>> want;
    if (name == "synthetic-types.gguf") {  // README: a.T {96, 7}, b.T {256, 16}, c.MXFP4
      for (const char* t :
           {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "MXFP4"}) {
        want[std::string("a.") + t] = {t, {96, 7}};
        want[std::string("b.") + t] = {t, {256, 16}};
      }
      want["c.MXFP4"] = {"MXFP4", {64, 5, 3}};
      EXPECT_EQ(*f->get_string("general.architecture"), "synthetic");
    } else {
      const Json& types = name.starts_with("tiny-qwen3_5") ? *qwen3_5 : *qwen3;
      ASSERT_TRUE(types.contains(name));
      const Json& g = types[name];
      EXPECT_EQ(size, g["size_bytes"].get<uint64_t>());
      EXPECT_EQ(*f->get_string("general.architecture"), g["arch"].get<std::string>());
      EXPECT_EQ(*f->get_int("general.file_type"), g["file_type"].get<int64_t>());
      for (auto it = g["tensors"].begin(); it != g["tensors"].end(); ++it) {
        want[it.key()] = {(*it)["type"].get<std::string>(),
                          (*it)["ne"].get<std::vector<uint64_t>>()};
      }
    }
    check_tensors(*f, want, size);
    // No general.alignment is written: the default applies.
    EXPECT_EQ(f->find("general.alignment"), nullptr);
    auto h = parse_gguf(f->files()[0]->data(), f->files()[0]->size(), path);
    ASSERT_TRUE(h.is_ok());
    EXPECT_EQ(h->alignment, 32u);
    EXPECT_EQ(h->data_start % 32, 0u);
  }
}

// The goldens' sha256 of the stored bytes: checks data pointers and sizes from outside.
TEST(GgufFixtures, TensorBytesMatchGoldenHashes) {
  auto dq = read_json_file(fixture_dir() + "/golden/dequant.json");
  ASSERT_TRUE(dq.is_ok()) << dq.status().to_string();
  std::map<std::string, GgufFile> open;
  int checked = 0;
  for (const Json& e : (*dq)["tensors"]) {
    const std::string file = e["file"].get<std::string>();
    const std::string name = e["tensor"].get<std::string>();
    SCOPED_TRACE(file + "::" + name);
    if (!open.count(file)) {
      auto f = GgufFile::open(fixture_dir() + "/" + file);
      ASSERT_TRUE(f.is_ok()) << f.status().to_string();
      open.emplace(file, std::move(f).value());
    }
    const GgufTensorInfo* t = open.at(file).tensor(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(ggml_type_info(t->type).name, e["ggml_type"].get<std::string>());
    // The hash covers the whole stored tensor (axis0_slice applies to the dequantized values).
    EXPECT_EQ(t->bytes, e["raw_nbytes"].get<uint64_t>());
    EXPECT_EQ(test::sha256_hex(t->data, t->bytes), e["raw_bytes_sha256"].get<std::string>());
    ++checked;
  }
  EXPECT_EQ(checked, 38);
}

TEST(GgufFixtures, MetadataFacts) {
  for (const char* name : {"tiny-qwen3-moe-allmoe.Q4_K_M.gguf", "tiny-qwen3-dense.Q6_K.gguf"}) {
    SCOPED_TRACE(name);
    auto f = GgufFile::open(fixture_dir() + "/" + name);
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    const bool moe = std::string(name).find("moe") != std::string::npos;
    const std::string a = moe ? "qwen3moe." : "qwen3.";
    EXPECT_EQ(*f->get_string("general.architecture"), moe ? "qwen3moe" : "qwen3");
    EXPECT_EQ(*f->get_string("general.type"), "model");
    EXPECT_EQ(*f->get_int("general.file_type"), moe ? 15 : 18);
    EXPECT_EQ(*f->get_int("general.quantization_version"), 2);
    EXPECT_EQ(*f->get_int(a + "block_count"), moe ? 4 : 2);
    EXPECT_EQ(*f->get_int(a + "context_length"), 1024);
    EXPECT_EQ(*f->get_int(a + "embedding_length"), 256);
    EXPECT_EQ(*f->get_int(a + "feed_forward_length"), 688);
    EXPECT_EQ(*f->get_int(a + "attention.head_count"), 4);
    EXPECT_EQ(*f->get_int(a + "attention.head_count_kv"), 2);
    EXPECT_EQ(*f->get_int(a + "attention.key_length"), 64);
    EXPECT_EQ(*f->get_int(a + "attention.value_length"), 64);
    EXPECT_EQ(*f->get_float(a + "rope.freq_base"), 10000.0);
    EXPECT_EQ(*f->get_float(a + "attention.layer_norm_rms_epsilon"), double{1e-6f});
    if (moe) {
      EXPECT_EQ(*f->get_int(a + "expert_count"), 8);
      EXPECT_EQ(*f->get_int(a + "expert_used_count"), 2);
      EXPECT_EQ(*f->get_int(a + "expert_feed_forward_length"), 240);
    } else {
      EXPECT_EQ(f->find("qwen3.expert_count"), nullptr);
    }
    EXPECT_EQ(*f->get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(*f->get_string("tokenizer.ggml.pre"), "qwen2");
    auto tokens = f->get_array("tokenizer.ggml.tokens", VT::kString);
    ASSERT_TRUE(tokens.is_ok()) << tokens.status().to_string();
    ASSERT_EQ((*tokens)->array.size(), 4096u);
    EXPECT_EQ((*tokens)->array[4093].str, "<|endoftext|>");
    EXPECT_EQ((*tokens)->array[4095].str, "<|im_end|>");
    auto merges = f->get_array("tokenizer.ggml.merges", VT::kString);
    ASSERT_TRUE(merges.is_ok());
    ASSERT_EQ((*merges)->array.size(), 3837u);
    EXPECT_NE((*merges)->array[0].str.find(' '), std::string::npos);
    auto types = f->get_array("tokenizer.ggml.token_type", VT::kI32);
    ASSERT_TRUE(types.is_ok()) << types.status().to_string();
    ASSERT_EQ((*types)->array.size(), 4096u);
    for (size_t i = 0; i < 4096; ++i) EXPECT_EQ((*types)->array[i].i, i < 4093 ? 1 : 3) << i;
    EXPECT_EQ(*f->get_int("tokenizer.ggml.bos_token_id"), 4093);
    EXPECT_EQ(*f->get_int("tokenizer.ggml.eos_token_id"), 4095);
    EXPECT_EQ(*f->get_int("tokenizer.ggml.padding_token_id"), 4093);
    EXPECT_FALSE(*f->get_bool("tokenizer.ggml.add_bos_token"));
    EXPECT_EQ(f->get_string("tokenizer.chat_template")->size(), 4116u);
    // Typed reads that do not fit name the key.
    auto wrong = f->get_int("general.architecture");
    ASSERT_FALSE(wrong.is_ok());
    EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(wrong.status().message().find("general.architecture"), std::string::npos);
    EXPECT_FALSE(f->get_array("tokenizer.ggml.tokens", VT::kI32).is_ok());
    EXPECT_EQ(f->get_string("no.such.key").status().code(), StatusCode::kNotFound);
  }
}

// ---- Synthetic files: what is accepted ----

TEST(GgufParse, SmallFileTensorsAndData) {
  for (uint32_t version : {2u, 3u}) {
    Spec s = good_spec();
    s.version = version;
    const Built b = build(s);
    auto h = parse(b.bytes);
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    EXPECT_EQ(h->version, version);
    EXPECT_EQ(h->alignment, 32u);
    EXPECT_EQ(h->data_start, b.data_start);
    ASSERT_EQ(h->tensors.size(), 2u);
    const GgufTensorInfo& q = h->tensors[0];
    EXPECT_EQ(q.name, "w.q8");
    EXPECT_EQ(q.type, GgmlType::kQ8_0);
    EXPECT_EQ(q.ne, (std::vector<int64_t>{64, 3}));
    EXPECT_EQ(q.bytes, 2u * 34 * 3);
    EXPECT_EQ(q.offset, 0u);
    const GgufTensorInfo& n = h->tensors[1];
    EXPECT_EQ(n.bytes, 20u);
    EXPECT_EQ(n.offset, 224u);  // 204 rounded up to 32
    const auto* base = reinterpret_cast<const uint8_t*>(b.bytes.data());
    for (const GgufTensorInfo& t : h->tensors) {
      EXPECT_EQ(t.data, base + b.data_start + t.offset);
      for (uint64_t i = 0; i < t.bytes; ++i) ASSERT_EQ(t.data[i], pattern(t.offset + i));
    }
  }
}

TEST(GgufParse, EmptyFileAndCustomAlignment) {
  auto empty = parse(build(Spec{}).bytes);
  ASSERT_TRUE(empty.is_ok()) << empty.status().to_string();
  EXPECT_TRUE(empty->tensors.empty());
  Spec s = good_spec();
  s.kvs[1] = kv_u32("general.alignment", 64);
  s.align = 64;
  const Built b = build(s);
  auto h = parse(b.bytes);
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  EXPECT_EQ(h->alignment, 64u);
  EXPECT_EQ(h->data_start % 64, 0u);
  EXPECT_EQ(h->data_start, b.data_start);
  EXPECT_EQ(h->tensors[1].offset, 256u);
}

// Every value type, arrays of strings and arrays of arrays, as written.
std::vector<std::string> all_value_kvs() {
  std::string nested =
      arr(VT::kU16, 2, le<uint16_t>(7) + le<uint16_t>(65535)) + arr(VT::kU16, 0, "");
  return {kv("u8", VT::kU8, le<uint8_t>(200)),
          kv("i8", VT::kI8, le<int8_t>(-100)),
          kv("u16", VT::kU16, le<uint16_t>(60000)),
          kv("i16", VT::kI16, le<int16_t>(-30000)),
          kv("u32", VT::kU32, le<uint32_t>(4000000000u)),
          kv("i32", VT::kI32, le<int32_t>(-2000000000)),
          kv("u64", VT::kU64, le<uint64_t>(uint64_t{1} << 40)),
          kv("u64.big", VT::kU64, le<uint64_t>(~uint64_t{0})),
          kv("i64", VT::kI64, le<int64_t>(-(int64_t{1} << 50))),
          kv("f32", VT::kF32, le<float>(0.25f)),
          kv("f64", VT::kF64, le<double>(-1e300)),
          kv("bool.t", VT::kBool, le<uint8_t>(1)),
          kv("bool.f", VT::kBool, le<uint8_t>(0)),
          kv_str("str", "h\xc3\xa9llo"),
          kv_str("str.empty", ""),
          kv("arr.str", VT::kArray, arr(VT::kString, 2, gstr("a b") + gstr(""))),
          kv("arr.f32", VT::kArray, arr(VT::kF32, 2, le<float>(1.5f) + le<float>(-2.f))),
          kv("arr.nested", VT::kArray, arr(VT::kArray, 2, nested))};
}

TEST(GgufParse, EveryValueType) {
  Spec s;
  s.kvs = all_value_kvs();
  auto h = parse(build(s).bytes);
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  const auto& m = h->metadata;
  ASSERT_EQ(m.size(), s.kvs.size());
  EXPECT_EQ(m.at("u8").u, 200u);
  EXPECT_EQ(m.at("u8").i, 200);
  EXPECT_EQ(m.at("u64.big").u, ~uint64_t{0});
  EXPECT_EQ(m.at("i64").i, -(int64_t{1} << 50));
  EXPECT_EQ(m.at("i64").u, 0u);     // negative: only in `i`
  EXPECT_EQ(m.at("u64.big").i, 0);  // above INT64_MAX: only in `u`
  EXPECT_EQ(m.at("str").str, "h\xc3\xa9llo");
  EXPECT_EQ(m.at("str").type, VT::kString);
  const GgufValue& as = m.at("arr.str");
  EXPECT_EQ(as.elem_type, VT::kString);
  ASSERT_EQ(as.array.size(), 2u);
  EXPECT_EQ(as.array[0].str, "a b");
  EXPECT_EQ(m.at("arr.f32").array[1].f, -2.0);
  const GgufValue& nested = m.at("arr.nested");
  EXPECT_EQ(nested.elem_type, VT::kArray);
  ASSERT_EQ(nested.array.size(), 2u);
  EXPECT_EQ(nested.array[0].elem_type, VT::kU16);
  ASSERT_EQ(nested.array[0].array.size(), 2u);
  EXPECT_EQ(nested.array[0].array[1].u, 65535u);
  EXPECT_TRUE(nested.array[1].array.empty());
}

TEST(GgufFile, TypedGetters) {
  Spec s;
  s.kvs = all_value_kvs();
  const std::string path = test::temp_dir("gguf-get") + "/values.gguf";
  write_file(path, build(s).bytes);
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(*f->get_int("u8"), 200);
  EXPECT_EQ(*f->get_int("i8"), -100);
  EXPECT_EQ(*f->get_int("u16"), 60000);
  EXPECT_EQ(*f->get_int("i16"), -30000);
  EXPECT_EQ(*f->get_int("u32"), 4000000000);
  EXPECT_EQ(*f->get_int("i32"), -2000000000);
  EXPECT_EQ(*f->get_int("u64"), int64_t{1} << 40);
  EXPECT_EQ(*f->get_int("i64"), -(int64_t{1} << 50));
  auto big = f->get_int("u64.big");
  ASSERT_FALSE(big.is_ok());
  EXPECT_NE(big.status().message().find("u64.big"), std::string::npos);
  EXPECT_FALSE(f->get_int("f32").is_ok());
  EXPECT_FALSE(f->get_int("bool.t").is_ok());
  EXPECT_EQ(*f->get_float("f32"), 0.25);
  EXPECT_EQ(*f->get_float("f64"), -1e300);
  EXPECT_EQ(*f->get_float("i8"), -100.0);
  EXPECT_EQ(*f->get_float("u64.big"), 18446744073709551615.0);
  EXPECT_FALSE(f->get_float("str").is_ok());
  EXPECT_TRUE(*f->get_bool("bool.t"));
  EXPECT_FALSE(*f->get_bool("bool.f"));
  EXPECT_FALSE(f->get_bool("u8").is_ok());
  EXPECT_EQ(*f->get_string("str"), "h\xc3\xa9llo");
  EXPECT_EQ(*f->get_string("str.empty"), "");
  EXPECT_FALSE(f->get_string("arr.str").is_ok());
  auto a = f->get_array("arr.str", VT::kString);
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ((*a)->array.size(), 2u);
  auto wrong = f->get_array("arr.str", VT::kF32);
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("arr.str"), std::string::npos);
  EXPECT_FALSE(f->get_array("str", VT::kString).is_ok());
  EXPECT_TRUE(f->get_array("arr.nested", VT::kArray).is_ok());
  for (auto st :
       {f->get_int("nope").status(), f->get_float("nope").status(), f->get_bool("nope").status(),
        f->get_string("nope").status(), f->get_array("nope", VT::kU8).status()}) {
    EXPECT_EQ(st.code(), StatusCode::kNotFound);
    EXPECT_NE(st.message().find("nope"), std::string::npos);
  }
  EXPECT_TRUE(GgufFile::looks_like_gguf(path));
  EXPECT_FALSE(GgufFile::looks_like_gguf(fs::path(path).parent_path().string()));
  EXPECT_FALSE(GgufFile::looks_like_gguf(fixture_dir() + "/README.md"));
  fs::remove_all(fs::path(path).parent_path());
}

// ---- Synthetic files: every kind of damage ----

TEST(GgufDamage, HeaderFields) {
  std::string b = build(good_spec()).bytes;
  std::string bad = b;
  bad[3] = 'X';
  expect_error(bad, {"bad magic"});
  Spec s = good_spec();
  s.version = 1;
  expect_error(build(s).bytes, {"GGUF version 1 is not supported"});
  s.version = 4;
  expect_error(build(s).bytes, {"GGUF version 4 is not supported"});
  s.version = 0;
  expect_error(build(s).bytes, {"GGUF version 0 is not supported"});
  s.version = 0x03000000;  // a big-endian v3 file read little-endian
  expect_error(build(s).bytes, {"big-endian"});
  expect_error("", {"magic", "past the end"});
}

TEST(GgufDamage, TruncationAnywhere) {
  Spec s = good_spec();
  s.kvs = all_value_kvs();
  s.kvs.push_back(kv_u32("general.alignment", 32));
  const std::string b = build(s).bytes;
  ASSERT_TRUE(parse(b).is_ok());
  for (size_t n = 0; n < b.size(); ++n) {
    auto r = parse(b.substr(0, n));
    ASSERT_FALSE(r.is_ok()) << "prefix " << n;
    const std::string& m = r.status().message();
    EXPECT_TRUE(m.find("past the end") != std::string::npos ||
                m.find("cannot fit") != std::string::npos)
        << n << ": " << m;
  }
}

TEST(GgufDamage, LengthsPastTheEnd) {
  Spec s;
  s.kvs = {gstr("k") + le<uint32_t>(8) + le<uint64_t>(1000) + "abc"};
  expect_error(build(s).bytes, {"key 'k'", "length 1000", "past the end"});
  s.kvs = {le<uint64_t>(~uint64_t{0}) + "key"};
  expect_error(build(s).bytes, {"key has length 18446744073709551615", "past the end"});
  s.kvs = {kv("a", VT::kArray, arr(VT::kU32, 1000, le<uint32_t>(1)))};
  expect_error(build(s).bytes, {"key 'a'", "array length 1000", "past the end"});
  s.kvs = {kv("a", VT::kArray, arr(VT::kString, uint64_t{1} << 62, ""))};
  expect_error(build(s).bytes, {"key 'a'", "array length", "past the end"});
  // Each string element needs 8 bytes: 100 of them cannot fit in 200 bytes.
  s.kvs = {kv("a", VT::kArray, arr(VT::kString, 100, std::string(200, '\0')))};
  expect_error(build(s).bytes, {"array length 100", "past the end"});
  s = Spec{};
  s.tensors = {{"n", {4}, 0}};
  std::string b = build(s).bytes;
  b.replace(24, 8, le<uint64_t>(uint64_t{1} << 40));  // the first tensor name's length
  expect_error(b, {"tensor info 0", "tensor name has length", "past the end"});
}

TEST(GgufDamage, CountsThatCannotFit) {
  Spec s = good_spec();
  s.kv_count = 1000000;
  expect_error(build(s).bytes, {"metadata count 1000000 cannot fit"});
  s.kv_count = -1;
  s.tensor_count = int64_t{1} << 40;
  expect_error(build(s).bytes, {"tensor count 1099511627776 cannot fit"});
  std::string b = build(good_spec()).bytes;
  b.replace(8, 16, std::string(16, '\xff'));
  expect_error(b, {"cannot fit"});
  // A count that fits the size bound but not the entries that are there.
  s = good_spec();
  s.kv_count = 3;
  expect_error(build(s).bytes, {"t.gguf"});
}

TEST(GgufDamage, NestingValueTypesAndDuplicates) {
  // `levels` arrays, each the single element of the one around it, around one u8.
  auto nest = [](int levels) {
    std::string v;
    for (int i = 1; i < levels; ++i) v += le(static_cast<uint32_t>(VT::kArray)) + le<uint64_t>(1);
    return v + arr(VT::kU8, 1, le<uint8_t>(5));
  };

  Spec s;
  s.kvs = {kv("deep", VT::kArray, nest(8))};
  EXPECT_TRUE(parse(build(s).bytes).is_ok());
  s.kvs = {kv("deep", VT::kArray, nest(9))};
  expect_error(build(s).bytes, {"key 'deep'", "nested deeper than 8"});
  s.kvs = {kv("deep", VT::kArray, nest(100000))};
  expect_error(build(s).bytes, {"nested deeper than 8"});
  s.kvs = {gstr("t") + le<uint32_t>(13) + le<uint32_t>(0)};
  expect_error(build(s).bytes, {"key 't'", "unknown value type 13"});
  s.kvs = {kv("a", VT::kArray, arr(static_cast<VT>(77), 0, ""))};
  expect_error(build(s).bytes, {"key 'a'", "unknown element type 77"});
  s.kvs = {kv_u32("x", 1), kv_str("y", "a"), kv_u32("x", 2)};
  expect_error(build(s).bytes, {"key 'x'", "duplicate key"});
  s = good_spec();
  s.tensors[1].name = "w.q8";
  expect_error(build(s).bytes, {"tensor 'w.q8'", "duplicate tensor name"});
  // Names from the file are escaped in messages.
  s.tensors = {{"a\nb", {4}, 0}, {"a\nb", {4}, 0}};
  expect_error(build(s).bytes, {"tensor 'a\\x0ab'", "duplicate tensor name"});
}

TEST(GgufDamage, Alignment) {
  Spec s = good_spec();
  s.kvs[1] = kv("general.alignment", VT::kU64, le<uint64_t>(32));
  expect_error(build(s).bytes, {"general.alignment", "must be u32, not u64"});
  s.kvs[1] = kv_str("general.alignment", "32");
  expect_error(build(s).bytes, {"general.alignment", "must be u32, not string"});
  for (uint32_t a : {0u, 48u, 3u}) {
    s.kvs[1] = kv_u32("general.alignment", a);
    expect_error(build(s).bytes, {"general.alignment",
                                  "alignment " + std::to_string(a) + " is not a power of two"});
  }
  s = good_spec();
  s.tensors[1].offset = 208;  // 16-aligned, not 32
  expect_error(build(s).bytes,
               {"tensor 'n.f32'", "offset 208 is not a multiple of the alignment 32"});
}

TEST(GgufDamage, Dimensions) {
  Spec s = good_spec();
  s.tensors[0].ne = {};
  expect_error(build(s).bytes, {"tensor 'w.q8'", "n_dims 0"});
  s.tensors[0].ne = {32, 1, 1, 1, 1};
  expect_error(build(s).bytes, {"tensor 'w.q8'", "n_dims 5"});
  s.tensors[0].ne = {64, 0};
  expect_error(build(s).bytes, {"tensor 'w.q8'", "ne[1] = 0 is not positive"});
  s.tensors[0].ne = {64, uint64_t{1} << 63};
  expect_error(build(s).bytes, {"tensor 'w.q8'", "ne[1] = -9223372036854775808 is not positive"});
  s.tensors[0].ne = {64, uint64_t{1} << 32, uint64_t{1} << 32};
  expect_error(build(s).bytes, {"tensor 'w.q8'", "overflow int64"});
  s.tensors[0].ne = {40, 3};
  expect_error(build(s).bytes,
               {"tensor 'w.q8'", "ne[0] = 40", "not a multiple of the Q8_0 block of 32"});
  // Bytes (not elements) that overflow: 2^62 F32 values.
  s.tensors[0] = {"big", {uint64_t{1} << 31, uint64_t{1} << 31}, 0};
  expect_error(build(s).bytes, {"tensor 'big'", "overflow"});
  s.tensors[0] = {"long", {uint64_t{1} << 62}, 0};  // one row of 2^64 bytes
  expect_error(build(s).bytes, {"tensor 'long'", "overflow"});
}

TEST(GgufDamage, Types) {
  Spec s = good_spec();
  for (uint32_t id : {4u, 99u, 0xffffffffu}) {
    s.tensors[0].type = id;
    expect_error(build(s).bytes, {"tensor 'w.q8'", "unknown ggml type id " + std::to_string(id)});
  }
  const std::string supported(ggml_supported_type_list());
  ASSERT_NE(supported.find("Q8_0"), std::string::npos) << supported;
  for (auto [id, name] : {std::pair<uint32_t, const char*>{16, "IQ2_XXS"}, {34, "TQ1_0"}}) {
    s.tensors[0] = {"w.iq", {256, 2}, id};
    expect_error(build(s).bytes, {"tensor 'w.iq'", name, "not supported", supported});
  }
}

TEST(GgufDamage, DataPlacement) {
  Spec s = good_spec();
  Built b = build(s);
  b.bytes.pop_back();
  expect_error(b.bytes, {"tensor 'n.f32'", "past the end of the file"});
  s.tensors[1].offset = uint64_t{1} << 62;
  expect_error(build(s).bytes, {"tensor 'n.f32'", "past the end of the file"});
  s.tensors[1].offset = ~uint64_t{0} - 31;  // offset + bytes wraps
  expect_error(build(s).bytes, {"tensor 'n.f32'", "past the end of the file"});
  s = good_spec();
  s.tensors[1].offset = 192;  // inside w.q8 (204 bytes from 0)
  s.data_bytes = 1024;
  expect_error(build(s).bytes, {"tensors 'w.q8' and 'n.f32' overlap"});
  s.tensors = {{"a", {32}, 0}, {"b", {8}, 0, 512}, {"c", {32}, 0, 0}};
  expect_error(build(s).bytes, {"'a' and 'c' overlap"});
}

// ---- Split checkpoints ----

struct SplitPart {
  std::vector<std::string> kvs;
  std::vector<TensorSpec> tensors;
  int no = 0;  // the split.* keys written; count 0 writes none
  int count = 2;
  int total = 3;
};

std::vector<std::string> with_split(std::vector<std::string> kvs, int no, int count, int total) {
  kvs.push_back(kv("split.no", VT::kU16, le<uint16_t>(static_cast<uint16_t>(no))));
  kvs.push_back(kv("split.count", VT::kU16, le<uint16_t>(static_cast<uint16_t>(count))));
  kvs.push_back(kv("split.tensors.count", VT::kI32, le<int32_t>(total)));
  return kvs;
}

// Writes `parts` as dir/m-0000i-of-0000N.gguf; returns the paths.
std::vector<std::string> write_split(const std::string& dir, const std::vector<SplitPart>& parts) {
  std::vector<std::string> paths;
  for (size_t i = 0; i < parts.size(); ++i) {
    const SplitPart& p = parts[i];
    Spec s;
    s.kvs = p.count > 0 ? with_split(p.kvs, p.no, p.count, p.total) : p.kvs;
    s.tensors = p.tensors;
    char name[64];
    std::snprintf(name, sizeof(name), "/m-%05zu-of-%05zu.gguf", i + 1, parts.size());
    paths.push_back(dir + name);
    write_file(paths.back(), build(s).bytes);
  }
  return paths;
}

std::vector<SplitPart> two_parts() {
  SplitPart a{{kv_str("general.architecture", "synthetic")}, {{"t0", {64, 2}, 8}, {"t1", {4}, 0}}};
  SplitPart b{{kv_str("general.name", "part two")}, {{"t2", {32, 3}, 1}}};
  b.no = 1;
  return {a, b};
}

TEST(GgufSplit, OpensEveryPartFromAnyPart) {
  const std::string dir = test::temp_dir("gguf-split");
  const std::vector<std::string> paths = write_split(dir, two_parts());
  for (const std::string& p : paths) {
    auto f = GgufFile::open(p);
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    EXPECT_EQ(f->path(), p);
    ASSERT_EQ(f->files().size(), 2u);
    ASSERT_EQ(f->tensors().size(), 3u);
    EXPECT_EQ(*f->get_string("general.architecture"), "synthetic");
    EXPECT_EQ(f->find("general.name"), nullptr);  // metadata comes from part 1
    const int want_file[3] = {0, 0, 1};
    for (int i = 0; i < 3; ++i) {
      const GgufTensorInfo* t = f->tensor("t" + std::to_string(i));
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(t->file, want_file[i]);
      const MappedFile& m = *f->files()[static_cast<size_t>(t->file)];
      EXPECT_EQ(m.path(), paths[static_cast<size_t>(want_file[i])]);
      ASSERT_LE(t->data + t->bytes, m.data() + m.size());
      ASSERT_GE(t->data, m.data());
      // The last tensor of each part ends the file; the data pattern restarts per part.
      EXPECT_EQ(t->data[0], pattern(t->offset));
    }
    EXPECT_EQ(f->tensor("t2")->data + f->tensor("t2")->bytes,
              f->files()[1]->data() + f->files()[1]->size());
  }
  fs::remove_all(dir);
}

void expect_open_error(const std::string& path, std::initializer_list<std::string> needles) {
  auto f = GgufFile::open(path);
  ASSERT_FALSE(f.is_ok()) << "opened " << path;
  for (const std::string& n : needles)
    EXPECT_NE(f.status().message().find(n), std::string::npos) << f.status().message();
}

TEST(GgufSplit, BrokenSplits) {
  const std::string dir = test::temp_dir("gguf-split-bad");
  std::vector<SplitPart> parts = two_parts();
  std::vector<std::string> paths = write_split(dir, parts);
  fs::remove(paths[1]);
  expect_open_error(paths[0], {"split part 2 of 2", "m-00002-of-00002.gguf", "no such file"});

  parts[1].no = 0;
  paths = write_split(dir, parts);
  expect_open_error(paths[0], {"m-00002-of-00002.gguf", "split.no", "part 2"});

  parts = two_parts();
  parts[1].count = 3;
  paths = write_split(dir, parts);
  expect_open_error(paths[1], {"m-00002-of-00002.gguf", "split.count", "3"});

  parts = two_parts();
  parts[0].total = 4;
  paths = write_split(dir, parts);
  expect_open_error(paths[0], {"m-00001-of-00002.gguf", "split.tensors.count", "4", "hold 3"});

  parts = two_parts();
  parts[1].tensors[0].name = "t0";
  paths = write_split(dir, parts);
  expect_open_error(paths[0], {"tensor 't0'", "also in", "m-00001-of-00002.gguf"});

  parts = two_parts();
  parts[1].count = 0;  // no split keys at all in part 2
  paths = write_split(dir, parts);
  expect_open_error(paths[0], {"m-00002-of-00002.gguf", "split.count", "absent"});

  // A part of a split under a name without the pattern.
  const std::string plain = dir + "/plain.gguf";
  fs::copy_file(paths[0], plain, fs::copy_options::overwrite_existing);
  expect_open_error(plain, {"plain.gguf", "split.count", "does not follow"});
  // Damage in one part is reported with that part's name.
  write_file(paths[1], "GGUF");
  expect_open_error(paths[0], {"m-00002-of-00002.gguf", "version", "past the end"});
  fs::remove_all(dir);
}

TEST(GgufSplit, SingleFiles) {
  const std::string dir = test::temp_dir("gguf-single");
  Spec s = good_spec();
  write_file(dir + "/one.gguf", build(s).bytes);
  auto f = GgufFile::open(dir + "/one.gguf");
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->files().size(), 1u);
  EXPECT_EQ(f->tensors().size(), 2u);
  // A one-part split name with split keys, and one without them.
  s.kvs = with_split(s.kvs, 0, 1, 2);
  write_file(dir + "/x-00001-of-00001.gguf", build(s).bytes);
  EXPECT_TRUE(GgufFile::open(dir + "/x-00001-of-00001.gguf").is_ok());
  write_file(dir + "/y-00001-of-00001.gguf", build(good_spec()).bytes);
  EXPECT_TRUE(GgufFile::open(dir + "/y-00001-of-00001.gguf").is_ok());
  expect_open_error(dir + "/z-00003-of-00002.gguf", {"part 3 of 2"});
  expect_open_error(dir + "/missing.gguf", {"missing.gguf"});
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mx

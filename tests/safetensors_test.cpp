// safetensors reading and writing, single files and shards, and every kind of damage.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "loader/checkpoint.h"
#include "loader/safetensors.h"
#include "test_util.h"

namespace mx {
namespace {

namespace fs = std::filesystem;

std::string raw_file(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + std::string(data_bytes, '\x11');
}

Status parse(const std::string& bytes) {
  auto r = parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                             "t.safetensors");
  return r.is_ok() ? Status::ok() : r.status();
}

void expect_error(const std::string& bytes, const std::string& needle) {
  const Status s = parse(bytes);
  ASSERT_FALSE(s.is_ok()) << "accepted: " << needle;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("t.safetensors"), std::string::npos) << s.message();
}

TEST(Safetensors, WriteThenReadEveryDtype) {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  const DType dtypes[] = {DType::kBF16, DType::kF16, DType::kF32, DType::kF8E4M3,
                          DType::kU8,   DType::kI8,  DType::kI32, DType::kI64};
  for (DType d : dtypes) {
    std::vector<uint8_t> bytes(3 * 5 * dtype_size(d));
    for (size_t i = 0; i < bytes.size(); ++i)
      bytes[i] = static_cast<uint8_t>(i * 7 + static_cast<int>(d));
    ASSERT_TRUE(
        w.add("t." + std::string(dtype_name(d)), d, {3, 5}, bytes.data(), bytes.size()).is_ok());
  }
  const std::string dir = test::temp_dir("st");
  const std::string path = dir + "/a.safetensors";
  ASSERT_TRUE(w.write(path).is_ok());
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->tensors().size(), std::size(dtypes));
  for (DType d : dtypes) {
    auto t = f->tensor("t." + std::string(dtype_name(d)));
    ASSERT_TRUE(t.is_ok());
    EXPECT_EQ(t->dtype(), d);
    EXPECT_EQ(t->shape(), (Shape{3, 5}));
    EXPECT_TRUE(t->is_mapped());
    const auto* p = static_cast<const uint8_t*>(t->data());
    for (size_t i = 0; i < t->nbytes(); ++i)
      ASSERT_EQ(p[i], static_cast<uint8_t>(i * 7 + static_cast<int>(d)));
  }
  // The header is padded so the data area starts 8-byte aligned.
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  fs::remove_all(dir);
}

TEST(Safetensors, WriterRejectsMismatchedSizes) {
  SafetensorsWriter w;
  uint8_t b[6] = {};
  EXPECT_FALSE(w.add("x", DType::kF32, {2}, b, 6).is_ok());
  EXPECT_TRUE(w.add("x", DType::kU8, {6}, b, 6).is_ok());
  EXPECT_FALSE(w.add("x", DType::kU8, {6}, b, 6).is_ok());  // twice
}

TEST(Safetensors, DamageIsReportedWithItsCause) {
  expect_error(std::string(5, '\0'), "shorter than the 8-byte header");
  expect_error(raw_file("{}", 0).substr(0, 9), "runs past the end");
  std::string huge = raw_file("{}", 0);
  huge[6] = 1;
  expect_error(huge, "runs past the end");
  expect_error(raw_file("{\"a\":", 0), "malformed JSON");
  expect_error(raw_file("[1,2]", 0), "not a JSON object");
  expect_error(raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4),
               "past the data area");
  expect_error(raw_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
               "needs 12 bytes");
  expect_error(raw_file(R"({"w":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}})", 8),
               "unknown dtype 'Q9'");
  expect_error(raw_file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
               "negative");
  expect_error(raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8),
               "begin > end");
  expect_error(raw_file(R"({"w":{"dtype":"F32","shape":[2]}})", 8), "data_offsets");
  expect_error(raw_file(R"({"a":{"dtype":"U8","shape":[6],"data_offsets":[0,6]},)"
                        R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                        8),
               "overlap");
  expect_error(raw_file(R"({"__metadata__":{"x":1}})", 0), "not a string");
  expect_error(
      raw_file(
          R"({"w":{"dtype":"U8","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}})",
          8),
      "w");
  // Well-formed: accepted, including an empty tensor.
  EXPECT_TRUE(
      parse(raw_file(R"({"e":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})", 0)).is_ok());
}

TEST(Safetensors, TruncatedFileOnDisk) {
  const std::string dir = test::temp_dir("trunc");
  SafetensorsWriter w;
  std::vector<uint8_t> b(1000, 3);
  ASSERT_TRUE(w.add("big", DType::kU8, {1000}, b.data(), b.size()).is_ok());
  const std::string bytes = w.serialize();
  const std::string path = dir + "/t.safetensors";
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 10));
  auto f = SafetensorsFile::open(path);
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.status().message().find("big"), std::string::npos);
  EXPECT_NE(f.status().message().find("truncated"), std::string::npos);
  auto missing = SafetensorsFile::open(dir + "/nope.safetensors");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  fs::remove_all(dir);
}

TEST(Checkpoint, BundledShardsOpenThroughTheIndex) {
  auto ck = CheckpointFiles::open(test::source_dir() + "/models/tiny-qwen3-moe", "model");
  ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
  EXPECT_EQ(ck->files().size(), 2u);
  auto t = ck->tensor("model.layers.1.mlp.experts.7.down_proj.weight");
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(t->dtype(), DType::kBF16);
  EXPECT_EQ(t->shape(), (Shape{256, 240}));
}

TEST(Checkpoint, MissingShardAndMissingTensorAreNamed) {
  const std::string dir = test::temp_dir("shards");
  SafetensorsWriter w;
  uint8_t b[4] = {1, 2, 3, 4};
  ASSERT_TRUE(w.add("a", DType::kU8, {4}, b, 4).is_ok());
  ASSERT_TRUE(w.write(dir + "/s1.safetensors").is_ok());
  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})";
  auto ck = CheckpointFiles::open(dir, "model");
  ASSERT_FALSE(ck.is_ok());
  EXPECT_NE(ck.status().message().find("s2.safetensors"), std::string::npos)
      << ck.status().message();
  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"weight_map":{"a":"s1.safetensors","c":"s1.safetensors"}})";
  ck = CheckpointFiles::open(dir, "model");
  ASSERT_FALSE(ck.is_ok());
  EXPECT_NE(ck.status().message().find("'c'"), std::string::npos) << ck.status().message();
  std::ofstream(dir + "/model.safetensors.index.json") << R"({"weight_map":{"a":"../x"}})";
  EXPECT_FALSE(CheckpointFiles::open(dir, "model").is_ok());
  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"weight_map":{"a":"s1.safetensors"}})";
  ck = CheckpointFiles::open(dir, "model");
  ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
  EXPECT_EQ(ck->size(), 1u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mx

// ggml types: the type table, the scalar references against llama.cpp's dequantization
// goldens (gguf-py, equal to ggml's to_float), every ISA variant against the reference on
// random blocks, and the MXFP4 repack into OCP order checked through the OCP dequantizer.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/json_util.h"
#include "formats/ggml_types.h"
#include "formats/half.h"
#include "formats/mx_block.h"
#include "formats/mx_layout.h"
#include "loader/gguf.h"
#include "loader/safetensors.h"
#include "test_util.h"

namespace mx {
namespace {

std::string gguf_dir() { return test::shared_dir() + "/fixtures/gguf"; }

// The reference of the table row, then every ISA table this machine runs.
std::vector<std::pair<std::string, const GgmlKernels*>> isa_tables() {
  std::vector<std::pair<std::string, const GgmlKernels*>> out;
  for (IsaLevel l : {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512}) {
    if (const GgmlKernels* k = ggml_kernels_for(l)) out.emplace_back(std::string(isa_name(l)), k);
  }
  return out;
}

// Index of the first float whose bits differ, or -1.
int64_t first_bit_difference(const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) return i;
  }
  return -1;
}

std::string describe(const float* got, const float* want, int64_t i) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "element %lld: got %.9g (0x%08x), want %.9g (0x%08x)",
                static_cast<long long>(i), static_cast<double>(got[i]),
                std::bit_cast<uint32_t>(got[i]), static_cast<double>(want[i]),
                std::bit_cast<uint32_t>(want[i]));
  return buf;
}

// ---- (a) the table ----

struct TypeFact {
  uint32_t id;
  const char* name;
  int64_t block, bytes;
  bool supported;
};

// From ggml.h (ids) and ggml-common.h (block structs).
constexpr TypeFact kFacts[] = {
    {0, "F32", 1, 4, true},          {1, "F16", 1, 2, true},
    {2, "Q4_0", 32, 18, true},       {3, "Q4_1", 32, 20, true},
    {6, "Q5_0", 32, 22, true},       {7, "Q5_1", 32, 24, true},
    {8, "Q8_0", 32, 34, true},       {9, "Q8_1", 32, 36, false},
    {10, "Q2_K", 256, 84, true},     {11, "Q3_K", 256, 110, true},
    {12, "Q4_K", 256, 144, true},    {13, "Q5_K", 256, 176, true},
    {14, "Q6_K", 256, 210, true},    {15, "Q8_K", 256, 292, false},
    {16, "IQ2_XXS", 256, 66, false}, {17, "IQ2_XS", 256, 74, false},
    {18, "IQ3_XXS", 256, 98, false}, {19, "IQ1_S", 256, 50, false},
    {20, "IQ4_NL", 32, 18, true},   {21, "IQ3_S", 256, 110, false},
    {22, "IQ2_S", 256, 82, false},   {23, "IQ4_XS", 256, 136, true},
    {24, "I8", 1, 1, false},         {25, "I16", 1, 2, false},
    {26, "I32", 1, 4, false},        {27, "I64", 1, 8, false},
    {28, "F64", 1, 8, false},        {29, "IQ1_M", 256, 56, false},
    {30, "BF16", 1, 2, true},        {34, "TQ1_0", 256, 54, false},
    {35, "TQ2_0", 256, 66, false},   {39, "MXFP4", 32, 17, true},
};

TEST(GgmlTypes, TableFacts) {
  for (const TypeFact& f : kFacts) {
    SCOPED_TRACE(f.name);
    const GgmlTypeInfo* t = ggml_type_info(f.id);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(static_cast<uint32_t>(t->type), f.id);
    EXPECT_EQ(t->name, f.name);
    EXPECT_EQ(t->block, f.block);
    EXPECT_EQ(t->block_bytes, f.bytes);
    EXPECT_EQ(t->supported, f.supported);
    EXPECT_EQ(t->reference != nullptr, f.supported);
    EXPECT_EQ(&ggml_type_info(static_cast<GgmlType>(f.id)), t);
  }
  int defined = 0;
  for (uint32_t id = 0; id < 1000; ++id) defined += ggml_type_info(id) != nullptr;
  EXPECT_EQ(defined, static_cast<int>(std::size(kFacts)));
  for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 41u, 255u, 0xFFFFFFFFu}) {
    EXPECT_EQ(ggml_type_info(id), nullptr) << id;
  }
}

TEST(GgmlTypes, SupportedListNamesExactlyTheSupportedTypes) {
  std::set<std::string> want;
  for (const TypeFact& f : kFacts)
    if (f.supported) want.insert(f.name);
  std::set<std::string> got;
  const std::string list(ggml_supported_type_list());
  for (size_t pos = 0; pos <= list.size();) {
    size_t end = list.find(", ", pos);
    if (end == std::string::npos) end = list.size();
    got.insert(list.substr(pos, end - pos));
    pos = end + 2;
  }
  EXPECT_EQ(got, want) << list;
}

TEST(GgmlTypes, RowBytes) {
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ4_K, 256), 144);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ4_K, 512), 288);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ4_K, 96), -1);  // not a multiple of 256
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ8_0, 240), -1);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ8_0, 256), 272);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kMXFP4, 64), 34);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kF16, 688), 1376);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kF32, 7), 28);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kIQ2_XXS, 512), 132);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ6_K, 0), 0);
  EXPECT_EQ(ggml_row_bytes(GgmlType::kQ6_K, -256), -1);
  EXPECT_EQ(ggml_row_bytes(static_cast<GgmlType>(4), 32), -1);  // not a ggml id
}

TEST(GgmlTypes, KernelTables) {
  ASSERT_NE(ggml_kernels_for(IsaLevel::kScalar), nullptr);
  EXPECT_EQ(ggml_kernels_for(IsaLevel::kAvx512), nullptr);  // no AVX-512 table yet
  for (const auto& [name, k] : isa_tables()) {
    SCOPED_TRACE(name);
    for (uint32_t id = 0; id < 40; ++id) {
      const GgmlTypeInfo* t = ggml_type_info(id);
      EXPECT_EQ(k->dequant[id] != nullptr, t != nullptr && t->supported) << id;
    }
  }
  const GgmlKernels& active = ggml_kernels();
  EXPECT_LE(static_cast<int>(active.isa), static_cast<int>(active_isa()));
  EXPECT_EQ(ggml_kernels_for(active.isa), &active);
  EXPECT_EQ(&ggml_kernels(), &active);  // resolved once
  for (uint32_t id = 0; id < 40; ++id) {
    if (ggml_type_info(id) && ggml_type_info(id)->supported) {
      EXPECT_EQ(ggml_detail::kScalarGgml.dequant[id], ggml_type_info(id)->reference);
    }
  }
}

// Every supported type but F32 (a copy) has an AVX2 dequantizer of its own: a type left on
// its scalar reference makes GGUF decode on its files several times slower. That each equals
// the reference bit for bit is checked below, on random blocks and on the goldens.
TEST(GgmlTypes, Avx2HasAFastPathForEveryQuantizedType) {
  const GgmlKernels* avx2 = ggml_kernels_for(IsaLevel::kAvx2);
  if (avx2 == nullptr) GTEST_SKIP() << "no AVX2 on this machine";
  for (const TypeFact& f : kFacts) {
    if (!f.supported || f.id == 0) continue;
    EXPECT_NE(avx2->dequant[f.id], ggml_type_info(f.id)->reference) << f.name;
  }
}

// ---- hand-built blocks: facts of the formats, computed here from their description ----

TEST(GgmlTypes, Mxfp4ScaleIncludesSubnormalsAndTheTop) {
  // Code 1 (doubled E2M1: 1) and code 15 (-12) under e = 0, 1, 2, 254, 255.
  const std::pair<uint8_t, double> cases[] = {
      {0, std::ldexp(1.0, -128)}, {1, std::ldexp(1.0, -127)},  {2, std::ldexp(1.0, -126)},
      {127, std::ldexp(1.0, -1)}, {254, std::ldexp(1.0, 126)}, {255, std::ldexp(1.0, 127)},
  };
  for (const auto& [e, d] : cases) {
    uint8_t blk[17] = {e};
    blk[1] = 0xF1;  // element 0: code 1, element 16: code 15
    blk[2] = 0x08;  // element 1: code 8 (+0 in ggml's table)
    float y[32];
    ggml_detail::ref_mxfp4(blk, y, 32);
    EXPECT_EQ(y[0], static_cast<float>(d)) << int{e};
    const double m = -12.0 * d;
    EXPECT_EQ(y[16], m < -std::ldexp(1.0, 128) ? -INFINITY : static_cast<float>(m)) << int{e};
    EXPECT_EQ(std::bit_cast<uint32_t>(y[1]), 0u) << int{e};
  }
}

TEST(GgmlTypes, Q4KScalePackingOfTheUpperSubBlocks) {
  // Sub-block 5: scale 0b101011 = 43 (low 4 in byte 9, top 2 in bits 6-7 of byte 1), min
  // 0b110001 = 49 (low 4 in the high nibble of byte 9, top 2 in bits 6-7 of byte 5).
  GgmlBlockQ4_K b{};
  b.d = 0x3C00;     // 1.0
  b.dmin = 0x3800;  // 0.5
  b.scales[9] = static_cast<uint8_t>(0x1 << 4 | 0xB);
  b.scales[1] = 0b10 << 6;
  b.scales[5] = 0b11 << 6;
  for (int l = 0; l < 32; ++l) b.qs[64 + l] = static_cast<uint8_t>((l % 16) << 4);  // high
  uint8_t raw[sizeof b];
  std::memcpy(raw, &b, sizeof b);
  float y[256];
  ggml_detail::ref_q4_k(raw, y, 256);
  for (int l = 0; l < 32; ++l) EXPECT_EQ(y[160 + l], 43.0f * (l % 16) - 24.5f) << l;
  EXPECT_EQ(y[128], 0.0f);  // sub-block 4: scale and min 0
}

TEST(GgmlTypes, Q6KSignedScalesAndQ3KHighMask) {
  GgmlBlockQ6_K b6{};
  b6.d = 0xB800;  // -0.5
  b6.scales[13] = -3;
  // Value 208 = half 1, quarter 2 (high nibble of ql[64 + l]), l = 16: q = 0x3F - 32 = 31.
  b6.ql[64 + 16] = 0xF0;
  b6.qh[32 + 16] = 0b11 << 4;
  uint8_t raw6[sizeof b6];
  std::memcpy(raw6, &b6, sizeof b6);
  float y[256];
  ggml_detail::ref_q6_k(raw6, y, 256);
  EXPECT_EQ(y[208], 1.5f * 31);
  EXPECT_EQ(y[209], 1.5f * -32);  // code 0: -32

  GgmlBlockQ3_K b3{};
  b3.d = 0x4000;  // 2.0
  // Scale 9: low 4 bits in the high nibble of byte 1, top 2 bits at bit 4 of byte 9.
  b3.scales[1] = 0x50;       // low 4 bits 5
  b3.scales[9] = 0b10 << 4;  // top bits 2: 0b100101 = 37, unbiased 5
  // Value 150 (scale 9): half 1, pass 0, l = 22: field of qs[32 + 22] bits 0-1; hmask bit 4.
  b3.qs[54] = 0b11;
  b3.hmask[22] = 1 << 4;
  uint8_t raw3[sizeof b3];
  std::memcpy(raw3, &b3, sizeof b3);
  ggml_detail::ref_q3_k(raw3, y, 256);
  EXPECT_EQ(y[150], 2.0f * 5 * 3);
  EXPECT_EQ(y[151], 2.0f * 5 * -4);  // field 0 and hmask clear: -4
}

TEST(GgmlTypes, F16NaNsDecodeAsTheCodec) {
  // Every variant decodes FP16 as formats/half.h does, NaN payloads included.
  std::vector<uint16_t> h;
  for (uint32_t v = 0; v < 65536; ++v) h.push_back(static_cast<uint16_t>(v));
  std::vector<float> want(h.size()), got(h.size());
  for (size_t i = 0; i < h.size(); ++i) want[i] = fp16_to_float(h[i]);
  const auto* bytes = reinterpret_cast<const uint8_t*>(h.data());
  const auto n = static_cast<int64_t>(h.size());
  for (const auto& [name, k] : isa_tables()) {
    k->dequant[1](bytes, got.data(), n);
    const int64_t i = first_bit_difference(got.data(), want.data(), n);
    EXPECT_EQ(i, -1) << name << ": " << (i >= 0 ? describe(got.data(), want.data(), i) : "");
  }
}

// ---- (b) the goldens ----

struct GoldenEntry {
  std::string name, file, tensor, type;
  std::vector<int64_t> ne;
  int64_t raw_nbytes = 0;
  bool sliced = false;
  int64_t slice_begin = 0, slice_end = 0;
};

std::vector<GoldenEntry> golden_entries() {
  auto j = read_json_file(gguf_dir() + "/golden/dequant.json");
  EXPECT_TRUE(j.is_ok()) << j.status().to_string();
  std::vector<GoldenEntry> out;
  if (!j.is_ok()) return out;
  for (const Json& t : j.value()["tensors"]) {
    GoldenEntry e;
    e.name = t["name"].get<std::string>();
    e.file = t["file"].get<std::string>();
    e.tensor = t["tensor"].get<std::string>();
    e.type = t["ggml_type"].get<std::string>();
    e.ne = t["ggml_ne"].get<std::vector<int64_t>>();
    e.raw_nbytes = t["raw_nbytes"].get<int64_t>();
    if (!t["axis0_slice"].is_null()) {
      e.sliced = true;
      e.slice_begin = t["axis0_slice"][0].get<int64_t>();
      e.slice_end = t["axis0_slice"][1].get<int64_t>();
    }
    out.push_back(std::move(e));
  }
  return out;
}

// The stored rows of one golden entry: raw blocks, values per row, row count.
struct GoldenRows {
  const uint8_t* data = nullptr;
  int64_t ne0 = 0, rows = 0, row_bytes = 0;
  GgmlType type = GgmlType::kF32;
  const float* want = nullptr;
};

class GgmlGolden : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto st = SafetensorsFile::open(gguf_dir() + "/golden/dequant.safetensors");
    ASSERT_TRUE(st.is_ok()) << st.status().to_string();
    golden_ = new SafetensorsFile(std::move(st.value()));
    files_ = new std::map<std::string, GgufFile>();
  }
  static void TearDownTestSuite() {
    delete golden_;
    delete files_;
  }

  // Null (and a note) when the entry's file is not shipped.
  static const GgufFile* file(const std::string& name) {
    auto it = files_->find(name);
    if (it != files_->end()) return &it->second;
    const std::string path = gguf_dir() + "/" + name;
    if (!std::filesystem::exists(path)) return nullptr;
    auto f = GgufFile::open(path);
    EXPECT_TRUE(f.is_ok()) << f.status().to_string();
    if (!f.is_ok()) return nullptr;
    return &files_->emplace(name, std::move(f.value())).first->second;
  }

  // Checks the tensor's facts against the entry and locates the stored slice.
  static bool locate(const GoldenEntry& e, GoldenRows* r) {
    const GgufFile* f = file(e.file);
    if (f == nullptr) return false;
    const GgufTensorInfo* t = f->tensor(e.tensor);
    EXPECT_NE(t, nullptr) << e.name;
    if (t == nullptr) return false;
    const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(t->type));
    EXPECT_NE(info, nullptr) << e.name;
    if (info == nullptr) return false;
    EXPECT_EQ(info->name, e.type) << e.name;
    EXPECT_EQ(t->ne, e.ne) << e.name;
    int64_t rows = 1;
    for (size_t i = 1; i < e.ne.size(); ++i) rows *= e.ne[i];
    r->type = t->type;
    r->ne0 = e.ne[0];
    r->row_bytes = ggml_row_bytes(t->type, r->ne0);
    EXPECT_EQ(r->row_bytes * rows, e.raw_nbytes) << e.name;
    EXPECT_EQ(static_cast<int64_t>(t->bytes), e.raw_nbytes) << e.name;
    // numpy axis 0 is the last ggml dimension; a slice keeps whole rows of it.
    const int64_t per_unit = e.ne.size() > 1 ? rows / e.ne.back() : 1;
    const int64_t first = e.sliced ? e.slice_begin * per_unit : 0;
    r->rows = e.sliced ? (e.slice_end - e.slice_begin) * per_unit : rows;
    r->data = t->data + first * r->row_bytes;
    auto g = golden_->tensor(e.name);
    EXPECT_TRUE(g.is_ok()) << g.status().to_string();
    if (!g.is_ok()) return false;
    EXPECT_EQ(g.value().dtype(), DType::kF32);
    EXPECT_EQ(g.value().numel(), r->rows * r->ne0) << e.name;
    if (g.value().numel() != r->rows * r->ne0) return false;
    r->want = g.value().data_as<float>();
    return true;
  }

  static SafetensorsFile* golden_;
  static std::map<std::string, GgufFile>* files_;
};

SafetensorsFile* GgmlGolden::golden_ = nullptr;
std::map<std::string, GgufFile>* GgmlGolden::files_ = nullptr;

// Dequantizes the rows one at a time with `fn` and compares every float's bits.
void expect_rows_match(const GoldenRows& r, GgmlDequantFn fn, const std::string& what) {
  std::vector<float> got(static_cast<size_t>(r.ne0));
  for (int64_t row = 0; row < r.rows; ++row) {
    fn(r.data + row * r.row_bytes, got.data(), r.ne0);
    const float* want = r.want + row * r.ne0;
    const int64_t i = first_bit_difference(got.data(), want, r.ne0);
    if (i >= 0) {
      ADD_FAILURE() << what << " row " << row << ", " << describe(got.data(), want, i);
      return;
    }
  }
}

TEST_F(GgmlGolden, EveryVariantEqualsLlamaCpp) {
  const auto entries = golden_entries();
  ASSERT_EQ(entries.size(), 38u);
  std::set<std::string> types;
  int checked = 0;
  for (const GoldenEntry& e : entries) {
    GoldenRows r;
    if (!locate(e, &r)) {
      if (!std::filesystem::exists(gguf_dir() + "/" + e.file)) {
        std::printf("skipped %s: %s is not shipped\n", e.name.c_str(), e.file.c_str());
      }
      continue;
    }
    const GgmlTypeInfo& info = ggml_type_info(r.type);
    ASSERT_TRUE(info.supported) << e.name;
    expect_rows_match(r, info.reference, e.name + " (reference)");
    for (const auto& [name, k] : isa_tables()) {
      expect_rows_match(r, k->dequant[static_cast<uint32_t>(r.type)], e.name + " (" + name + ")");
    }
    types.insert(e.type);
    ++checked;
  }
  std::printf("checked %d golden tensors of %zu types\n", checked, types.size());
  // Every shipped file is in the fixtures; each supported type appears in them.
  EXPECT_EQ(checked, 38);
  EXPECT_EQ(types.size(), 14u);
}

// ---- (c) every variant against the reference on random blocks ----

// Byte offsets of the FP16 fields of a block, made finite in random data.
std::vector<int> half_fields(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ5_0:
    case GgmlType::kQ8_0:
      return {0};
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
      return {0, 2};
    case GgmlType::kQ2_K:
      return {80, 82};
    case GgmlType::kQ3_K:
      return {108};
    case GgmlType::kQ6_K:
      return {208};
    default:
      return {};
  }
}

std::vector<uint8_t> random_blocks(GgmlType t, int64_t nblocks, uint32_t seed) {
  const GgmlTypeInfo& info = ggml_type_info(t);
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(static_cast<size_t>(nblocks * info.block_bytes));
  for (uint8_t& v : b) v = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < nblocks; ++i) {
    for (int off : half_fields(t)) {
      uint8_t* p = b.data() + i * info.block_bytes + off;
      if ((p[1] & 0x7C) == 0x7C) p[1] &= 0xBF;  // exponent 31 (Inf/NaN) -> a finite one
      if (i % 5 == 1) p[1] &= 0x83;             // some subnormal and zero scales
    }
  }
  return b;
}

TEST(GgmlTypes, EveryVariantEqualsTheReferenceOnRandomBlocks) {
  for (const TypeFact& f : kFacts) {
    if (!f.supported) continue;
    const auto t = static_cast<GgmlType>(f.id);
    const GgmlTypeInfo& info = ggml_type_info(t);
    const std::vector<int64_t> counts = info.block == 1
                                            ? std::vector<int64_t>{1, 3, 7, 8, 17, 33, 97}
                                            : std::vector<int64_t>{1, 3, 17};
    for (int64_t nb : counts) {
      const uint32_t seed = 1000u * f.id + static_cast<uint32_t>(nb);
      SCOPED_TRACE(std::string(f.name) + " blocks=" + std::to_string(nb) +
                   " seed=" + std::to_string(seed));
      const auto blocks = random_blocks(t, nb, seed);
      const int64_t n = nb * info.block;
      std::vector<float> want(static_cast<size_t>(n));
      info.reference(blocks.data(), want.data(), n);
      for (const auto& [name, k] : isa_tables()) {
        // A sentinel past the end catches writes beyond n values.
        std::vector<float> got(static_cast<size_t>(n) + 8, 12345.0f);
        k->dequant[f.id](blocks.data(), got.data(), n);
        const int64_t i = first_bit_difference(got.data(), want.data(), n);
        EXPECT_EQ(i, -1) << name << ": " << (i >= 0 ? describe(got.data(), want.data(), i) : "");
        for (int s = 0; s < 8; ++s) EXPECT_EQ(got[static_cast<size_t>(n + s)], 12345.0f) << name;
      }
    }
  }
}

// ---- (d) MXFP4 into OCP order ----

// Repacks a row, checks each code against the ggml block directly, and returns the OCP
// dequantization (formats/mx_block.h) of the result.
std::vector<float> ocp_values_of(const uint8_t* blocks, int64_t k) {
  std::vector<uint8_t> packed(static_cast<size_t>(k / 2)), scales(static_cast<size_t>(k / 32));
  EXPECT_TRUE(ggml_mxfp4_row_to_ocp(blocks, k, packed.data(), scales.data()));
  std::vector<uint8_t> codes(static_cast<size_t>(k));
  fp4_unpack(packed.data(), k, Fp4Order::kAdjacent, codes.data());
  for (int64_t i = 0; i < k; ++i) {
    const uint8_t* blk = blocks + (i / 32) * 17;
    const int j = static_cast<int>(i % 32);
    const int ggml_code = (blk[1 + j % 16] >> (j < 16 ? 0 : 4)) & 0xF;
    const int want = ggml_code == 8 ? 0 : ggml_code;  // both +0
    EXPECT_EQ((packed[static_cast<size_t>(i / 2)] >> (4 * (i % 2))) & 0xF, want) << i;
    if (j == 0) {
      EXPECT_EQ(scales[static_cast<size_t>(i / 32)], blk[0]) << i;
    }
  }
  std::vector<float> out(static_cast<size_t>(k));
  mx_dequantize_row(codes.data(), scales.data(), k, ElemFormat::kE2M1, out.data());
  return out;
}

void expect_ocp_equals_reference(const uint8_t* blocks, int64_t k, const std::string& what) {
  std::vector<float> want(static_cast<size_t>(k));
  ggml_detail::ref_mxfp4(blocks, want.data(), k);
  const auto got = ocp_values_of(blocks, k);
  const int64_t i = first_bit_difference(got.data(), want.data(), k);
  EXPECT_EQ(i, -1) << what << ": " << (i >= 0 ? describe(got.data(), want.data(), i) : "");
}

TEST_F(GgmlGolden, Mxfp4RepackOfTheGoldenTensors) {
  int checked = 0;
  for (const GoldenEntry& e : golden_entries()) {
    if (e.type != "MXFP4") continue;
    GoldenRows r;
    if (!locate(e, &r)) continue;
    for (int64_t row = 0; row < r.rows; ++row) {
      const uint8_t* blocks = r.data + row * r.row_bytes;
      expect_ocp_equals_reference(blocks, r.ne0, e.name + " row " + std::to_string(row));
      const auto got = ocp_values_of(blocks, r.ne0);
      const int64_t i = first_bit_difference(got.data(), r.want + row * r.ne0, r.ne0);
      ASSERT_EQ(i, -1) << e.name << " row " << row << " against the golden";
    }
    ++checked;
  }
  EXPECT_EQ(checked, 5);  // 3 synthetic, 2 MoE experts
}

TEST(GgmlTypes, Mxfp4RepackOfRandomBlocks) {
  for (int64_t nb : {1, 3, 17}) {
    const uint32_t seed = 77u + static_cast<uint32_t>(nb);
    SCOPED_TRACE("blocks=" + std::to_string(nb) + " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    std::vector<uint8_t> b(static_cast<size_t>(nb * 17));
    for (uint8_t& v : b) v = static_cast<uint8_t>(rng());
    const uint8_t edges[] = {0, 1, 2, 254};
    for (int64_t i = 0; i < nb; ++i) {
      uint8_t& e = b[static_cast<size_t>(i * 17)];
      e = i < 4 ? edges[i] : static_cast<uint8_t>(e % 255);
      b[static_cast<size_t>(i * 17 + 1)] = 0x88;  // code 8 in both nibbles
    }
    if (nb >= 17) {
      b[4 * 17] = 254;
      b[5 * 17] = 0;
      b[6 * 17] = 1;
    }
    expect_ocp_equals_reference(b.data(), nb * 32, "random");

    b[static_cast<size_t>((nb - 1) * 17)] = 0xFF;  // 2^127 in ggml: no OCP scale byte
    std::vector<uint8_t> packed(static_cast<size_t>(nb * 16)), scales(static_cast<size_t>(nb));
    EXPECT_FALSE(ggml_mxfp4_row_to_ocp(b.data(), nb * 32, packed.data(), scales.data()));
  }
  uint8_t blk[17] = {127};
  uint8_t packed[16], scale[1];
  EXPECT_FALSE(ggml_mxfp4_row_to_ocp(blk, 31, packed, scale));  // not whole blocks
}

}  // namespace
}  // namespace mx

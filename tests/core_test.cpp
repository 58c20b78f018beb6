#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/huge_pages.h"
#include "core/json_util.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace mx {
namespace {

Result<int> half_of(int x) {
  if (x % 2) return invalid_argument("field 'x': " + std::to_string(x) + " is odd");
  return x / 2;
}

Status quarter(int x, int* out) {
  MX_ASSIGN_OR_RETURN(int h, half_of(x));
  MX_ASSIGN_OR_RETURN(*out, half_of(h));
  return Status::ok();
}

TEST(Status, ResultCarriesValueOrError) {
  int q = 0;
  EXPECT_TRUE(quarter(8, &q).is_ok());
  EXPECT_EQ(q, 2);
  const Status s = quarter(6, &q);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "field 'x': 3 is odd");
  EXPECT_EQ(s.with_context("loading a.json").to_string(),
            "InvalidArgument: loading a.json: field 'x': 3 is odd");
}

TEST(Json, DepthScanIgnoresBracketsInStrings) {
  const auto nested = [](int n) { return std::string(n, '[') + std::string(n, ']'); };
  EXPECT_FALSE(json_nests_deeper_than(nested(3), 3));
  EXPECT_TRUE(json_nests_deeper_than(nested(4), 3));
  EXPECT_TRUE(json_nests_deeper_than("{\"a\":[{\"b\":[]}]}", 3));
  // Brackets inside strings, escaped quotes included, do not count.
  EXPECT_FALSE(json_nests_deeper_than("[\"[[[[\\\"[[[[\"]", 1));
  EXPECT_TRUE(json_nests_deeper_than("[\"\\\\\", [[]]]", 2));
  const auto r = parse_json(nested(kMaxJsonDepth + 1), "deep.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("deep.json: JSON nested deeper than 256"), std::string::npos);
  EXPECT_TRUE(parse_json(nested(kMaxJsonDepth), "ok.json").is_ok());
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::empty(DType::kF32, {3, 4});
  float* p = t.mutable_data_as<float>();
  for (int i = 0; i < 12; ++i) p[i] = static_cast<float>(i);
  Tensor row = t.select(0, 2);
  EXPECT_EQ(row.shape(), (Shape{4}));
  EXPECT_EQ(row.data_as<float>()[1], 9.0f);
  Tensor col = t.select(1, 3);
  EXPECT_EQ(col.strides(), (Shape{4}));
  EXPECT_FALSE(t.transpose(0, 1).is_contiguous());
  Tensor tt = t.transpose(0, 1).contiguous_copy();
  EXPECT_EQ(tt.shape(), (Shape{4, 3}));
  EXPECT_EQ(tt.data_as<float>()[1], 4.0f);  // tt[0][1] = t[1][0]
  Tensor s = t.slice(1, 1, 3);
  EXPECT_EQ(s.shape(), (Shape{3, 2}));
  EXPECT_EQ(s.contiguous_copy().data_as<float>()[2], 5.0f);
  EXPECT_EQ(t.reshape({2, 6}).dim(-1), 6);
  EXPECT_EQ(t.describe(), "F32[3, 4]");
  EXPECT_EQ(shape_numel({1 << 30, 1 << 30, 1 << 30}), -1);
}

// Buffers carved from the huge-page arena: aligned, disjoint (each keeps its own bytes while
// the others are written), large ones on huge-page boundaries, and every mapping returned
// once its buffers are freed.
TEST(HugePages, BuffersAreDisjointAndMappingsReturn) {
  const uint64_t before = huge_mapped_bytes();
  // Sizes whose roundings would wrap are refused, not mapped short.
  EXPECT_THROW(huge_alloc(static_cast<size_t>(-1) - 10), std::bad_alloc);
  EXPECT_THROW(HugeArray<double>(static_cast<size_t>(-1) / 4), std::bad_alloc);
  const std::vector<size_t> sizes = {1,        63,       64,   4096, 100000, 1 << 20, (3 << 20) + 5,
                                     20 << 20, 70 << 20, 12345};
  std::vector<uint8_t*> bufs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto* p = static_cast<uint8_t*>(huge_alloc(sizes[i]));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << sizes[i];
    std::memset(p, static_cast<int>(i + 1), sizes[i]);
    bufs.push_back(p);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    const uint8_t want = static_cast<uint8_t>(i + 1);
    EXPECT_EQ(bufs[i][0], want) << sizes[i];
    EXPECT_EQ(bufs[i][sizes[i] / 2], want) << sizes[i];
    EXPECT_EQ(bufs[i][sizes[i] - 1], want) << sizes[i];
  }
  if (huge_mapped_bytes() == before) {
    // Built with AddressSanitizer: the heap serves these buffers.
    for (size_t i = 0; i < sizes.size(); ++i) huge_free(bufs[i], sizes[i]);
    GTEST_SKIP() << "huge-page arena off in this build";
  }
  // 20 and 70 MB take mappings of their own, whole huge pages at a huge-page boundary.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(bufs[7]) % (2 << 20), 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(bufs[8]) % (2 << 20), 0u);
  EXPECT_GE(huge_mapped_bytes() - before, uint64_t{(20 + 70) << 20});
  for (size_t i = 0; i < sizes.size(); ++i) huge_free(bufs[i], sizes[i]);
  EXPECT_EQ(huge_mapped_bytes(), before);
  {
    HugeVector<float> v(1000, 2.5f);
    HugeArray<int32_t> a(5000);
    a.get()[4999] = 7;
    EXPECT_EQ(v[999], 2.5f);
    EXPECT_GT(huge_mapped_bytes(), before);
  }
  EXPECT_EQ(huge_mapped_bytes(), before);
}

TEST(ThreadPool, RangesCoverExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (int rep = 0; rep < 20; ++rep) {
        pool.parallel_for(n, [&](int64_t b, int64_t e, int t) {
          EXPECT_LT(t, threads);
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        });
      }
      for (auto& h : hits) EXPECT_EQ(h.load(), 20);
    }
  }
}

TEST(CpuFeatures, LevelsAreConsistent) {
  EXPECT_TRUE(isa_supported(IsaLevel::kScalar));
  EXPECT_LE(active_isa(), max_supported_isa());
  IsaLevel l;
  EXPECT_TRUE(parse_isa("avx2", &l));
  EXPECT_EQ(l, IsaLevel::kAvx2);
  EXPECT_FALSE(parse_isa("sse9", &l));
  std::printf("cpu: max isa %s, active %s\n", std::string(isa_name(max_supported_isa())).c_str(),
              std::string(isa_name(active_isa())).c_str());
}

}  // namespace
}  // namespace mx

// Bit-exact agreement with the MX vectors of an independent implementation
// (../shared/fixtures/mx-vectors, or MX_VECTORS_DIR). Every case found in every file is
// checked; nothing here names a case.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/act_quant.h"
#include "formats/mx_block.h"
#include "formats/mx_layout.h"
#include "loader/safetensors.h"
#include "test_util.h"

namespace mx {
namespace {

namespace fs = std::filesystem;

std::string vectors_dir() {
  return test::env_or("MX_VECTORS_DIR", test::shared_dir() + "/fixtures/mx-vectors");
}

bool format_of(const SafetensorsFile& f, ElemFormat* out) {
  std::string key = f.path();
  for (const char* meta : {"element_format", "format"}) {
    if (auto it = f.metadata().find(meta); it != f.metadata().end()) key = it->second;
  }
  if (key.find("e4m3") != std::string::npos)
    *out = ElemFormat::kE4M3;
  else if (key.find("e5m2") != std::string::npos)
    *out = ElemFormat::kE5M2;
  else if (key.find("e2m1") != std::string::npos)
    *out = ElemFormat::kE2M1;
  else
    return false;
  return true;
}

template <typename T>
std::vector<T> read_all(const SafetensorsFile& f, const std::string& name) {
  auto t = f.tensor(name);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  if (!t.is_ok()) return {};
  std::vector<T> v(static_cast<size_t>(t->numel()));
  std::memcpy(v.data(), t->data(), t->nbytes());
  return v;
}

struct Counts {
  int files = 0, cases = 0;
  int64_t elements = 0;
};

// Checks one case against the tensors under `prefix` ("" for microxcaling's main answer,
// "ocp_" for the exact rule in divergent files).
void check_case(const SafetensorsFile& f, ElemFormat fmt, const std::string& c,
                const std::string& prefix, bool scale_only, Counts* counts) {
  const TensorInfo* in = f.find(c + ".input");
  ASSERT_NE(in, nullptr);
  ASSERT_EQ(in->shape.size(), 2u) << c;
  const int64_t rows = in->shape[0], k = in->shape[1], nb = mx_num_blocks(k);
  const auto x = read_all<float>(f, c + ".input");
  const auto want_scale = read_all<uint8_t>(f, c + "." + prefix + "scale");
  ASSERT_EQ(static_cast<int64_t>(want_scale.size()), rows * nb) << c;
  std::vector<uint8_t> codes(static_cast<size_t>(k)), scales(static_cast<size_t>(nb));
  std::vector<float> deq(static_cast<size_t>(k));
  std::vector<uint8_t> want_codes;
  std::vector<float> want_deq;
  if (!scale_only) {
    want_codes = read_all<uint8_t>(f, c + "." + prefix + "codes");
    want_deq = read_all<float>(f, c + "." + prefix + "dequant");
  }
  const std::string where = f.path() + " case " + c + (prefix.empty() ? "" : " (" + prefix + ")");
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * k;
    mx_quantize_row(xr, k, fmt, ScaleRule::kFloor, codes.data(), scales.data());
    for (int64_t b = 0; b < nb; ++b) {
      ASSERT_EQ(scales[b], want_scale[r * nb + b]) << where << " row " << r << " block " << b;
    }
    counts->elements += k;
    if (scale_only) continue;
    mx_dequantize_row(codes.data(), scales.data(), k, fmt, deq.data());
    for (int64_t i = 0; i < k; ++i) {
      ASSERT_EQ(codes[i], want_codes[r * k + i])
          << where << " row " << r << " elem " << i << " input " << xr[i];
      ASSERT_EQ(std::bit_cast<uint32_t>(deq[i]), std::bit_cast<uint32_t>(want_deq[r * k + i]))
          << where << " row " << r << " elem " << i;
    }
    // The per-row activation kernels of every ISA give the same bytes.
    if (fmt == ElemFormat::kE4M3 || fmt == ElemFormat::kE2M1) {
      std::vector<uint8_t> want_packed(codes.size());
      size_t out_bytes = static_cast<size_t>(k);
      if (fmt == ElemFormat::kE2M1) {
        out_bytes = static_cast<size_t>(fp4_packed_bytes(k));
        fp4_pack(want_codes.data() + r * k, k, Fp4Order::kAdjacent, want_packed.data());
      } else {
        std::memcpy(want_packed.data(), want_codes.data() + r * k, out_bytes);
      }
      for (IsaLevel isa : {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512}) {
        const ActQuantKernels* kern = act_quant_kernels_for(isa);
        if (kern == nullptr) continue;
        std::vector<uint8_t> out(out_bytes), sc(static_cast<size_t>(nb));
        auto fn = fmt == ElemFormat::kE4M3 ? kern->f32_to_mxfp8 : kern->f32_to_mxfp4;
        fn(xr, k, ScaleRule::kFloor, out.data(), sc.data());
        ASSERT_EQ(0, std::memcmp(sc.data(), want_scale.data() + r * nb, sc.size()))
            << where << " isa " << isa_name(isa) << " row " << r;
        ASSERT_EQ(0, std::memcmp(out.data(), want_packed.data(), out_bytes))
            << where << " isa " << isa_name(isa) << " row " << r;
      }
    }
  }
  ++counts->cases;
}

TEST(MxVectors, EveryCaseInEveryFileMatchesBitForBit) {
  const std::string dir = vectors_dir();
  ASSERT_TRUE(fs::is_directory(dir)) << dir << " is missing";
  Counts counts;
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".safetensors") paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  for (const fs::path& p : paths) {
    auto file = SafetensorsFile::open(p.string());
    ASSERT_TRUE(file.is_ok()) << file.status().to_string();
    ElemFormat fmt;
    ASSERT_TRUE(format_of(*file, &fmt)) << p << ": cannot tell the element format";
    const std::string stem = p.filename().string();
    const bool divergent = stem.rfind("divergent_", 0) == 0;
    const bool nonfinite = stem.rfind("nonfinite_", 0) == 0;
    ++counts.files;
    for (const TensorInfo& t : file->tensors()) {
      const std::string suffix = ".input";
      if (t.name.size() <= suffix.size() ||
          t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) != 0) {
        continue;
      }
      const std::string c = t.name.substr(0, t.name.size() - suffix.size());
      // Divergent files: mxserve follows the exact OCP rule (ocp_*), not microxcaling's
      // answer. Non-finite files are informative: only the scale byte is a contract.
      check_case(*file, fmt, c, divergent ? "ocp_" : "", nonfinite, &counts);
    }
  }
  EXPECT_GE(counts.files, 3);
  EXPECT_GE(counts.cases, 60);
  std::printf("mx-vectors: %d files, %d cases, %lld elements checked\n", counts.files, counts.cases,
              static_cast<long long>(counts.elements));
}

}  // namespace
}  // namespace mx

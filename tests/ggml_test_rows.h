// Random rows of ggml blocks for the kernel tests: random bytes with finite scale fields.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "formats/ggml_types.h"
#include "formats/half.h"

namespace mx::test {

// Where ggml's block structs (ggml-common.h) keep their FP16 scales (d, and dmin or m), and
// the block sizes those layouts imply.
struct BlockLayout {
  GgmlType type;
  int64_t bytes;
  std::vector<int64_t> fp16_fields;
};
inline const std::vector<BlockLayout>& layouts() {
  static const std::vector<BlockLayout> kLayouts = {
      {GgmlType::kQ4_0, 18, {0}},     {GgmlType::kQ4_1, 20, {0, 2}},
      {GgmlType::kQ5_0, 22, {0}},     {GgmlType::kQ5_1, 24, {0, 2}},
      {GgmlType::kQ8_0, 34, {0}},     {GgmlType::kQ2_K, 84, {80, 82}},
      {GgmlType::kQ3_K, 110, {108}},  {GgmlType::kQ4_K, 144, {0, 2}},
      {GgmlType::kQ5_K, 176, {0, 2}}, {GgmlType::kQ6_K, 210, {208}},
      {GgmlType::kMXFP4, 17, {}},     {GgmlType::kIQ4_NL, 18, {0}},
      {GgmlType::kIQ4_XS, 136, {0}},
  };
  return kLayouts;
}
inline const BlockLayout* layout_of(GgmlType t) {
  for (const BlockLayout& l : layouts()) {
    if (l.type == t) return &l;
  }
  return nullptr;
}

inline void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, sizeof v); }

// A small normal FP16 with a random sign: finite scales keep every dequantized value finite.
inline uint16_t small_fp16(std::mt19937& rng) {
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> exp(-10, -4);
  const float v = std::ldexp(mant(rng), exp(rng)) * (rng() & 1 ? -1.0f : 1.0f);
  return float_to_fp16(v);
}

// `n` rows of k values of type t: random bytes with finite scale fields.
inline std::vector<uint8_t> random_rows(GgmlType t, int64_t n, int64_t k, std::mt19937& rng) {
  const int64_t row_bytes = ggml_row_bytes(t, k);
  std::vector<uint8_t> w(static_cast<size_t>(n * row_bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : w) b = static_cast<uint8_t>(byte(rng));
  const int64_t count = n * k;
  if (t == GgmlType::kF32) {
    std::uniform_real_distribution<float> v(-2.0f, 2.0f);
    for (int64_t i = 0; i < count; ++i) {
      const float f = v(rng);
      std::memcpy(w.data() + 4 * i, &f, 4);
    }
  } else if (t == GgmlType::kF16) {
    for (int64_t i = 0; i < count; ++i) {
      uint16_t h = static_cast<uint16_t>(rng());
      while (((h >> 10) & 0x1F) == 0x1F) h = static_cast<uint16_t>(rng());  // no Inf/NaN
      put_u16(w.data() + 2 * i, h);
    }
  } else if (t == GgmlType::kBF16) {
    std::uniform_int_distribution<int> exp(100, 150);
    for (int64_t i = 0; i < count; ++i) {
      const auto h = static_cast<uint16_t>((rng() & 0x807F) | (exp(rng) << 7));
      put_u16(w.data() + 2 * i, h);
    }
  } else {
    const BlockLayout* l = layout_of(t);
    const int64_t blocks = count / ggml_type_info(t).block;
    std::uniform_int_distribution<int> e8m0(100, 140);
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* blk = w.data() + b * l->bytes;
      for (int64_t off : l->fp16_fields) put_u16(blk + off, small_fp16(rng));
      if (t == GgmlType::kMXFP4) blk[0] = static_cast<uint8_t>(e8m0(rng));
    }
  }
  return w;
}

}  // namespace mx::test

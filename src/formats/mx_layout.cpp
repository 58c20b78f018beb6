#include "formats/mx_layout.h"

#include <algorithm>
#include <cstring>

namespace mx {
namespace {

// Position of element i in the packed stream: byte index and whether it is the high nibble.
inline void fp4_slot(int64_t i, int64_t k, Fp4Order order, int64_t* byte, bool* high) {
  if (order == Fp4Order::kAdjacent) {
    *byte = i / 2;
    *high = (i & 1) != 0;
    return;
  }
  const int64_t block = i / 32;
  const int64_t j = i % 32;
  const int64_t block_len = std::min<int64_t>(32, k - block * 32);
  const int64_t half = (block_len + 1) / 2;  // 16 for a full block
  *byte = block * 16 + (j < half ? j : j - half);
  *high = j >= half;
}

}  // namespace

// Whole pairs (adjacent order) and whole blocks (split halves) go through plain byte loops, which
// the compiler vectorizes: per element through fp4_slot, packing a GGUF file's MXFP4 experts at
// load took seconds.
void fp4_pack(const uint8_t* codes, int64_t k, Fp4Order order, uint8_t* packed) {
  std::memset(packed, 0, static_cast<size_t>(fp4_packed_bytes(k)));
  int64_t done = 0;
  if (order == Fp4Order::kAdjacent) {
    for (int64_t j = 0; j < k / 2; ++j) {
      packed[j] = static_cast<uint8_t>((codes[2 * j] & 0xF) | (codes[2 * j + 1] & 0xF) << 4);
    }
    done = k / 2 * 2;
  } else {
    for (int64_t b = 0; b < k / 32; ++b) {
      const uint8_t* c = codes + 32 * b;
      for (int64_t j = 0; j < 16; ++j) {
        packed[16 * b + j] = static_cast<uint8_t>((c[j] & 0xF) | (c[j + 16] & 0xF) << 4);
      }
    }
    done = k / 32 * 32;
  }
  for (int64_t i = done; i < k; ++i) {
    int64_t byte;
    bool high;
    fp4_slot(i, k, order, &byte, &high);
    packed[byte] |= static_cast<uint8_t>((codes[i] & 0xF) << (high ? 4 : 0));
  }
}

void fp4_unpack(const uint8_t* packed, int64_t k, Fp4Order order, uint8_t* codes) {
  int64_t done = 0;
  if (order == Fp4Order::kAdjacent) {
    for (int64_t j = 0; j < k / 2; ++j) {
      codes[2 * j] = packed[j] & 0xF;
      codes[2 * j + 1] = packed[j] >> 4;
    }
    done = k / 2 * 2;
  } else {
    for (int64_t b = 0; b < k / 32; ++b) {
      for (int64_t j = 0; j < 16; ++j) {
        codes[32 * b + j] = packed[16 * b + j] & 0xF;
        codes[32 * b + j + 16] = packed[16 * b + j] >> 4;
      }
    }
    done = k / 32 * 32;
  }
  for (int64_t i = done; i < k; ++i) {
    int64_t byte;
    bool high;
    fp4_slot(i, k, order, &byte, &high);
    codes[i] = (packed[byte] >> (high ? 4 : 0)) & 0xF;
  }
}

void mx_scales_to_paired(const uint8_t* canonical, int64_t n, int64_t k, uint8_t* paired) {
  const int64_t nb = (k + 31) / 32;
  const int64_t cols = mx_paired_scale_cols(k);
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(paired + r * cols, canonical + r * nb, static_cast<size_t>(nb));
    if (cols != nb) paired[r * cols + nb] = 0;
  }
}

void mx_scales_from_paired(const uint8_t* paired, int64_t n, int64_t k, uint8_t* canonical) {
  const int64_t nb = (k + 31) / 32;
  const int64_t cols = mx_paired_scale_cols(k);
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(canonical + r * nb, paired + r * cols, static_cast<size_t>(nb));
  }
}

}  // namespace mx

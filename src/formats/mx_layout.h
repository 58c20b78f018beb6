// Storage layouts: FP4 nibble packing and E8M0 scale layouts.
#pragma once

#include <cstdint>

namespace mx {

enum class Fp4Order : uint8_t {
  kAdjacent,   // element 2i low nibble, 2i+1 high nibble (msmodelslim, torchao, OCP-style)
  kSplitHalf,  // per 32-block, element j low nibble and j+16 high nibble (GGUF MXFP4)
};

inline int64_t fp4_packed_bytes(int64_t k) { return (k + 1) / 2; }

// codes: k unpacked E2M1 codes (low nibble). A partial last block in split-half order pairs
// j with j+16 as far as the block reaches; missing partners are zero nibbles.
void fp4_pack(const uint8_t* codes, int64_t k, Fp4Order order, uint8_t* packed);
void fp4_unpack(const uint8_t* packed, int64_t k, Fp4Order order, uint8_t* codes);

// Scale layouts for an [n, k] weight: canonical [n, ceil(k/32)]; paired [n, ceil(nb/2), 2]
// (NPU-style), one zero byte appended per row when ceil(k/32) is odd.
inline int64_t mx_paired_scale_cols(int64_t k) {
  const int64_t nb = (k + 31) / 32;
  return nb + (nb & 1);
}
void mx_scales_to_paired(const uint8_t* canonical, int64_t n, int64_t k, uint8_t* paired);
void mx_scales_from_paired(const uint8_t* paired, int64_t n, int64_t k, uint8_t* canonical);

}  // namespace mx

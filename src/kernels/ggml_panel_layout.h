// The row-interleaved panels that the GGUF panel kernels read (sixteen weight rows repacked at
// load, layouts at their repack functions and at the top of ggml_panel_avx512.cpp), and the
// per-block activation terms the kernels start their integer sums from. The AVX-512 and AVX2
// tables read the same panels: a 64-byte register of sixteen rows is two 32-byte halves of eight.
//
// Generic code: the repacks and terms of the types both tables read are compiled once, without
// ISA flags, in ggml_panel_layout.cpp; the helpers below have internal linkage, so that a unit
// built with ISA flags keeps its own copies (see formats/act_quant.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/ggml_dot.h"
#include "kernels/prefetch.h"

namespace mx::ggml_dot_detail {

using RepackFn = void (*)(const uint8_t*, int64_t, int64_t, int64_t, uint8_t*);
using PreFn = void (*)(const ActRowView*, int, int64_t, int64_t, int32_t*);

// Bytes of a panel's block (sixteen rows' stored blocks, plus Q5_K's fifth bits).
constexpr int64_t kQ4kPanelBlock = 16 * 144;
constexpr int64_t kQ5kPanelBlock = 16 * 176;
constexpr int64_t kIq4PanelBlock = 16 * 136;
constexpr int64_t kQ6kPanelBlock = 16 * 210;
constexpr int64_t kQ8PanelBlock = 16 * 34;
constexpr int64_t kQ3kPanelBlock = 16 * 110;
constexpr int64_t kQ2kPanelBlock = 16 * 84;

void repack_q4_k_panels(const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k, uint8_t* out);
void repack_q5_k_panels(const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k, uint8_t* out);
void repack_iq4_xs_panels(const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k,
                          uint8_t* out);
void repack_q6_k_panels(const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k, uint8_t* out);
void repack_q8_0_panels(const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k, uint8_t* out);
void repack_q3_k_panels(const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k, uint8_t* out);
void repack_q2_k_panels(const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k, uint8_t* out);

// Per-block activation terms, rows x nb x `per` int32s from block b0 on. Q4_K and Q5_K (per 4):
// each pair of sub-blocks' activation sums as the int16 halves of an int32, what the kernels
// multiply against the mins' pairs. IQ4_XS (per 8): -128 times each sub-block's sum. Q6_K (per
// 16): -32 times each group of 16's sum. Q8_0 (per 1): -128 times each block's sum. Q3_K (per
// 16): -4 times each group of 16's sum. Q2_K (per 8): each pair of groups' sums as the int16
// halves of an int32 (Q4_K's form).
void pre_q4_k(const ActRowView* x, int rows, int64_t b0, int64_t nb, int32_t* out);
void pre_iq4_xs(const ActRowView* x, int rows, int64_t b0, int64_t nb, int32_t* out);
void pre_q6_k(const ActRowView* x, int rows, int64_t b0, int64_t nb, int32_t* out);
void pre_q8_0(const ActRowView* x, int rows, int64_t b0, int64_t nb, int32_t* out);
void pre_q3_k(const ActRowView* x, int rows, int64_t b0, int64_t nb, int32_t* out);
void pre_q2_k(const ActRowView* x, int rows, int64_t b0, int64_t nb, int32_t* out);

namespace {

// The lines of the block kAhead bytes on, into L2, part j of eight spread over a super-block's
// eight sub-blocks: at one activation row a k-quant panel kernel's loads come too unevenly for
// the hardware prefetcher to keep memory busy (Q4_K from memory ran at 0.69x the row kernel's
// speed without this). Into L1 in one burst at each block's start, the requests crowded its
// fill buffers and stalled the loads behind them: on a Zen 4, lm_head-sized Q6_K and Q4_K
// panels read at 0.73 and 0.87 of a plain read's rate so (4.5 KiB on), and at 0.98 and 0.95
// as here (medians of four alternations). Q8_0 panels, whose loads are even, read best with
// none: 0.91 with a block's lines asked for 6.6 KiB on, 0.96 without (five alternations).
constexpr int64_t kAhead = 6720;
inline void prefetch_part(const uint8_t* blk, int64_t bytes, int j) {
  const int64_t lines = (bytes + 63) / 64, per = (lines + 7) / 8;
  const int64_t e = std::min(lines, per * (j + 1));
  for (int64_t l = per * j; l < e; ++l) prefetch_line_l2(blk + kAhead + 64 * l);
}

// Calls put(o, r, blk) for every stored block blk of every row, with o the zeroed block of the
// panel it goes to (row r of sixteen): panels of sixteen rows, each holding its blocks along k
// in order, a block of a panel the sixteen rows' bytes (rows past n left zero).
template <class Put>
void repack_blocks(const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k, int64_t values,
                   int64_t in_bytes, uint8_t* out, Put put) {
  const int64_t nb = k / values, out_bytes = 16 * in_bytes;
  for (int64_t p = 0; p < (n + 15) / 16; ++p) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* o = out + (p * nb + b) * out_bytes;
      std::memset(o, 0, static_cast<size_t>(out_bytes));
      for (int r = 0; r < 16 && 16 * p + r < n; ++r) {
        put(o, r, rows + (16 * p + r) * row_bytes + b * in_bytes);
      }
    }
  }
}

// Two activation sums as the int16 halves of an int32, what vpdpwssd multiplies against a pair
// of mins (each within int16: at most 32 x 127 in magnitude).
inline int32_t pack16(int lo, int hi) {
  return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(lo)) |
                              static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16);
}

// Per-block activation terms, rows x nb x `per` int32s from block b0 on, for codes stored
// kOffset above their values: -kOffset times each group of 16's activation sum (Q8_K rows) or
// each block of 32's (Q8_0 rows), where the block's integer sum starts.
template <int kOffset>
void pre_groups16(const ActRowView* x, int rows, int64_t b0, int64_t nb, int32_t* out) {
  for (int r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const int16_t* s = x[r].sums + 16 * (b0 + b);
      for (int g = 0; g < 16; ++g) out[(r * nb + b) * 16 + g] = -kOffset * s[g];
    }
  }
}
template <int kOffset>
void pre_blocks32(const ActRowView* x, int rows, int64_t b0, int64_t nb, int32_t* out) {
  if constexpr (kOffset == 0) {
    std::memset(out, 0, sizeof(int32_t) * static_cast<size_t>(rows * nb));
    return;
  }
  for (int r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const int8_t* c = x[r].codes + 32 * (b0 + b);
      int sum = 0;
      for (int i = 0; i < 32; ++i) sum += c[i];
      out[r * nb + b] = -kOffset * sum;
    }
  }
}

// Sub-block j's one-bit fields of row r (weight i's from bit(i)) into the register at q: bit v
// of byte 4r + t for the weight that code register v holds there (weight 32j + 4v + t, or
// 32j + 16 + 4(v - 4) + t from v = 4 on).
template <class Bit>
void put_bits(uint8_t* q, int r, int j, Bit bit) {
  for (int v = 0; v < 8; ++v) {
    for (int t = 0; t < 4; ++t) {
      const int i = 32 * j + (v < 4 ? 4 * v : 16 + 4 * (v - 4)) + t;
      q[4 * r + t] |= static_cast<uint8_t>(bit(i) << v);
    }
  }
}

// The 32-value nibble types (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL), panels per block of 32 (sixteen
// rows' bytes each):
//   [0, 32)    d of row r at 2r (FP16)
//   [32, 64)   Q4_1 and Q5_1: m of row r at 32 + 2r (FP16)
//   then 256 bytes of nibble planes in four registers u: bytes 4r..4r + 3 of register u hold
//   weights 4u + t (low nibble) and 16 + 4u + t (high nibble) of row r;
//   then Q5_0 and Q5_1: one register whose byte 4r + t holds, in bit v, the fifth bit of the
//   weight that code register v holds there.
struct B32Kind {
  int in_bytes;  // bytes of a stored block
  int qh_at;     // offset of the fifth bits in a stored block, or -1
  int qs_at;     // offset of the nibbles in a stored block
  bool has_min;  // m at stored offset 2
  bool grid;     // IQ4_NL's table of values
  int offset;    // what each code stands above its value (8, 16; 128 for the grid)
};
constexpr B32Kind kQ40{18, -1, 2, false, false, 8};
constexpr B32Kind kQ41{20, -1, 4, true, false, 0};
constexpr B32Kind kQ50{22, 2, 6, false, false, 16};
constexpr B32Kind kQ51{24, 4, 8, true, false, 0};
constexpr B32Kind kIq4Nl{18, -1, 2, false, true, 128};

constexpr int64_t codes_at(const B32Kind& k) { return k.has_min ? 64 : 32; }
constexpr int64_t panel_block(const B32Kind& k) { return 16 * k.in_bytes; }

template <const B32Kind& K>
void repack_b32(const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k, uint8_t* out) {
  constexpr int64_t kCodes = codes_at(K);
  repack_blocks(
      rows, row_bytes, n, k, 32, K.in_bytes, out, [&](uint8_t* o, int r, const uint8_t* blk) {
        std::memcpy(o + 2 * r, blk, 2);
        if constexpr (K.has_min) std::memcpy(o + 32 + 2 * r, blk + 2, 2);
        const uint8_t* qs = blk + K.qs_at;
        for (int u = 0; u < 4; ++u) {
          for (int t = 0; t < 4; ++t) {
            const int lo = 4 * u + t;  // weight lo is qs[lo]'s low nibble, lo + 16 its high one
            o[kCodes + 64 * u + 4 * r + t] = qs[lo];
          }
        }
        if constexpr (K.qh_at >= 0) {
          uint32_t qh;
          std::memcpy(&qh, blk + K.qh_at, 4);
          put_bits(o + kCodes + 256, r, 0, [&](int i) { return static_cast<int>(qh >> i) & 1; });
        }
      });
}

}  // namespace
}  // namespace mx::ggml_dot_detail

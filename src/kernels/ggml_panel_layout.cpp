// The panels' repacks and per-block activation terms (ggml_panel_layout.h), compiled without ISA
// flags: the AVX-512 and AVX2 tables both call them.
#include "kernels/ggml_panel_layout.h"

#include "formats/ggml_types.h"

namespace mx::ggml_dot_detail {
namespace {

// A super-block's 256 four-bit weights in order, from the nibble bytes as each type stores them:
// Q4_K and Q6_K's low bits hold them in runs of 32 (byte x of run c: weight 64c + x low, 64c + 32
// + x high; Q6_K's halves of 128 each so), IQ4_XS in runs of 16. Loops the compiler vectorizes:
// read through an accessor per weight, as before, a Q4_K_M file's repack took 4.3 s of CPU.
inline void k4_weights(const uint8_t* qs, uint8_t w[256]) {
  for (int c = 0; c < 4; ++c) {
    for (int x = 0; x < 32; ++x) {
      w[64 * c + x] = qs[32 * c + x] & 0x0F;
      w[64 * c + 32 + x] = qs[32 * c + x] >> 4;
    }
  }
}
inline void xs_weights(const uint8_t* qs, uint8_t w[256]) {
  for (int c = 0; c < 8; ++c) {
    for (int x = 0; x < 16; ++x) {
      w[32 * c + x] = qs[16 * c + x] & 0x0F;
      w[32 * c + 16 + x] = qs[16 * c + x] >> 4;
    }
  }
}
inline void q6_low_weights(const uint8_t* ql, uint8_t w[256]) {
  for (int h = 0; h < 2; ++h) {
    for (int x = 0; x < 64; ++x) {
      w[128 * h + x] = ql[64 * h + x] & 0x0F;
      w[128 * h + 64 + x] = ql[64 * h + x] >> 4;
    }
  }
}

// Row r's 256 weights (four bits each) into the nibble planes of a panel super-block at `q`.
inline void put_nibbles(uint8_t* q, int r, const uint8_t w[256]) {
  for (int j = 0; j < 8; ++j) {
    uint8_t b[16];
    for (int x = 0; x < 16; ++x)
      b[x] = static_cast<uint8_t>(w[32 * j + x] | w[32 * j + 16 + x] << 4);
    for (int u = 0; u < 4; ++u) std::memcpy(q + 256 * j + 64 * u + 4 * r, b + 4 * u, 4);
  }
}

// Sub-block j's 2-bit fields of row r (weight i's from field(i)) into the two registers at q:
// bits 2u..2u + 1 of byte 4r + t of register h hold the field of the weight that code register
// 4h + u holds there (weight 32j + 4u + t, or 32j + 16 + 4u + t for h = 1).
template <class Field>
void put_fields(uint8_t* q, int r, int j, Field field) {
  for (int v = 0; v < 8; ++v) {
    for (int t = 0; t < 4; ++t) {
      const int i = 32 * j + (v < 4 ? 4 * v : 16 + 4 * (v - 4)) + t;
      q[64 * (v / 4) + 4 * r + t] |= static_cast<uint8_t>(field(i) << (2 * (v % 4)));
    }
  }
}

// Q5_K panel, per super-block (2816 bytes): Q4_K's panel for the scales, mins and low four bits
// (its 2304 bytes), then per sub-block j one register at 2304 + 64j whose byte 4r + t holds, in
// bit v, the fifth bit of the weight that code register v holds there.
template <bool kFive>
void repack_k4(const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k, uint8_t* out) {
  constexpr int64_t kIn = kFive ? 176 : 144;
  repack_blocks(rows, row_bytes, n, k, 256, kIn, out, [&](uint8_t* o, int r, const uint8_t* blk) {
    std::memcpy(o + 2 * r, blk, 2);
    std::memcpy(o + 32 + 2 * r, blk + 2, 2);
    uint8_t sc[8], m[8];
    ggml_detail::unpack_k4_scales(blk + 4, sc, m);
    for (int j = 0; j < 8; ++j) {
      o[64 + 16 * j + r] = static_cast<uint8_t>((sc[j] & 15) | (m[j] & 15) << 4);
      o[192 + 16 * (j / 2) + r] |=
          static_cast<uint8_t>(((sc[j] >> 4) | (m[j] >> 4) << 2) << (4 * (j & 1)));
    }
    uint8_t w[256];
    k4_weights(blk + (kFive ? 48 : 16), w);
    put_nibbles(o + 256, r, w);
    if constexpr (kFive) {
      for (int j = 0; j < 8; ++j) {
        put_bits(o + kQ4kPanelBlock + 64 * j, r, j,
                 [&](int i) { return (blk[16 + i % 32] >> (i / 32)) & 1; });
      }
    }
  });
}

}  // namespace

void repack_q4_k_panels(const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k,
                        uint8_t* out) {
  repack_k4<false>(rows, row_bytes, n, k, out);
}
void repack_q5_k_panels(const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k,
                        uint8_t* out) {
  repack_k4<true>(rows, row_bytes, n, k, out);
}

// IQ4_XS panel, per super-block (2176 bytes): d of row r at 2r; the scales' low nibbles, sub-blocks
// 2p and 2p + 1 of row r at 32 + 16p + r (low, high nibble); their high two bits, sub-blocks
// 4q..4q + 3 of row r at 96 + 16q + r (two bits each, in order); the nibble planes at 128.
void repack_iq4_xs_panels(const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k,
                          uint8_t* out) {
  repack_blocks(rows, row_bytes, n, k, 256, 136, out, [&](uint8_t* o, int r, const uint8_t* blk) {
    std::memcpy(o + 2 * r, blk, 2);
    uint16_t sh;
    std::memcpy(&sh, blk + 2, 2);
    for (int j = 0; j < 8; ++j) {
      const int lo = (blk[4 + j / 2] >> (4 * (j % 2))) & 15, hi = (sh >> (2 * j)) & 3;
      o[32 + 16 * (j / 2) + r] |= static_cast<uint8_t>(lo << (4 * (j % 2)));
      o[96 + 16 * (j / 4) + r] |= static_cast<uint8_t>(hi << (2 * (j % 4)));
    }
    uint8_t w[256];
    xs_weights(blk + 8, w);
    put_nibbles(o + 128, r, w);
  });
}

// Q6_K panel, per super-block (3360 bytes): d of row r at 2r; the int8 scale of group g (16
// values) of row r at 32 + 16g + r; the low nibbles as Q4_K's planes at 288; then per sub-block j
// two registers at 2336 + 128j whose bytes 4r + t hold, in bits 2u..2u + 1 of register h, the
// high two bits of the weight that nibble register 4h + u holds there.
void repack_q6_k_panels(const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k,
                        uint8_t* out) {
  repack_blocks(rows, row_bytes, n, k, 256, 210, out, [&](uint8_t* o, int r, const uint8_t* blk) {
    std::memcpy(o + 2 * r, blk + 208, 2);
    for (int g = 0; g < 16; ++g) o[32 + 16 * g + r] = blk[192 + g];
    uint8_t w[256];
    q6_low_weights(blk, w);
    put_nibbles(o + 288, r, w);
    // The high two bits of weight 128h + 32q + x: bits 2q..2q + 1 of qh[32h + x].
    const uint8_t* qh = blk + 128;
    for (int h = 0; h < 2; ++h) {
      for (int q = 0; q < 4; ++q) {
        for (int x = 0; x < 32; ++x) w[128 * h + 32 * q + x] = (qh[32 * h + x] >> (2 * q)) & 3;
      }
    }
    for (int j = 0; j < 8; ++j) {
      for (int h = 0; h < 2; ++h) {
        for (int t = 0; t < 4; ++t) {
          const uint8_t* e = w + 32 * j + 16 * h + t;
          o[2336 + 128 * j + 64 * h + 4 * r + t] =
              static_cast<uint8_t>(e[0] | e[4] << 2 | e[8] << 4 | e[12] << 6);
        }
      }
    }
  });
}

// Q8_0 panel, per block of 32 (544 bytes): d of row r at 2r; then eight registers v whose bytes
// 4r + t hold code 4v + t of row r plus 128.
void repack_q8_0_panels(const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k,
                        uint8_t* out) {
  repack_blocks(rows, row_bytes, n, k, 32, 34, out, [&](uint8_t* o, int r, const uint8_t* blk) {
    std::memcpy(o + 2 * r, blk, 2);
    for (int v = 0; v < 8; ++v) {
      uint32_t c;
      std::memcpy(&c, blk + 2 + 4 * v, 4);
      c ^= 0x80808080u;
      std::memcpy(o + 32 + 64 * v + 4 * r, &c, 4);
    }
  });
}

// Q3_K panel, per super-block (1760 bytes): d of row r at 2r; the scales' low four bits, groups
// 2p and 2p + 1 of row r at 32 + 16p + r (low, high nibble); their top two bits, groups 4q..4q + 3
// at 160 + 16q + r; the low two bits of the codes, sub-block j's two registers at 224 + 128j (as
// put_fields); their third bits (hmask), sub-block j's register at 1248 + 64j, bit v of byte
// 4r + t for code register v.
void repack_q3_k_panels(const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k,
                        uint8_t* out) {
  repack_blocks(rows, row_bytes, n, k, 256, 110, out, [&](uint8_t* o, int r, const uint8_t* blk) {
    std::memcpy(o + 2 * r, blk + 108, 2);
    int sc[16];
    ggml_detail::q3_k_scales(blk + 96, sc);
    for (int g = 0; g < 16; ++g) {
      const int u = sc[g] + 32;
      o[32 + 16 * (g / 2) + r] |= static_cast<uint8_t>((u & 15) << (4 * (g % 2)));
      o[160 + 16 * (g / 4) + r] |= static_cast<uint8_t>((u >> 4) << (2 * (g % 4)));
    }
    for (int j = 0; j < 8; ++j) {
      put_fields(o + 224 + 128 * j, r, j,
                 [&](int i) { return ggml_detail::q2_field(blk + 32, i); });
      put_bits(o + 1248 + 64 * j, r, j, [&](int i) { return (blk[i % 32] >> (i / 32)) & 1; });
    }
  });
}

// Q2_K panel, per super-block (1344 bytes): d of row r at 2r, dmin at 32 + 2r; group g's scale
// byte (scale | min << 4) of row r at 64 + 16g + r; the codes, sub-block j's two registers at
// 320 + 128j (as put_fields).
void repack_q2_k_panels(const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k,
                        uint8_t* out) {
  repack_blocks(rows, row_bytes, n, k, 256, 84, out, [&](uint8_t* o, int r, const uint8_t* blk) {
    std::memcpy(o + 2 * r, blk + 80, 2);
    std::memcpy(o + 32 + 2 * r, blk + 82, 2);
    for (int g = 0; g < 16; ++g) o[64 + 16 * g + r] = blk[g];
    for (int j = 0; j < 8; ++j) {
      put_fields(o + 320 + 128 * j, r, j,
                 [&](int i) { return ggml_detail::q2_field(blk + 16, i); });
    }
  });
}

// Q4_K and Q5_K: each pair of sub-blocks' activation sums as the int16 halves of an int32, what
// vpdpwssd multiplies against the mins' pairs.
void pre_q4_k(const ActRowView* x, int rows, int64_t b0, int64_t nb, int32_t* out) {
  for (int r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const int16_t* s = x[r].sums + 16 * (b0 + b);
      for (int p = 0; p < 4; ++p) {
        out[(r * nb + b) * 4 + p] = pack16(s[4 * p] + s[4 * p + 1], s[4 * p + 2] + s[4 * p + 3]);
      }
    }
  }
}
// IQ4_XS: -128 times each sub-block's activation sum (the grid's offset).
void pre_iq4_xs(const ActRowView* x, int rows, int64_t b0, int64_t nb, int32_t* out) {
  for (int r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const int16_t* s = x[r].sums + 16 * (b0 + b);
      for (int j = 0; j < 8; ++j) out[(r * nb + b) * 8 + j] = -128 * (s[2 * j] + s[2 * j + 1]);
    }
  }
}

void pre_q6_k(const ActRowView* x, int rows, int64_t b0, int64_t nb, int32_t* out) {
  pre_groups16<32>(x, rows, b0, nb, out);
}
void pre_q8_0(const ActRowView* x, int rows, int64_t b0, int64_t nb, int32_t* out) {
  pre_blocks32<128>(x, rows, b0, nb, out);
}
void pre_q3_k(const ActRowView* x, int rows, int64_t b0, int64_t nb, int32_t* out) {
  pre_groups16<4>(x, rows, b0, nb, out);
}
// Q2_K: each pair of groups' activation sums as the int16 halves of an int32 (Q4_K's form).
void pre_q2_k(const ActRowView* x, int rows, int64_t b0, int64_t nb, int32_t* out) {
  for (int r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const int16_t* s = x[r].sums + 16 * (b0 + b);
      for (int p = 0; p < 8; ++p) {
        out[(r * nb + b) * 8 + p] = pack16(s[2 * p], s[2 * p + 1]);
      }
    }
  }
}

}  // namespace mx::ggml_dot_detail

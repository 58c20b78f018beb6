// AMX tiles for the integer MX GEMMs (W4A4 and W4A8) over the AVX-512 table's panels: per
// panel and 32-block, one TDPBSSD multiplies sixteen rows of int8 activations by the block's
// sixteen columns of E2M1 weights as signed bytes (2 * value), giving each output the block's
// exact integer dot, as vpdpbusd's offset bytes less their offset do. W4A8 runs it on both byte
// planes of the 14-bit activations (x = 170 h + l) and combines 170 H + L in integers. The
// scaling after it is int_gemm_scalar's, in its order, so every output equals the scalar
// table's bit for bit whatever the rows beside it. E4M3 weights, and fewer rows than a tile is
// worth, stay with the AVX-512 kernels.
//
// Compiled with AVX-512 and AMX flags: the functions here run only where cpu_features().amx
// holds (the processor has AMX-TILE and AMX-INT8 and the OS let this process use the tiles).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "core/amx_tile_config.h"
#include "kernels/mx_gemm.h"

namespace mx::mx_gemm_detail {
namespace {

constexpr int64_t kP = kMxPanelCols;  // sixteen columns: one tile row of int32
constexpr int64_t kTileRows = 16;
// Rows whose totals wait on the stack (12 KB) while a panel's block groups pass; a last block
// takes up to fifteen more. Fewer where their activations would pass 256 KB, which every
// panel reads again: from L2, not beyond (W4A8 at 512 rows and k = 2048 in mx_bench: 316
// GFLOP/s in blocks of 192 rows, 348 in blocks of 64).
constexpr int64_t kBlockRows = 192, kMaxBlockRows = kBlockRows + 15;
constexpr int64_t kBlockActivationBytes = 256 << 10;
// Blocks of a panel decoded at a time: 16 KB of B tiles, read by every row tile from L1.
constexpr int64_t kGroupBlocks = 32;
constexpr int64_t kBTileBytes = 512;  // 8 rows (k / 4) x 16 columns x 4 bytes

// Fewer rows than this run the AVX-512 kernels, as fast or faster there: mx_bench, one thread,
// k = n = 2048, AMX against AVX-512 at 8 rows W4A8 241 / 233 GFLOP/s and W4A4 404 / 422; at 12
// rows 254 / 220 and 518 / 398 (a call decodes each panel's weights for few rows, and scales
// every block's dots row by row whatever their count).
constexpr int64_t kAmxMinRows = 12;

// The tile registers, named by number (GCC's tile intrinsics paste the literal into the
// assembly): tmm0 C for plane h (and W4A4), tmm1 C for plane l, tmm2 and tmm3 their A tiles,
// tmm4 B.
constexpr int kCh = 0, kCl = 1, kAh = 2, kAl = 3, kB = 4;

// C and A tiles of `rows` rows (at most sixteen).
void configure_tiles(int rows) {
  AmxTileConfig c;
  for (int t : {kCh, kCl}) {
    c.colsb[t] = 64;
    c.rows[t] = static_cast<uint8_t>(rows);
  }
  for (int t : {kAh, kAl}) {
    c.colsb[t] = 32;
    c.rows[t] = static_cast<uint8_t>(rows);
  }
  c.colsb[kB] = 64;
  c.rows[kB] = 8;
  _tile_loadconfig(&c);
}

// Blocks [b0, b0 + nblk) of panel p as B tiles: AVX-512 panel row j (k = 8j + i in the low
// nibble of byte i of each column's dword, 8j + 4 + i in the high one) becomes B rows 2j and
// 2j + 1, each column's dword holding four consecutive k as signed bytes 2 * value.
void decode_b(const MxPanelView& w, int64_t p, int64_t b0, int64_t nblk, int64_t nb, uint8_t* out) {
  const __m512i lut = _mm512_broadcast_i32x4(
      _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const uint8_t* codes = w.codes + (p * nb + b0) * 256;
  for (int64_t j = 0; j < 4 * nblk; ++j) {
    const __m512i v = _mm512_loadu_si512(codes + 64 * j);
    _mm512_store_si512(out + 128 * j, _mm512_shuffle_epi8(lut, _mm512_and_si512(v, nibble)));
    _mm512_store_si512(out + 128 * j + 64,
                       _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble)));
  }
}

// Per block of a group, panel p's scale vector times the scale unit: (sv * unit), the first
// factor of int_gemm_scalar's scale.
void group_scales(const MxPanelView& w, int64_t p, int64_t b0, int64_t nblk, int64_t nb, float* s) {
  const int64_t nc = (w.k + 511) / 512;
  const __m512 unit = _mm512_set1_ps(mx_panel_scale_unit(ElemFormat::kE2M1));
  for (int64_t i = 0; i < nblk; ++i) {
    const int64_t b = b0 + i;
    const __m128i bytes =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales + (p * nb + b) * kP));
    __m512 v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu8_epi32(bytes), 23));
    if (w.chunk_scales != nullptr) {
      v = _mm512_mul_ps(v, _mm512_loadu_ps(w.chunk_scales + (p * nc + b / 16) * kP));
    }
    _mm512_store_ps(s + i * kP, _mm512_mul_ps(v, unit));
  }
}

// A row tile of R rows (the tiles' configured row count) over one group of blocks of a
// panel: the R totals in registers, loaded from or stored to `totals` between groups, and at
// the last group times post into y, all but the first `skip` rows (another tile's, whose
// totals that tile has already moved on). x: the tile's first row at the group's first block
// (stride bytes between rows, step bytes between blocks; W4A8's plane l 32 bytes after h);
// xs: its first activation scale (nb floats between rows).
template <bool kW4a8, int R>
void tile_group(const int8_t* x, int64_t stride, const uint8_t* btiles, const float* s,
                const float* xs, int64_t nb, int64_t nblk, float* totals, bool first, float* y,
                int64_t ldy, int64_t cols, float post, int64_t skip) {
  constexpr int64_t kStep = kW4a8 ? 64 : 32;
  __m512 total[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    total[r] = first ? _mm512_setzero_ps() : _mm512_load_ps(totals + r * kP);
  }
  alignas(64) int32_t ch[R][kP], cl[R][kP];
  for (int64_t i = 0; i < nblk; ++i, x += kStep) {
    _tile_loadd(4, btiles + i * kBTileBytes, 64);
    _tile_loadd(2, x, stride);
    _tile_zero(0);
    _tile_dpbssd(0, 2, 4);
    if constexpr (kW4a8) {
      _tile_loadd(3, x + 32, stride);
      _tile_zero(1);
      _tile_dpbssd(1, 3, 4);
      _tile_stored(1, cl, 64);
    }
    _tile_stored(0, ch, 64);
    const __m512 sv = _mm512_load_ps(s + i * kP);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      __m512i dot = _mm512_load_si512(ch[r]);
      if constexpr (kW4a8) {
        // 256 * (170 H + L): 512 w times x, as the int16 kernels sum it.
        dot = _mm512_slli_epi32(
            _mm512_add_epi32(_mm512_mullo_epi32(dot, _mm512_set1_epi32(kW4a8PlaneSplit)),
                             _mm512_load_si512(cl[r])),
            8);
      }
      const __m512 scale = _mm512_mul_ps(sv, _mm512_set1_ps(xs[r * nb + i]));
      total[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, total[r]);
    }
  }
  if (y == nullptr) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      if (r >= skip) _mm512_store_ps(totals + r * kP, total[r]);
    }
    return;
  }
  const __m512 pv = _mm512_set1_ps(post);
  const __mmask16 keep = cols >= kP ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << cols) - 1);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    if (r >= skip) _mm512_mask_storeu_ps(y + r * ldy, keep, _mm512_mul_ps(total[r], pv));
  }
}

using TileGroupFn = void (*)(const int8_t*, int64_t, const uint8_t*, const float*, const float*,
                             int64_t, int64_t, float*, bool, float*, int64_t, int64_t, float,
                             int64_t);
template <bool kW4a8, int... Rs>
constexpr std::array<TileGroupFn, kTileRows + 1> tile_group_fns(std::integer_sequence<int, Rs...>) {
  return {nullptr, &tile_group<kW4a8, Rs + 1>...};
}
template <bool kW4a8>
constexpr auto kTileGroupFns = tile_group_fns<kW4a8>(std::make_integer_sequence<int, kTileRows>());

// Rows [row0, row0 + m) of panel p, in tiles of R rows (the configured count: sixteen, or all
// the rows where there are fewer); a last partial tile is the block's last R rows, and stores
// only those the tile before did not own.
template <bool kW4a8>
void panel_rows(const MxGemmArgs& a, int64_t row0, int64_t m, int64_t p, int64_t n_end, int64_t R) {
  const MxPanelView& w = *a.w;
  const int64_t nb = (w.k + 31) / 32;
  const int64_t stride = kW4a8 ? 2 * a.ldx : a.ldx;
  const int8_t* x0 = kW4a8 ? a.xhb : a.xq;
  const TileGroupFn fn = kTileGroupFns<kW4a8>[static_cast<size_t>(R)];
  alignas(64) uint8_t btiles[kGroupBlocks * kBTileBytes];
  alignas(64) float totals[kMaxBlockRows * kP];
  alignas(64) float s[kGroupBlocks * kP];
  const int64_t cols = n_end - p * kP;
  for (int64_t b0 = 0; b0 < nb; b0 += kGroupBlocks) {
    const int64_t nblk = std::min(kGroupBlocks, nb - b0);
    decode_b(w, p, b0, nblk, nb, btiles);
    group_scales(w, p, b0, nblk, nb, s);
    const bool first = b0 == 0, last = b0 + nblk >= nb;
    for (int64_t t0 = 0; t0 < m; t0 += R) {
      const int64_t t = std::min(t0, m - R), row = row0 + t;
      float* y = last ? a.y + row * a.ldy + p * kP - a.y_col0 : nullptr;
      fn(x0 + row * stride + b0 * (kW4a8 ? 64 : 32), stride, btiles, s, a.xscale + row * nb + b0,
         nb, nblk, totals + t * kP, first, y, a.ldy, cols, w.post, t0 - t);
    }
  }
}

template <bool kW4a8>
void amx_gemm(const MxGemmArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t R = std::min(kTileRows, a.m);
  configure_tiles(static_cast<int>(R));
  const int64_t p_begin = n_begin / kP, p_end = (n_end + kP - 1) / kP;
  const int64_t row_bytes = ((a.w->k + 31) / 32) * (kW4a8 ? 64 : 32);
  const int64_t block_rows =
      std::clamp(kBlockActivationBytes / row_bytes / kTileRows * kTileRows, kTileRows, kBlockRows);
  for (int64_t r0 = 0; r0 < a.m;) {
    // A block of fewer than R rows would leave a tile without its own rows: the block before
    // takes them (kMaxBlockRows).
    int64_t m = std::min(block_rows, a.m - r0);
    if (a.m - r0 - m < R) m = a.m - r0;
    for (int64_t p = p_begin; p < p_end; ++p) panel_rows<kW4a8>(a, r0, m, p, n_end, R);
    r0 += m;
  }
  _tile_release();
}

// The AVX-512 table's entries, looked up when called (its definition lives in another
// translation unit, so it is not read during static initialization).
void gemm_fp8(const MxGemmArgs& a, int64_t n_begin, int64_t n_end) {
  kAvx512MxGemm.gemm(a, n_begin, n_end);
}

void gemm_w4a4(const MxGemmArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.m < kAmxMinRows) {
    kAvx512MxGemm.gemm_w4a4(a, n_begin, n_end);
    return;
  }
  amx_gemm<false>(a, n_begin, n_end);
}

void gemm_w4a8(const MxGemmArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.m < kAmxMinRows) {
    kAvx512MxGemm.gemm_w4a8(a, n_begin, n_end);
    return;
  }
  amx_gemm<true>(a, n_begin, n_end);
}

}  // namespace

const MxGemmKernels kAmxMxGemm = {
    IsaLevel::kAmx, "amx",    pack_mx_weights_avx512, decode_avx2, prepare_w4a8_avx2, gemm_fp8,
    gemm_w4a4,      gemm_w4a8};

}  // namespace mx::mx_gemm_detail

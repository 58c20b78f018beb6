// The AMX int8 peak: what the AMX level's integer GEMMs can reach where the CPU has the tiles.
#include <immintrin.h>

#include <cstdint>

#include "core/amx_tile_config.h"
#include "runtime/machine_peaks.h"

namespace mx::peaks_detail {

// Four independent 16 x 16 int32 accumulators, each fed by TDPBSSD from two A and two B tiles
// of 16 x 64 bytes (a 2 x 2 block): 16 * 16 * 64 multiply-adds per instruction.
double int8_dot_amx(int64_t iters, int* sink) {
  AmxTileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = 16;
  }
  _tile_loadconfig(&c);
  alignas(64) int8_t a[16 * 64], b[16 * 64];
  for (int i = 0; i < 16 * 64; ++i) {
    a[i] = static_cast<int8_t>(i % 7 - 3);
    b[i] = static_cast<int8_t>(i % 5 - 2);
  }
  _tile_loadd(4, a, 64);
  _tile_loadd(5, a, 64);
  _tile_loadd(6, b, 64);
  _tile_loadd(7, b, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t it = 0; it < iters; ++it) {
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  alignas(64) int32_t out[16 * 16];
  _tile_stored(0, out, 64);
  _tile_release();
  *sink ^= out[0];
  return static_cast<double>(iters) * 4 * 16 * 16 * 64 * 2;
}

}  // namespace mx::peaks_detail

// Software prefetch for the MX GEMMs, shared by the ISA units: the prefill passes ask for a
// panel's next group of codes (8-32 KB on, a jump the hardware prefetcher does not follow)
// while the row tiles run on the current one, and the direct tiles for the codes a few blocks
// ahead of the one they start.
#pragma once

#include <cstdint>

#include "kernels/mx_gemm.h"
#include "kernels/prefetch.h"

namespace mx::mx_gemm_detail {
// Internal linkage: ISA translation units compiled with different flags include this (see
// tile_plan.h).
namespace {

// The codes (block_bytes per panel and block) of panels [panel, panel + q) that are widened
// next: their group of up to group_blocks blocks from block b, or after the last group the
// next panel set's (np panels on), while below panel_end.
inline void prefetch_next_group(const MxPanelView& w, int64_t panel, int64_t q, int64_t b,
                                int64_t nb, int64_t group_blocks, int64_t np, int64_t panel_end,
                                int64_t block_bytes) {
  if (b >= nb) {
    panel += np;
    b = 0;
  }
  const int64_t bytes = (group_blocks < nb - b ? group_blocks : nb - b) * block_bytes;
  for (int64_t i = 0; i < q && panel + i < panel_end; ++i) {
    const uint8_t* codes = w.codes + ((panel + i) * nb + b) * block_bytes;
    for (int64_t off = 0; off < bytes; off += 64) prefetch_line(codes + off);
  }
}

// The codes of block b + ahead of panels [panel, panel + c) (block_bytes each), or past their
// last block those of the next tile's panels [panel + c, panel + 2c), where the matrix has
// them: the direct tiles ask for them as they start block b. Their stream is sequential, yet
// with the hardware prefetcher alone a one-row tile waited on it for a fifth of its time, and
// while the spill-over went to the tile's own next panel, the next tile began with cold
// panels (one-row W4A8 decode 68-73 -> 76-80 tok/s; docs/performance.md). to_l2 asks with
// prefetcht1: on a Zen 4 the lines then wait in L2, and the tiles ran 12-23% faster than with
// the same requests into L1, whose fill buffers and 32 KB they crowded (lm_head of the Qwen3.5
// shape, AVX2 tables: W4A4 10.0 -> 8.1 ms a step, W8A8 18.9 -> 15.5; AVX-512 BF16 tiles at
// eight rows, Qwen3-30B shape: 16.2-18.7 -> 13.1-13.7). The AVX-512 FMA tiles, which Intel
// cores run, keep L1: not measured there.
inline void prefetch_blocks_ahead(const MxPanelView& w, int64_t panel, int c, int64_t nb, int64_t b,
                                  int64_t ahead, int64_t block_bytes, bool to_l2 = false) {
  const int64_t end = mx_panels(w.n) * nb;
  // At most a panel ahead: further, a tile would never ask for its own blocks, and would skip
  // the next tile's first ones (k = 768 with 32 blocks ahead: blocks 0-7 of every tile).
  if (ahead > nb) ahead = nb;
  // Past the panels' last block, the next tile's panels (c on) are the ones read next.
  const int64_t next = b + ahead < nb ? b + ahead : c * nb + b + ahead - nb;
  for (int i = 0; i < c; ++i) {
    const int64_t blk = (panel + i) * nb + next;
    if (blk >= end) return;
    const uint8_t* codes = w.codes + blk * block_bytes;
    for (int64_t off = 0; off < block_bytes; off += 64) {
      if (to_l2) {
        prefetch_line_l2(codes + off);
      } else {
        prefetch_line(codes + off);
      }
    }
  }
}

}  // namespace
}  // namespace mx::mx_gemm_detail

// Software prefetch for the MX GEMMs' prefill widening and decoding passes, shared by the ISA
// units: a panel's next group of codes is 8-32 KB on, a jump the hardware prefetcher does not
// follow, so the pass asks for it while the row tiles run on the current one.
#pragma once

#include <cstdint>

#include "kernels/mx_gemm.h"

namespace mx::mx_gemm_detail {
// Internal linkage: ISA translation units compiled with different flags include this (see
// tile_plan.h).
namespace {

// A prefetch that stays: GCC deletes a loop whose only work is _mm_prefetch.
inline void prefetch_line(const void* p) {
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
}

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

}  // namespace
}  // namespace mx::mx_gemm_detail

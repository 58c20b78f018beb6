// The 64-byte operand of LDTILECFG (palette 1): each tile register's bytes per row and rows.
// Plain data, so that every AMX translation unit (kernels, bench's peak probe) fills the same
// layout without an instruction of its own here.
#pragma once

#include <cstdint>

namespace mx {

struct alignas(64) AmxTileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(AmxTileConfig) == 64);

}  // namespace mx

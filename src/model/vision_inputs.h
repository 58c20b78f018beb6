// Where images enter a prompt: each image placeholder token expanded to as many tokens as the
// image's embeddings, and the multimodal rotary positions of the expanded prompt (transformers'
// get_rope_index for Qwen3.5 and Qwen3-VL).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "loader/model_config.h"
#include "model/vision_tower.h"

namespace mx {

// Each of `ids`' image placeholders (vision.image_token_id), in order, repeated to its image's
// embedding count (the grid's patches over merge^2). Fails when placeholders and images differ
// in number.
Result<std::vector<int32_t>> expand_image_placeholders(std::span<const int32_t> ids,
                                                       const VisionConfig& vision,
                                                       std::span<const ImageGrid> grids);

struct MropePositions {
  std::vector<int64_t> pos;  // [tokens][3]: (t, h, w)
  // What generated token k (after the prompt's n tokens) takes on all three axes: n + k + delta.
  int64_t rope_delta = 0;
};

// Text runs take equal positions continuing from the last; an image run (the expanded
// placeholders of one image) starting at s takes (s + frame, s + row, s + column) over the
// merged grid, row-major, and the text after it resumes at s + the largest of the merged
// grid's sides.
Result<MropePositions> mrope_positions(std::span<const int32_t> expanded_ids,
                                       const VisionConfig& vision,
                                       std::span<const ImageGrid> grids);

}  // namespace mx

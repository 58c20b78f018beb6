// A prompt with images: the token ids with each image placeholder expanded, the vision
// tower's embeddings standing at those positions, and the multimodal rotary positions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "media/vision_preprocess.h"
#include "model/vision_inputs.h"
#include "model/vision_tower.h"

namespace mx {

struct MultimodalPrompt {
  std::vector<int32_t> ids;        // placeholders expanded
  std::vector<float> embeds;       // [image tokens, hidden], the images in order
  std::vector<const float*> rows;  // per prompt position: its embedding row, or null (text)
  MropePositions positions;
  std::vector<ImageGrid> grids;
  // `ids` as the prefix cache keys them: each image token replaced by a negative id drawn from
  // a hash of its image's pixels and its place in the image, so a cached prefix never spans a
  // different image while the same image with the same text is found again.
  std::vector<int32_t> cache_keys;
  int64_t image_tokens = 0;
  double tower_seconds = 0;
};

// `ids` holds one image placeholder per image of `images`, in order (an image part of a
// chat renders as vision_start, one placeholder, vision_end).
Result<MultimodalPrompt> build_multimodal_prompt(VisionTower& tower, std::span<const int32_t> ids,
                                                 std::span<const PixelPatches> images);

// Token ids of `<|vision_start|><|image_pad|><|vision_end|>` for each of `count` images, for a
// raw prompt (run) that names no placeholder itself.
std::vector<int32_t> image_markers(const VisionConfig& vision, int64_t count);

}  // namespace mx

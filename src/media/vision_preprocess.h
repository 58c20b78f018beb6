// The Qwen2-VL image processor (used by Qwen2.5-VL, Qwen3-VL and Qwen3.5): an RGB image to the
// rows of pixel patches the vision tower embeds. It reproduces transformers' PIL path bit for
// bit: smart_resize to a multiple of patch * merge, Pillow's bicubic resize when the size
// changes, rescale and normalize per channel, the still image repeated over the temporal patch,
// and the patches in spatial-merge-block order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "media/image.h"

namespace mx {

// preprocessor_config.json. The defaults are transformers' Qwen2VLImageProcessor defaults
// except patch_size (16, as every Qwen3-VL and Qwen3.5 checkpoint writes), used where a field
// is absent.
struct VisionPreprocessConfig {
  int patch_size = 16;
  int temporal_patch_size = 2;
  int merge_size = 2;
  int64_t min_pixels = 56 * 56;         // size.shortest_edge
  int64_t max_pixels = 28 * 28 * 1280;  // size.longest_edge
  float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
  float std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
  double rescale = 1 / 255.0;

  // The side of a merged token in pixels: resized sides are multiples of it.
  int factor() const { return patch_size * merge_size; }
};

// Bounds a config must satisfy (each refusal names the field).
constexpr int kMaxPatchSize = 1024;
constexpr int kMaxTemporalPatchSize = 64;
constexpr int kMaxMergeSize = 64;
constexpr int64_t kMaxVisionPixels = int64_t{1} << 30;
constexpr int64_t kMaxVisionSide = int64_t{1} << 24;
// transformers refuses an aspect ratio above this.
constexpr double kMaxAspectRatio = 200;

Status validate_preprocess_config(const VisionPreprocessConfig& c, const std::string& what);
// The text of a preprocessor_config.json; `what` names it in errors.
Result<VisionPreprocessConfig> parse_preprocessor_config(const std::string& text,
                                                         const std::string& what);
// `dir`/preprocessor_config.json (not found is an error: the caller decides whether a model
// without one can take images).
Result<VisionPreprocessConfig> read_preprocessor_config(const std::string& dir);

struct ImageSize {
  int height = 0;
  int width = 0;
};

// transformers' smart_resize: the sides rounded (half to even) to multiples of `factor`, then
// scaled down to at most max_pixels or up to at least min_pixels keeping the aspect ratio.
// Refuses an aspect ratio over kMaxAspectRatio, a result with a side under `factor`, sides over
// kMaxVisionSide and pixel bounds outside 0 <= min_pixels <= max_pixels <= kMaxVisionPixels.
Result<ImageSize> smart_resize(int64_t height, int64_t width, int factor, int64_t min_pixels,
                               int64_t max_pixels);

// Pillow's Image.resize((out_w, out_h), BICUBIC) on 8-bit RGB, bit for bit (Pillow 9.4):
// separable, horizontal pass first, antialiased when shrinking, 22-bit fixed-point weights
// and an 8-bit intermediate image. A pass whose size does not change is skipped. Sides >= 1.
Image resize_bicubic_pillow(const Image& in, int out_w, int out_h);

// Rows of flattened patches: pixel_values [rows, cols] with cols = 3 * temporal * patch^2,
// each row [channel, t, y, x]; rows in (t, block row, block col, row in block, col in block)
// order. grid_* count patches (not merged tokens).
struct PixelPatches {
  std::vector<float> values;
  int64_t rows = 0;
  int64_t cols = 0;
  int grid_t = 0;
  int grid_h = 0;
  int grid_w = 0;
};

// The whole processor: smart_resize, the resize when the size differs, then patchify_image.
Result<PixelPatches> preprocess_image(const Image& image, const VisionPreprocessConfig& c);

// Normalizes and cuts an image whose sides are already multiples of c.factor().
Result<PixelPatches> patchify_image(const Image& image, const VisionPreprocessConfig& c);

// The <|image_pad|> tokens an image becomes: grid_t * grid_h * grid_w / merge^2.
int64_t num_image_tokens(const PixelPatches& patches, int merge_size);

}  // namespace mx

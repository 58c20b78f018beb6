#include "media/vision_preprocess.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace mx {

Result<ImageSize> smart_resize(int64_t height, int64_t width, int factor, int64_t min_pixels,
                               int64_t max_pixels) {
  const std::string dims = std::to_string(width) + "x" + std::to_string(height);
  if (height <= 0 || width <= 0) return invalid_argument("image " + dims + " has no pixels");
  if (factor <= 0) return invalid_argument("smart_resize: factor must be positive");
  // Bounds that keep every product below in 64 bits and every double-to-integer cast defined.
  if (height > kMaxVisionSide || width > kMaxVisionSide) {
    return invalid_argument("image " + dims + " has a side over " + std::to_string(kMaxVisionSide) +
                            " pixels");
  }
  if (max_pixels < 1 || max_pixels > kMaxVisionPixels || min_pixels < 0 ||
      min_pixels > max_pixels) {
    return invalid_argument("smart_resize: min_pixels " + std::to_string(min_pixels) +
                            " and max_pixels " + std::to_string(max_pixels) +
                            " must satisfy 0 <= min <= max <= " + std::to_string(kMaxVisionPixels));
  }
  // Python's float arithmetic throughout: true division to double, round half to even
  // (nearbyint in the default rounding mode), then floor or ceil.
  const double ratio =
      static_cast<double>(std::max(height, width)) / static_cast<double>(std::min(height, width));
  if (ratio > kMaxAspectRatio) {
    return invalid_argument("image " + dims + ": aspect ratio " + std::to_string(ratio) +
                            " is over the limit of " +
                            std::to_string(static_cast<int>(kMaxAspectRatio)));
  }
  const double h = static_cast<double>(height), w = static_cast<double>(width);
  const double f = factor;
  int64_t h_bar = static_cast<int64_t>(std::nearbyint(h / f)) * factor;
  int64_t w_bar = static_cast<int64_t>(std::nearbyint(w / f)) * factor;
  const double area = static_cast<double>(height * width);
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(area / static_cast<double>(max_pixels));
    h_bar = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / area);
    h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  if (h_bar < factor || w_bar < factor) {
    return invalid_argument("image " + dims + " is too small: a side rounds to 0 multiples of " +
                            std::to_string(factor) + " pixels and min_pixels (" +
                            std::to_string(min_pixels) + ") does not enlarge it");
  }
  // min_pixels may round up past kMaxVisionPixels by a factor's strip; more is a bad config.
  if (h_bar * w_bar > 2 * kMaxVisionPixels) {
    return invalid_argument("image " + dims + " resizes to more than " +
                            std::to_string(kMaxVisionPixels) + " pixels");
  }
  return ImageSize{static_cast<int>(h_bar), static_cast<int>(w_bar)};
}

namespace {

// Per channel, the normalized value of each 8-bit level, computed in double and rounded once:
// for mean = std = 0.5 and rescale 1/255 this is float32((2p - 255) / 255) exactly.
struct NormalizeTable {
  float v[3][256];
};

NormalizeTable normalize_table(const VisionPreprocessConfig& c) {
  NormalizeTable t;
  for (int ch = 0; ch < 3; ++ch) {
    const double mean = c.mean[ch], std = c.std[ch];
    for (int p = 0; p < 256; ++p) t.v[ch][p] = static_cast<float>((p * c.rescale - mean) / std);
  }
  return t;
}

}  // namespace

Result<PixelPatches> patchify_image(const Image& image, const VisionPreprocessConfig& c) {
  MX_RETURN_IF_ERROR(validate_preprocess_config(c, "vision preprocessor"));
  const int ps = c.patch_size, tps = c.temporal_patch_size, m = c.merge_size;
  if (image.width <= 0 || image.height <= 0 ||
      image.rgb.size() != size_t{3} * image.width * image.height) {
    return invalid_argument("patchify_image: the RGB buffer does not match the image size");
  }
  if (image.width % c.factor() != 0 || image.height % c.factor() != 0) {
    return invalid_argument("patchify_image: image " + std::to_string(image.width) + "x" +
                            std::to_string(image.height) + " is not a multiple of " +
                            std::to_string(c.factor()) + " pixels");
  }
  PixelPatches out;
  // One still frame, repeated to fill the temporal patch: one temporal step.
  out.grid_t = 1;
  out.grid_h = image.height / ps;
  out.grid_w = image.width / ps;
  out.rows = int64_t{out.grid_t} * out.grid_h * out.grid_w;
  out.cols = int64_t{3} * tps * ps * ps;
  out.values.resize(static_cast<size_t>(out.rows * out.cols));

  const NormalizeTable table = normalize_table(c);
  const size_t stride = size_t{3} * image.width;
  float* row = out.values.data();
  for (int bh = 0; bh < out.grid_h / m; ++bh) {
    for (int bw = 0; bw < out.grid_w / m; ++bw) {
      for (int mh = 0; mh < m; ++mh) {
        for (int mw = 0; mw < m; ++mw) {
          const uint8_t* origin =
              image.rgb.data() + stride * ((bh * m + mh) * ps) + size_t{3} * ((bw * m + mw) * ps);
          float* dst = row;
          for (int ch = 0; ch < 3; ++ch) {
            for (int t = 0; t < tps; ++t) {
              for (int y = 0; y < ps; ++y) {
                const uint8_t* src = origin + stride * y + ch;
                for (int x = 0; x < ps; ++x) *dst++ = table.v[ch][src[3 * x]];
              }
            }
          }
          row += out.cols;
        }
      }
    }
  }
  return out;
}

Result<PixelPatches> preprocess_image(const Image& image, const VisionPreprocessConfig& c) {
  MX_RETURN_IF_ERROR(validate_preprocess_config(c, "vision preprocessor"));
  if (image.width <= 0 || image.height <= 0 ||
      image.rgb.size() != size_t{3} * image.width * image.height) {
    return invalid_argument("preprocess_image: the RGB buffer does not match the image size");
  }
  MX_ASSIGN_OR_RETURN(const ImageSize size, smart_resize(image.height, image.width, c.factor(),
                                                         c.min_pixels, c.max_pixels));
  if (size.width == image.width && size.height == image.height) return patchify_image(image, c);
  return patchify_image(resize_bicubic_pillow(image, size.width, size.height), c);
}

int64_t num_image_tokens(const PixelPatches& patches, int merge_size) {
  return int64_t{patches.grid_t} * patches.grid_h * patches.grid_w /
         (int64_t{merge_size} * merge_size);
}

}  // namespace mx

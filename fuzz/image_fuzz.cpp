// libFuzzer target: image bytes as a request carries them, raw (PNG, JPEG or WebP by their
// magic) or, after a leading "data:", as a data URI. Whatever decodes must fit the limits and
// hold the pixels it claims; it is then turned into the vision tower's pixel patches with the
// Qwen3.5 processor settings (so the resize path runs too), whose shape and values are checked.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "media/image.h"
#include "media/vision_preprocess.h"

namespace {

// Small, so that an input costs milliseconds: a bomb is refused either way.
mx::ImageLimits fuzz_limits() {
  mx::ImageLimits l;
  l.max_pixels = 512 * 512;
  l.max_side = 4096;
  return l;
}

mx::VisionPreprocessConfig fuzz_config() {
  mx::VisionPreprocessConfig c;
  c.min_pixels = 1024;
  c.max_pixels = 65536;
  for (int ch = 0; ch < 3; ++ch) c.mean[ch] = c.std[ch] = 0.5f;
  return c;
}

void check_patches(const mx::Image& img) {
  static const mx::VisionPreprocessConfig kConfig = fuzz_config();
  auto p = mx::preprocess_image(img, kConfig);
  if (!mx::fuzz::accepted("preprocess_image", p, "")) {
    MX_FUZZ_CHECK(!p.status().message().empty(), "a refusal without a message");
    return;
  }
  const int f = kConfig.merge_size;
  MX_FUZZ_CHECK(p->grid_t == 1 && p->grid_h >= f && p->grid_w >= f, "grid");
  MX_FUZZ_CHECK(p->grid_h % f == 0 && p->grid_w % f == 0, "grid not a multiple of the merge");
  MX_FUZZ_CHECK(p->rows == int64_t{p->grid_h} * p->grid_w, "rows");
  MX_FUZZ_CHECK(p->cols == 3 * 2 * 16 * 16, "cols");
  MX_FUZZ_CHECK(p->values.size() == static_cast<size_t>(p->rows * p->cols), "values");
  // The smart_resize area bound holds within one factor's strip (aspect ratio <= 200).
  MX_FUZZ_CHECK(p->rows * 256 <= 2 * kConfig.max_pixels, "resized past max_pixels");
  for (float v : p->values) MX_FUZZ_CHECK(v >= -1.0f && v <= 1.0f, "value outside [-1, 1]");
  MX_FUZZ_CHECK(mx::num_image_tokens(*p, f) * 4 == p->rows, "token count");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mx::fuzz::guarded("image", [&] {
    static const mx::ImageLimits kLimits = fuzz_limits();
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    auto img = text.substr(0, 5) == "data:" ? mx::decode_data_uri(text, kLimits)
                                            : mx::decode_image(data, size, kLimits);
    if (!mx::fuzz::accepted("decode_image", img, "")) {
      MX_FUZZ_CHECK(!img.status().message().empty(), "a refusal without a message");
      return;
    }
    MX_FUZZ_CHECK(img->width >= 1 && img->height >= 1, "empty image accepted");
    MX_FUZZ_CHECK(int64_t{img->width} * img->height <= kLimits.max_pixels, "pixel limit");
    MX_FUZZ_CHECK(img->width <= kLimits.max_side && img->height <= kLimits.max_side, "side");
    MX_FUZZ_CHECK(img->rgb.size() == size_t{3} * img->width * img->height, "rgb size");
    check_patches(*img);
  });
  return 0;
}

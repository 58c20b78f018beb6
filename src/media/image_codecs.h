// The per-format decoders behind decode_image (private to mx_media). Each reads the header,
// checks its dimensions against the limits and only then allocates the pixels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "media/image.h"

namespace mx::media_detail {

Result<Image> decode_png(const uint8_t* data, size_t size, const ImageLimits& limits);
Result<Image> decode_jpeg(const uint8_t* data, size_t size, const ImageLimits& limits);
Result<Image> decode_webp(const uint8_t* data, size_t size, const ImageLimits& limits);

}  // namespace mx::media_detail

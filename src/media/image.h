// Images in: decoding PNG, JPEG and WebP bytes (files, request bodies, data URIs) into 8-bit
// RGB. Every input is untrusted: a refusal comes back as a Status naming its cause, and the
// dimensions are checked against ImageLimits before any pixel memory is allocated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mx {

// 8-bit RGB, row-major, 3 bytes per pixel.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3
};

// A header may claim any size; these bound what a decoder allocates (decompression bombs).
struct ImageLimits {
  int64_t max_pixels = int64_t{32} * 1024 * 1024;
  int max_side = 16384;
};

enum class ImageType { kUnknown, kPng, kJpeg, kWebp };

// From the leading magic bytes; kUnknown when none matches.
ImageType detect_image_type(const uint8_t* data, size_t size);
const char* image_type_name(ImageType type);

// Decodes a PNG, JPEG or WebP (chosen by magic bytes, not by any declared type) into RGB.
// Palette, grayscale and 16-bit samples are converted to 8-bit RGB; alpha is dropped (what
// PIL's convert("RGB") does, which the Qwen-VL processors apply).
Result<Image> decode_image(const uint8_t* data, size_t size, const ImageLimits& limits = {});

// `data:image/<type>;base64,<payload>` as OpenAI-style requests carry images inline. The media
// type must be image/*; the payload must be base64 (standard or URL-safe alphabet, whitespace
// ignored, padding optional).
Result<Image> decode_data_uri(std::string_view uri, const ImageLimits& limits = {});

// Standard or URL-safe base64, whitespace ignored, padding optional but only at the end.
Result<std::vector<uint8_t>> decode_base64(std::string_view text);

// Whether width x height passes `limits` (an error naming both when not).
Status check_image_size(int64_t width, int64_t height, const ImageLimits& limits);

}  // namespace mx

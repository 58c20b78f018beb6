// WebP through libwebp: the features (size, animation) first, then a decode into a buffer of
// the size they promised.
#include <webp/decode.h>

#include <string>

#include "media/image_codecs.h"

namespace mx::media_detail {

Result<Image> decode_webp(const uint8_t* data, size_t size, const ImageLimits& limits) {
  // The RIFF header states the file's length; libwebp would accept less (it decodes
  // incrementally) and only fail later without saying why.
  if (size < 12) return data_loss("truncated WebP data");
  const uint32_t riff_size = uint32_t{data[4]} | (uint32_t{data[5]} << 8) |
                             (uint32_t{data[6]} << 16) | (uint32_t{data[7]} << 24);
  if (size - 8 < riff_size) return data_loss("truncated WebP data");
  WebPBitstreamFeatures features;
  const VP8StatusCode status = WebPGetFeatures(data, size, &features);
  if (status == VP8_STATUS_NOT_ENOUGH_DATA) return data_loss("truncated WebP data");
  if (status != VP8_STATUS_OK) {
    return data_loss("corrupt WebP: header refused (code " + std::to_string(status) + ")");
  }
  if (features.has_animation) return unimplemented("animated WebP is not supported");
  MX_RETURN_IF_ERROR(check_image_size(features.width, features.height, limits));

  Image img;
  img.width = features.width;
  img.height = features.height;
  const size_t stride = size_t{static_cast<unsigned>(img.width)} * 3;
  img.rgb.resize(stride * static_cast<size_t>(img.height));
  if (WebPDecodeRGBInto(data, size, img.rgb.data(), img.rgb.size(), static_cast<int>(stride)) ==
      nullptr) {
    return data_loss("corrupt WebP: the image data does not decode");
  }
  return img;
}

}  // namespace mx::media_detail

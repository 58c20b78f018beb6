// PNG through libpng. libpng reports errors by longjmp: each phase that can fail runs in a
// function of its own whose frame holds only trivially destructible locals, so a longjmp never
// skips a destructor; messages land in a fixed buffer and become a Status afterwards.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "media/image_codecs.h"

namespace mx::media_detail {
namespace {

constexpr char kTruncated[] = "truncated PNG data";

struct PngSource {
  const uint8_t* data;
  size_t size;
  size_t pos;
  char error[200];
};

void png_on_error(png_structp png, png_const_charp message) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(src->error, sizeof(src->error), "%s", message != nullptr ? message : "?");
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}

void png_read_from_memory(png_structp png, png_bytep out, png_size_t length) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (length > src->size - src->pos) png_error(png, kTruncated);
  std::memcpy(out, src->data + src->pos, length);
  src->pos += length;
}

// Owns the libpng read and info structs.
struct PngReader {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngReader() { png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr); }
};

// Reads the header and sets the transforms to 8-bit RGB. False when libpng failed.
bool read_header(png_structp png, png_infop info, png_uint_32* width, png_uint_32* height) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  int bit_depth = 0, color_type = 0;
  png_get_IHDR(png, info, width, height, &bit_depth, &color_type, nullptr, nullptr, nullptr);
  // PIL keeps the high byte of 16-bit samples, as strip_16 does.
  if (bit_depth == 16) png_set_strip_16(png);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (color_type == PNG_COLOR_TYPE_GRAY || color_type == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_gray_to_rgb(png);
  }
  // Expanding a palette or gray image with a tRNS chunk adds an alpha channel; alpha is
  // dropped either way.
  if ((color_type & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS)) {
    png_set_strip_alpha(png);
  }
  (void)png_set_interlace_handling(png);
  png_read_update_info(png, info);
  return true;
}

bool read_pixels(png_structp png, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  return true;
}

// What follows the pixels (text chunks, IEND) is checked but not required, as PIL does not.
void read_trailer(png_structp png) {
  if (setjmp(png_jmpbuf(png))) return;
  png_read_end(png, nullptr);
}

Status png_failure(const char* message) {
  if (std::strcmp(message, kTruncated) == 0) return data_loss(message);
  return data_loss(std::string("corrupt PNG: ") + message);
}

}  // namespace

Result<Image> decode_png(const uint8_t* data, size_t size, const ImageLimits& limits) {
  PngSource src{data, size, 0, {}};
  PngReader r;
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
  if (r.png == nullptr) return Status(StatusCode::kInternal, "PNG: cannot create a reader");
  r.info = png_create_info_struct(r.png);
  if (r.info == nullptr) return Status(StatusCode::kInternal, "PNG: cannot create a reader");
  png_set_read_fn(r.png, &src, png_read_from_memory);

  png_uint_32 width = 0, height = 0;
  if (!read_header(r.png, r.info, &width, &height)) return png_failure(src.error);
  MX_RETURN_IF_ERROR(check_image_size(width, height, limits));
  if (png_get_channels(r.png, r.info) != 3 || png_get_bit_depth(r.png, r.info) != 8 ||
      png_get_rowbytes(r.png, r.info) != size_t{width} * 3) {
    return Status(StatusCode::kInternal, "PNG: the transforms did not give 8-bit RGB");
  }

  Image img;
  img.width = static_cast<int>(width);
  img.height = static_cast<int>(height);
  img.rgb.resize(size_t{width} * height * 3);
  std::vector<png_bytep> rows(height);
  for (png_uint_32 y = 0; y < height; ++y) rows[y] = img.rgb.data() + size_t{y} * width * 3;
  if (!read_pixels(r.png, rows.data())) return png_failure(src.error);
  read_trailer(r.png);
  return img;
}

}  // namespace mx::media_detail

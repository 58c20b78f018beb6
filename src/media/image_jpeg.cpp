// JPEG through libjpeg(-turbo). Its default error handler calls exit(); ours longjmps back to
// the phase that failed, each phase a function whose frame holds only trivially destructible
// locals, so no destructor is skipped. The message is kept in a fixed buffer.
#include <cstdio>  // jpeglib.h needs FILE declared first

#include <jerror.h>  // after jpeglib.h, which it needs
#include <jpeglib.h>

#include <csetjmp>
#include <string>
#include <vector>

#include "media/image_codecs.h"

namespace mx::media_detail {
namespace {

// A progressive JPEG may hold thousands of tiny scans, each a pass over the whole image: past
// this many the input is refused rather than decoded slowly.
constexpr int kMaxScans = 1000;

struct JpegError {
  jpeg_error_mgr mgr;  // first, so that the library's pointer is ours
  jpeg_progress_mgr progress;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 64];
};

[[noreturn]] void jpeg_fail(j_common_ptr cinfo, const char* prefix) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  char text[JMSG_LENGTH_MAX] = {};
  cinfo->err->format_message(cinfo, text);
  std::snprintf(err->message, sizeof(err->message), "%s%s", prefix, text);
  std::longjmp(err->jump, 1);
}

void jpeg_on_error(j_common_ptr cinfo) { jpeg_fail(cinfo, "corrupt JPEG: "); }

// Warnings are ignored (PIL ignores them too) except the one that means the data ran out:
// libjpeg would pad the rest of the image with gray.
void jpeg_on_message(j_common_ptr cinfo, int level) {
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    auto* err = reinterpret_cast<JpegError*>(cinfo->err);
    std::snprintf(err->message, sizeof(err->message), "truncated JPEG data");
    std::longjmp(err->jump, 1);
  }
}

void jpeg_on_progress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  auto* dinfo = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (dinfo->input_scan_number > kMaxScans) {
    auto* err = reinterpret_cast<JpegError*>(cinfo->err);
    std::snprintf(err->message, sizeof(err->message), "corrupt JPEG: more than %d scans",
                  kMaxScans);
    std::longjmp(err->jump, 1);
  }
}

// Owns the decompressor.
struct JpegReader {
  jpeg_decompress_struct cinfo{};
  JpegError err{};
  bool created = false;
  ~JpegReader() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

bool read_header(JpegReader* r, const uint8_t* data, size_t size) {
  if (setjmp(r->err.jump)) return false;
  jpeg_create_decompress(&r->cinfo);
  r->created = true;
  r->cinfo.progress = &r->err.progress;
  jpeg_mem_src(&r->cinfo, data, static_cast<unsigned long>(size));
  (void)jpeg_read_header(&r->cinfo, TRUE);
  // libjpeg converts YCbCr and grayscale to RGB itself; CMYK is converted below.
  const bool cmyk = r->cinfo.jpeg_color_space == JCS_CMYK || r->cinfo.jpeg_color_space == JCS_YCCK;
  r->cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  jpeg_calc_output_dimensions(&r->cinfo);
  return true;
}

// CMYK to RGB as (255 - c)(255 - k) / 255 per channel, PIL's formula up to rounding; Adobe
// writes the samples inverted.
void cmyk_row_to_rgb(const uint8_t* cmyk, int width, bool inverted, uint8_t* rgb) {
  for (int x = 0; x < width; ++x) {
    const int k = inverted ? cmyk[4 * x + 3] : 255 - cmyk[4 * x + 3];
    for (int c = 0; c < 3; ++c) {
      const int v = inverted ? cmyk[4 * x + c] : 255 - cmyk[4 * x + c];
      rgb[3 * x + c] = static_cast<uint8_t>((v * k + 127) / 255);
    }
  }
}

// Decodes into img->rgb (already sized); `cmyk_row` holds one CMYK row when converting.
bool read_pixels(JpegReader* r, Image* img, uint8_t* cmyk_row) {
  if (setjmp(r->err.jump)) return false;
  jpeg_decompress_struct& c = r->cinfo;
  (void)jpeg_start_decompress(&c);
  const bool cmyk = c.out_color_space == JCS_CMYK;
  while (c.output_scanline < c.output_height) {
    uint8_t* out = img->rgb.data() + size_t{c.output_scanline} * img->width * 3;
    JSAMPROW row = cmyk ? cmyk_row : out;
    if (jpeg_read_scanlines(&c, &row, 1) != 1) return false;
    if (cmyk) cmyk_row_to_rgb(cmyk_row, img->width, c.saw_Adobe_marker, out);
  }
  (void)jpeg_finish_decompress(&c);
  return true;
}

}  // namespace

Result<Image> decode_jpeg(const uint8_t* data, size_t size, const ImageLimits& limits) {
  JpegReader r;
  r.cinfo.err = jpeg_std_error(&r.err.mgr);
  r.err.mgr.error_exit = jpeg_on_error;
  r.err.mgr.emit_message = jpeg_on_message;
  r.err.progress.progress_monitor = jpeg_on_progress;
  if (!read_header(&r, data, size)) return data_loss(r.err.message);
  MX_RETURN_IF_ERROR(check_image_size(r.cinfo.image_width, r.cinfo.image_height, limits));
  const int channels = r.cinfo.out_color_space == JCS_CMYK ? 4 : 3;
  if (r.cinfo.output_width != r.cinfo.image_width ||
      r.cinfo.output_height != r.cinfo.image_height || r.cinfo.output_components != channels) {
    return Status(StatusCode::kInternal, "JPEG: unexpected output geometry");
  }

  Image img;
  img.width = static_cast<int>(r.cinfo.image_width);
  img.height = static_cast<int>(r.cinfo.image_height);
  img.rgb.resize(size_t{r.cinfo.image_width} * r.cinfo.image_height * 3);
  std::vector<uint8_t> cmyk_row(channels == 4 ? size_t{r.cinfo.image_width} * 4 : 0);
  if (!read_pixels(&r, &img, cmyk_row.data())) {
    return data_loss(r.err.message[0] != '\0' ? r.err.message : "corrupt JPEG: no scanlines");
  }
  return img;
}

}  // namespace mx::media_detail

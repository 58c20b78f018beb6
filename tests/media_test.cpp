// Images in: the Qwen-VL fixture's image goldens (decode, smart_resize, Pillow's bicubic resize,
// pixel patches by sha256 and by value), the decoders on images the test encodes itself with
// libpng, libjpeg and libwebp, and every kind of bad input.
#include <gtest/gtest.h>

#include <cstdio>  // jpeglib.h needs FILE declared first

#include <jpeglib.h>
#include <png.h>
#include <webp/encode.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "core/json_util.h"
#include "core/mapped_file.h"
#include "media/image.h"
#include "media/vision_preprocess.h"
#include "test_util.h"

namespace mx {
namespace {

using Bytes = std::vector<uint8_t>;

std::string fixture_dir() { return test::shared_dir() + "/fixtures/tiny-qwen3_5-moe-vl"; }

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The golden tensors by name, read straight from the safetensors layout (8-byte header length,
// JSON header, data) so that this test needs no loader.
struct GoldenTensors {
  Bytes file;
  Json header;
  size_t data_start = 0;

  explicit GoldenTensors(const std::string& path) : file(read_bytes(path)) {
    uint64_t n = 0;
    std::memcpy(&n, file.data(), 8);
    header = Json::parse(file.begin() + 8, file.begin() + 8 + static_cast<ptrdiff_t>(n));
    data_start = 8 + n;
  }
  Bytes bytes(const std::string& name) const {
    const Json& t = header.at(name);
    const size_t begin = t["data_offsets"][0], end = t["data_offsets"][1];
    return Bytes(file.begin() + static_cast<ptrdiff_t>(data_start + begin),
                 file.begin() + static_cast<ptrdiff_t>(data_start + end));
  }
};

Image decode_ok(const Bytes& b, const ImageLimits& limits = {}) {
  auto r = decode_image(b.data(), b.size(), limits);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? std::move(r).value() : Image{};
}

// The message of a refusal ("" when the input was accepted).
std::string refusal(const Bytes& b, const ImageLimits& limits = {}) {
  auto r = decode_image(b.data(), b.size(), limits);
  return r.is_ok() ? "" : r.status().message();
}

// ---- the fixture goldens ----

TEST(MediaGolden, PreprocessorConfigOfTheFixture) {
  auto c = read_preprocessor_config(fixture_dir());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->patch_size, 16);
  EXPECT_EQ(c->temporal_patch_size, 2);
  EXPECT_EQ(c->merge_size, 2);
  EXPECT_EQ(c->min_pixels, 1024);
  EXPECT_EQ(c->max_pixels, 65536);
  for (int ch = 0; ch < 3; ++ch) {
    EXPECT_EQ(c->mean[ch], 0.5f);
    EXPECT_EQ(c->std[ch], 0.5f);
  }
  EXPECT_EQ(c->rescale, 1 / 255.0);
}

TEST(MediaGolden, EveryCaseMatchesPixelForPixel) {
  auto golden = read_json_file(fixture_dir() + "/golden/golden.json");
  ASSERT_TRUE(golden.is_ok()) << golden.status().to_string();
  const GoldenTensors tensors(fixture_dir() + "/golden/golden.safetensors");
  auto config = read_preprocessor_config(fixture_dir());
  ASSERT_TRUE(config.is_ok());
  int cases = 0;
  for (const Json& g : (*golden)["cases"]) {
    const std::string name = g["name"];
    SCOPED_TRACE(name);
    ++cases;
    const Image img = decode_ok(read_bytes(fixture_dir() + "/golden/" + name + ".png"));
    EXPECT_EQ(img.width, g["image_size_wh"][0].get<int>());
    EXPECT_EQ(img.height, g["image_size_wh"][1].get<int>());

    auto size = smart_resize(img.height, img.width, config->factor(), config->min_pixels,
                             config->max_pixels);
    ASSERT_TRUE(size.is_ok());
    EXPECT_EQ(size->width, g["resized_size_wh"][0].get<int>());
    EXPECT_EQ(size->height, g["resized_size_wh"][1].get<int>());
    EXPECT_EQ(size->width != img.width || size->height != img.height, g["resized"].get<bool>());

    auto p = preprocess_image(img, *config);
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    EXPECT_EQ(p->grid_t, g["image_grid_thw"][0].get<int>());
    EXPECT_EQ(p->grid_h, g["image_grid_thw"][1].get<int>());
    EXPECT_EQ(p->grid_w, g["image_grid_thw"][2].get<int>());
    EXPECT_EQ(num_image_tokens(*p, config->merge_size), g["num_image_tokens"].get<int64_t>());
    EXPECT_EQ(p->rows, g["pixel_values_shape"][0].get<int64_t>());
    EXPECT_EQ(p->cols, g["pixel_values_shape"][1].get<int64_t>());
    ASSERT_EQ(p->values.size(), static_cast<size_t>(p->rows * p->cols));
    EXPECT_EQ(test::sha256_hex(p->values.data(), p->values.size() * sizeof(float)),
              g["pixel_values_sha256_f32le"].get<std::string>());
    const Bytes stored = tensors.bytes(name + ".pixel_values");
    ASSERT_EQ(stored.size(), p->values.size() * sizeof(float));
    EXPECT_EQ(std::memcmp(stored.data(), p->values.data(), stored.size()), 0);

    if (g["resized"].get<bool>()) {
      const Image resized = resize_bicubic_pillow(img, size->width, size->height);
      EXPECT_EQ(resized.rgb, tensors.bytes(name + ".resized_rgb"));
      // The later stage alone, from the stored resized image.
      const Image stored_rgb{size->width, size->height, tensors.bytes(name + ".resized_rgb")};
      auto q = patchify_image(stored_rgb, *config);
      ASSERT_TRUE(q.is_ok());
      EXPECT_EQ(q->values, p->values);
    }
  }
  EXPECT_EQ(cases, 3);
}

// ---- smart_resize, against values worked out by hand from transformers' formula ----

struct ResizeCase {
  int64_t h, w;
  int factor;
  int64_t min_pixels, max_pixels;
  int want_h, want_w;
};

TEST(MediaSmartResize, RoundsHalfToEvenAndScalesIntoBounds) {
  const ResizeCase cases[] = {
      {80, 80, 32, 1024, 65536, 64, 64},        // 2.5 rounds down to 2
      {112, 80, 32, 1024, 65536, 128, 64},      // 3.5 rounds up to 4, 2.5 down to 2
      {48, 48, 32, 0, 1 << 30, 64, 64},         // 1.5 rounds up to 2
      {75, 100, 32, 1024, 65536, 64, 96},       // the fixture's resize case
      {96, 128, 32, 1024, 65536, 96, 128},      // already a multiple
      {10, 10, 32, 1024, 65536, 32, 32},        // min_pixels branch
      {1, 200, 32, 1024, 65536, 32, 480},       // min_pixels branch at the ratio limit
      {500, 7, 32, 1024, 65536, 288, 32},       // max_pixels branch, a side held at the factor
      {3000, 4000, 32, 1024, 65536, 192, 288},  // max_pixels branch
      {1080, 1920, 32, 1024, 65536, 192, 320},
      {1000, 1000, 32, 1024, 65536, 256, 256},  // beta exact: 1000 / 3.90625 = 256
      {1000, 1000, 28, 3136, 28 * 28 * 1280, 980, 980},
      {4032, 3024, 32, 65536, 16777216, 4032, 3008},
  };
  for (const ResizeCase& c : cases) {
    auto r = smart_resize(c.h, c.w, c.factor, c.min_pixels, c.max_pixels);
    ASSERT_TRUE(r.is_ok()) << c.h << "x" << c.w << ": " << r.status().to_string();
    EXPECT_EQ(r->height, c.want_h) << c.h << "x" << c.w;
    EXPECT_EQ(r->width, c.want_w) << c.h << "x" << c.w;
  }
}

TEST(MediaSmartResize, RefusesAbsurdAspectRatiosAndSidesItCannotRound) {
  auto ratio = smart_resize(1, 201, 32, 1024, 65536);
  ASSERT_FALSE(ratio.is_ok());
  EXPECT_NE(ratio.status().message().find("aspect ratio"), std::string::npos);
  // Without a min_pixels to enlarge it, a side under half the factor rounds to nothing.
  auto tiny = smart_resize(10, 10, 32, 0, 65536);
  ASSERT_FALSE(tiny.is_ok());
  EXPECT_NE(tiny.status().message().find("too small"), std::string::npos);
  EXPECT_FALSE(smart_resize(0, 10, 32, 1024, 65536).is_ok());
  EXPECT_FALSE(smart_resize(int64_t{1} << 40, int64_t{1} << 40, 32, 1024, 65536).is_ok());
  EXPECT_FALSE(smart_resize(64, 64, 32, 1024, -5).is_ok());
  EXPECT_FALSE(smart_resize(64, 64, 32, 70000, 65536).is_ok());
}

// ---- Pillow's resize: the golden case is exact; these are properties of any correct one ----

TEST(MediaResize, KeepsFlatColorsAndTheSizeItIsGiven) {
  Image flat{37, 23, {}};
  for (int i = 0; i < 37 * 23; ++i) flat.rgb.insert(flat.rgb.end(), {200, 17, 255});
  for (auto [w, h] : {std::pair{64, 64}, {5, 3}, {37, 50}, {90, 23}, {1, 1}}) {
    const Image out = resize_bicubic_pillow(flat, w, h);
    ASSERT_EQ(out.width, w);
    ASSERT_EQ(out.height, h);
    ASSERT_EQ(out.rgb.size(), size_t{3} * w * h);
    for (size_t i = 0; i < out.rgb.size(); ++i) ASSERT_EQ(out.rgb[i], flat.rgb[i % 3]) << i;
  }
  EXPECT_EQ(resize_bicubic_pillow(flat, 37, 23).rgb, flat.rgb);
}

// ---- preprocessor_config.json ----

TEST(MediaPreprocessorConfig, ReadsOlderFieldsAndRefusesBadValues) {
  auto old = parse_preprocessor_config(
      R"({"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14,
          "size": {"min_pixels": 1, "max_pixels": 2}, "image_mean": 0.25,
          "image_std": [1, 2, 4], "rescale_factor": 0.5})",
      "p.json");
  ASSERT_TRUE(old.is_ok()) << old.status().to_string();
  EXPECT_EQ(old->min_pixels, 3136);  // top-level fields win over `size`
  EXPECT_EQ(old->max_pixels, 12845056);
  EXPECT_EQ(old->patch_size, 14);
  EXPECT_EQ(old->mean[2], 0.25f);
  EXPECT_EQ(old->std[2], 4.0f);
  EXPECT_EQ(old->rescale, 0.5);

  const std::pair<const char*, const char*> bad[] = {
      {R"({"patch_size": 0})", "patch_size"},
      {R"({"merge_size": "2"})", "merge_size"},
      {R"({"size": 5})", "size"},
      {R"({"size": {"longest_edge": 10}})", "longest_edge"},
      {R"({"size": {"shortest_edge": 99999, "longest_edge": 65536}})", "shortest_edge"},
      {R"({"image_std": [0.5, 0, 0.5]})", "image_std"},
      {R"({"image_mean": [0.5, 0.5]})", "image_mean"},
      {R"({"image_mean": [1e300, 0.5, 0.5]})", "image_mean"},
      {R"({"rescale_factor": -1})", "rescale_factor"},
      {R"([1, 2])", "object"},
      {R"({"patch_size": )", "malformed"},
  };
  for (auto [text, field] : bad) {
    auto r = parse_preprocessor_config(text, "p.json");
    ASSERT_FALSE(r.is_ok()) << text;
    EXPECT_NE(r.status().message().find("p.json"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().message();
  }
  auto missing = read_preprocessor_config("/nonexistent-dir");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("preprocessor_config.json"), std::string::npos);
}

// ---- encoders for the decode tests ----

void png_write_to_vector(png_structp png, png_bytep data, png_size_t n) {
  auto* out = static_cast<Bytes*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}
void png_flush_nothing(png_structp) {}

struct PngSpec {
  int width, height, bit_depth, color_type;
  Bytes rows;  // packed rows as PNG stores them (16-bit samples big-endian)
  std::vector<png_color> palette = {};
  Bytes palette_alpha = {};  // tRNS of a palette image
  bool interlaced = false;
};

Bytes encode_png(const PngSpec& s) {
  Bytes out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    ADD_FAILURE() << "libpng could not write the test image";
    png_destroy_write_struct(&png, &info);
    return {};
  }
  png_set_write_fn(png, &out, png_write_to_vector, png_flush_nothing);
  png_set_IHDR(png, info, s.width, s.height, s.bit_depth, s.color_type,
               s.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!s.palette.empty()) {
    png_set_PLTE(png, info, s.palette.data(), static_cast<int>(s.palette.size()));
  }
  if (!s.palette_alpha.empty()) {
    png_set_tRNS(png, info, s.palette_alpha.data(), static_cast<int>(s.palette_alpha.size()),
                 nullptr);
  }
  png_write_info(png, info);
  const size_t row_bytes = s.rows.size() / s.height;
  std::vector<png_bytep> rows(s.height);
  for (int y = 0; y < s.height; ++y) {
    rows[y] = const_cast<png_bytep>(s.rows.data() + row_bytes * y);
  }
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

Bytes encode_jpeg(const Image& img, bool gray, int quality) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = img.width;
  c.image_height = img.height;
  c.input_components = gray ? 1 : 3;
  c.in_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  // 4:4:4: no chroma subsampling, so the loss is the quantization alone.
  for (int i = 0; i < c.num_components; ++i) {
    c.comp_info[i].h_samp_factor = 1;
    c.comp_info[i].v_samp_factor = 1;
  }
  jpeg_start_compress(&c, TRUE);
  Bytes row(size_t{3} * img.width);
  while (c.next_scanline < c.image_height) {
    const uint8_t* src = &img.rgb[size_t{3} * img.width * c.next_scanline];
    for (int x = 0; x < img.width; ++x) row[x] = src[3 * x];  // gray: the red channel
    JSAMPROW r = const_cast<JSAMPROW>(gray ? row.data() : src);
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  Bytes out(buf, buf + size);
  std::free(buf);
  return out;
}

// A smooth gradient: what lossy codecs keep well, so that a small tolerance holds.
Image gradient(int w, int h) {
  Image img{w, h, {}};
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      img.rgb.insert(img.rgb.end(), {static_cast<uint8_t>(x * 255 / (w - 1)),
                                     static_cast<uint8_t>(y * 255 / (h - 1)),
                                     static_cast<uint8_t>(128 + (x - y) / 2)});
    }
  }
  return img;
}

Image random_image(int w, int h, uint32_t seed) {
  std::mt19937 rng(seed);
  Image img{w, h, Bytes(size_t{3} * w * h)};
  for (uint8_t& v : img.rgb) v = static_cast<uint8_t>(rng());
  return img;
}

int max_abs_diff(const Bytes& a, const Bytes& b) {
  int d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

// ---- PNG color types and depths ----

TEST(MediaPng, RgbAndInterlacedDecodeExactly) {
  const Image img = random_image(19, 7, 1);
  for (bool interlaced : {false, true}) {
    const Bytes png = encode_png({19, 7, 8, PNG_COLOR_TYPE_RGB, img.rgb, {}, {}, interlaced});
    const Image out = decode_ok(png);
    EXPECT_EQ(out.width, 19);
    EXPECT_EQ(out.height, 7);
    EXPECT_EQ(out.rgb, img.rgb) << "interlaced " << interlaced;
  }
}

TEST(MediaPng, GrayPaletteSixteenBitAndAlphaBecomeRgb) {
  // 8-bit gray, 2 pixels: each level copied to R, G and B.
  EXPECT_EQ(decode_ok(encode_png({2, 1, 8, PNG_COLOR_TYPE_GRAY, {0, 200}})).rgb,
            (Bytes{0, 0, 0, 200, 200, 200}));
  // 1-bit gray, 0b10100000 over 3 pixels: scaled to 0 / 255.
  EXPECT_EQ(decode_ok(encode_png({3, 1, 1, PNG_COLOR_TYPE_GRAY, {0xA0}})).rgb,
            (Bytes{255, 255, 255, 0, 0, 0, 255, 255, 255}));
  // Gray + alpha: alpha dropped.
  EXPECT_EQ(decode_ok(encode_png({1, 1, 8, PNG_COLOR_TYPE_GRAY_ALPHA, {77, 3}})).rgb,
            (Bytes{77, 77, 77}));
  // Palette with transparency: the palette colors, alpha dropped.
  PngSpec pal{
      3,       1, 8, PNG_COLOR_TYPE_PALETTE, {2, 0, 1}, {{10, 20, 30}, {40, 50, 60}, {1, 2, 3}},
      {0, 128}};
  EXPECT_EQ(decode_ok(encode_png(pal)).rgb, (Bytes{1, 2, 3, 10, 20, 30, 40, 50, 60}));
  // 4-bit palette, two pixels per byte.
  PngSpec pal4{2, 1, 4, PNG_COLOR_TYPE_PALETTE, {0x10}, {{9, 8, 7}, {6, 5, 4}}, {}};
  EXPECT_EQ(decode_ok(encode_png(pal4)).rgb, (Bytes{6, 5, 4, 9, 8, 7}));
  // 16-bit RGB: the high byte of each sample, as PIL keeps.
  EXPECT_EQ(
      decode_ok(encode_png({1, 1, 16, PNG_COLOR_TYPE_RGB, {0x12, 0xFF, 0xAB, 0x01, 0, 9}})).rgb,
      (Bytes{0x12, 0xAB, 0}));
  // 16-bit gray.
  EXPECT_EQ(decode_ok(encode_png({1, 1, 16, PNG_COLOR_TYPE_GRAY, {0xC3, 0x50}})).rgb,
            (Bytes{0xC3, 0xC3, 0xC3}));
  // RGBA: alpha dropped, the color kept even where fully transparent.
  EXPECT_EQ(decode_ok(encode_png({2, 1, 8, PNG_COLOR_TYPE_RGBA, {1, 2, 3, 0, 4, 5, 6, 255}})).rgb,
            (Bytes{1, 2, 3, 4, 5, 6}));
  // 16-bit RGBA.
  EXPECT_EQ(decode_ok(encode_png({1, 1, 16, PNG_COLOR_TYPE_RGBA, {1, 0, 2, 0, 3, 0, 0, 0}})).rgb,
            (Bytes{1, 2, 3}));
}

// ---- JPEG and WebP round trips ----

TEST(MediaJpeg, RoundTripWithinTheLossOfQuality95) {
  const Image img = gradient(40, 24);
  const Image out = decode_ok(encode_jpeg(img, /*gray=*/false, 95));
  ASSERT_EQ(out.width, 40);
  ASSERT_EQ(out.height, 24);
  // Quality 95, 4:4:4: a smooth gradient keeps within a few levels (3 with libjpeg-turbo 2.1),
  // while a swapped channel, an offset or a misplaced row would be off by tens.
  constexpr int kJpegQ95GradientTolerance = 6;
  EXPECT_LE(max_abs_diff(out.rgb, img.rgb), kJpegQ95GradientTolerance);

  const Image gray = decode_ok(encode_jpeg(img, /*gray=*/true, 95));
  ASSERT_EQ(gray.rgb.size(), img.rgb.size());
  for (size_t i = 0; i < gray.rgb.size(); i += 3) {
    ASSERT_EQ(gray.rgb[i], gray.rgb[i + 1]);
    ASSERT_EQ(gray.rgb[i], gray.rgb[i + 2]);
    ASSERT_LE(std::abs(gray.rgb[i] - img.rgb[i]), kJpegQ95GradientTolerance);
  }
}

TEST(MediaWebp, LosslessRoundTripIsExactAndAlphaIsDropped) {
  const Image img = random_image(23, 11, 2);
  uint8_t* out = nullptr;
  size_t n = WebPEncodeLosslessRGB(img.rgb.data(), img.width, img.height, img.width * 3, &out);
  ASSERT_GT(n, 0u);
  const Bytes webp(out, out + n);
  WebPFree(out);
  EXPECT_EQ(decode_ok(webp).rgb, img.rgb);

  Bytes rgba;
  for (size_t i = 0; i < img.rgb.size(); i += 3) {
    rgba.insert(rgba.end(), {img.rgb[i], img.rgb[i + 1], img.rgb[i + 2], 255});
  }
  rgba[3] = 0;
  // Exact: keep the color under transparent pixels.
  WebPConfig config;
  ASSERT_TRUE(WebPConfigInit(&config));
  config.lossless = 1;
  config.exact = 1;
  WebPPicture pic;
  ASSERT_TRUE(WebPPictureInit(&pic));
  pic.use_argb = 1;
  pic.width = img.width;
  pic.height = img.height;
  ASSERT_TRUE(WebPPictureImportRGBA(&pic, rgba.data(), img.width * 4));
  WebPMemoryWriter writer;
  WebPMemoryWriterInit(&writer);
  pic.writer = WebPMemoryWrite;
  pic.custom_ptr = &writer;
  ASSERT_TRUE(WebPEncode(&config, &pic));
  const Bytes webp_alpha(writer.mem, writer.mem + writer.size);
  WebPPictureFree(&pic);
  WebPMemoryWriterClear(&writer);
  EXPECT_EQ(decode_ok(webp_alpha).rgb, img.rgb);
}

// ---- bad input: each refused with its cause, none crashing ----

Bytes fixture_png() { return read_bytes(fixture_dir() + "/golden/quadrants_64x64.png"); }

TEST(MediaBadInput, Empty) {
  EXPECT_NE(refusal({}).find("empty image data"), std::string::npos);
  EXPECT_FALSE(decode_image(nullptr, 0, {}).is_ok());
}

TEST(MediaBadInput, RandomBytesAndOtherFormats) {
  const std::string random_msg = refusal(random_image(8, 8, 3).rgb);
  EXPECT_NE(random_msg.find("unsupported image type (not PNG, JPEG or WebP)"), std::string::npos);
  const std::string gif = "GIF89a\x01\x00\x01\x00";
  EXPECT_NE(refusal(Bytes(gif.begin(), gif.end())).find("unsupported image type"),
            std::string::npos);
}

TEST(MediaBadInput, TruncatedPngAtEveryCut) {
  const Bytes png = fixture_png();
  for (size_t cut :
       {size_t{8}, size_t{20}, size_t{33}, size_t{60}, png.size() / 2, png.size() - 13}) {
    const std::string msg = refusal(Bytes(png.begin(), png.begin() + cut));
    EXPECT_NE(msg.find("truncated PNG data"), std::string::npos) << cut << ": " << msg;
  }
}

TEST(MediaBadInput, CorruptPngChecksumAndData) {
  Bytes png = fixture_png();
  png[20] ^= 0x01;  // inside IHDR: its CRC no longer matches
  EXPECT_NE(refusal(png).find("corrupt PNG"), std::string::npos) << refusal(png);
  Bytes data = fixture_png();
  // Flip bytes inside the first IDAT's compressed stream; CRC fixed so zlib sees them.
  const auto idat =
      std::search(data.begin(), data.end(), std::begin("IDAT"), std::begin("IDAT") + 4);
  ASSERT_NE(idat, data.end());
  const size_t at = static_cast<size_t>(idat - data.begin());
  const uint32_t len =
      (uint32_t{data[at - 4]} << 24) | (data[at - 3] << 16) | (data[at - 2] << 8) | data[at - 1];
  for (size_t i = at + 4; i < at + 4 + len; i += 7) data[i] ^= 0x5A;
  const uint32_t crc = crc32(crc32(0, nullptr, 0), &data[at], len + 4);
  for (int k = 0; k < 4; ++k) data[at + 4 + len + k] = static_cast<uint8_t>(crc >> (24 - 8 * k));
  EXPECT_NE(refusal(data).find("PNG"), std::string::npos) << refusal(data);
}

// A 100000 x 100000 RGB header with a valid CRC, then a tiny IDAT: refused at the header.
Bytes png_bomb(uint32_t w, uint32_t h) {
  Bytes b = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  auto chunk = [&](const char* type, const Bytes& body) {
    const uint32_t n = static_cast<uint32_t>(body.size());
    for (int k = 0; k < 4; ++k) b.push_back(static_cast<uint8_t>(n >> (24 - 8 * k)));
    const size_t start = b.size();
    b.insert(b.end(), type, type + 4);
    b.insert(b.end(), body.begin(), body.end());
    const uint32_t crc = crc32(crc32(0, nullptr, 0), &b[start], n + 4);
    for (int k = 0; k < 4; ++k) b.push_back(static_cast<uint8_t>(crc >> (24 - 8 * k)));
  };
  Bytes ihdr;
  for (uint32_t v : {w, h}) {
    for (int k = 0; k < 4; ++k) ihdr.push_back(static_cast<uint8_t>(v >> (24 - 8 * k)));
  }
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});
  chunk("IHDR", ihdr);
  chunk("IDAT", {0x78, 0x9C, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01});
  chunk("IEND", {});
  return b;
}

TEST(MediaBadInput, DecompressionBombHeaders) {
  const std::string png = refusal(png_bomb(100000, 100000));
  EXPECT_NE(png.find("image 100000x100000 exceeds the limit of 33554432 pixels"), std::string::npos)
      << png;
  // Within the pixel budget but one side too long.
  const std::string side = refusal(png_bomb(20000, 2));
  EXPECT_NE(side.find("exceeds the limit of 16384 pixels per side"), std::string::npos) << side;

  // A JPEG whose frame header claims 60000 x 60000.
  Bytes jpeg = encode_jpeg(gradient(16, 16), false, 90);
  const uint8_t sof[] = {0xFF, 0xC0};
  auto at = std::search(jpeg.begin(), jpeg.end(), std::begin(sof), std::end(sof));
  ASSERT_NE(at, jpeg.end());
  const size_t i = static_cast<size_t>(at - jpeg.begin()) + 5;  // marker, length, precision
  jpeg[i] = jpeg[i + 2] = 0xEA;
  jpeg[i + 1] = jpeg[i + 3] = 0x60;
  const std::string jmsg = refusal(jpeg);
  EXPECT_NE(jmsg.find("image 60000x60000 exceeds the limit"), std::string::npos) << jmsg;

  // WebP and PNG against tight limits.
  ImageLimits tight;
  tight.max_pixels = 100;
  uint8_t* out = nullptr;
  const Image img = random_image(32, 32, 4);
  size_t n = WebPEncodeLosslessRGB(img.rgb.data(), 32, 32, 96, &out);
  const Bytes webp(out, out + n);
  WebPFree(out);
  EXPECT_NE(refusal(webp, tight).find("image 32x32 exceeds the limit of 100 pixels"),
            std::string::npos);
  EXPECT_NE(refusal(fixture_png(), tight).find("exceeds the limit of 100 pixels"),
            std::string::npos);
}

TEST(MediaBadInput, CorruptAndTruncatedJpeg) {
  const Bytes good = encode_jpeg(gradient(32, 16), false, 90);
  Bytes precision = good;
  const uint8_t sof[] = {0xFF, 0xC0};
  auto at = std::search(precision.begin(), precision.end(), std::begin(sof), std::end(sof));
  ASSERT_NE(at, precision.end());
  at[4] = 7;  // sample precision
  const std::string msg = refusal(precision);
  EXPECT_EQ(msg.rfind("corrupt JPEG: ", 0), 0u) << msg;

  const Bytes garbage = {0xFF, 0xD8, 0xFF, 0x00, 0x13, 0x37, 0x42};
  EXPECT_NE(refusal(garbage).find("JPEG"), std::string::npos) << refusal(garbage);

  const std::string cut = refusal(Bytes(good.begin(), good.begin() + good.size() * 2 / 3));
  EXPECT_NE(cut.find("truncated JPEG data"), std::string::npos) << cut;
  const std::string header_cut = refusal(Bytes(good.begin(), good.begin() + 40));
  EXPECT_NE(header_cut, "");
}

TEST(MediaBadInput, CorruptAndTruncatedWebp) {
  const Image img = random_image(16, 16, 5);
  uint8_t* out = nullptr;
  size_t n = WebPEncodeLosslessRGB(img.rgb.data(), 16, 16, 48, &out);
  const Bytes webp(out, out + n);
  WebPFree(out);
  EXPECT_NE(refusal(Bytes(webp.begin(), webp.begin() + 14)).find("WebP"), std::string::npos);
  EXPECT_NE(refusal(Bytes(webp.begin(), webp.begin() + webp.size() / 2)).find("WebP"),
            std::string::npos);
  Bytes bad = webp;
  for (size_t i = 30; i < bad.size(); i += 3) bad[i] ^= 0xA5;
  const std::string msg = refusal(bad);
  if (!msg.empty()) {
    EXPECT_NE(msg.find("WebP"), std::string::npos) << msg;
  }
}

// ---- data URIs and base64 ----

std::string base64(const Bytes& b) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < b.size(); i += 3) {
    const uint32_t v = (uint32_t{b[i]} << 16) | (i + 1 < b.size() ? b[i + 1] << 8 : 0) |
                       (i + 2 < b.size() ? b[i + 2] : 0);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < b.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < b.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

TEST(MediaDataUri, DecodesWhatDecodeImageDecodes) {
  const Bytes png = fixture_png();
  auto img = decode_data_uri("data:image/png;base64," + base64(png));
  ASSERT_TRUE(img.is_ok()) << img.status().to_string();
  EXPECT_EQ(img->rgb, decode_ok(png).rgb);
  // The declared subtype is not trusted: a PNG labelled JPEG decodes by its magic bytes.
  auto labelled = decode_data_uri("DATA:Image/JPEG;BASE64," + base64(png));
  EXPECT_TRUE(labelled.is_ok());
}

TEST(MediaDataUri, RefusesWhatIsNotABase64Image) {
  const std::string payload = base64(fixture_png());
  const std::pair<std::string, const char*> bad[] = {
      {"https://example.com/cat.png", "not a data URI"},
      {"data:image/png;base64", "without ','"},
      {"data:text/plain;base64," + payload, "is not an image"},
      {"data:;base64," + payload, "is not an image"},
      {"data:image/png," + payload, "not base64-encoded"},
      {"data:image/png;base64,iVBO*w0K", "invalid character 0x2A at offset 4"},
      {"data:image/png;base64,iVBORw0KG", "truncated"},
      {"data:image/png;base64,iV==BO", "after '=' padding"},
      {"data:image/png;base64,", "empty image data"},
      {"data:image/png;base64,aGVsbG8gd29ybGQ=", "unsupported image type"},
      {"data:image/png;base64," + payload.substr(0, 200), "truncated PNG data"},
  };
  for (const auto& [uri, want] : bad) {
    auto r = decode_data_uri(uri);
    ASSERT_FALSE(r.is_ok()) << uri.substr(0, 60);
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  }
}

TEST(MediaDataUri, Base64AlphabetsPaddingAndWhitespace) {
  const auto text = [](std::string_view s) {
    auto r = decode_base64(s);
    return r.is_ok() ? std::string(r->begin(), r->end()) : "<" + r.status().message() + ">";
  };
  EXPECT_EQ(text("aGVsbG8="), "hello");
  EXPECT_EQ(text("aGVsbG8"), "hello");
  EXPECT_EQ(text("aGVs\r\nbG8g\n"),
            "hel"
            "lo ");
  EXPECT_EQ(text("-_8="), text("+/8="));
  EXPECT_EQ(text(""), "");
  EXPECT_NE(text("aGVsbG8==="), "hello");
  EXPECT_NE(text("a"), "");
}

}  // namespace
}  // namespace mx

#include "media/image.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "media/image_codecs.h"

namespace mx {

ImageType detect_image_type(const uint8_t* data, size_t size) {
  static constexpr uint8_t kPng[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (size >= sizeof(kPng) && std::memcmp(data, kPng, sizeof(kPng)) == 0) return ImageType::kPng;
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) return ImageType::kJpeg;
  if (size >= 12 && std::memcmp(data, "RIFF", 4) == 0 && std::memcmp(data + 8, "WEBP", 4) == 0) {
    return ImageType::kWebp;
  }
  return ImageType::kUnknown;
}

const char* image_type_name(ImageType type) {
  switch (type) {
    case ImageType::kPng:
      return "PNG";
    case ImageType::kJpeg:
      return "JPEG";
    case ImageType::kWebp:
      return "WebP";
    case ImageType::kUnknown:
      break;
  }
  return "unknown";
}

Status check_image_size(int64_t width, int64_t height, const ImageLimits& limits) {
  const std::string dims = std::to_string(width) + "x" + std::to_string(height);
  if (width <= 0 || height <= 0) return data_loss("image " + dims + " has no pixels");
  // Division, not the product, so that no header value can overflow it.
  if (width > limits.max_pixels / height) {
    return invalid_argument("image " + dims + " exceeds the limit of " +
                            std::to_string(limits.max_pixels) + " pixels");
  }
  if (width > limits.max_side || height > limits.max_side) {
    return invalid_argument("image " + dims + " exceeds the limit of " +
                            std::to_string(limits.max_side) + " pixels per side");
  }
  return Status::ok();
}

Result<Image> decode_image(const uint8_t* data, size_t size, const ImageLimits& limits) {
  if (data == nullptr || size == 0) return invalid_argument("empty image data");
  switch (detect_image_type(data, size)) {
    case ImageType::kPng:
      return media_detail::decode_png(data, size, limits);
    case ImageType::kJpeg:
      return media_detail::decode_jpeg(data, size, limits);
    case ImageType::kWebp:
      return media_detail::decode_webp(data, size, limits);
    case ImageType::kUnknown:
      break;
  }
  return invalid_argument("unsupported image type (not PNG, JPEG or WebP)");
}

namespace {

// 0..63 for a character of either alphabet (standard or URL-safe), -1 otherwise.
int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// A bounded, printable quote of untrusted text for an error message.
std::string quoted(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 64)) out += (c >= 0x20 && c < 0x7F) ? c : '?';
  return out + (s.size() > 64 ? "...'" : "'");
}

}  // namespace

Result<std::vector<uint8_t>> decode_base64(std::string_view text) {
  std::vector<uint8_t> out;
  out.reserve(text.size() / 4 * 3 + 3);
  uint32_t acc = 0;
  int bits = 0;
  size_t chars = 0, padding = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (is_space(c)) continue;
    if (c == '=') {
      ++padding;
      continue;
    }
    if (padding > 0) {
      return invalid_argument("base64: data after '=' padding at offset " + std::to_string(i));
    }
    const int v = base64_value(c);
    if (v < 0) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02X", static_cast<unsigned char>(c));
      return invalid_argument(std::string("base64: invalid character ") + hex + " at offset " +
                              std::to_string(i));
    }
    acc = ((acc << 6) | static_cast<uint32_t>(v)) & 0xFFFFFF;
    bits += 6;
    ++chars;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>(acc >> bits));
    }
  }
  if (chars % 4 == 1) return invalid_argument("base64: truncated (one character past a group)");
  if (padding > 2 || (padding > 0 && (chars + padding) % 4 != 0)) {
    return invalid_argument("base64: wrong '=' padding");
  }
  return out;
}

Result<Image> decode_data_uri(std::string_view uri, const ImageLimits& limits) {
  if (uri.size() < 5 || ascii_lower(uri.substr(0, 5)) != "data:") {
    return invalid_argument("not a data URI (expected data:image/...;base64,...): " + quoted(uri));
  }
  const size_t comma = uri.find(',');
  if (comma == std::string_view::npos) {
    return invalid_argument("data URI without ',' before its payload");
  }
  const std::string_view meta = uri.substr(5, comma - 5);
  size_t semi = meta.find(';');
  const std::string mime = ascii_lower(trim(meta.substr(0, semi)));
  bool base64 = false;
  while (semi != std::string_view::npos) {
    const size_t next = meta.find(';', semi + 1);
    const std::string_view param = meta.substr(semi + 1, next - (semi + 1));
    base64 = base64 || ascii_lower(trim(param)) == "base64";
    semi = next;
  }
  if (mime.rfind("image/", 0) != 0) {
    return invalid_argument("data URI media type " + quoted(mime) +
                            " is not an image (expected image/png, image/jpeg or image/webp)");
  }
  if (!base64) return invalid_argument("data URI is not base64-encoded (expected ';base64,')");
  auto bytes = decode_base64(uri.substr(comma + 1));
  if (!bytes.is_ok()) return bytes.status().with_context("data URI");
  auto img = decode_image(bytes->data(), bytes->size(), limits);
  if (!img.is_ok()) return img.status().with_context("data URI (" + quoted(mime) + ")");
  return img;
}

}  // namespace mx

#include "server/image_inputs.h"

namespace mx {
namespace {

HttpError image_error(size_t index, const std::string& what) {
  return {400, "image " + std::to_string(index + 1) + ": " + what, "invalid_request_error",
          "messages"};
}

}  // namespace

std::optional<HttpError> load_request_images(const std::vector<std::string>& urls,
                                             const ImageServing& serving,
                                             std::vector<PixelPatches>* out) {
  out->clear();
  for (size_t i = 0; i < urls.size(); ++i) {
    const std::string& url = urls[i];
    if (url.rfind("data:", 0) != 0) {
      const bool web = url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0;
      return image_error(i, web ? "image URLs are not fetched by this server; send the image "
                                  "inline as a data: URI (data:image/png;base64,...)"
                                : "the URL is neither a data: URI nor http(s)");
    }
    auto img = decode_data_uri(url, serving.limits);
    if (!img.is_ok()) return image_error(i, img.status().message());
    auto px = preprocess_image(*img, serving.preprocess);
    if (!px.is_ok()) return image_error(i, px.status().message());
    out->push_back(std::move(*px));
  }
  return std::nullopt;
}

}  // namespace mx

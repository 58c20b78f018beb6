// The images of a chat request: content-part URLs (data: URIs, and http(s) URLs fetched with
// size and time limits) to the pixel patches the vision tower takes. Every image is untrusted
// input; each refusal is a 400 naming the image and the cause.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "media/image.h"
#include "media/vision_preprocess.h"
#include "model/vision_tower.h"
#include "server/openai_protocol.h"

namespace mx {

struct ImageServing {
  VisionTower* tower = nullptr;  // null: the model takes no images
  VisionPreprocessConfig preprocess;
  ImageLimits limits;       // what a decoder may allocate (decompression bombs)
  int64_t max_images = 16;  // per request (vLLM's --limit-mm-per-prompt)
  // http(s) image URLs: fetched unless off, each within these bounds (redirects followed).
  bool fetch_urls = true;
  double fetch_timeout_s = 10;
  int64_t fetch_max_bytes = int64_t{20} << 20;
};

// The bytes at an http(s) URL within the time and size bounds; the error names the cause
// (unreachable, an HTTP status, too large, too slow, a certificate that does not verify).
Result<std::string> fetch_image_url(const std::string& url, const ImageServing& serving);

// Decodes (fetching URLs) and preprocesses `urls` in order into `out`; the error names the
// image by its place in the request.
std::optional<HttpError> load_request_images(const std::vector<std::string>& urls,
                                             const ImageServing& serving,
                                             std::vector<PixelPatches>* out);

// Loads requests' images on its own threads, off the HTTP server's: a fetch may wait seconds
// and a large image takes a while to decode. Jobs still queued when it is destroyed are run
// with `cancelled` set.
class ImageLoader {
 public:
  using Done = std::function<void(std::optional<HttpError> error, std::vector<PixelPatches> images,
                                  bool cancelled)>;
  ImageLoader(const ImageServing& serving, int threads);
  ~ImageLoader();
  ImageLoader(const ImageLoader&) = delete;
  ImageLoader& operator=(const ImageLoader&) = delete;
  void load(std::vector<std::string> urls, Done done);

 private:
  struct Job {
    std::vector<std::string> urls;
    Done done;
  };
  void work();
  const ImageServing serving_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace mx

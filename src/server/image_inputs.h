// The images of a chat request: content-part URLs to the pixel patches the vision tower takes.
// Every image is untrusted input; each refusal is a 400 naming the image and the cause.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
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
};

// Decodes and preprocesses `urls` (data: URIs) in order into `out`; the error names the image
// by its place in the request.
std::optional<HttpError> load_request_images(const std::vector<std::string>& urls,
                                             const ImageServing& serving,
                                             std::vector<PixelPatches>* out);

}  // namespace mx

// preprocessor_config.json of a Qwen-VL checkpoint, read as transformers'
// Qwen2VLImageProcessor does: `size` {shortest_edge, longest_edge} (older files: {min_pixels,
// max_pixels}), overridden by top-level `min_pixels` / `max_pixels` where present.
#include <cmath>
#include <string>

#include "core/json_util.h"
#include "core/mapped_file.h"
#include "media/vision_preprocess.h"

namespace mx {
namespace {

Status check_range(const std::string& what, const char* field, int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return Status::ok();
  return invalid_argument(what + ": '" + field + "' is " + std::to_string(v) + ", expected " +
                          std::to_string(lo) + ".." + std::to_string(hi));
}

// A JSON number as a float, refusing what a float cannot hold (the conversion would be
// undefined).
bool as_float(const Json& v, float* out) {
  if (!v.is_number()) return false;
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::fabs(d) > 1e30) return false;
  *out = static_cast<float>(d);
  return true;
}

// `image_mean` / `image_std`: three numbers, or one for every channel.
Status read_channels(const Json& j, const char* key, const std::string& what, float out[3]) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::ok();
  const Status bad = invalid_argument(what + ": '" + key +
                                      "' must be a number or a list of 3 numbers, each finite");
  if (it->is_number()) {
    float v = 0;
    if (!as_float(*it, &v)) return bad;
    for (int c = 0; c < 3; ++c) out[c] = v;
    return Status::ok();
  }
  if (!it->is_array() || it->size() != 3) return bad;
  for (int c = 0; c < 3; ++c) {
    if (!as_float((*it)[c], &out[c])) return bad;
  }
  return Status::ok();
}

Status read_pixel_bounds(const Json& j, const std::string& what, VisionPreprocessConfig* c) {
  auto size = j.find("size");
  if (size != j.end() && !size->is_null()) {
    if (!size->is_object()) return invalid_argument(what + ": 'size' must be an object");
    const std::string in_size = what + " size";
    const bool edges = size->contains("shortest_edge") || size->contains("longest_edge");
    MX_ASSIGN_OR_RETURN(c->min_pixels, json_int_or(*size, edges ? "shortest_edge" : "min_pixels",
                                                   c->min_pixels, in_size));
    MX_ASSIGN_OR_RETURN(c->max_pixels, json_int_or(*size, edges ? "longest_edge" : "max_pixels",
                                                   c->max_pixels, in_size));
  }
  MX_ASSIGN_OR_RETURN(c->min_pixels, json_int_or(j, "min_pixels", c->min_pixels, what));
  MX_ASSIGN_OR_RETURN(c->max_pixels, json_int_or(j, "max_pixels", c->max_pixels, what));
  return Status::ok();
}

}  // namespace

Status validate_preprocess_config(const VisionPreprocessConfig& c, const std::string& what) {
  MX_RETURN_IF_ERROR(check_range(what, "patch_size", c.patch_size, 1, kMaxPatchSize));
  MX_RETURN_IF_ERROR(
      check_range(what, "temporal_patch_size", c.temporal_patch_size, 1, kMaxTemporalPatchSize));
  MX_RETURN_IF_ERROR(check_range(what, "merge_size", c.merge_size, 1, kMaxMergeSize));
  const int64_t factor = int64_t{c.patch_size} * c.merge_size;
  MX_RETURN_IF_ERROR(check_range(what, "max_pixels (size.longest_edge)", c.max_pixels,
                                 factor * factor, kMaxVisionPixels));
  MX_RETURN_IF_ERROR(
      check_range(what, "min_pixels (size.shortest_edge)", c.min_pixels, 0, c.max_pixels));
  for (int ch = 0; ch < 3; ++ch) {
    if (!std::isfinite(c.mean[ch])) return invalid_argument(what + ": 'image_mean' not finite");
    if (!std::isfinite(c.std[ch]) || c.std[ch] == 0.0f) {
      return invalid_argument(what + ": 'image_std' must be finite and nonzero");
    }
  }
  if (!std::isfinite(c.rescale) || c.rescale <= 0.0) {
    return invalid_argument(what + ": 'rescale_factor' must be positive and finite");
  }
  return Status::ok();
}

Result<VisionPreprocessConfig> parse_preprocessor_config(const std::string& text,
                                                         const std::string& what) {
  MX_ASSIGN_OR_RETURN(const Json j, parse_json(text, what));
  if (!j.is_object()) return invalid_argument(what + ": expected a JSON object");
  VisionPreprocessConfig c;
  MX_RETURN_IF_ERROR(read_pixel_bounds(j, what, &c));
  const auto read_int = [&](const char* key, int* field, int hi) -> Status {
    MX_ASSIGN_OR_RETURN(const int64_t v, json_int_or(j, key, *field, what));
    MX_RETURN_IF_ERROR(check_range(what, key, v, 1, hi));
    *field = static_cast<int>(v);
    return Status::ok();
  };
  MX_RETURN_IF_ERROR(read_int("patch_size", &c.patch_size, kMaxPatchSize));
  MX_RETURN_IF_ERROR(
      read_int("temporal_patch_size", &c.temporal_patch_size, kMaxTemporalPatchSize));
  MX_RETURN_IF_ERROR(read_int("merge_size", &c.merge_size, kMaxMergeSize));
  MX_RETURN_IF_ERROR(read_channels(j, "image_mean", what, c.mean));
  MX_RETURN_IF_ERROR(read_channels(j, "image_std", what, c.std));
  MX_ASSIGN_OR_RETURN(c.rescale, json_number_or(j, "rescale_factor", c.rescale, what));
  MX_RETURN_IF_ERROR(validate_preprocess_config(c, what));
  return c;
}

Result<VisionPreprocessConfig> read_preprocessor_config(const std::string& dir) {
  const std::string path = dir + "/preprocessor_config.json";
  MX_ASSIGN_OR_RETURN(const std::string text, read_text_file(path));
  return parse_preprocessor_config(text, path);
}

}  // namespace mx

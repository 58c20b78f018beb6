#include "model/vision_inputs.h"

#include <algorithm>
#include <string>

namespace mx {
namespace {

int64_t merged_tokens(const VisionConfig& v, const ImageGrid& g) {
  const int64_t m = v.spatial_merge_size;
  return g.patches() / (m * m);
}

Status count_mismatch(size_t placeholders, size_t images) {
  return invalid_argument("the prompt holds " + std::to_string(placeholders) +
                          " image placeholders for " + std::to_string(images) + " images");
}

}  // namespace

Result<std::vector<int32_t>> expand_image_placeholders(std::span<const int32_t> ids,
                                                       const VisionConfig& vision,
                                                       std::span<const ImageGrid> grids) {
  const auto image = static_cast<int32_t>(vision.image_token_id);
  const auto placeholders = static_cast<size_t>(std::count(ids.begin(), ids.end(), image));
  if (placeholders != grids.size()) return count_mismatch(placeholders, grids.size());
  std::vector<int32_t> out;
  out.reserve(ids.size());
  size_t next = 0;
  for (int32_t id : ids) {
    if (id != image) {
      out.push_back(id);
      continue;
    }
    out.insert(out.end(), static_cast<size_t>(merged_tokens(vision, grids[next++])), image);
  }
  return out;
}

Result<MropePositions> mrope_positions(std::span<const int32_t> expanded_ids,
                                       const VisionConfig& vision,
                                       std::span<const ImageGrid> grids) {
  const auto image = static_cast<int32_t>(vision.image_token_id);
  const int64_t n = static_cast<int64_t>(expanded_ids.size()), m = vision.spatial_merge_size;
  MropePositions r;
  r.pos.resize(static_cast<size_t>(3 * n));
  int64_t next = 0;
  size_t img = 0;
  for (int64_t i = 0; i < n;) {
    if (expanded_ids[static_cast<size_t>(i)] != image) {
      for (int a = 0; a < 3; ++a) r.pos[static_cast<size_t>(3 * i + a)] = next;
      ++next, ++i;
      continue;
    }
    if (img >= grids.size()) return count_mismatch(img + 1, grids.size());
    const ImageGrid& g = grids[img++];
    const int64_t gh = g.h / m, gw = g.w / m, count = g.t * gh * gw;
    if (i + count > n) {
      return invalid_argument("image " + std::to_string(img) + " needs " + std::to_string(count) +
                              " placeholder tokens; the prompt ends first");
    }
    for (int64_t k = 0; k < count; ++k) {
      const auto at = static_cast<size_t>(3 * (i + k));
      if (expanded_ids[static_cast<size_t>(i + k)] != image) {
        return invalid_argument("image " + std::to_string(img) + " needs " + std::to_string(count) +
                                " consecutive placeholder tokens");
      }
      r.pos[at] = next + k / (gh * gw);
      r.pos[at + 1] = next + k / gw % gh;
      r.pos[at + 2] = next + k % gw;
    }
    next += std::max({g.t, gh, gw});
    i += count;
  }
  if (img != grids.size()) return count_mismatch(img, grids.size());
  r.rope_delta = next - n;
  return r;
}

}  // namespace mx

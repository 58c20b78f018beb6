#include "runtime/multimodal.h"

#include <chrono>
#include <cstdint>

namespace mx {
namespace {

uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

// FNV-1a over the patches' bytes and the grid: the image as the tower sees it.
uint64_t pixel_hash(const PixelPatches& px) {
  uint64_t h = 0xcbf29ce484222325ULL;
  auto eat = [&h](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
  };
  eat(px.values.data(), px.values.size() * sizeof(float));
  const int64_t grid[3] = {px.grid_t, px.grid_h, px.grid_w};
  eat(grid, sizeof grid);
  return h;
}

}  // namespace

Result<MultimodalPrompt> build_multimodal_prompt(VisionTower& tower, std::span<const int32_t> ids,
                                                 std::span<const PixelPatches> images) {
  const auto t0 = std::chrono::steady_clock::now();
  const VisionConfig& v = tower.config();
  MultimodalPrompt p;
  for (const PixelPatches& px : images) {
    if (px.cols != v.patch_values()) {
      return invalid_argument("an image's patches hold " + std::to_string(px.cols) +
                              " values where the vision tower takes " +
                              std::to_string(v.patch_values()));
    }
    const ImageGrid g{px.grid_t, px.grid_h, px.grid_w};
    MX_RETURN_IF_ERROR(tower.check_grid(g));
    p.grids.push_back(g);
    p.image_tokens += tower.output_rows(g);
  }
  MX_ASSIGN_OR_RETURN(p.ids, expand_image_placeholders(ids, v, p.grids));
  MX_ASSIGN_OR_RETURN(p.positions, mrope_positions(p.ids, v, p.grids));
  const int64_t hid = v.out_hidden_size;
  p.embeds.resize(static_cast<size_t>(p.image_tokens * hid));
  int64_t at = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    MX_RETURN_IF_ERROR(tower.forward(images[i].values.data(), p.grids[i], p.embeds.data() + at));
    at += tower.output_rows(p.grids[i]) * hid;
  }
  p.rows.assign(p.ids.size(), nullptr);
  p.cache_keys = p.ids;
  const float* next = p.embeds.data();
  size_t image = 0;
  int64_t left = images.empty() ? 0 : tower.output_rows(p.grids[0]);
  uint64_t h = images.empty() ? 0 : pixel_hash(images[0]);
  for (size_t i = 0; i < p.ids.size(); ++i) {
    if (p.ids[i] != v.image_token_id) continue;
    if (left == 0) {
      ++image;
      left = tower.output_rows(p.grids[image]);
      h = pixel_hash(images[image]);
    }
    p.rows[i] = next;
    next += hid;
    --left;
    // Below zero, so no token id can equal it.
    const uint64_t k = mix64(h + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(left));
    p.cache_keys[i] = -1 - static_cast<int32_t>(k & 0x7fffffffu);
  }
  p.tower_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

std::vector<int32_t> image_markers(const VisionConfig& vision, int64_t count) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < count; ++i) {
    ids.push_back(static_cast<int32_t>(vision.vision_start_token_id));
    ids.push_back(static_cast<int32_t>(vision.image_token_id));
    ids.push_back(static_cast<int32_t>(vision.vision_end_token_id));
  }
  return ids;
}

}  // namespace mx

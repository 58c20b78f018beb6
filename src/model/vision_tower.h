// The Qwen3.5 / Qwen3-VL vision tower: an image's patches in, one embedding per merged group of
// patches out, in the language model's width, to stand at the image's placeholder tokens.
//
// Patches arrive as the image processor lays them out: per frame, the merge x merge groups
// row-major over the grid, the patches of a group row-major inside it, each patch flattened
// [channel][temporal][y][x]. The tower: patch embedding (the Conv3d as one matmul) plus the
// learned position table resampled to the grid bilinearly, `depth` ViT blocks (LayerNorm,
// attention with 2-D rotary over the patches of a frame, GELU MLP), and the merger (LayerNorm,
// each group's patches concatenated, two linears with an exact GELU between).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/exec_context.h"
#include "core/status.h"
#include "loader/model_config.h"
#include "model/model.h"
#include "quant/linear.h"

namespace mx {

// An image's grid in patches: frames (a still image is one), rows and columns.
struct ImageGrid {
  int64_t t = 1, h = 0, w = 0;
  int64_t patches() const { return t * h * w; }
};

class VisionTower {
 public:
  const VisionConfig& config() const { return config_; }
  // Embeddings an image of grid g gives: one per merge x merge group.
  int64_t output_rows(const ImageGrid& g) const;
  // Whether the tower takes grid g (sides multiples of the merge size, positive frames).
  Status check_grid(const ImageGrid& g) const;
  // patches [g.patches(), config().patch_values()] -> out [output_rows(g), out_hidden_size].
  Status forward(const float* patches, const ImageGrid& g, float* out);
  uint64_t weight_bytes() const;
  // The schemes of its linears, e.g. "bf16" or "w8a8_mxfp8".
  std::string scheme_summary() const;

 private:
  friend Result<std::unique_ptr<VisionTower>> load_vision_tower(const std::string&,
                                                                const LoadOptions&, ThreadPool*);
  struct Block {
    Tensor norm1_w, norm1_b, norm2_w, norm2_b;  // [hidden] FP32
    std::unique_ptr<Linear> qkv, proj, fc1, fc2;
    Tensor qkv_b, proj_b, fc1_b, fc2_b;  // FP32
  };
  struct Merger {
    Tensor norm_w, norm_b;
    std::unique_ptr<Linear> fc1, fc2;
    Tensor fc1_b, fc2_b;
  };
  void add_positions(const ImageGrid& g, float* x) const;
  void rotary_tables(const ImageGrid& g, float* cs) const;
  void block_forward(const Block& b, const ImageGrid& g, const float* cs, float* x);
  void attention(const ImageGrid& g, float* qkv, float* out);
  void merge(const Merger& m, int64_t n, const float* x, float* out);

  VisionConfig config_;
  std::unique_ptr<Linear> patch_embed;  // [hidden, patch_values], as stored
  Tensor patch_bias;                    // [hidden] FP32
  Tensor pos_table;                     // [num_position_embeddings, hidden] FP32
  std::vector<Block> blocks_;
  Merger merger_;
  std::vector<float> inv_freq_;
  std::unique_ptr<ExecContext> exec_;
};

// The tower of the checkpoint at `dir` (its vision_config, weights under model.visual. or
// visual.), its linears in options.quantization where one is given online, or as an offline
// checkpoint stores them; patch embedding and position table as stored. Runs on `pool`.
Result<std::unique_ptr<VisionTower>> load_vision_tower(const std::string& dir,
                                                       const LoadOptions& options,
                                                       ThreadPool* pool);

}  // namespace mx

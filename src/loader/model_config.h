// Hyper-parameters from a Hugging Face config.json, typed per architecture. Every value comes
// from the checkpoint; defaults apply only where the file omits a field.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mx {

enum class Arch { kQwen3, kQwen3Moe, kQwen3_5, kQwen3_5Moe, kQwen3Next };

// What mixes tokens in a layer: softmax attention over the KV cache, or gated DeltaNet linear
// attention over a recurrent state.
enum class LayerKind { kFullAttention, kLinearAttention };

struct ArchInfo {
  Arch arch;
  std::string_view hf_class;    // "architectures" entry
  std::string_view model_type;  // "model_type"
  std::string_view gguf_arch;   // GGUF "general.architecture"
};
// The explicit list of supported architectures.
const std::vector<ArchInfo>& supported_archs();

// A Qwen3.5 / Qwen3-VL vision tower: patches of patch x patch pixels over temporal_patch
// frames embedded to hidden_size, `depth` ViT blocks, and a merger that concatenates each
// merge x merge group of patches and maps it to the language model's width (out_hidden_size).
struct VisionConfig {
  int64_t depth = 0;
  int64_t hidden_size = 0;
  int64_t num_heads = 0;
  int64_t intermediate_size = 0;
  int64_t in_channels = 3;
  int64_t patch_size = 0;
  int64_t temporal_patch_size = 0;
  int64_t spatial_merge_size = 0;
  int64_t out_hidden_size = 0;
  int64_t num_position_embeddings = 0;  // a square grid of learned positions
  // The block MLP's GELU: the tanh form (gelu_pytorch_tanh) or exact (gelu).
  bool mlp_gelu_tanh = true;
  // Qwen3-VL's DeepStack: blocks whose merged output is added to the language model's hidden
  // states after the first layers (one per entry).
  std::vector<int64_t> deepstack_indexes;
  int64_t image_token_id = -1;
  int64_t video_token_id = -1;
  int64_t vision_start_token_id = -1;
  int64_t vision_end_token_id = -1;
  // Why a vision_config that is there cannot be used (empty: usable or absent).
  std::string unusable;
  bool present() const { return depth > 0; }
  int64_t patch_values() const {
    return in_channels * temporal_patch_size * patch_size * patch_size;
  }
};

struct ModelConfig {
  Arch arch = Arch::kQwen3;
  std::string hf_class;
  std::string model_type;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;  // dense MLP width
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;
  // MoE (qwen3_moe)
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;  // the library default; checkpoints usually say true
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;

  // Per layer (`layer_types`, else every full_attention_interval-th layer is full attention).
  std::vector<LayerKind> layer_kinds;
  // Where the language model's tensors live ("model." or, for Qwen3.5, "model.language_model.").
  std::string weight_prefix = "model.";
  // Qwen3.5 and Qwen3-Next: norms store w - 1 and apply (1 + w); q_proj also gives a sigmoid
  // output gate per head; RoPE covers the first rotary_dim dims of each head.
  bool zero_centered_norms = false;
  bool attn_output_gate = false;
  int64_t rotary_dim = 0;  // = head_dim unless partial_rotary_factor < 1
  // Gated DeltaNet (linear attention layers).
  int64_t linear_num_key_heads = 0;
  int64_t linear_num_value_heads = 0;
  int64_t linear_key_head_dim = 0;
  int64_t linear_value_head_dim = 0;
  int64_t linear_conv_kernel_dim = 0;
  // Which key head value head j reads: j / (nv / nk) as Hugging Face groups them, or j % nk when
  // the value heads are stored tiled (llama.cpp's GGUFs, for ggml's broadcast). Every per-value-
  // head tensor (v, z, b, a, A_log, dt_bias, conv channels, out_proj columns) is in that order.
  bool linear_v_heads_tiled = false;
  // Qwen3-Next stores DeltaNet's projections fused and interleaved per key-head group
  // (in_proj_qkvz, in_proj_ba), reordered into Qwen3.5's layout at load; llama.cpp's newer
  // qwen3next GGUFs split qkvz into Qwen3.5's in_proj_qkv and in_proj_z and keep ba fused.
  bool deltanet_fused_qkvz = false;
  bool deltanet_fused_ba = false;
  // MoE with a sigmoid-gated shared expert of this width (0: none).
  int64_t shared_expert_intermediate_size = 0;
  // Multi-token-prediction layers the checkpoint carries beside the decoder (mtp.*).
  int64_t mtp_num_hidden_layers = 0;
  // Multimodal rotary (Qwen3.5, Qwen3-VL): rotary frequency j takes the temporal, height or
  // width position of its row. Interleaved (Qwen3.5): j = 3i + 1 takes h for i < section[1],
  // j = 3i + 2 takes w for i < section[2], every other j takes t. Text rows have three equal
  // positions, so text alone is plain RoPE.
  std::array<int64_t, 3> mrope_section{0, 0, 0};
  bool mrope_interleaved = false;
  // The vision tower (depth 0: a text-only checkpoint).
  VisionConfig vision;

  bool is_moe_layer(int64_t layer) const;
  bool is_linear_attention(int64_t layer) const {
    return layer_kinds[static_cast<size_t>(layer)] == LayerKind::kLinearAttention;
  }
  bool has_moe() const {
    return arch == Arch::kQwen3Moe || arch == Arch::kQwen3_5Moe || arch == Arch::kQwen3Next;
  }

  bool is_hybrid() const {
    return arch == Arch::kQwen3_5 || arch == Arch::kQwen3_5Moe || arch == Arch::kQwen3Next;
  }
};

// The largest value a size field may take (widths, heads, vocabulary), so that products of two
// sizes cannot overflow, and the most layers a model may have.
inline constexpr int64_t kMaxConfigSize = int64_t{1} << 24;
inline constexpr int64_t kMaxLayers = 4096;

// The bounds every config must meet, whichever file it came from (config.json, GGUF
// metadata): finite positive rope_theta and rms_norm_eps, widths whose products fit, at most
// kMaxExperts experts and no more chosen than exist. `what` names the source in errors.
Status validate_model_config(const ModelConfig& c, const std::string& what);

// `what` names the source in errors.
Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& what);
Result<ModelConfig> load_model_config(const std::string& model_dir);

}  // namespace mx

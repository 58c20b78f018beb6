// The architectures mxserve runs: one line each, naming the file that builds and runs its
// layers. The config parser's list (loader/model_config.cpp) says which checkpoints map here.
#include "model/blocks.h"

namespace mx {

const ArchImpl* arch_impl(Arch arch) {
  static const ArchImpl kArchs[] = {
      {Arch::kQwen3, build_qwen3_layer, qwen3_layer_forward, nullptr},             // qwen3.cpp
      {Arch::kQwen3Moe, build_qwen3_moe_layer, qwen3_moe_layer_forward, nullptr},  // qwen3_moe.cpp
      {Arch::kQwen3_5, build_qwen3_5_layer, qwen3_5_layer_forward,
       &kQwen3_5PackedModules},  // qwen3_5.cpp
      {Arch::kQwen3_5Moe, build_qwen3_5_layer, qwen3_5_layer_forward,
       &kQwen3_5PackedModules},  // qwen3_5.cpp
      // Qwen3-Next's checkpoints store DeltaNet's projections fused (reordered at load); its
      // newer GGUFs store them as Qwen3.5 does.
      {Arch::kQwen3Next, build_qwen3_5_layer, qwen3_5_layer_forward,
       &kQwen3_5PackedModules},  // qwen3_5.cpp
  };
  for (const ArchImpl& a : kArchs) {
    if (a.arch == arch) return &a;
  }
  return nullptr;
}

}  // namespace mx

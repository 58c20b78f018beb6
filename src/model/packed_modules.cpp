#include "model/packed_modules.h"

namespace mx {

const PackedModules& generic_packed_modules() {
  static const PackedModules kGeneric = {
      {"qkv_proj", {"q_proj", "k_proj", "v_proj"}},
      {"gate_up_proj", {"gate_proj", "up_proj"}},
  };
  return kGeneric;
}

PackedModules merge_packed_modules(const PackedModules& scoped) {
  PackedModules out = generic_packed_modules();
  for (const auto& [name, shards] : scoped) out[name] = shards;
  return out;
}

}  // namespace mx

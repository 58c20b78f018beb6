// Packed modules: the linears one kernel runs as one matmul, each stacked along the output from
// checkpoint shards that keep their own names (and must share one type). A table, as vLLM's
// and SGLang's packed_modules_mapping: generic entries every architecture has, merged with an
// architecture's own, which replace a generic entry only under the same key.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace mx {

using PackedModules = std::map<std::string, std::vector<std::string>>;

// qkv_proj <- q_proj, k_proj, v_proj; gate_up_proj <- gate_proj, up_proj.
const PackedModules& generic_packed_modules();
PackedModules merge_packed_modules(const PackedModules& scoped);

}  // namespace mx

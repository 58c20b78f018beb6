// quant_model_description.json (msmodelslim layout): a type string per saved tensor plus
// global keys. Its presence in a model directory selects the offline quantized path.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace mx {

inline constexpr const char* kQuantDescriptionFile = "quant_model_description.json";
inline constexpr const char* kQuantWeightsStem = "quant_model_weights";

enum class QuantType {
  kFloat,
  kW8A8Mxfp8,
  kW4A8Mxfp,
  kW4A4Mxfp4,
  kW4A4Mxfp4DualScale,
  kUnsupported,  // a msmodelslim type mxserve does not run (W8A8 int8, W4A4_DYNAMIC, ...)
};

std::string_view quant_type_name(QuantType type);
// Known MX/FLOAT strings map to their type; any other string is kUnsupported.
QuantType quant_type_from_string(std::string_view text);

struct QuantDescription {
  std::string version;
  std::string model_quant_type;
  int64_t group_size = 32;
  // mxserve's block Hadamard rotation of the MX weights along K ("mx_block_rotation"), 0 for
  // none. Written beside is_rot_used: true, which readers that do not know it refuse.
  int64_t rotation = 0;
  // Tensor name -> type, with the raw string kept for messages about unsupported types.
  std::map<std::string, QuantType> tensor_types;
  std::map<std::string, std::string> raw_types;

  std::optional<QuantType> type_of(const std::string& tensor) const;
};

Result<QuantDescription> parse_quant_description(const std::string& json_text,
                                                 const std::string& what);
// Not-found when the directory has no description (the checkpoint is not offline-quantized).
Result<QuantDescription> load_quant_description(const std::string& model_dir);
bool has_quant_description(const std::string& model_dir);

}  // namespace mx

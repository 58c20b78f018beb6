#include "loader/quant_description.h"

#include <array>
#include <filesystem>

#include "core/json_util.h"
#include "core/mapped_file.h"

namespace mx {
namespace {

constexpr std::array<std::pair<std::string_view, QuantType>, 5> kNames = {{
    {"FLOAT", QuantType::kFloat},
    {"W8A8_MXFP8", QuantType::kW8A8Mxfp8},
    {"W4A8_MXFP", QuantType::kW4A8Mxfp},
    {"W4A4_MXFP4", QuantType::kW4A4Mxfp4},
    {"W4A4_MXFP4_DUALSCALE", QuantType::kW4A4Mxfp4DualScale},
}};

// Keys that describe the whole checkpoint, not a tensor.
bool is_global_key(const std::string& key) {
  return key == "version" || key == "model_quant_type" || key == "group_size" ||
         key == "metadata" || key == "optional" || key == "kv_quant_type" ||
         key == "kv_cache_type" || key == "fa_quant_type" || key == "reduce_quant_type";
}

}  // namespace

std::string_view quant_type_name(QuantType type) {
  for (const auto& [name, t] : kNames) {
    if (t == type) return name;
  }
  return "UNSUPPORTED";
}

QuantType quant_type_from_string(std::string_view text) {
  for (const auto& [name, t] : kNames) {
    if (name == text) return t;
  }
  return QuantType::kUnsupported;
}

std::optional<QuantType> QuantDescription::type_of(const std::string& tensor) const {
  auto it = tensor_types.find(tensor);
  if (it == tensor_types.end()) return std::nullopt;
  return it->second;
}

Result<QuantDescription> parse_quant_description(const std::string& json_text,
                                                 const std::string& what) {
  MX_ASSIGN_OR_RETURN(Json j, parse_json(json_text, what));
  if (!j.is_object()) return invalid_argument(what + ": not a JSON object");
  QuantDescription d;
  bool rot_used = false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    if (key == "version") {
      if (!it->is_string()) return invalid_argument(what + ": field 'version' must be a string");
      d.version = it->get<std::string>();
    } else if (key == "model_quant_type") {
      if (!it->is_string()) {
        return invalid_argument(what + ": field 'model_quant_type' must be a string");
      }
      d.model_quant_type = it->get<std::string>();
    } else if (key == "group_size") {
      if (!it->is_number_integer() || it->get<int64_t>() <= 0) {
        return invalid_argument(what + ": field 'group_size' must be a positive integer");
      }
      d.group_size = it->get<int64_t>();
    } else if (key == "is_rot_used") {
      rot_used = it->is_boolean() && it->get<bool>();
    } else if (key == "mx_block_rotation") {
      const bool ok = it->is_object() && it->value("type", "") == "hadamard" &&
                      it->contains("block") && (*it)["block"].is_number_integer() &&
                      ((*it)["block"] == 32 || (*it)["block"] == 128);
      if (!ok) {
        return invalid_argument(what +
                                ": field 'mx_block_rotation' must be {\"type\": \"hadamard\", "
                                "\"block\": 32 or 128}");
      }
      d.rotation = (*it)["block"].get<int64_t>();
    } else if (is_global_key(key)) {
      continue;
    } else {
      if (!it->is_string()) {
        return invalid_argument(what + ": tensor '" + key + "' has a " + json_type_name(*it) +
                                " where a quantization type string belongs");
      }
      const std::string raw = it->get<std::string>();
      d.tensor_types[key] = quant_type_from_string(raw);
      d.raw_types[key] = raw;
    }
  }
  // QuaRot folds a rotation into the weights and expects the runtime to rotate activations with
  // matrices that mxserve does not apply; only its own block rotation is run.
  if (rot_used && d.rotation == 0) {
    return unimplemented(what + ": is_rot_used is true: QuaRot rotation is not supported");
  }
  if (d.rotation != 0 && !rot_used) {
    return invalid_argument(what + ": mx_block_rotation without is_rot_used: true");
  }
  return d;
}

bool has_quant_description(const std::string& model_dir) {
  std::error_code ec;
  return std::filesystem::exists(std::filesystem::path(model_dir) / kQuantDescriptionFile, ec);
}

Result<QuantDescription> load_quant_description(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / kQuantDescriptionFile).string();
  MX_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return parse_quant_description(text, path);
}

}  // namespace mx

#include "loader/model_inventory.h"

#include "loader/checkpoint.h"
#include "loader/checkpoint_format.h"
#include "loader/gguf_source.h"
#include "loader/gguf_tokenizer.h"
#include "loader/weight_source.h"

namespace mx {
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_scale_tensor(const std::string& name) {
  return ends_with(name, ".weight_scale") || ends_with(name, ".weight_dual_scale") ||
         ends_with(name, ".weight_offset");
}

bool is_packed_fp4(QuantType t) {
  return t == QuantType::kW4A8Mxfp || t == QuantType::kW4A4Mxfp4 ||
         t == QuantType::kW4A4Mxfp4DualScale;
}

// Routed experts: HF ".mlp.experts.", GGUF "ffn_*_exps" (shared experts are replicated).
void count_bytes(const std::string& name, uint64_t bytes, ModelInventory* inv) {
  inv->total_bytes += bytes;
  const bool routed =
      name.find(".experts.") != std::string::npos ||
      (name.find("_exps.") != std::string::npos && name.find("shexp") == std::string::npos);
  if (routed) inv->routed_expert_bytes += bytes;
  // Hugging Face and GGUF names of what every rank holds whole.
  bool whole = false;
  for (const char* part : {"embed_tokens", "token_embd", "norm", ".mlp.gate.", "ffn_gate_inp",
                           "shared_expert_gate", "mtp.", "nextn", "visual.", "v.blk", "mm."}) {
    whole = whole || name.find(part) != std::string::npos;
  }
  if (!whole) inv->tp_split_bytes += bytes;
}

}  // namespace

Result<ModelInventory> inspect_gguf_checkpoint(const std::string& path) {
  ModelInventory inv;
  inv.dir = path;
  MX_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(path));
  MX_ASSIGN_OR_RETURN(inv.config, model_config_from_gguf(f));
  ModelInventory::GgufFacts g;
  g.version = f.version();
  if (f.find("general.quantization_version") != nullptr) {
    MX_ASSIGN_OR_RETURN(g.quantization_version, f.get_int("general.quantization_version"));
  }
  if (f.find("general.file_type") != nullptr) {
    MX_ASSIGN_OR_RETURN(g.file_type, f.get_int("general.file_type"));
  }
  inv.num_files = f.files().size();
  for (const GgufTensorInfo& t : f.tensors()) {
    ++inv.num_tensors;
    int64_t n = 1;
    for (int64_t d : t.ne) n *= d;
    inv.parameters += n;
    auto& [count, bytes] = g.types[std::string(ggml_type_info(t.type).name)];
    ++count;
    bytes += t.bytes;
    count_bytes(t.name, t.bytes, &inv);
  }
  g.tokenizer = describe_gguf_tokenizer(f);
  inv.gguf = std::move(g);
  return inv;
}

namespace {

// The safetensors files of a directory; `inv->quant` set for an offline one.
Result<ModelInventory> inspect_directory(const std::string& dir, bool offline) {
  ModelInventory inv;
  inv.dir = dir;
  MX_ASSIGN_OR_RETURN(inv.config, load_model_config(dir));
  std::string stem = "model";
  if (offline) {
    MX_ASSIGN_OR_RETURN(QuantDescription q, load_quant_description(dir));
    inv.quant = std::move(q);
    stem = kQuantWeightsStem;
  }
  MX_ASSIGN_OR_RETURN(CheckpointFiles ck, CheckpointFiles::open(dir, stem));
  inv.num_files = ck.files().size();
  for (const SafetensorsFile& f : ck.files()) {
    for (const TensorInfo& t : f.tensors()) {
      ++inv.num_tensors;
      const uint64_t bytes = t.end - t.begin;
      inv.bytes_by_dtype[std::string(dtype_name(t.dtype))] += bytes;
      count_bytes(t.name, bytes, &inv);
      if (inv.quant && is_scale_tensor(t.name)) {
        inv.scale_bytes += bytes;
        continue;
      }
      int64_t n = shape_numel(t.shape);
      if (inv.quant) {
        const auto type = inv.quant->type_of(t.name);
        if (type && is_packed_fp4(*type) && ends_with(t.name, ".weight")) n *= 2;
        if (type && ends_with(t.name, ".weight")) {
          inv.module_types[t.name.substr(0, t.name.size() - 7)] = *type;
        }
      }
      inv.parameters += n;
    }
  }
  return inv;
}

}  // namespace

Result<ModelInventory> inspect_safetensors_checkpoint(const std::string& dir) {
  return inspect_directory(dir, /*offline=*/false);
}

Result<ModelInventory> inspect_msmodelslim_checkpoint(const std::string& dir) {
  return inspect_directory(dir, /*offline=*/true);
}

Result<ModelInventory> inspect_model_dir(const std::string& path) {
  MX_ASSIGN_OR_RETURN(const CheckpointFormat* format, find_checkpoint_format(path));
  return format->inspect(path);
}

}  // namespace mx

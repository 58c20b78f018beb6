#include "model/export.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/json_util.h"
#include "core/log.h"
#include "core/mapped_file.h"
#include "loader/checkpoint_format.h"
#include "loader/quant_description.h"
#include "loader/safetensors.h"
#include "loader/weight_source.h"

namespace mx {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool always_float(const std::string& name, bool quantize_gate, bool quantize_head) {
  return name.find("embed_tokens") != std::string::npos ||
         (!quantize_head && name.rfind("lm_head", 0) == 0) ||
         name.find("norm") != std::string::npos ||
         // Per-head gates of DeltaNet and the shared expert's one-row gate stay as stored,
         // as online quantization keeps them.
         ends_with(name, ".in_proj_b.weight") || ends_with(name, ".in_proj_a.weight") ||
         ends_with(name, ".in_proj_ba.weight") || ends_with(name, ".shared_expert_gate.weight") ||
         (!quantize_gate && ends_with(name, ".mlp.gate.weight"));
}

std::string shard_name(size_t i, size_t n) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%s-%05zu-of-%05zu.safetensors", kQuantWeightsStem, i + 1, n);
  return buf;
}

// Whether `inner` is `outer` or lies inside it, after resolving symlinks and "..".
bool same_or_inside(const fs::path& inner, const fs::path& outer) {
  std::error_code ec;
  const fs::path i = fs::weakly_canonical(fs::absolute(inner, ec), ec);
  const fs::path o = fs::weakly_canonical(fs::absolute(outer, ec), ec);
  auto [oi, ii] = std::mismatch(o.begin(), o.end(), i.begin(), i.end());
  // A trailing separator leaves an empty last element in `o`.
  return oi == o.end() || (std::next(oi) == o.end() && oi->empty());
}

Status check_output_dir(const std::string& src_dir, const std::string& out_dir,
                        const ExportOptions& opt) {
  if (same_or_inside(out_dir, src_dir)) {
    return invalid_argument("the output " + out_dir + " is the model directory " + src_dir +
                            " or inside it; write the quantized checkpoint elsewhere");
  }
  if (opt.max_shard_bytes < kMinShardBytes || opt.max_shard_bytes > kMaxShardBytes) {
    return invalid_argument("the shard size limit must be between 1 MiB and 1 TiB (got " +
                            std::to_string(opt.max_shard_bytes) + " bytes)");
  }
  std::error_code ec;
  if (fs::exists(out_dir, ec) && !fs::is_directory(out_dir, ec)) {
    return invalid_argument(out_dir + " exists and is not a directory");
  }
  const bool empty = !fs::exists(out_dir, ec) || fs::is_empty(out_dir, ec);
  if (!empty && !opt.overwrite) {
    return invalid_argument(out_dir + " is not empty; pass --force to write into it");
  }
  if (!empty) {
    for (const fs::directory_entry& e : fs::directory_iterator(out_dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(kQuantWeightsStem, 0) == 0 &&
          (ends_with(name, ".safetensors") || ends_with(name, ".index.json"))) {
        fs::remove(e.path(), ec);
        if (ec) return io_error(e.path().string() + ": cannot remove: " + ec.message());
      }
    }
  }
  return Status::ok();
}

// Warned up front, before a long export: a typo in a pattern keeps nothing FLOAT.
std::vector<std::string> unmatched_patterns(const std::vector<std::string>& names,
                                            const std::vector<std::string>& patterns,
                                            const std::string& src_dir, const std::string& flag) {
  std::vector<std::string> unmatched;
  for (const std::string& p : patterns) {
    if (std::none_of(names.begin(), names.end(),
                     [&](const std::string& n) { return n.find(p) != std::string::npos; })) {
      MX_LOG_WARN(flag + " '" + p + "' matches no tensor of " + src_dir);
      unmatched.push_back(p);
    }
  }
  return unmatched;
}

}  // namespace

std::optional<Scheme> export_scheme(const std::string& name, int64_t rank,
                                    const ExportOptions& opt) {
  Scheme scheme = opt.scheme;
  bool named_head = false;
  for (const auto& [pattern, s] : opt.module_schemes) {
    if (name.find(pattern) == std::string::npos) continue;
    scheme = s;
    named_head = name.rfind("lm_head", 0) == 0;
    break;
  }
  if (!ends_with(name, ".weight") || rank != 2 ||
      always_float(name, opt.quantize_router_gate, opt.quantize_lm_head || named_head)) {
    return std::nullopt;
  }
  for (const std::string& p : opt.keep_float) {
    if (name.find(p) != std::string::npos) return std::nullopt;
  }
  return scheme;
}

Result<ExportSummary> export_msmodelslim(const std::string& src_dir, const std::string& out_dir,
                                         const ExportOptions& opt) {
  if (opt.scheme == Scheme::kBf16) return invalid_argument("quantize: pick an MX scheme");
  MX_ASSIGN_OR_RETURN(const CheckpointFormat* format, find_checkpoint_format(src_dir));
  if (format->name != "safetensors") {
    return invalid_argument(src_dir + " is a " + std::string(format->name) +
                            " checkpoint; quantize exports from a BF16 Hugging Face checkpoint");
  }
  MX_RETURN_IF_ERROR(check_output_dir(src_dir, out_dir, opt));
  MX_ASSIGN_OR_RETURN(std::unique_ptr<WeightSource> ck, open_safetensors_source(src_dir));
  ExportSummary sum;
  const std::vector<std::string> names = ck->logical_names();
  sum.unmatched_keep_float = unmatched_patterns(names, opt.keep_float, src_dir, "--keep-float");
  std::vector<std::string> module_patterns;
  for (const auto& [pattern, scheme] : opt.module_schemes) {
    if (scheme == Scheme::kBf16)
      return invalid_argument("quantize: '" + pattern + "' names no MX scheme");
    module_patterns.push_back(pattern);
  }
  sum.unmatched_module_schemes =
      unmatched_patterns(names, module_patterns, src_dir, "--module-scheme");
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return io_error(out_dir + ": cannot create: " + ec.message());
  nlohmann::ordered_json desc = {
      {"version", "1.0.0"},
      {"model_quant_type", std::string(scheme_info(opt.scheme).offline_type)},
      {"group_size", 32}};
  if (opt.rotation != 0) {
    desc["is_rot_used"] = true;
    desc["mx_block_rotation"] = {{"type", "hadamard"}, {"block", opt.rotation}};
  }
  std::vector<SafetensorsWriter> shards(1);
  auto add = [&](const std::string& name, const Tensor& t, const std::string& t_type) -> Status {
    if (shards.back().num_tensors() > 0 &&
        shards.back().data_bytes() + t.nbytes() > opt.max_shard_bytes) {
      shards.emplace_back();
    }
    desc[name] = t_type;
    return shards.back().add(name, t);
  };
  int64_t done = 0;
  for (const std::string& name : names) {
    MX_ASSIGN_OR_RETURN(Tensor t, ck->tensor(name));
    const std::optional<Scheme> scheme = export_scheme(name, t.rank(), opt);
    if (!scheme) {
      MX_RETURN_IF_ERROR(add(name, t, "FLOAT"));
      ++sum.kept_float;
    } else {
      const std::string type(scheme_info(*scheme).offline_type);
      MxWeights q;
      const auto given = opt.calibrated != nullptr ? opt.calibrated->find(name)
                                                   : decltype(opt.calibrated->end())();
      if (opt.calibrated != nullptr && given != opt.calibrated->end()) {
        q = given->second;
        if (q.scheme != *scheme || q.n != t.dim(0) || q.k != t.dim(1) || q.rotation != opt.rotation)
          return invalid_argument(name +
                                  ": the calibrated weight's scheme, shape or rotation "
                                  "differs from the export's");
        ++sum.calibrated;
      } else {
        MX_ASSIGN_OR_RETURN(q, quantize_weight(t, *scheme, opt.rule, name, opt.pool, opt.rotation));
      }
      const std::string base = name.substr(0, name.size() - 7);
      Tensor codes = q.codes;
      if (scheme_info(*scheme).weight == ElemFormat::kE4M3) {
        codes = Tensor::from_storage(Storage::allocate(q.codes.nbytes()), DType::kF8E4M3,
                                     q.codes.shape());
        std::memcpy(codes.mutable_data(), q.codes.data(), q.codes.nbytes());
      }
      MX_RETURN_IF_ERROR(add(name, codes, type));
      MX_RETURN_IF_ERROR(add(base + ".weight_scale", q.scales, type));
      if (q.chunk_scales.defined())
        MX_RETURN_IF_ERROR(add(base + ".weight_dual_scale", q.chunk_scales, type));
      ++sum.quantized;
    }
    if (opt.progress) opt.progress(++done, static_cast<int64_t>(names.size()));
  }
  // Weights, then the index when sharded.
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = shards.size() == 1 ? std::string(kQuantWeightsStem) + ".safetensors"
                                                : shard_name(i, shards.size());
    MX_RETURN_IF_ERROR(shards[i].write((fs::path(out_dir) / file).string()));
    sum.bytes += shards[i].data_bytes();
    auto f = SafetensorsFile::open((fs::path(out_dir) / file).string());
    if (!f.is_ok()) return f.status();
    for (const TensorInfo& t : f->tensors()) weight_map[t.name] = file;
  }
  sum.shards = static_cast<int64_t>(shards.size());
  if (shards.size() > 1) {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", sum.bytes}}},
                                    {"weight_map", weight_map}};
    std::ofstream(fs::path(out_dir) / (std::string(kQuantWeightsStem) + ".safetensors.index.json"))
        << index.dump(2);
  }
  std::ofstream(fs::path(out_dir) / kQuantDescriptionFile) << desc.dump(2) << "\n";
  // The Hugging Face files, config.json without quantization_config.
  for (const char* f :
       {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
    const fs::path src = fs::path(src_dir) / f;
    if (!fs::exists(src, ec)) continue;
    if (std::string(f) == "config.json") {
      MX_ASSIGN_OR_RETURN(std::string text, read_text_file(src.string()));
      auto j = nlohmann::ordered_json::parse(text, nullptr, false);
      if (j.is_discarded() || !j.is_object())
        return invalid_argument(src.string() + ": malformed JSON");
      j.erase("quantization_config");
      std::ofstream(fs::path(out_dir) / f) << j.dump(2) << "\n";
    } else {
      fs::copy_file(src, fs::path(out_dir) / f, fs::copy_options::overwrite_existing, ec);
      if (ec) return io_error(src.string() + ": copy failed: " + ec.message());
    }
  }
  return sum;
}

}  // namespace mx

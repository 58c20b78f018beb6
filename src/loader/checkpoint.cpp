#include "loader/checkpoint.h"

#include <filesystem>

#include "core/json_util.h"

namespace mx {

namespace fs = std::filesystem;

bool CheckpointFiles::exists(const std::string& dir, const std::string& stem) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / (stem + ".safetensors.index.json"), ec) ||
         fs::exists(fs::path(dir) / (stem + ".safetensors"), ec);
}

Result<CheckpointFiles> CheckpointFiles::open(const std::string& dir, const std::string& stem) {
  CheckpointFiles ck;
  const fs::path index_path = fs::path(dir) / (stem + ".safetensors.index.json");
  std::error_code ec;
  if (!fs::exists(index_path, ec)) {
    const fs::path single = fs::path(dir) / (stem + ".safetensors");
    if (!fs::exists(single, ec)) {
      return not_found(dir + ": no " + stem + ".safetensors or " + stem +
                       ".safetensors.index.json");
    }
    MX_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(single.string()));
    for (const TensorInfo& t : f.tensors()) ck.where_[t.name] = 0;
    ck.files_.push_back(std::move(f));
    return ck;
  }

  const std::string label = index_path.string();
  MX_ASSIGN_OR_RETURN(Json index, read_json_file(label));
  if (!index.is_object()) return invalid_argument(label + ": not a JSON object");
  auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object()) {
    return invalid_argument(label + ": missing object 'weight_map'");
  }
  std::map<std::string, size_t> shard_of_file;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string()) {
      return invalid_argument(label + ": weight_map entry '" + it.key() + "' is not a file name");
    }
    const std::string shard = it->get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "..") {
      return invalid_argument(label + ": weight_map entry '" + it.key() +
                              "' names an invalid shard '" + shard + "'");
    }
    auto found = shard_of_file.find(shard);
    if (found == shard_of_file.end()) {
      const std::string shard_path = (fs::path(dir) / shard).string();
      auto f = SafetensorsFile::open(shard_path);
      if (!f.is_ok()) {
        return f.status().with_context("shard '" + shard + "' listed in " + label);
      }
      found = shard_of_file.emplace(shard, ck.files_.size()).first;
      ck.files_.push_back(std::move(f).value());
    }
    if (ck.files_[found->second].find(it.key()) == nullptr) {
      return data_loss(label + ": tensor '" + it.key() + "' is listed in shard '" + shard +
                       "' but that shard does not hold it");
    }
    ck.where_[it.key()] = found->second;
  }
  return ck;
}

std::vector<std::string> CheckpointFiles::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, _] : where_) out.push_back(name);
  return out;
}

const TensorInfo* CheckpointFiles::find(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : files_[it->second].find(name);
}

Result<Tensor> CheckpointFiles::tensor(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) return not_found("checkpoint has no tensor '" + name + "'");
  return files_[it->second].tensor(name);
}

}  // namespace mx

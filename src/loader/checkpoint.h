// A set of safetensors files that together hold one checkpoint: a single file or shards
// listed by an index (`<stem>.safetensors.index.json` with a `weight_map`).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "loader/safetensors.h"

namespace mx {

class CheckpointFiles {
 public:
  // Opens `<dir>/<stem>.safetensors.index.json` and its shards when the index exists, else
  // `<dir>/<stem>.safetensors`. Every tensor the index lists must be in its shard.
  static Result<CheckpointFiles> open(const std::string& dir, const std::string& stem);
  static bool exists(const std::string& dir, const std::string& stem);

  const std::vector<SafetensorsFile>& files() const { return files_; }
  // Tensor names in name order.
  std::vector<std::string> names() const;
  const TensorInfo* find(const std::string& name) const;
  Result<Tensor> tensor(const std::string& name) const;
  size_t size() const { return where_.size(); }

 private:
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index in files_
};

}  // namespace mx

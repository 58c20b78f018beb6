// safetensors: an 8-byte little-endian header length, a JSON header, then raw little-endian
// tensor data. Reading validates everything against the file size before any tensor is
// touched, and tensors are views into the mapped file.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/status.h"
#include "core/tensor.h"

namespace mx {

struct TensorInfo {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0;  // offsets relative to the start of the data area
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // absolute offset of the data area
};

// Validates a whole file image. `label` names the file in errors.
Result<SafetensorsHeader> parse_safetensors(const uint8_t* data, size_t size,
                                            const std::string& label);

class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const TensorInfo* find(const std::string& name) const;
  // A view into the mapped file; not-found names the tensor and file.
  Result<Tensor> tensor(const std::string& name) const;

 private:
  std::shared_ptr<const MappedFile> file_;
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_;
};

// Builds a safetensors file in memory and writes it. Tensors are laid out in insertion order
// with no gaps; the header is space-padded to a multiple of 8 bytes.
class SafetensorsWriter {
 public:
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  // Copies `bytes`; its size must equal numel * dtype size.
  Status add(const std::string& name, DType dtype, const Shape& shape, const void* bytes,
             size_t size);
  Status add(const std::string& name, const Tensor& tensor);
  uint64_t data_bytes() const { return data_.size(); }
  size_t num_tensors() const { return entries_.size(); }
  std::string serialize() const;
  Status write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
  std::string data_;
};

}  // namespace mx

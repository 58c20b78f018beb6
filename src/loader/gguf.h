// GGUF (llama.cpp's single-file checkpoint), versions 2 and 3: magic "GGUF", version, tensor
// and metadata counts, typed key/values (arrays of arrays too), tensor infos (ggml dim order:
// ne[0] is the row length), then tensor data aligned to `general.alignment` (default 32).
// Everything is validated against the file size before any tensor is touched; tensors are
// views into the mapped file. Split files (`NAME-00001-of-0000N.gguf`, `split.*` keys) open
// as one.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/status.h"
#include "formats/ggml_types.h"

namespace mx {

enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
std::string_view gguf_value_type_name(GgufValueType t);

struct GgufValue {
  GgufValueType type = GgufValueType::kU8;
  // Scalars: integers in `i` (unsigned ones that fit) and `u` (non-negative ones; 0 for a
  // negative value), floats in `f`, bools in `b`.
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  bool b = false;
  std::string str;
  // Arrays: the element type and the elements (which may be arrays themselves).
  GgufValueType elem_type = GgufValueType::kU8;
  std::vector<GgufValue> array;

  bool is_integer() const;  // any of the eight integer types
  bool is_float() const { return type == GgufValueType::kF32 || type == GgufValueType::kF64; }
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> ne;        // ggml order: ne[0] is the row length; 1 to 4 dims
  uint64_t offset = 0;            // relative to the data area of its file
  uint64_t bytes = 0;             // rows x ggml_row_bytes(type, ne[0])
  int file = 0;                   // index into GgufFile::files() (split checkpoints)
  const uint8_t* data = nullptr;  // into the mapped file
};

// One parsed file image (no split handling). `label` names the file in errors.
struct GgufHeader {
  uint32_t version = 0;
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensorInfo> tensors;  // in file order, data pointers set
  uint64_t alignment = 32;
  uint64_t data_start = 0;  // absolute offset of the data area
};
Result<GgufHeader> parse_gguf(const uint8_t* data, size_t size, const std::string& label);

class GgufFile {
 public:
  // Opens a .gguf; a `-00001-of-0000N.gguf` name (or `split.count` > 1) opens every part,
  // checks `split.no`/`split.count`, and merges their tensors (metadata from part 1).
  static Result<GgufFile> open(const std::string& path);
  static bool looks_like_gguf(const std::string& path);  // a regular file starting "GGUF"

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  const std::vector<std::shared_ptr<const MappedFile>>& files() const { return files_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* tensor(const std::string& name) const;

  // Typed metadata reads: not-found when absent, invalid-argument naming the key when the
  // type does not fit.
  Result<int64_t> get_int(const std::string& key) const;
  Result<double> get_float(const std::string& key) const;  // integers accepted
  Result<bool> get_bool(const std::string& key) const;
  Result<std::string> get_string(const std::string& key) const;
  Result<const GgufValue*> get_array(const std::string& key, GgufValueType elem) const;

 private:
  std::string path_;
  uint32_t version_ = 0;
  std::vector<std::shared_ptr<const MappedFile>> files_;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> index_;
};

}  // namespace mx

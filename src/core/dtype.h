// Storage data types of tensors, named as safetensors names them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace mx {

enum class DType : uint8_t {
  kF64,
  kF32,
  kF16,
  kBF16,
  kF8E4M3,
  kF8E5M2,
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
};

struct DTypeInfo {
  DType dtype;
  std::string_view name;  // safetensors spelling
  size_t size;            // bytes per element
};

const DTypeInfo& dtype_info(DType dtype);
inline size_t dtype_size(DType dtype) { return dtype_info(dtype).size; }
inline std::string_view dtype_name(DType dtype) { return dtype_info(dtype).name; }
std::optional<DType> dtype_from_name(std::string_view name);

}  // namespace mx

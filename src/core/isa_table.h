// The one selector of kernel tables: each kernel family lists a table per ISA level (null
// where none is written) and resolves the active one once, falling back level by level to
// the scalar table, which always exists.
#pragma once

#include "core/check.h"
#include "core/cpu_features.h"

namespace mx {

template <class T>
struct IsaTable {
  const T* scalar = nullptr;
  const T* avx2 = nullptr;
  const T* avx512 = nullptr;
  const T* amx = nullptr;

  // The table written for `level`, or null where none is or the processor lacks the level.
  const T* at(IsaLevel level) const {
    if (!isa_supported(level)) return nullptr;
    switch (level) {
      case IsaLevel::kScalar:
        return scalar;
      case IsaLevel::kAvx2:
        return avx2;
      case IsaLevel::kAvx512:
        return avx512;
      case IsaLevel::kAmx:
        return amx;
    }
    return nullptr;
  }

  // The highest table at or below active_isa().
  const T& select() const {
    for (int l = static_cast<int>(active_isa()); l > 0; --l) {
      if (const T* p = at(static_cast<IsaLevel>(l))) return *p;
    }
    MX_CHECK(scalar != nullptr);
    return *scalar;
  }
};

}  // namespace mx

// Helpers shared by the tests: fixture locations and deterministic random data.
#pragma once

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace mx::test {

// ../shared beside the source tree (CI lays a copy there).
inline std::string shared_dir() { return MX_SHARED_DIR; }
inline std::string source_dir() { return MX_SOURCE_DIR; }

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

// Built with AddressSanitizer: tests whose work is numerics or many repeats of one path
// shrink it there, where every load is checked and runs several times slower.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

// A scratch directory unique to this process, removed by the caller if it cares.
std::string temp_dir(const std::string& tag);

// Values spanning many binades, with signs, zeros and occasional outliers: what activations
// look like after a residual add.
std::vector<float> activation_like(size_t n, uint32_t seed);

// SHA-256 of bytes as lowercase hex (OpenSSL), to check data against goldens' hashes.
std::string sha256_hex(const void* data, size_t n);

// The UTF-8 encoding of one code point (no validation: surrogates encode as given).
std::string utf8(uint32_t cp);

}  // namespace mx::test

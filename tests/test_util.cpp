#include "test_util.h"

#include <openssl/sha.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

namespace mx::test {

std::string temp_dir(const std::string& tag) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mxserve-" + tag + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::vector<float> activation_like(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-20, 12);
  std::uniform_int_distribution<int> pick(0, 99);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    float x = normal(rng);
    if (i % 32 == 0) x = std::ldexp(x, binade(rng));  // per-block magnitude changes
    const int p = pick(rng);
    if (p == 0) x *= 300.0f;  // outlier channel
    if (p == 1) x = 0.0f;
    if (p == 2) x = -0.0f;
    v[i] = x;
  }
  return v;
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::string sha256_hex(const void* data, size_t n) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(static_cast<const unsigned char*>(data), n, md);
  std::string out;
  char buf[3];
  for (unsigned char c : md) {
    std::snprintf(buf, sizeof(buf), "%02x", c);
    out += buf;
  }
  return out;
}

}  // namespace mx::test

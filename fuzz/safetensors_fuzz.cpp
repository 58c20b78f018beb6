// libFuzzer target: a safetensors file image (8-byte header length, JSON header, data).
// Whatever parses must lie inside the buffer and add up with its dtype and shape.
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_util.h"
#include "json_mutator.h"
#include "loader/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mx::fuzz::guarded("safetensors", [&] {
    static const std::string kLabel = "fuzz.safetensors";
    auto h = mx::parse_safetensors(data, size, kLabel);
    if (!mx::fuzz::accepted("parse_safetensors", h, kLabel)) return;
    MX_FUZZ_CHECK(h->data_start >= 8 && h->data_start <= size, "data_start");
    for (const mx::TensorInfo& t : h->tensors) {
      MX_FUZZ_CHECK(t.begin <= t.end && t.end <= size - h->data_start, t.name);
      const int64_t numel = mx::shape_numel(t.shape);
      MX_FUZZ_CHECK(numel >= 0, t.name);
      MX_FUZZ_CHECK(static_cast<uint64_t>(numel) * mx::dtype_size(t.dtype) == t.end - t.begin,
                    t.name);
      if (t.end > t.begin) {
        mx::fuzz::touch(data + h->data_start + t.begin);
        mx::fuzz::touch(data + h->data_start + t.end - 1);
      }
    }
  });
  return 0;
}

// The JSON mutator on the header, the length prefix rewritten to match and the data kept;
// byte mutations otherwise (and for a quarter of the inputs, so the prefix gets mutated too).
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  uint64_t n = 0;
  for (int i = 7; size >= 8 && i >= 0; --i) n = (n << 8) | data[i];
  if (size < 8 || n > size - 8 || seed % 4 == 0) return LLVMFuzzerMutate(data, size, max_size);
  const std::string rest(reinterpret_cast<const char*>(data) + 8 + n, size - 8 - n);
  std::string header(reinterpret_cast<const char*>(data) + 8, n);
  header.resize(max_size - 8 - rest.size() > n ? max_size - 8 - rest.size() : n);
  const size_t len = mx::fuzz::mutate_json_text(reinterpret_cast<uint8_t*>(header.data()), n,
                                                header.size(), seed / 4);
  header.resize(len);
  for (int i = 0; i < 8; ++i) data[i] = static_cast<uint8_t>(uint64_t{len} >> (8 * i));
  std::memcpy(data + 8, header.data(), len);
  std::memcpy(data + 8 + len, rest.data(), rest.size());
  return 8 + len + rest.size();
}

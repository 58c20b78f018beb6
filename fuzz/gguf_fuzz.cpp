// libFuzzer target: a GGUF file image. Whatever parses has its tensors inside the buffer (the
// first and last byte of each are read) and every metadata value reachable; it is then opened
// as a file (GgufFile, from a scratch copy under /dev/shm or TMPDIR), its `{arch}.*` metadata is
// read as a model config, and its tokenizer metadata is built into a tokenizer.json and a
// Tokenizer, as `mxserve` does for a GGUF checkpoint.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "fuzz_util.h"
#include "loader/gguf.h"
#include "loader/gguf_config.h"
#include "loader/gguf_source.h"
#include "loader/gguf_tokenizer.h"

namespace {

size_t count_values(const mx::GgufValue& v) {
  size_t n = 1 + v.str.size() % 2;
  for (const mx::GgufValue& e : v.array) n += count_values(e);
  return n;
}

const std::string& scratch_path() {
  static const std::string kPath = [] {
    std::error_code ec;
    std::string dir = std::filesystem::is_directory("/dev/shm", ec) ? "/dev/shm" : "";
    if (dir.empty()) dir = std::filesystem::temp_directory_path(ec).string();
    return dir + "/mx-gguf-fuzz-" + std::to_string(getpid()) + ".gguf";
  }();
  return kPath;
}

void check_file_level(const uint8_t* data, size_t size) {
  const std::string& path = scratch_path();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) mx::fuzz::fail("setup", "cannot write " + path);
  const bool written = std::fwrite(data, 1, size, f) == size;
  std::fclose(f);
  if (!written) mx::fuzz::fail("setup", "cannot write " + path);
  auto file = mx::GgufFile::open(path);
  if (mx::fuzz::accepted("GgufFile::open", file, path)) {
    // The `{arch}.*` keys as a model config, and every tensor name as its checkpoint name.
    auto config = mx::model_config_from_gguf(*file);
    const int64_t first_mtp = config.is_ok() ? config->num_layers : int64_t{1} << 62;
    for (const mx::GgufTensorInfo& t : file->tensors()) {
      MX_FUZZ_CHECK(!mx::gguf_to_hf_name(t.name, first_mtp).empty(), t.name);
    }
    (void)mx::describe_gguf_tokenizer(*file);
    (void)mx::chat_template_from_gguf(*file);
    (void)mx::gguf_special_tokens(*file);
    auto tok = mx::tokenizer_from_gguf(*file);
    if (mx::fuzz::accepted("tokenizer_from_gguf", tok, path)) {
      const std::vector<int32_t> ids = (*tok)->encode("Hello, world! caf\xC3\xA9 <|im_end|>");
      for (int32_t id : ids) MX_FUZZ_CHECK(id >= 0 && id < (*tok)->vocab_size(), "token id");
      (void)(*tok)->decode(ids);
    }
  }
  std::remove(path.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mx::fuzz::guarded("gguf", [&] {
    static const std::string kLabel = "fuzz.gguf";
    auto h = mx::parse_gguf(data, size, kLabel);
    if (!mx::fuzz::accepted("parse_gguf", h, kLabel)) return;
    // The data area may lie past the end when no tensor has bytes (then data_start is only
    // where it would begin).
    MX_FUZZ_CHECK(h->alignment > 0, "alignment");
    for (const mx::GgufTensorInfo& t : h->tensors) {
      MX_FUZZ_CHECK(!t.ne.empty() && t.ne.size() <= 4, t.name);
      if (t.bytes == 0) continue;
      const auto at = static_cast<uint64_t>(t.data - data);
      MX_FUZZ_CHECK(at >= h->data_start && at <= size && t.bytes <= size - at, t.name);
      mx::fuzz::touch(t.data);
      mx::fuzz::touch(t.data + t.bytes - 1);
    }
    size_t values = 0;
    for (const auto& [key, v] : h->metadata) values += count_values(v);
    (void)values;
    check_file_level(data, size);
  });
  return 0;
}

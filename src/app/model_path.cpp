#include <filesystem>

#include "app/commands.h"

namespace mx::app {

std::string default_model_dir() {
  namespace fs = std::filesystem;
  const fs::path rel = "models/tiny-qwen3-moe";
  std::error_code ec;
  if (fs::is_directory(rel, ec)) return rel.string();
  const fs::path src = fs::path(MX_SOURCE_DIR) / rel;
  if (fs::is_directory(src, ec)) return src.string();
  return rel.string();
}

}  // namespace mx::app

#include "server/web_ui.h"

#include <string>

namespace mx {

const WebFile* find_web_file(std::string_view path) {
  for (const WebFile& f : web_files()) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

HttpReply web_file_reply(const WebFile& file) {
  // No inline script or style, no frames, forms or plugins; fetch() only to this origin.
  static const char kPolicy[] =
      "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; "
      "img-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
      "frame-ancestors 'none'";
  return {200,
          std::string(file.content_type),
          std::string(file.body),
          {{"Content-Security-Policy", kPolicy},
           {"X-Content-Type-Options", "nosniff"},
           {"Referrer-Policy", "no-referrer"},
           {"Cache-Control", "no-cache"}}};
}

}  // namespace mx

// The chat page at / (the files of web/, embedded in the binary at build time by
// cmake/embed_files.cmake): served with headers that keep it to this server's origin.
#pragma once

#include <span>
#include <string_view>

#include "server/http_server.h"

namespace mx {

struct WebFile {
  std::string_view path;  // "/" for index.html, "/NAME" otherwise
  std::string_view content_type;
  std::string_view body;
};

// Every embedded file (defined in the generated web_files.cpp).
std::span<const WebFile> web_files();

// The file served at `path`, or null.
const WebFile* find_web_file(std::string_view path);

// The reply that serves `file`: its Content-Type and a Content-Security-Policy that lets the
// page load and connect to its own origin only.
HttpReply web_file_reply(const WebFile& file);

}  // namespace mx

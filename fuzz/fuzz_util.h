// Shared helpers of the libFuzzer targets: a failed invariant or an exception that escapes a
// parser is a finding, so both abort (libFuzzer then saves the input as a crash).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

namespace mx::fuzz {

inline std::string as_string(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

[[noreturn]] inline void fail(const char* what, std::string_view detail) {
  std::fprintf(stderr, "\n==FUZZ== %s: %.*s\n", what, static_cast<int>(detail.size()),
               detail.data());
  std::fflush(stderr);
  std::abort();
}

// MX_FUZZ_KNOWN="text|text": an escaped exception whose message holds one of these is a bug
// already reported. It is counted (each distinct message said once on stderr, the counts at
// exit) and the input treated as refused, so that a run goes on to find other bugs. Failed
// invariants and sanitizer reports are never waived.
struct Known {
  std::vector<std::string> texts;
  std::vector<size_t> hits;
  std::vector<std::string> said;  // each distinct message is said once
  Known() {
    const char* env = std::getenv("MX_FUZZ_KNOWN");
    for (std::string_view s = env ? env : ""; !s.empty();) {
      const size_t bar = std::min(s.find('|'), s.size());
      if (bar > 0) texts.emplace_back(s.substr(0, bar));
      s.remove_prefix(std::min(bar + 1, s.size()));
    }
    hits.assign(texts.size(), 0);
  }
  ~Known() {
    for (size_t i = 0; i < texts.size(); ++i) {
      std::fprintf(stderr, "==FUZZ== known finding '%s' waived %zu times\n", texts[i].c_str(),
                   hits[i]);
    }
  }
  bool waive(std::string_view detail) {
    for (size_t i = 0; i < texts.size(); ++i) {
      if (detail.find(texts[i]) == std::string_view::npos) continue;
      ++hits[i];
      if (said.size() < 32 && std::find(said.begin(), said.end(), detail) == said.end()) {
        said.emplace_back(detail);
        std::fprintf(stderr, "==FUZZ== known finding (waived by MX_FUZZ_KNOWN): %.*s\n",
                     static_cast<int>(detail.size()), detail.data());
      }
      return true;
    }
    return false;
  }
};
inline Known& known() {
  static Known k;
  return k;
}

// Runs `body`; an exception leaving it is a bug of the parser (parsers report through Status).
template <typename F>
void guarded(const char* target, F&& body) {
  std::string what;
  try {
    body();
    return;
  } catch (const std::exception& e) {
    what = std::string("exception escaped the parser: ") + e.what();
  } catch (...) {
    what = "a non-std exception escaped the parser";
  }
  if (!known().waive(what)) fail(target, what);
}

// Reads a byte so that the sanitizer checks the address (the sink keeps the load).
inline volatile unsigned g_sink = 0;
inline void touch(const uint8_t* p) { g_sink = g_sink + *p; }

// With MX_FUZZ_VERBOSE set (replaying seeds by hand), says whether an input was accepted.
inline bool verbose() {
  static const bool kVerbose = std::getenv("MX_FUZZ_VERBOSE") != nullptr;
  return kVerbose;
}
inline void report(const char* what, bool ok, std::string_view detail = {}) {
  if (verbose()) {
    std::fprintf(stderr, "%s: %s%.*s\n", what,
                 ok ? "accepted" : "refused: ", static_cast<int>(detail.size()), detail.data());
  }
}

// Errors must name their source (the file label), as the loaders promise.
inline void expect_names(const std::string& message, const std::string& label) {
  if (message.find(label) == std::string::npos) fail("error without its source", message);
}

// Whether `r` holds a value (said on stderr with MX_FUZZ_VERBOSE). A refusal must name
// `label`, its source, as the loaders promise; an empty label skips that check.
template <typename R>
bool accepted(const char* what, const R& r, const std::string& label) {
  if (r.is_ok()) {
    report(what, true);
    return true;
  }
  report(what, false, r.status().message());
  if (!label.empty()) expect_names(r.status().message(), label);
  return false;
}

}  // namespace mx::fuzz

#define MX_FUZZ_CHECK(cond, detail)                                    \
  do {                                                                 \
    if (!(cond)) ::mx::fuzz::fail("invariant failed: " #cond, detail); \
  } while (0)

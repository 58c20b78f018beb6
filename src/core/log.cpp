#include "core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "core/check.h"

namespace mx {
namespace {

LogLevel initial_level() {
  // MX_LOG_LEVEL is a debug override; the CLI sets the level otherwise.
  LogLevel level = LogLevel::kInfo;
  if (const char* env = std::getenv("MX_LOG_LEVEL")) parse_log_level(env, &level);
  return level;
}

std::atomic<LogLevel> g_level{initial_level()};
std::atomic<int> g_rank{-1};
std::mutex g_mutex;

const char* level_tag(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "D";
    case LogLevel::kInfo:
      return "I";
    case LogLevel::kWarn:
      return "W";
    case LogLevel::kError:
      return "E";
    case LogLevel::kOff:
      break;
  }
  return "?";
}

}  // namespace

void set_log_level(LogLevel level) { g_level.store(level); }
LogLevel log_level() { return g_level.load(std::memory_order_relaxed); }
void set_log_rank(int rank) { g_rank.store(rank); }

bool parse_log_level(std::string_view text, LogLevel* out) {
  static constexpr std::pair<std::string_view, LogLevel> kNames[] = {{"debug", LogLevel::kDebug},
                                                                     {"info", LogLevel::kInfo},
                                                                     {"warn", LogLevel::kWarn},
                                                                     {"error", LogLevel::kError},
                                                                     {"off", LogLevel::kOff}};
  for (const auto& [name, level] : kNames) {
    if (text == name) {
      *out = level;
      return true;
    }
  }
  return false;
}

void log_message(LogLevel level, const std::string& message) {
  using clock = std::chrono::steady_clock;
  static const clock::time_point start = clock::now();
  const double secs = std::chrono::duration<double>(clock::now() - start).count();
  std::lock_guard<std::mutex> lock(g_mutex);
  const int rank = g_rank.load();
  if (rank >= 0) {
    std::fprintf(stderr, "[%s %9.3f r%d] %s\n", level_tag(level), secs, rank, message.c_str());
  } else {
    std::fprintf(stderr, "[%s %9.3f] %s\n", level_tag(level), secs, message.c_str());
  }
}

namespace detail {
void check_failed(const char* file, int line, const char* expr, const char* msg) {
  std::fprintf(stderr, "mxserve: check failed at %s:%d: %s %s\n", file, line, expr, msg);
  std::fflush(stderr);
  std::abort();
}
}  // namespace detail

}  // namespace mx

// One logging facade: levels, an optional rank prefix for multi-process runs, stderr output.
// Never call it from a hot loop.
#pragma once

#include <string>
#include <string_view>

namespace mx {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
// Parses "debug|info|warn|error|off"; returns false for anything else.
bool parse_log_level(std::string_view text, LogLevel* out);
// Set under MPI so each line says which rank wrote it; -1 means no prefix.
void set_log_rank(int rank);

void log_message(LogLevel level, const std::string& message);

}  // namespace mx

#define MX_LOG(level, msg)                             \
  do {                                                 \
    if (::mx::LogLevel::level >= ::mx::log_level()) {  \
      ::mx::log_message(::mx::LogLevel::level, (msg)); \
    }                                                  \
  } while (0)
#define MX_LOG_DEBUG(msg) MX_LOG(kDebug, msg)
#define MX_LOG_INFO(msg) MX_LOG(kInfo, msg)
#define MX_LOG_WARN(msg) MX_LOG(kWarn, msg)
#define MX_LOG_ERROR(msg) MX_LOG(kError, msg)

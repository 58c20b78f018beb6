// MX_CHECK guards invariants (bugs), always on; MX_DCHECK only in debug builds. Anything a
// user or a file can cause goes through Status instead.
#pragma once

namespace mx::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* expr, const char* msg);
}  // namespace mx::detail

#define MX_CHECK(cond)                                                      \
  do {                                                                      \
    if (!(cond)) ::mx::detail::check_failed(__FILE__, __LINE__, #cond, ""); \
  } while (0)

#define MX_CHECK_MSG(cond, msg)                                              \
  do {                                                                       \
    if (!(cond)) ::mx::detail::check_failed(__FILE__, __LINE__, #cond, msg); \
  } while (0)

#ifdef NDEBUG
#define MX_DCHECK(cond) \
  do {                  \
  } while (0)
#else
#define MX_DCHECK(cond) MX_CHECK(cond)
#endif

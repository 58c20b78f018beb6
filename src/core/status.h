// Status and Result<T>: the error channel for everything a user, a file or the network can
// cause. Messages name the file, tensor or field at fault; invariants use MX_CHECK instead.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace mx {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kDataLoss,  // a file is truncated or inconsistent
  kUnimplemented,
  kIoError,
  kOutOfRange,
  kInternal,
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "DataLoss: model.safetensors: tensor 'x' ends past the data"
  std::string to_string() const;

  // Prepends context ("while loading X: ...") so callers up the stack add what they know.
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string msg) {
  return {StatusCode::kInvalidArgument, std::move(msg)};
}
inline Status not_found(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
inline Status data_loss(std::string msg) { return {StatusCode::kDataLoss, std::move(msg)}; }
inline Status unimplemented(std::string msg) {
  return {StatusCode::kUnimplemented, std::move(msg)};
}
inline Status io_error(std::string msg) { return {StatusCode::kIoError, std::move(msg)}; }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.is_ok()) status_ = Status(StatusCode::kInternal, "Result built from an OK status");
  }

  bool is_ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  T& value() & {
    if (!value_) die();
    return *value_;
  }
  const T& value() const& {
    if (!value_) die();
    return *value_;
  }
  T&& value() && {
    if (!value_) die();
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  [[noreturn]] void die() const;

  std::optional<T> value_;
  Status status_;
};

[[noreturn]] void result_value_of_error(const Status& status);

template <typename T>
void Result<T>::die() const {
  result_value_of_error(status_);
}

}  // namespace mx

#define MX_STATUS_CONCAT_INNER(a, b) a##b
#define MX_STATUS_CONCAT(a, b) MX_STATUS_CONCAT_INNER(a, b)

// Returns the status from the enclosing function when `expr` (a Status) is not OK.
#define MX_RETURN_IF_ERROR(expr)                \
  do {                                          \
    ::mx::Status mx_status_ = (expr);           \
    if (!mx_status_.is_ok()) return mx_status_; \
  } while (0)

// Declares `lhs` from a Result<T> expression or returns its error.
#define MX_ASSIGN_OR_RETURN(lhs, expr) \
  MX_ASSIGN_OR_RETURN_IMPL(MX_STATUS_CONCAT(mx_result_, __LINE__), lhs, expr)
#define MX_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.is_ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

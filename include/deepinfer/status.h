// Status and Result<T>: how every fallible call in deepinfer reports failure.
// A Status is either ok or carries a code and a message naming what was wrong (file, tensor,
// field, request). Library code never throws, never exits and never prints; it returns these.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace deepinfer {

class [[nodiscard]] Status {
 public:
  enum class Code { kOk = 0, kInvalidArgument, kNotFound, kIoError, kCorrupt, kUnsupported, kInternal };

  Status() = default;
  static Status ok() { return Status(); }
  static Status invalid_argument(std::string msg) { return Status(Code::kInvalidArgument, std::move(msg)); }
  static Status not_found(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status io_error(std::string msg) { return Status(Code::kIoError, std::move(msg)); }
  static Status corrupt(std::string msg) { return Status(Code::kCorrupt, std::move(msg)); }
  static Status unsupported(std::string msg) { return Status(Code::kUnsupported, std::move(msg)); }
  static Status internal(std::string msg) { return Status(Code::kInternal, std::move(msg)); }

  bool is_ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "<code name>: <message>", or "ok".
  std::string to_string() const;

  // Prefixes the message with context ("loading model/config.json: ...").
  Status with_context(const std::string& context) const {
    if (is_ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

// Result<T> holds either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {   // NOLINT: implicit by design
    assert(!status_.is_ok() && "Result constructed from an ok Status without a value");
  }
  bool is_ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace deepinfer

// Early return on error: DI_RETURN_IF_ERROR(do_thing());
#define DI_RETURN_IF_ERROR(expr)              \
  do {                                        \
    ::deepinfer::Status di_status_ = (expr);  \
    if (!di_status_.is_ok()) return di_status_; \
  } while (0)

#define DI_CONCAT_INNER(a, b) a##b
#define DI_CONCAT(a, b) DI_CONCAT_INNER(a, b)
// DI_ASSIGN_OR_RETURN(auto x, make_x());
#define DI_ASSIGN_OR_RETURN(lhs, expr) DI_ASSIGN_OR_RETURN_IMPL(DI_CONCAT(di_result_, __LINE__), lhs, expr)
#define DI_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.is_ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

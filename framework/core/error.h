// Errors, one style per layer (docs/style: "errors with context").
//   - anelab::Error (an exception) for programming errors inside builders and for CLI-level failures;
//     its message starts with "[component]" and names the file / field / shape / value involved.
//   - anelab::Status / Result<T> at backend and file boundaries, where callers must be able to react
//     (e.g. a compile that fails because the per-process budget is spent).
#pragma once
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

#include "framework/core/untrusted.h"

namespace anelab {

// The message is stored through quote_untrusted (newlines kept): many messages quote a file's or a request's
// bytes (tensor names, metadata, JSON fields), and whoever prints what() (the CLI, the server, the dashboard)
// then never passes a terminal control sequence on. Printable text, UTF-8 included, is unchanged.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(quote_untrusted(msg, true)) {}
};

// Builds "[component] a b c" from any streamable parts.
template <typename... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

template <typename... Args>
[[noreturn]] void fail(const char* component, Args&&... args) {
  throw Error(cat("[", component, "] ", std::forward<Args>(args)...));
}

#define ANELAB_CHECK(cond, component, ...)               \
  do {                                                   \
    if (!(cond)) ::anelab::fail(component, __VA_ARGS__); \
  } while (0)

// Status codes a caller may branch on.
enum class Code {
  kOk = 0,
  kInvalidArgument,  // bad program / shapes / options
  kLimitExceeded,    // a device-profile limit (dimension, surface size, ...)
  kBudgetExhausted,  // per-process compile budget spent: caller should checkpoint + exec-restart
  kCompileFailed,    // the ANE compiler failed on a program the device profile accepts (maybe transient:
                     // the trainer checkpoints + exec-restarts once, docs/native_backend.md)
  kUnavailable,      // backend not available on this host
  kIoError,          // file / surface IO
  kInternal,
};

const char* code_name(Code c);

class Status {
 public:
  Status() = default;
  Status(Code code, std::string msg) : code_(code), msg_(std::move(msg)) {}
  static Status ok() { return {}; }
  bool is_ok() const { return code_ == Code::kOk; }
  explicit operator bool() const { return is_ok(); }
  Code code() const { return code_; }
  const std::string& message() const { return msg_; }
  // Throws anelab::Error carrying the message when not ok.
  void throw_if_error() const {
    if (!is_ok()) throw Error(msg_);
  }

 private:
  Code code_ = Code::kOk;
  std::string msg_;
};

template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT(implicit)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(implicit)
  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const {
    static const Status ok;
    return is_ok() ? ok : std::get<Status>(v_);
  }
  T& value() {
    if (!is_ok()) throw Error(std::get<Status>(v_).message());
    return std::get<T>(v_);
  }
  const T& value() const {
    if (!is_ok()) throw Error(std::get<Status>(v_).message());
    return std::get<T>(v_);
  }
  T& operator*() { return value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace anelab

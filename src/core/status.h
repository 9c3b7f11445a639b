// Status, Expected<T> and the checked-call macros: the three error tiers of vlm.cpp.
//  1. Recoverable failures at the edges (files, network, user input, bad samples) return Status / Expected<T>.
//  2. Broken invariants abort through VLM_CHECK with file:line, rank and host.
//  3. Vendor calls (CUDA, cuBLAS, NCCL, MPI) go through one generic status macro (see cuda_check.h).
// Library code never calls exit().
#pragma once

#include <sstream>
#include <string>
#include <utility>
#include <variant>

namespace vlm {

// Concatenates any streamable arguments into one string: str("step ", 3, ": ", 0.5f).
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

enum class StatusCode { ok, invalid_argument, not_found, io_error, parse_error, out_of_range, unsupported, internal };

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::ok; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "parse_error: config.toml: train.lr: must be > 0"
  std::string to_string() const;
  // Returns a copy with `context` prepended to the message ("reading shard x.tar: ...").
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::ok;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return Status(StatusCode::invalid_argument, std::move(m)); }
inline Status not_found(std::string m) { return Status(StatusCode::not_found, std::move(m)); }
inline Status io_error(std::string m) { return Status(StatusCode::io_error, std::move(m)); }
inline Status parse_error(std::string m) { return Status(StatusCode::parse_error, std::move(m)); }
inline Status out_of_range(std::string m) { return Status(StatusCode::out_of_range, std::move(m)); }
inline Status unsupported(std::string m) { return Status(StatusCode::unsupported, std::move(m)); }
inline Status internal_error(std::string m) { return Status(StatusCode::internal, std::move(m)); }

// A value or the Status that explains why there is none. Accessing the value of an error aborts.
template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Expected(Status status) : v_(std::move(status)) {  // NOLINT
    check_not_ok();
  }

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<1>(v_);
  }
  T& value() & {
    check_ok();
    return std::get<0>(v_);
  }
  const T& value() const& {
    check_ok();
    return std::get<0>(v_);
  }
  T&& value() && {
    check_ok();
    return std::get<0>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void check_ok() const;
  void check_not_ok() const;
  std::variant<T, Status> v_;
};

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& message);
}  // namespace detail

template <class T>
void Expected<T>::check_ok() const {
  if (!ok()) detail::check_failed(__FILE__, __LINE__, "Expected::ok()", std::get<1>(v_).to_string());
}
template <class T>
void Expected<T>::check_not_ok() const {
  if (std::get<1>(v_).ok()) detail::check_failed(__FILE__, __LINE__, "!status.ok()", "Expected built from an ok Status");
}

}  // namespace vlm

// Aborts with file:line, rank and host when `cond` is false. Extra arguments are streamed into the message.
#define VLM_CHECK(cond, ...)                                                                  \
  do {                                                                                        \
    if (!(cond)) ::vlm::detail::check_failed(__FILE__, __LINE__, #cond, ::vlm::str(__VA_ARGS__)); \
  } while (0)

#define VLM_FAIL(...) ::vlm::detail::check_failed(__FILE__, __LINE__, "unreachable", ::vlm::str(__VA_ARGS__))

#define VLM_CONCAT_INNER(a, b) a##b
#define VLM_CONCAT(a, b) VLM_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` (a Status) is not ok.
#define VLM_RETURN_IF_ERROR(expr)            \
  do {                                       \
    ::vlm::Status _vlm_s = (expr);           \
    if (!_vlm_s.ok()) return _vlm_s;         \
  } while (0)

// VLM_ASSIGN_OR_RETURN(auto x, expected_expr): unwraps an Expected or returns its Status.
#define VLM_ASSIGN_OR_RETURN(lhs, expr) VLM_ASSIGN_OR_RETURN_IMPL(VLM_CONCAT(_vlm_e, __LINE__), lhs, expr)
#define VLM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

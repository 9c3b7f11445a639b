// Status formatting and the abort path of VLM_CHECK.
#include "core/status.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "core/logging.h"

namespace vlm {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::ok: return "ok";
    case StatusCode::invalid_argument: return "invalid_argument";
    case StatusCode::not_found: return "not_found";
    case StatusCode::io_error: return "io_error";
    case StatusCode::parse_error: return "parse_error";
    case StatusCode::out_of_range: return "out_of_range";
    case StatusCode::unsupported: return "unsupported";
    case StatusCode::internal: return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& message) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::fprintf(stderr, "\n[vlm FATAL] %s:%d rank %d host %s: check failed: %s%s%s\n", file, line, log_rank(), host,
               cond, message.empty() ? "" : ": ", message.c_str());
  std::fflush(stderr);
  std::abort();
}
}  // namespace detail

}  // namespace vlm

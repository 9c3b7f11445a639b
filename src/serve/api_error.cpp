// OpenAI-shaped errors.
#include "serve/api_error.h"

#include <nlohmann/json.hpp>

namespace vlm::serve {

namespace {
ApiError make(int status, std::string type, std::string param, std::string message, std::string code) {
  return ApiError{status, std::move(message), std::move(type), std::move(param), std::move(code)};
}
}  // namespace

ApiError bad_request(std::string param, std::string message, std::string code) {
  return make(400, "invalid_request_error", std::move(param), std::move(message), std::move(code));
}
ApiError unprocessable(std::string param, std::string message, std::string code) {
  return make(422, "invalid_request_error", std::move(param), std::move(message), std::move(code));
}
ApiError too_large(std::string param, std::string message) {
  return make(413, "invalid_request_error", std::move(param), std::move(message), "payload_too_large");
}
ApiError unauthorized(std::string message) {
  return make(401, "authentication_error", "", std::move(message), "invalid_api_key");
}
ApiError not_found_error(std::string param, std::string message, std::string code) {
  return make(404, "invalid_request_error", std::move(param), std::move(message), std::move(code));
}
ApiError rate_limited(std::string message) {
  return make(429, "rate_limit_error", "", std::move(message), "queue_full");
}
ApiError unavailable(std::string message) { return make(503, "server_error", "", std::move(message), "shutting_down"); }
ApiError server_error(std::string message) { return make(500, "server_error", "", std::move(message), ""); }
ApiError timeout_error(std::string message) {
  return make(504, "server_error", "", std::move(message), "request_timeout");
}

std::string error_body(const ApiError& e) {
  nlohmann::json j;
  j["error"]["message"] = e.message;
  j["error"]["type"] = e.type;
  j["error"]["param"] = e.param.empty() ? nlohmann::json() : nlohmann::json(e.param);
  j["error"]["code"] = e.code.empty() ? nlohmann::json() : nlohmann::json(e.code);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace vlm::serve

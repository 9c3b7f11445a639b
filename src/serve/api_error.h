// Errors as the OpenAI API returns them: an HTTP status and {"error": {"message", "type", "param", "code"}}, where
// `param` names the request field at fault (e.g. "messages[0].content[1].image_url.url"). Clients (the official
// SDKs included) raise typed exceptions from the status and show the message.
#pragma once

#include <string>

namespace vlm::serve {

struct ApiError {
  int status = 0;  // HTTP status; 0: no error
  std::string message;
  std::string type;   // "invalid_request_error", "authentication_error", "rate_limit_error", "server_error", ...
  std::string param;  // the request field at fault, or empty
  std::string code;   // a machine-readable reason ("context_length_exceeded", "model_not_found"), or empty
  bool ok() const { return status == 0; }
};

// 400: the request is malformed (bad JSON, a wrong type, a value out of range, bad base64).
ApiError bad_request(std::string param, std::string message, std::string code = "");
// 422: well-formed but unprocessable (an image that does not decode or exceeds the pixel limit).
ApiError unprocessable(std::string param, std::string message, std::string code = "");
// 413: the body or one image is over its size limit.
ApiError too_large(std::string param, std::string message);
ApiError unauthorized(std::string message);
ApiError not_found_error(std::string param, std::string message, std::string code);
ApiError rate_limited(std::string message);   // 429: the queue is full
ApiError unavailable(std::string message);    // 503: shutting down
ApiError server_error(std::string message);   // 500
ApiError timeout_error(std::string message);  // 504: the per-request deadline passed

// {"error": {...}} with null for an empty param or code.
std::string error_body(const ApiError& e);

}  // namespace vlm::serve

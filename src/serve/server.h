// `vlm serve`'s HTTP side: an OpenAI-compatible API over the engine loop, on cpp-httplib's threaded server.
//   POST /v1/chat/completions, POST /v1/completions  (JSON, or server-sent events with "stream": true)
//   GET /v1/models, GET /health, GET /metrics (Prometheus text)
// Each generation request is parsed and built into an engine request on its HTTP thread, handed to the engine
// loop, and answered from its channel; a streamed client that goes away (a failed write) or a non-streamed one that
// closes its connection cancels the request, and so does the per-request deadline. With an API key every endpoint
// but /health needs "Authorization: Bearer KEY" (compared in constant time). Requests never name files: images come
// inline. Thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "core/status.h"
#include "data/tokenizer/tokenizer.h"
#include "serve/api_prompt.h"
#include "serve/api_request.h"
#include "serve/api_response.h"
#include "serve/engine_loop.h"
#include "serve/metrics.h"
#include "serve/remote_image.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace vlm::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (port() tells which)
  std::string api_key;
  std::string model_name;  // what /v1/models lists and requests must name (or leave out)
  size_t max_body_bytes = size_t{32} << 20;
  double request_timeout_s = 600;
  int http_threads = 0;  // 0: enough for every request the loop accepts, plus a few for /health and /metrics
  RequestLimits limits;
  RemoteImageOptions remote_images;  // used when limits.allow_remote_images
};

// True when both strings are equal, in time that depends only on their lengths.
bool constant_time_equal(const std::string& a, const std::string& b);

class Server {
 public:
  Server(ServerOptions options, EngineLoop& loop, const ApiPromptBuilder& prompts, const Tokenizer& tokenizer,
         ServeMetrics& metrics);
  ~Server();

  Status bind();
  int port() const { return port_; }
  // Serves until shutdown() ends it.
  void serve();
  // Refuses new requests (503), lets in-flight ones finish for up to `deadline_s`, cancels the rest, then stops
  // listening (serve() returns). Safe from any thread, once.
  void shutdown(double deadline_s);

 private:
  void handle_generation(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  void reply_stream(const ResponseMeta& meta, const ApiRequest& api, std::shared_ptr<RequestChannel> channel,
                    httplib::Response& res);
  void reply_whole(const ResponseMeta& meta, const std::shared_ptr<RequestChannel>& channel,
                   const httplib::Request& req, httplib::Response& res);
  std::string next_id(Endpoint endpoint);
  Clock::duration timeout() const;

  ServerOptions options_;
  EngineLoop& loop_;
  const ApiPromptBuilder& prompts_;
  const Tokenizer& tokenizer_;
  ServeMetrics& metrics_;
  std::unique_ptr<httplib::Server> http_;
  int port_ = 0;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> active_{0};  // generation requests whose response is not fully written yet
  std::atomic<uint64_t> next_id_{0};
  const uint64_t id_salt_;
};

}  // namespace vlm::serve

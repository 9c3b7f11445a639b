// The HTTP endpoints of `vlm serve` (cpp-httplib) over the engine loop.
#include "serve/server.h"

#include <httplib.h>

#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/logging.h"
#include "core/philox.h"
#include "serve/peer_socket.h"

namespace vlm::serve {

namespace {

using json = nlohmann::json;

// How often a waiting handler looks at its client (a non-streamed one polls its socket, a stream wakes to check its
// deadline), and how long a stream may stay quiet before it sends a keep-alive comment.
constexpr auto kPoll = std::chrono::milliseconds(25);
constexpr auto kStreamPing = std::chrono::seconds(1);

void reply_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_body(e), "application/json");
}

// The engine loop's failures (validation, timeout, shutdown) keep their status; an engine error is a 500.
ApiError channel_error(const RequestChannel& ch) {
  if (!ch.error().ok()) return ch.error();
  if (!ch.answer().status.ok()) return server_error(ch.answer().status.message());
  return {};
}

// Set by a generation handler, cleared by the logger that httplib calls on the same thread after the response.
thread_local bool counted_on_this_thread = false;

std::string endpoint_label(const std::string& path) {
  for (const char* p : {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics"})
    if (path == p) return p;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  return "other";
}

}  // namespace

bool constant_time_equal(const std::string& a, const std::string& b) {
  // Compares over the longer length so the time does not reveal the matching prefix; lengths leak only as length.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

Server::Server(ServerOptions options, EngineLoop& loop, const ApiPromptBuilder& prompts, const Tokenizer& tokenizer,
               ServeMetrics& metrics)
    : options_(std::move(options)),
      loop_(loop),
      prompts_(prompts),
      tokenizer_(tokenizer),
      metrics_(metrics),
      http_(std::make_unique<httplib::Server>()),
      id_salt_(fmix64(static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()))) {
  httplib::Server& h = *http_;
  const size_t threads = options_.http_threads > 0 ? static_cast<size_t>(options_.http_threads)
                                                   : static_cast<size_t>(loop_.max_pending()) + 8;
  h.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  h.set_payload_max_length(options_.max_body_bytes);
  h.set_read_timeout(30, 0);
  h.set_write_timeout(30, 0);
  h.set_keep_alive_timeout(5);
  h.set_tcp_nodelay(true);  // stream chunks are small writes: without it Nagle + delayed ACK hold each ~40 ms

  h.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options_.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    const std::string given = auth.rfind(prefix, 0) == 0 ? auth.substr(prefix.size()) : std::string();
    if (constant_time_equal(given, options_.api_key)) return httplib::Server::HandlerResponse::Unhandled;
    reply_error(res, unauthorized(auth.empty() ? "no API key: send \"Authorization: Bearer KEY\""
                                               : "the API key is not valid"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Errors httplib answers itself (413 over max_body_bytes, 404 unknown route, 400 bad HTTP) in OpenAI's shape.
  h.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    if (res.status == 413)
      e = too_large("", "the request body is over the limit of " + std::to_string(options_.max_body_bytes) + " bytes");
    else if (res.status == 404)
      e = not_found_error("", "no route " + req.method + " " + req.path, "unknown_url");
    else if (res.status == 405)
      e = ApiError{405, "method " + req.method + " is not allowed on " + req.path, "invalid_request_error", "", ""};
    else
      e = ApiError{res.status, "HTTP error " + std::to_string(res.status), "invalid_request_error", "", ""};
    reply_error(res, e);
    return httplib::Server::HandlerResponse::Handled;
  }));
  h.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.count_request(endpoint_label(req.path), res.status);
    if (counted_on_this_thread) {
      counted_on_this_thread = false;
      active_.fetch_sub(1);
    }
  });

  h.Post("/v1/chat/completions",
         [this](const httplib::Request& req, httplib::Response& res) { handle_generation(Endpoint::chat, req, res); });
  h.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(Endpoint::completion, req, res);
  });
  auto model_object = [this] {
    return json{{"id", options_.model_name},
                {"object", "model"},
                {"created", 0},
                {"owned_by", "vlm.cpp"},
                {"max_model_len", loop_.max_context()}};
  };
  h.Get("/v1/models", [model_object](const httplib::Request&, httplib::Response& res) {
    res.set_content(json{{"object", "list"}, {"data", json::array({model_object()})}}.dump(), "application/json");
  });
  // What the clients' models.retrieve(id) asks.
  h.Get(R"(/v1/models/(.+))", [this, model_object](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    if (id != options_.model_name)
      return reply_error(
          res, not_found_error("model",
                               "the model '" + id + "' does not exist; this server has '" + options_.model_name + "'",
                               "model_not_found"));
    res.set_content(model_object().dump(), "application/json");
  });
  h.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (draining_) {
      reply_error(res, unavailable("the server is shutting down"));
      return;
    }
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  h.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(loop_.snapshot()), "text/plain; version=0.0.4");
  });
}

Server::~Server() = default;

Status Server::bind() {
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
    if (port_ <= 0) return io_error("cannot listen on " + options_.host + " (any port)");
  } else {
    if (!http_->bind_to_port(options_.host, options_.port))
      return io_error("cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                      " (in use, or not an address of this machine)");
    port_ = options_.port;
  }
  return Status();
}

void Server::serve() { http_->listen_after_bind(); }

void Server::shutdown(double deadline_s) {
  draining_ = true;
  const Clock::time_point until =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(deadline_s));
  // Handlers, not just engine requests: an answered request is in flight until its last bytes are written.
  while (active_ > 0 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (active_ > 0) {
    VLM_INFO("serve: cancelling ", loop_.in_flight(), " request(s) still running after ", deadline_s, " s");
    loop_.cancel_all(unavailable("the server is shutting down"));
    // The handlers answer their clients with the error; give them a moment to write it.
    const auto grace = Clock::now() + std::chrono::seconds(2);
    while (active_ > 0 && Clock::now() < grace) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  http_->stop();
}

Clock::duration Server::timeout() const {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.request_timeout_s));
}

std::string Server::next_id(Endpoint endpoint) {
  const uint64_t n = next_id_.fetch_add(1);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fmix64(n ^ id_salt_)));
  return std::string(endpoint == Endpoint::chat ? "chatcmpl-" : "cmpl-") + buf;
}

void Server::handle_generation(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  // Counted until the response is written (streams included): the logger, which httplib calls on this thread once
  // the response is out, takes it off.
  active_.fetch_add(1);
  counted_on_this_thread = true;
  if (draining_) return reply_error(res, unavailable("the server is shutting down"));
  ApiRequest api;
  if (ApiError e = parse_api_request(endpoint, req.body, options_.limits, &api); !e.ok()) return reply_error(res, e);
  if (!api.model.empty() && api.model != options_.model_name)
    return reply_error(
        res, not_found_error(
                 "model", "the model '" + api.model + "' does not exist; this server has '" + options_.model_name + "'",
                 "model_not_found"));
  if (ApiError e = fetch_remote_images(&api, options_.remote_images); !e.ok()) return reply_error(res, e);
  ResponseMeta meta;
  meta.endpoint = endpoint;
  meta.id = next_id(endpoint);
  meta.created = static_cast<int64_t>(std::time(nullptr));
  meta.model = options_.model_name;
  meta.logprobs = api.logprobs;
  infer::Request request;
  if (ApiError e = prompts_.build(api, meta.id, &request); !e.ok()) return reply_error(res, e);
  meta.stop_ids = request.sampling.stop_ids;
  std::shared_ptr<RequestChannel> channel = loop_.submit(std::move(request), api.stream);
  if (!channel) {
    metrics_.count_rejected();
    return reply_error(res, rate_limited("the server is busy: the queue is full; retry later"));
  }
  if (api.stream) return reply_stream(meta, api, std::move(channel), res);
  reply_whole(meta, channel, req, res);
}

void Server::reply_whole(const ResponseMeta& meta, const std::shared_ptr<RequestChannel>& channel,
                         const httplib::Request& req, httplib::Response& res) {
  const Clock::time_point deadline = channel->arrival() + timeout();
  const int fd = find_peer_socket(req.remote_addr, req.remote_port, port_);
  while (!channel->wait(std::min(deadline, Clock::now() + kPoll), nullptr)) {
    if (fd >= 0 && peer_closed(fd)) {
      loop_.cancel(channel, ApiError{499, "the client closed the connection", "invalid_request_error", "", ""});
    } else if (Clock::now() >= deadline) {
      loop_.cancel(channel, timeout_error("the request ran past the server's limit of " +
                                          std::to_string(options_.request_timeout_s) + " s"));
    }
  }
  if (ApiError e = channel_error(*channel); !e.ok()) return reply_error(res, e);
  res.set_content(response_body(meta, channel->answer(), tokenizer_), "application/json");
}

namespace {
struct StreamState {
  std::shared_ptr<RequestChannel> channel;
  ResponseMeta meta;
  bool include_usage = false;
  int n = 1;
  std::vector<TextStreamer> streamers;
  bool started = false, finished = false;
  Clock::time_point deadline, last_write;
};
}  // namespace

void Server::reply_stream(const ResponseMeta& meta, const ApiRequest& api, std::shared_ptr<RequestChannel> channel,
                          httplib::Response& res) {
  auto st = std::make_shared<StreamState>();
  st->channel = std::move(channel);
  st->meta = meta;
  st->include_usage = api.include_usage;
  st->n = api.sampling.n;
  for (int i = 0; i < st->n; ++i) st->streamers.emplace_back(tokenizer_, api.sampling.stop);
  st->deadline = st->channel->arrival() + timeout();
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st](size_t, httplib::DataSink& sink) {
        std::string out;
        if (!st->started) {
          st->started = true;
          if (st->meta.endpoint == Endpoint::chat)
            for (int i = 0; i < st->n; ++i) out += stream_chunk(st->meta, i, "", true, "", {}, tokenizer_);
        }
        std::vector<StreamToken> tokens;
        const bool done = st->channel->wait(std::min(st->deadline, Clock::now() + kPoll), &tokens);
        std::vector<std::string> text(static_cast<size_t>(st->n));
        std::vector<ChunkTokens> chunk(static_cast<size_t>(st->n));
        for (const StreamToken& t : tokens) {
          if (t.completion < 0 || t.completion >= st->n || t.stop_id) continue;
          const size_t c = static_cast<size_t>(t.completion);
          text[c] += st->streamers[c].push(t.token);
          chunk[c].ids.push_back(t.token);
          chunk[c].logprobs.push_back(t.logprob);
          chunk[c].top.push_back(t.top);
        }
        for (int i = 0; i < st->n; ++i)
          // A chunk for every batch of new tokens, its text empty while held back (a stop string's prefix, half a
          // character, ids without text): clients see the tokens' timing, as OpenAI's stream shows it.
          if (!text[static_cast<size_t>(i)].empty() || !chunk[static_cast<size_t>(i)].ids.empty())
            out += stream_chunk(st->meta, i, text[static_cast<size_t>(i)], false, "", chunk[static_cast<size_t>(i)],
                                tokenizer_);
        if (done) {
          if (ApiError e = channel_error(*st->channel); !e.ok()) {
            out += stream_error_event(error_body(e));
          } else {
            const infer::RequestOutput& answer = st->channel->answer();
            for (size_t i = 0; i < answer.completions.size() && i < st->streamers.size(); ++i) {
              const infer::Completion& c = answer.completions[i];
              out += stream_chunk(st->meta, static_cast<int>(i), st->streamers[i].finish(c.text), false,
                                  c.finish_reason, {}, tokenizer_);
            }
            if (st->include_usage) out += stream_usage_chunk(st->meta, answer);
          }
          out += kStreamDone;
          st->finished = true;
          if (!sink.write(out.data(), out.size())) return false;
          sink.done();
          return true;
        }
        if (Clock::now() >= st->deadline)
          loop_.cancel(st->channel, timeout_error("the request ran past the server's limit of " +
                                                  std::to_string(options_.request_timeout_s) + " s"));
        // A quiet stream (queued, or prefilling a long prompt) still writes now and then: a client that left is
        // noticed by the failed write.
        if (out.empty() && Clock::now() - st->last_write >= kStreamPing) out = ": keep-alive\n\n";
        if (!out.empty()) {
          st->last_write = Clock::now();
          if (!sink.write(out.data(), out.size())) return false;
        }
        return true;
      },
      [this, st](bool) {
        if (!st->finished)
          loop_.cancel(st->channel, ApiError{499, "the client went away", "invalid_request_error", "", ""});
      });
}

}  // namespace vlm::serve

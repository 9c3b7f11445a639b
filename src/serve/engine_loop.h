// The engine's own thread and the hand-off to the HTTP threads. The Engine is not thread-safe, so one thread owns
// it: it takes submitted requests and cancellations from a locked queue, steps the engine while anything is
// unfinished, and delivers each request's tokens (when streaming) and answer through the request's channel, on
// which the HTTP thread that submitted it waits. At most max_pending requests are queued or running at once;
// submit() refuses more (the server answers 429). Cancelling (client gone, timeout, shutdown) frees the request's
// KV blocks at once (Engine::cancel).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "infer/engine.h"
#include "serve/api_error.h"
#include "serve/metrics.h"

namespace vlm::serve {

using Clock = std::chrono::steady_clock;

struct StreamToken {
  int completion = 0;
  int32_t token = -1;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
  bool stop_id = false;
};

// One request's way back. The engine thread pushes; the HTTP thread waits.
class RequestChannel {
 public:
  RequestChannel(infer::Request request, bool stream) : request_(std::move(request)), stream_(stream) {}

  // Waits until tokens or the answer are there or `until` passes; moves the tokens into `tokens`. True once the
  // answer (or error) is in: then answer() / error() hold it.
  bool wait(Clock::time_point until, std::vector<StreamToken>* tokens);
  const infer::RequestOutput& answer() const { return answer_; }
  const ApiError& error() const { return error_; }  // ok() unless the loop failed the request itself
  Clock::time_point arrival() const { return arrival_; }

 private:
  friend class EngineLoop;
  void push(StreamToken t);
  void finish(infer::RequestOutput out, ApiError error);

  infer::Request request_;  // moved into the engine when added
  const bool stream_;
  const Clock::time_point arrival_ = Clock::now();
  int64_t number_ = -1;                                       // the engine's number once added (engine thread only)
  std::vector<std::optional<Clock::time_point>> last_token_;  // per completion (engine thread only)
  std::atomic<bool> cancelled_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<StreamToken> tokens_;
  bool done_ = false;
  infer::RequestOutput answer_;
  ApiError error_;
};

class EngineLoop {
 public:
  // Builds the engine (its on_token hook is the loop's) and starts the thread.
  EngineLoop(VlmModel& model, infer::EngineOptions options, int max_pending, ServeMetrics& metrics);
  ~EngineLoop();

  // Queues a request; nullptr when max_pending requests are already in.
  std::shared_ptr<RequestChannel> submit(infer::Request request, bool stream);
  // The request is dropped (its blocks freed) and its channel answered with `why` (if not answered already).
  void cancel(const std::shared_ptr<RequestChannel>& channel, ApiError why);
  // Cancels everything queued or running with `why` (shutdown).
  void cancel_all(ApiError why);
  void stop();  // cancels everything and joins the thread

  int64_t in_flight() const { return in_flight_.load(); }
  int max_pending() const { return max_pending_; }
  int64_t max_context() const { return max_context_; }
  EngineSnapshot snapshot() const;

 private:
  void run();
  void on_token(const infer::TokenEvent& e);
  void retire(const std::shared_ptr<RequestChannel>& ch, infer::RequestOutput out, ApiError error);

  std::unique_ptr<infer::Engine> engine_;
  const int max_pending_;
  ServeMetrics& metrics_;
  int64_t max_context_ = 0;
  std::atomic<int64_t> in_flight_{0};

  std::mutex mutex_;  // guards the queues below and stop_
  std::condition_variable cv_;
  std::vector<std::shared_ptr<RequestChannel>> incoming_;
  std::vector<std::pair<std::shared_ptr<RequestChannel>, ApiError>> cancels_;
  std::optional<ApiError> cancel_all_;
  bool stop_ = false;

  std::map<int64_t, std::shared_ptr<RequestChannel>> live_;  // engine thread only: number -> channel
  mutable std::mutex snapshot_mutex_;
  EngineSnapshot snapshot_;
  std::thread thread_;
};

}  // namespace vlm::serve

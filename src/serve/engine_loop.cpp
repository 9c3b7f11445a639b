// The engine thread: submissions and cancellations in, tokens and answers out through per-request channels.
#include "serve/engine_loop.h"

#include "core/logging.h"

namespace vlm::serve {

bool RequestChannel::wait(Clock::time_point until, std::vector<StreamToken>* tokens) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait_until(lock, until, [&] { return done_ || !tokens_.empty(); });
  if (tokens) {
    for (StreamToken& t : tokens_) tokens->push_back(std::move(t));
  }
  tokens_.clear();
  return done_;
}

void RequestChannel::push(StreamToken t) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tokens_.push_back(std::move(t));
  }
  cv_.notify_all();
}

void RequestChannel::finish(infer::RequestOutput out, ApiError error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return;
    answer_ = std::move(out);
    error_ = std::move(error);
    done_ = true;
  }
  cv_.notify_all();
}

EngineLoop::EngineLoop(VlmModel& model, infer::EngineOptions options, int max_pending, ServeMetrics& metrics)
    : max_pending_(max_pending), metrics_(metrics) {
  options.on_token = [this](const infer::TokenEvent& e) { on_token(e); };
  engine_ = std::make_unique<infer::Engine>(model, options);
  max_context_ = engine_->max_context();
  snapshot_.engine = engine_->stats();
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() { stop(); }

std::shared_ptr<RequestChannel> EngineLoop::submit(infer::Request request, bool stream) {
  int64_t n = in_flight_.load();
  do {
    if (n >= max_pending_) return nullptr;
  } while (!in_flight_.compare_exchange_weak(n, n + 1));
  auto ch = std::make_shared<RequestChannel>(std::move(request), stream);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    incoming_.push_back(ch);
  }
  cv_.notify_all();
  return ch;
}

void EngineLoop::cancel(const std::shared_ptr<RequestChannel>& channel, ApiError why) {
  channel->cancelled_ = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancels_.emplace_back(channel, std::move(why));
  }
  cv_.notify_all();
}

void EngineLoop::cancel_all(ApiError why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancel_all_ = std::move(why);
  }
  cv_.notify_all();
}

void EngineLoop::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

EngineSnapshot EngineLoop::snapshot() const {
  std::lock_guard<std::mutex> lock(snapshot_mutex_);
  return snapshot_;
}

void EngineLoop::retire(const std::shared_ptr<RequestChannel>& ch, infer::RequestOutput out, ApiError error) {
  if (out.status.ok() && error.ok()) {
    int64_t generated = 0;
    for (const infer::Completion& c : out.completions) generated += static_cast<int64_t>(c.tokens.size());
    metrics_.add_tokens(out.prompt_tokens, generated);
    metrics_.observe_request(std::chrono::duration<double>(Clock::now() - ch->arrival()).count());
  }
  // The slot is free before the client hears the answer: a client that sends its next request at once must find it.
  in_flight_.fetch_sub(1);
  ch->finish(std::move(out), std::move(error));
}

void EngineLoop::on_token(const infer::TokenEvent& e) {
  auto it = live_.find(e.request);
  if (it == live_.end()) return;
  RequestChannel& ch = *it->second;
  const Clock::time_point now = Clock::now();
  if (ch.last_token_.size() <= static_cast<size_t>(e.completion)) ch.last_token_.resize(e.completion + 1);
  auto& last = ch.last_token_[static_cast<size_t>(e.completion)];
  if (!last) {
    if (e.completion == 0) metrics_.observe_first_token(std::chrono::duration<double>(now - ch.arrival()).count());
  } else {
    metrics_.observe_inter_token(std::chrono::duration<double>(now - *last).count());
  }
  last = now;
  if (!ch.stream_) return;
  StreamToken t;
  t.completion = e.completion;
  t.token = e.token;
  t.logprob = e.logprob;
  if (e.top) t.top = *e.top;
  t.stop_id = e.stop_id;
  ch.push(std::move(t));
}

void EngineLoop::run() {
  for (;;) {
    std::vector<std::shared_ptr<RequestChannel>> incoming;
    std::vector<std::pair<std::shared_ptr<RequestChannel>, ApiError>> cancels;
    std::optional<ApiError> cancel_all;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] {
        return stop_ || !incoming_.empty() || !cancels_.empty() || cancel_all_ || engine_->has_unfinished();
      });
      incoming.swap(incoming_);
      cancels.swap(cancels_);
      cancel_all.swap(cancel_all_);
      stopping = stop_;
    }
    if (stopping && !cancel_all) cancel_all = unavailable("the server is shutting down");
    for (auto& ch : incoming) {
      if (ch->cancelled_) continue;  // its cancellation is in `cancels`
      if (Status s = engine_->validate(ch->request_); !s.ok()) {
        retire(ch, {}, bad_request("", s.message()));
        continue;
      }
      const int64_t number = engine_->add_request(std::move(ch->request_));
      ch->number_ = number;
      live_[number] = ch;
    }
    for (auto& [ch, why] : cancels) {
      bool pending = false;
      if (ch->number_ >= 0) {
        pending = live_.erase(ch->number_) > 0;
        if (pending) engine_->cancel(ch->number_);
      } else {
        pending = true;  // cancelled before it was added
      }
      if (pending) {
        metrics_.count_cancelled();
        retire(ch, {}, std::move(why));
      }
    }
    if (cancel_all) {
      for (auto& [number, ch] : live_) {
        engine_->cancel(number);
        metrics_.count_cancelled();
        retire(ch, {}, *cancel_all);
      }
      live_.clear();
    }
    if (engine_->has_unfinished()) {
      for (infer::RequestOutput& out : engine_->step()) {
        auto it = live_.find(out.request);
        if (it == live_.end()) continue;
        std::shared_ptr<RequestChannel> ch = std::move(it->second);
        live_.erase(it);
        ApiError error;
        if (!out.status.ok())
          error = out.status.code() == StatusCode::invalid_argument ? bad_request("", out.status.message())
                                                                    : server_error(out.status.message());
        retire(ch, std::move(out), std::move(error));
      }
    }
    EngineSnapshot snap;
    snap.engine = engine_->stats();
    snap.running = snap.engine.running_seqs;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      snap.waiting = static_cast<int64_t>(incoming_.size()) + snap.engine.waiting_seqs;
    }
    {
      std::lock_guard<std::mutex> lock(snapshot_mutex_);
      snapshot_ = snap;
    }
    if (stopping && live_.empty()) break;
  }
}

}  // namespace vlm::serve

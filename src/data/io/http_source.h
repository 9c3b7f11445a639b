// HttpSource: an http:// or https:// shard streamed through libcurl with bounded memory and exact resume.
//
// The body flows from curl's write callback into a fixed-size ring buffer that read() drains; when the ring is
// full the transfer is paused (curl's multi interface, driven from read(); no extra thread), so memory stays at
// `buffer_size` plus one curl chunk (16 KiB) whatever the shard size. Requests are HTTP/1.1, where a pause really
// stops reading the socket.
// Failures: HTTP 4xx (except 408/429) end the stream at once (404/410 -> not_found, others io_error, both naming the
// URL and status). 5xx, 408, 429, network errors, timeouts and connections dropped mid-body are retried with
// exponential backoff and jitter; a retry after bytes were received asks for `Range: bytes=N-` from the first byte
// not yet received and checks the 206 Content-Range (a 200 means the server ignored Range: its first N bytes are
// discarded here), so the bytes delivered are exactly the file's. `max_attempts` bounds consecutive attempts that
// bring no new byte; an attempt that makes progress resets the count.
// Redirects are followed; curl's standard proxy variables (http_proxy, https_proxy, no_proxy, ...) are honoured.
// Used by one thread at a time, except stats(), which may be read from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "data/io/byte_source.h"

namespace vlm {

struct HttpOptions {
  size_t buffer_size = 4u << 20;         // ring buffer bytes (at least kMinBufferSize is used)
  int max_attempts = 6;                  // consecutive attempts without progress before giving up (>= 1)
  double retry_base_delay_s = 0.5;       // backoff before retry k (1-based): base * 2^(k-1), jittered to [50%, 100%]
  double retry_max_delay_s = 30.0;       // cap on one backoff
  long connect_timeout_ms = 15000;
  long low_speed_limit = 1024;           // bytes/s; a transfer slower than this for low_speed_time_s is retried
  long low_speed_time_s = 30;            // 0 disables the low-speed timeout
  long max_redirects = 10;
  std::string user_agent = "vlm.cpp";
  std::vector<std::string> headers;      // extra request headers, "Name: value" (e.g. an Authorization header)
};

// Counters for metrics; a snapshot.
struct HttpStats {
  uint64_t bytes_delivered = 0;  // returned by read() or skipped
  uint64_t bytes_received = 0;   // body bytes accepted from the network (Range-ignored prefixes excluded)
  uint64_t requests = 0;         // HTTP requests started (redirect hops not counted)
  uint64_t retries = 0;          // requests started after a failed one
  uint64_t resumes = 0;          // retries that asked for a Range from a non-zero offset
  uint64_t ranges_ignored = 0;   // resumes answered with 200 (prefix discarded locally)
  uint64_t peak_buffered = 0;    // most bytes ever held in the ring buffer
};

class HttpSource : public ByteSource {
 public:
  static constexpr size_t kMinBufferSize = 64u << 10;

  // Starts the transfer and waits for the first body bytes (or the end), so a missing shard fails here.
  static Expected<std::unique_ptr<HttpSource>> open(const std::string& url, const HttpOptions& options = {});
  ~HttpSource() override;
  HttpSource(const HttpSource&) = delete;
  HttpSource& operator=(const HttpSource&) = delete;

  Expected<size_t> read(void* buf, size_t n) override;
  // Drains buffered bytes without copying; reads (and drops) the rest of the way.
  Expected<uint64_t> skip(uint64_t n) override;
  const std::string& name() const override { return url_; }

  HttpStats stats() const;
  size_t buffer_capacity() const { return ring_.size(); }
  // The file size once a response has told it (Content-Length / Content-Range total); -1 while unknown.
  int64_t total_size() const { return total_size_; }

 private:
  struct Failure {
    Status status;
    bool retryable = false;
  };

  HttpSource(std::string url, const HttpOptions& options);
  Status init_curl();
  Status start_request();
  // Runs curl until the ring holds data, the body ended, or a final error; returns that error.
  Status fill();
  // One curl_multi_perform (then, when `wait` and nothing arrived, one poll of up to a second).
  void pump(bool wait);
  void on_transfer_done(int curl_result);  // CURLcode
  void on_failure(Failure failure);
  Failure check_response();  // status line and headers of the final response; ok status when the body may flow
  size_t on_write(const char* data, size_t n);
  size_t ring_take(uint8_t* dst, size_t n);  // dst may be nullptr: drop
  void maybe_unpause();

  static size_t write_callback(char* data, size_t size, size_t nmemb, void* self);

  std::string url_;
  HttpOptions options_;
  void* multi_ = nullptr;  // CURLM*
  void* easy_ = nullptr;   // CURL*
  void* header_list_ = nullptr;  // curl_slist*
  char error_buf_[256] = {0};

  // Ring buffer.
  std::vector<uint8_t> ring_;
  size_t ring_head_ = 0, ring_size_ = 0;

  // Transfer state.
  bool in_flight_ = false;
  bool paused_ = false;
  size_t paused_need_ = 0;        // bytes the paused chunk needs free in the ring
  bool response_checked_ = false;
  bool has_pending_failure_ = false;
  Failure pending_failure_;       // set by a callback; applied when curl reports the transfer done
  uint64_t request_offset_ = 0;   // first byte asked for by the current request
  uint64_t discard_ = 0;          // bytes still to drop (server ignored Range)
  uint64_t attempt_bytes_ = 0;    // bytes this request added
  int failed_attempts_ = 0;       // consecutive failures without progress
  bool eof_ = false;
  Status error_;                  // sticky
  int64_t total_size_ = -1;
  std::mt19937_64 jitter_rng_;

  // File offset of the next byte to come from the network, and the counters behind stats().
  std::atomic<uint64_t> received_{0}, delivered_{0}, requests_{0}, retries_{0}, resumes_{0}, ranges_ignored_{0},
      peak_buffered_{0};
};

}  // namespace vlm

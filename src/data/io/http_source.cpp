// HttpSource (see http_source.h): libcurl multi interface driven from read(), a ring buffer, retry and resume.
#include "data/io/http_source.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/logging.h"

namespace vlm {
namespace {

CURLM* as_multi(void* p) { return static_cast<CURLM*>(p); }
CURL* as_easy(void* p) { return static_cast<CURL*>(p); }

void global_init_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// curl results that another attempt cannot fix.
bool curl_error_retryable(CURLcode code) {
  switch (code) {
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_NOT_BUILT_IN:
    case CURLE_TOO_MANY_REDIRECTS:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_LOGIN_DENIED:
    case CURLE_REMOTE_ACCESS_DENIED:
    case CURLE_FILESIZE_EXCEEDED:
    case CURLE_OUT_OF_MEMORY:
    case CURLE_BAD_FUNCTION_ARGUMENT:
      return false;
    default:
      return true;
  }
}

// Parses "bytes S-E/T" (T may be "*": total stays -1). False when malformed.
bool parse_content_range(const char* text, uint64_t& start, int64_t& total) {
  const char* p = text;
  while (*p == ' ') ++p;
  if (strncasecmp(p, "bytes", 5) != 0) return false;
  p += 5;
  while (*p == ' ') ++p;
  char* end = nullptr;
  if (*p < '0' || *p > '9') return false;
  start = std::strtoull(p, &end, 10);
  if (*end != '-') return false;
  p = end + 1;
  if (*p < '0' || *p > '9') return false;
  std::strtoull(p, &end, 10);
  if (*end != '/') return false;
  p = end + 1;
  if (*p == '*') {
    total = -1;
    return true;
  }
  if (*p < '0' || *p > '9') return false;
  total = static_cast<int64_t>(std::strtoull(p, &end, 10));
  return true;
}

}  // namespace

HttpSource::HttpSource(std::string url, const HttpOptions& options)
    : url_(std::move(url)), options_(options), jitter_rng_(std::random_device{}()) {
  ring_.resize(std::max(options_.buffer_size, kMinBufferSize));
  options_.max_attempts = std::max(options_.max_attempts, 1);
}

HttpSource::~HttpSource() {
  if (easy_ && multi_ && in_flight_) curl_multi_remove_handle(as_multi(multi_), as_easy(easy_));
  if (easy_) curl_easy_cleanup(as_easy(easy_));
  if (multi_) curl_multi_cleanup(as_multi(multi_));
  if (header_list_) curl_slist_free_all(static_cast<curl_slist*>(header_list_));
}

Expected<std::unique_ptr<HttpSource>> HttpSource::open(const std::string& url, const HttpOptions& options) {
  std::unique_ptr<HttpSource> source(new HttpSource(url, options));
  VLM_RETURN_IF_ERROR(source->init_curl());
  VLM_RETURN_IF_ERROR(source->start_request());
  Status first = source->fill();
  if (source->ring_size_ == 0 && !first.ok()) return first;
  return source;
}

Status HttpSource::init_curl() {
  global_init_once();
  multi_ = curl_multi_init();
  easy_ = curl_easy_init();
  if (!multi_ || !easy_) return internal_error(str(url_, ": cannot create a curl handle"));
  CURL* e = as_easy(easy_);
  for (const std::string& h : options_.headers) {
    curl_slist* list = curl_slist_append(static_cast<curl_slist*>(header_list_), h.c_str());
    if (!list) return internal_error(str(url_, ": curl_slist_append failed"));
    header_list_ = list;
  }
  const bool ok =
      curl_easy_setopt(e, CURLOPT_URL, url_.c_str()) == CURLE_OK &&
      curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK &&
      curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https") == CURLE_OK &&
      curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &HttpSource::write_callback) == CURLE_OK &&
      curl_easy_setopt(e, CURLOPT_WRITEDATA, this) == CURLE_OK &&
      curl_easy_setopt(e, CURLOPT_ERRORBUFFER, error_buf_) == CURLE_OK &&
      // HTTP/1.1: pausing stops the socket reads, so the kernel's window is the only buffer outside the ring
      // (an HTTP/2 stream keeps receiving into curl's buffers up to its window while paused).
      curl_easy_setopt(e, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1)) == CURLE_OK &&
      curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L) == CURLE_OK &&
      curl_easy_setopt(e, CURLOPT_MAXREDIRS, options_.max_redirects) == CURLE_OK &&
      curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
      curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L) == CURLE_OK &&
      curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, options_.connect_timeout_ms) == CURLE_OK &&
      curl_easy_setopt(e, CURLOPT_USERAGENT, options_.user_agent.c_str()) == CURLE_OK &&
      curl_easy_setopt(e, CURLOPT_HTTPHEADER, header_list_) == CURLE_OK &&
      (options_.low_speed_time_s <= 0 ||
       (curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, options_.low_speed_limit) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, options_.low_speed_time_s) == CURLE_OK));
  if (!ok) return internal_error(str(url_, ": setting curl options failed (libcurl too old?)"));
  return Status();
}

Status HttpSource::start_request() {
  request_offset_ = received_;
  discard_ = 0;
  attempt_bytes_ = 0;
  response_checked_ = false;
  has_pending_failure_ = false;
  paused_ = false;
  error_buf_[0] = 0;
  const std::string range = str(received_.load(), "-");
  CURL* e = as_easy(easy_);
  if (curl_easy_setopt(e, CURLOPT_RANGE, received_ > 0 ? range.c_str() : nullptr) != CURLE_OK)
    return internal_error(str(url_, ": setting the Range failed"));
  CURLMcode mc = curl_multi_add_handle(as_multi(multi_), e);
  if (mc != CURLM_OK) return internal_error(str(url_, ": curl_multi_add_handle: ", curl_multi_strerror(mc)));
  in_flight_ = true;
  ++requests_;
  return Status();
}

size_t HttpSource::write_callback(char* data, size_t size, size_t nmemb, void* self) {
  return static_cast<HttpSource*>(self)->on_write(data, size * nmemb);
}

size_t HttpSource::on_write(const char* data, size_t n) {
  if (!response_checked_) {
    response_checked_ = true;
    Failure f = check_response();
    if (!f.status.ok()) {
      pending_failure_ = std::move(f);
      has_pending_failure_ = true;
      return 0;  // aborts the transfer (CURLE_WRITE_ERROR); the failure above is what counts
    }
  }
  const size_t drop = static_cast<size_t>(std::min<uint64_t>(discard_, n));
  const size_t keep = n - drop;
  if (keep > ring_.size() - ring_size_) {
    if (keep > ring_.size()) {
      pending_failure_ = {internal_error(str("a curl chunk of ", keep, " bytes exceeds the ", ring_.size(),
                                             "-byte buffer")),
                          false};
      has_pending_failure_ = true;
      return 0;
    }
    paused_ = true;
    paused_need_ = keep;
    return CURL_WRITEFUNC_PAUSE;  // curl keeps the chunk and hands it over again after unpausing
  }
  discard_ -= drop;
  const uint8_t* src = reinterpret_cast<const uint8_t*>(data) + drop;
  size_t tail = (ring_head_ + ring_size_) % ring_.size();
  size_t first = std::min(keep, ring_.size() - tail);
  std::memcpy(ring_.data() + tail, src, first);
  std::memcpy(ring_.data(), src + first, keep - first);
  ring_size_ += keep;
  received_ += keep;
  attempt_bytes_ += keep;
  if (ring_size_ > peak_buffered_.load(std::memory_order_relaxed)) peak_buffered_ = ring_size_;
  if (total_size_ >= 0 && received_ > static_cast<uint64_t>(total_size_)) {
    pending_failure_ = {io_error(str("the body runs past the announced size of ", total_size_, " bytes")), false};
    has_pending_failure_ = true;
    return 0;
  }
  return n;
}

size_t HttpSource::ring_take(uint8_t* dst, size_t n) {
  n = std::min(n, ring_size_);
  size_t first = std::min(n, ring_.size() - ring_head_);
  if (dst) {
    std::memcpy(dst, ring_.data() + ring_head_, first);
    std::memcpy(dst + first, ring_.data(), n - first);
  }
  ring_head_ = (ring_head_ + n) % ring_.size();
  ring_size_ -= n;
  if (ring_size_ == 0) ring_head_ = 0;
  return n;
}

void HttpSource::maybe_unpause() {
  if (!paused_ || ring_.size() - ring_size_ < paused_need_) return;
  paused_ = false;  // before the call: curl may deliver (and we may pause again) inside it
  curl_easy_pause(as_easy(easy_), CURLPAUSE_CONT);
}

HttpSource::Failure HttpSource::check_response() {
  CURL* e = as_easy(easy_);
  long code = 0;
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
  int64_t total = -1;
  if (code == 206) {
    curl_header* h = nullptr;
    if (curl_easy_header(e, "Content-Range", 0, CURLH_HEADER, -1, &h) != CURLHE_OK || !h)
      return {io_error("HTTP 206 without a Content-Range header"), false};
    uint64_t start = 0;
    if (!parse_content_range(h->value, start, total))
      return {io_error(str("HTTP 206 with a malformed Content-Range '", h->value, "'")), false};
    if (start != request_offset_)
      return {io_error(str("asked for bytes from ", request_offset_, " but the server sent Content-Range '",
                           h->value, "'")),
              false};
  } else if (code == 200) {
    if (request_offset_ > 0) {
      discard_ = request_offset_;  // the server ignored Range: drop what we already have
      ++ranges_ignored_;
    }
    curl_off_t length = -1;
    if (curl_easy_getinfo(e, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length) == CURLE_OK && length >= 0)
      total = static_cast<int64_t>(length);
  } else if (code >= 400) {
    const bool retryable = code >= 500 || code == 408 || code == 429;
    const std::string what = str("HTTP ", code, retryable ? "" : " (not retried)");
    return {(code == 404 || code == 410) ? not_found(what) : io_error(what), retryable};
  } else {
    return {io_error(str("unexpected HTTP status ", code)), false};
  }
  if (total >= 0) {
    if (total_size_ >= 0 && total != total_size_)
      return {io_error(str("the file changed size between requests (", total_size_, " then ", total, " bytes)")),
              false};
    total_size_ = total;
  }
  return {Status(), false};
}

void HttpSource::on_transfer_done(int result_code) {
  const CURLcode result = static_cast<CURLcode>(result_code);
  curl_multi_remove_handle(as_multi(multi_), as_easy(easy_));
  in_flight_ = false;
  paused_ = false;
  if (has_pending_failure_) return on_failure(pending_failure_);
  if (result != CURLE_OK) {
    std::string detail = error_buf_[0] ? str(" (", error_buf_, ")") : std::string();
    return on_failure({io_error(str(curl_easy_strerror(result), detail, " at byte ", received_.load())),
                       curl_error_retryable(result)});
  }
  if (!response_checked_) {  // an empty body: the status was never looked at
    response_checked_ = true;
    Failure f = check_response();
    if (!f.status.ok()) return on_failure(std::move(f));
  }
  if (discard_ > 0)
    return on_failure({io_error(str("a full-body answer to a Range request ended before byte ", request_offset_)),
                       true});
  if (total_size_ >= 0 && received_ < static_cast<uint64_t>(total_size_))
    return on_failure({io_error(str("the body ended at byte ", received_.load(), " of ", total_size_)), true});
  eof_ = true;
}

void HttpSource::on_failure(Failure failure) {
  if (attempt_bytes_ > 0) failed_attempts_ = 0;  // that attempt made progress
  ++failed_attempts_;
  if (!failure.retryable) {
    error_ = Status(failure.status.code(), str(url_, ": ", failure.status.message()));
    return;
  }
  if (failed_attempts_ >= options_.max_attempts) {
    error_ = Status(failure.status.code(),
                    str(url_, ": giving up after ", failed_attempts_, " attempts without progress (",
                        requests_.load(), " requests in all, ", received_.load(), " bytes received); last error: ",
                        failure.status.message()));
    return;
  }
  const double base = options_.retry_base_delay_s * std::ldexp(1.0, failed_attempts_ - 1);
  const double delay = std::min(base, options_.retry_max_delay_s) *
                       std::uniform_real_distribution<double>(0.5, 1.0)(jitter_rng_);
  VLM_WARN("http: ", url_, ": ", failure.status.message(), "; retry ", failed_attempts_, "/",
           options_.max_attempts - 1, " in ", delay, " s", received_ > 0 ? str(" from byte ", received_.load()) : "");
  if (delay > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay));
  ++retries_;
  if (received_ > 0) ++resumes_;
  Status started = start_request();
  if (!started.ok()) error_ = started;
}

void HttpSource::pump(bool wait) {
  maybe_unpause();
  int running = 0;
  CURLMcode mc = curl_multi_perform(as_multi(multi_), &running);
  if (mc != CURLM_OK) {
    error_ = internal_error(str(url_, ": curl_multi_perform: ", curl_multi_strerror(mc)));
    return;
  }
  int queued = 0;
  while (CURLMsg* msg = curl_multi_info_read(as_multi(multi_), &queued))
    if (msg->msg == CURLMSG_DONE && msg->easy_handle == as_easy(easy_)) on_transfer_done(msg->data.result);
  if (wait && ring_size_ == 0 && in_flight_ && error_.ok() && running > 0)
    curl_multi_poll(as_multi(multi_), nullptr, 0, 1000, nullptr);
}

Status HttpSource::fill() {
  while (ring_size_ == 0 && !eof_ && error_.ok() && in_flight_) pump(/*wait=*/true);
  return error_;
}

Expected<size_t> HttpSource::read(void* buf, size_t n) {
  if (n == 0) return size_t{0};
  if (ring_size_ == 0) {
    Status s = fill();
    if (ring_size_ == 0) {
      if (!s.ok()) return s;
      return size_t{0};
    }
  }
  size_t got = ring_take(static_cast<uint8_t*>(buf), n);
  delivered_ += got;
  // Keep the network busy while the consumer drains the ring: a non-blocking step once it is half empty.
  if (in_flight_ && error_.ok() && ring_size_ <= ring_.size() / 2) pump(/*wait=*/false);
  return got;
}

Expected<uint64_t> HttpSource::skip(uint64_t n) {
  uint64_t done = 0;
  while (done < n) {
    if (ring_size_ == 0) {
      Status s = fill();
      if (ring_size_ == 0) {
        if (!s.ok()) return s;
        break;
      }
    }
    size_t got = ring_take(nullptr, static_cast<size_t>(std::min<uint64_t>(n - done, ring_size_)));
    done += got;
    delivered_ += got;
    maybe_unpause();
  }
  return done;
}

HttpStats HttpSource::stats() const {
  HttpStats s;
  s.bytes_delivered = delivered_.load();
  s.bytes_received = received_.load();
  s.requests = requests_.load();
  s.retries = retries_.load();
  s.resumes = resumes_.load();
  s.ranges_ignored = ranges_ignored_.load();
  s.peak_buffered = peak_buffered_.load();
  return s;
}

}  // namespace vlm

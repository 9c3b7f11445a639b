// A small HTTP/1.1 server for tests: 127.0.0.1 on a free port, files served from memory with Content-Length and
// single-range Range support, redirects, and fault injection (error statuses, connections dropped mid-body,
// Range ignored, stalls). One thread accepts; each connection gets its own thread and one request
// (Connection: close). Unknown paths answer 404. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace vlm::testing {

// Faults are used up in this order, one per file request: fail_requests, then drop_requests, then stall_requests.
struct HttpFaults {
  int fail_requests = 0;         // answer `fail_status` (no body) to this many requests
  int fail_status = 503;
  int drop_requests = 0;         // send the headers and `drop_after_bytes` body bytes, then close the connection
  uint64_t drop_after_bytes = 0;
  int stall_requests = 0;        // send `stall_after_bytes` body bytes, then go silent for `stall_ms`, then close
  uint64_t stall_after_bytes = 0;
  int stall_ms = 0;
  bool ignore_range = false;     // answer Range requests with 200 and the whole file
};

struct HttpRequestRecord {
  std::string path;
  std::string range;  // the Range header ("" when absent)
  int status = 0;     // the status answered
};

class HttpTestServer {
 public:
  HttpTestServer();  // binds and starts serving; aborts the test binary if it cannot
  ~HttpTestServer();
  HttpTestServer(const HttpTestServer&) = delete;
  HttpTestServer& operator=(const HttpTestServer&) = delete;

  void add_file(const std::string& path, std::vector<uint8_t> bytes);  // path like "/shard-0.tar"
  void add_redirect(const std::string& from, const std::string& to);  // 302 to `to` (a path on this server)
  void set_faults(const HttpFaults& faults);                          // replaces the remaining faults
  std::string url(const std::string& path) const;                      // "http://127.0.0.1:PORT" + path
  int port() const { return port_; }
  std::vector<HttpRequestRecord> requests() const;
  void clear_requests();

 private:
  void accept_loop();
  void serve(int fd);

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<std::thread> workers_;
  std::set<int> open_fds_;
  std::map<std::string, std::shared_ptr<const std::vector<uint8_t>>> files_;
  std::map<std::string, std::string> redirects_;
  HttpFaults faults_;
  std::vector<HttpRequestRecord> log_;
};

}  // namespace vlm::testing

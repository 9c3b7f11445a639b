// HttpTestServer (see http_test_server.h): POSIX sockets, one thread per connection, one request per connection.
#include "http_test_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/status.h"

namespace vlm::testing {
namespace {

// Sends everything unless the peer goes away; false then.
bool send_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return false;
    p += sent;
    n -= static_cast<size_t>(sent);
  }
  return true;
}

const char* reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 206: return "Partial Content";
    case 302: return "Found";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 416: return "Range Not Satisfiable";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

// The value of header `name` in the raw request head ("" when absent).
std::string header_value(const std::string& head, const char* name) {
  const size_t len = std::strlen(name);
  size_t pos = head.find("\r\n");
  while (pos != std::string::npos && pos + 2 < head.size()) {
    size_t start = pos + 2, end = head.find("\r\n", start);
    if (end == std::string::npos) end = head.size();
    if (end - start > len && head[start + len] == ':' && strncasecmp(head.c_str() + start, name, len) == 0) {
      std::string v = head.substr(start + len + 1, end - start - len - 1);
      v.erase(0, v.find_first_not_of(' '));
      return v;
    }
    pos = end;
  }
  return "";
}

}  // namespace

HttpTestServer::HttpTestServer() {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  VLM_CHECK(listen_fd_ >= 0, "socket: ", std::strerror(errno));
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  VLM_CHECK(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "bind: ", std::strerror(errno));
  VLM_CHECK(::listen(listen_fd_, 64) == 0, "listen: ", std::strerror(errno));
  socklen_t len = sizeof(addr);
  VLM_CHECK(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0, "getsockname");
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

HttpTestServer::~HttpTestServer() {
  stop_ = true;
  acceptor_.join();
  ::close(listen_fd_);
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);  // unblocks workers stuck in send()
    workers.swap(workers_);
  }
  for (auto& t : workers) t.join();
}

void HttpTestServer::add_file(const std::string& path, std::vector<uint8_t> bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  files_[path] = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
}

void HttpTestServer::add_redirect(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mu_);
  redirects_[from] = to;
}

void HttpTestServer::set_faults(const HttpFaults& faults) {
  std::lock_guard<std::mutex> lock(mu_);
  faults_ = faults;
}

std::string HttpTestServer::url(const std::string& path) const { return str("http://127.0.0.1:", port_, path); }

std::vector<HttpRequestRecord> HttpTestServer::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

void HttpTestServer::clear_requests() {
  std::lock_guard<std::mutex> lock(mu_);
  log_.clear();
}

void HttpTestServer::accept_loop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    open_fds_.insert(fd);
    workers_.emplace_back([this, fd] { serve(fd); });
  }
}

void HttpTestServer::serve(int fd) {
  // Read the request head (the tests never send a body).
  std::string head;
  char buf[4096];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (head.find("\r\n\r\n") == std::string::npos && head.size() < 65536 && !stop_ &&
         std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    ssize_t got = ::recv(fd, buf, sizeof(buf), 0);
    if (got <= 0) break;
    head.append(buf, static_cast<size_t>(got));
  }
  auto finish = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    open_fds_.erase(fd);
    ::close(fd);
  };
  const size_t sp1 = head.find(' '), sp2 = sp1 == std::string::npos ? sp1 : head.find(' ', sp1 + 1);
  if (head.find("\r\n\r\n") == std::string::npos || sp2 == std::string::npos) return finish();
  const std::string path = head.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string range = header_value(head, "Range");

  // Decide the answer under the lock; send outside it.
  enum class Fault { none, fail, drop, stall } fault = Fault::none;
  std::shared_ptr<const std::vector<uint8_t>> file;
  std::string redirect;
  HttpFaults f;
  {
    std::lock_guard<std::mutex> lock(mu_);
    f = faults_;
    if (auto r = redirects_.find(path); r != redirects_.end()) {
      redirect = r->second;
    } else if (auto it = files_.find(path); it != files_.end()) {
      file = it->second;
      if (faults_.fail_requests > 0) {
        --faults_.fail_requests;
        fault = Fault::fail;
      } else if (faults_.drop_requests > 0) {
        --faults_.drop_requests;
        fault = Fault::drop;
      } else if (faults_.stall_requests > 0) {
        --faults_.stall_requests;
        fault = Fault::stall;
      }
    }
  }
  auto record = [&](int status) {
    std::lock_guard<std::mutex> lock(mu_);
    log_.push_back({path, range, status});
  };
  auto simple = [&](int status, const std::string& extra) {
    record(status);
    const std::string r = str("HTTP/1.1 ", status, " ", reason(status), "\r\n", extra,
                              "Content-Length: 0\r\nConnection: close\r\n\r\n");
    send_all(fd, r.data(), r.size());
  };
  if (!redirect.empty()) {
    simple(302, str("Location: ", redirect, "\r\n"));
    return finish();
  }
  if (!file) {
    simple(404, "");
    return finish();
  }
  if (fault == Fault::fail) {
    simple(f.fail_status, "");
    return finish();
  }

  // Body range: the whole file, or one "bytes=N-" / "bytes=N-M" range.
  const uint64_t size = file->size();
  uint64_t begin = 0, end = size;  // [begin, end)
  int status = 200;
  if (!range.empty() && !f.ignore_range) {
    unsigned long long a = 0, b = 0;
    int fields = std::sscanf(range.c_str(), "bytes=%llu-%llu", &a, &b);
    if (fields < 1 || a >= size) {
      simple(416, str("Content-Range: bytes */", size, "\r\n"));
      return finish();
    }
    begin = a;
    end = fields == 2 ? std::min<uint64_t>(b + 1, size) : size;
    status = 206;
  }
  record(status);
  std::string response = str("HTTP/1.1 ", status, " ", reason(status), "\r\nContent-Length: ", end - begin, "\r\n");
  if (status == 206) response += str("Content-Range: bytes ", begin, "-", end - 1, "/", size, "\r\n");
  response += "Accept-Ranges: bytes\r\nConnection: close\r\n\r\n";
  if (!send_all(fd, response.data(), response.size())) return finish();

  uint64_t limit = end - begin;
  if (fault == Fault::drop) limit = std::min(limit, f.drop_after_bytes);
  if (fault == Fault::stall) limit = std::min(limit, f.stall_after_bytes);
  if (!send_all(fd, file->data() + begin, limit)) return finish();
  if (fault == Fault::stall) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(f.stall_ms);
    while (!stop_ && std::chrono::steady_clock::now() < until) {
      pollfd p{fd, POLLIN, 0};  // the client hanging up ends the stall early
      if (::poll(&p, 1, 10) > 0 && ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT) == 0) break;
    }
  }
  finish();
}

}  // namespace vlm::testing

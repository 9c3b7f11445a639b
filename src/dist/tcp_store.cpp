// The rendezvous store's server (one poll() thread) and client (see tcp_store.h).
#include "dist/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/logging.h"

namespace vlm::dist {
namespace {

constexpr char kMagic[4] = {'V', 'L', 'M', 'S'};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::string errno_text() { return std::strerror(errno); }

// One client connection on the server: bytes received but not yet parsed, and whether the magic was seen.
struct Connection {
  int fd = -1;
  std::string in;
  bool greeted = false;
};

}  // namespace

StoreParse parse_store_request(std::string_view in, StoreRequest* request, size_t* consumed) {
  if (in.empty()) return StoreParse::need_more;
  const char op = in[0];
  if (op != 'S' && op != 'G' && op != 'C') return StoreParse::malformed;
  if (in.size() < 5) return StoreParse::need_more;
  const uint32_t key_len = get_u32(in.data() + 1);
  if (key_len > kStoreMaxKey) return StoreParse::malformed;
  size_t need = 5 + size_t{key_len};
  uint32_t value_len = 0;
  if (op == 'S') {
    if (in.size() < need + 4) return StoreParse::need_more;
    value_len = get_u32(in.data() + need);
    if (value_len > kStoreMaxValue) return StoreParse::malformed;
    need += 4 + size_t{value_len};
  }
  if (in.size() < need) return StoreParse::need_more;
  request->op = op;
  request->key.assign(in.substr(5, key_len));
  request->value.assign(op == 'S' ? in.substr(5 + key_len + 4, value_len) : std::string_view());
  *consumed = need;
  return StoreParse::ok;
}

struct TcpStoreServer::State {
  int listen_fd = -1;
  int wake[2] = {-1, -1};  // a byte written here ends the thread
  std::thread thread;
  std::atomic<int> rejected{0};
  std::map<std::string, std::string> values;
  std::multimap<std::string, int> waiting;  // key -> fds of clients blocked in get
  std::vector<Connection> connections;

  void run();
  // Parses and answers every complete request in c.in; false when c broke the wire format (it is then closed).
  bool serve(Connection& c);
  static bool reply(int fd, const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  static std::string value_reply(const std::string& v) {
    std::string r(1, 'v');
    put_u32(r, static_cast<uint32_t>(v.size()));
    return r + v;
  }
  void drop(size_t i, const char* why) {
    if (why != nullptr) {
      ++rejected;
      VLM_WARN("rendezvous store: closed a connection that ", why);
    }
    const int fd = connections[i].fd;
    for (auto it = waiting.begin(); it != waiting.end();) it = it->second == fd ? waiting.erase(it) : std::next(it);
    ::close(fd);
    connections.erase(connections.begin() + static_cast<std::ptrdiff_t>(i));
  }
};

bool TcpStoreServer::State::serve(Connection& c) {
  if (!c.greeted) {
    if (c.in.size() < 4) return std::memcmp(c.in.data(), kMagic, c.in.size()) == 0;
    if (std::memcmp(c.in.data(), kMagic, 4) != 0) return false;
    c.greeted = true;
    c.in.erase(0, 4);
  }
  for (;;) {
    StoreRequest r;
    size_t used = 0;
    const StoreParse parsed = parse_store_request(c.in, &r, &used);
    if (parsed == StoreParse::malformed) return false;
    if (parsed == StoreParse::need_more) return true;
    c.in.erase(0, used);
    if (r.op == 'S') {
      const auto [first, last] = waiting.equal_range(r.key);
      for (auto it = first; it != last; ++it) reply(it->second, value_reply(r.value));
      waiting.erase(first, last);
      values[r.key] = std::move(r.value);
      reply(c.fd, "k");
    } else if (r.op == 'G') {
      const auto it = values.find(r.key);
      if (it != values.end()) {
        reply(c.fd, value_reply(it->second));
      } else {
        waiting.emplace(r.key, c.fd);
      }
    } else {
      reply(c.fd, values.count(r.key) ? "1" : "0");
    }
  }
}

void TcpStoreServer::State::run() {
  std::vector<pollfd> fds;
  char buffer[64 * 1024];
  for (;;) {
    fds.clear();
    fds.push_back({wake[0], POLLIN, 0});
    fds.push_back({listen_fd, POLLIN, 0});
    for (const Connection& c : connections) fds.push_back({c.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      VLM_ERROR("rendezvous store: poll failed: ", errno_text());
      return;
    }
    if (fds[0].revents != 0) return;
    if (fds[1].revents & POLLIN) {
      const int fd = ::accept(listen_fd, nullptr, nullptr);
      if (fd >= 0) connections.push_back(Connection{fd, {}, false});
    }
    // Walk back to front so that dropping connection i leaves the indices still to visit in place; fds[2 + i] is
    // connections[i] as they were when poll() ran (new ones were appended after).
    for (size_t i = fds.size() - 2; i-- > 0;) {
      if (fds[2 + i].revents == 0) continue;
      const ssize_t n = ::recv(connections[i].fd, buffer, sizeof buffer, 0);
      if (n <= 0) {
        drop(i, nullptr);  // the client left
        continue;
      }
      connections[i].in.append(buffer, static_cast<size_t>(n));
      if (!serve(connections[i])) drop(i, "broke the wire format (magic, request type or length)");
    }
  }
}

TcpStoreServer::TcpStoreServer(int port, std::unique_ptr<State> state) : port_(port), state_(std::move(state)) {
  state_->thread = std::thread([s = state_.get()] { s->run(); });
}

TcpStoreServer::~TcpStoreServer() {
  if (state_->wake[1] >= 0) (void)!::write(state_->wake[1], "x", 1);
  if (state_->thread.joinable()) state_->thread.join();
  for (const Connection& c : state_->connections) ::close(c.fd);
  ::close(state_->listen_fd);
  ::close(state_->wake[0]);
  ::close(state_->wake[1]);
}

int TcpStoreServer::rejected_connections() const { return state_->rejected.load(); }

Expected<std::unique_ptr<TcpStoreServer>> TcpStoreServer::start(int port) {
  if (port < 0 || port > 65535) return invalid_argument(str("rendezvous store: port ", port, " is not a TCP port"));
  auto state = std::make_unique<State>();
  state->listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (state->listen_fd < 0) return io_error(str("rendezvous store: socket: ", errno_text()));
  const int one = 1;
  ::setsockopt(state->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(state->listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const std::string why = errno_text();
    ::close(state->listen_fd);
    return io_error(str("rendezvous store: cannot listen on port ", port, " (MASTER_PORT): ", why,
                        "; another program (torchrun's own agent store?) holds it: choose a free MASTER_PORT"));
  }
  if (::listen(state->listen_fd, 1024) != 0 || ::pipe2(state->wake, O_CLOEXEC) != 0) {
    const std::string why = errno_text();
    ::close(state->listen_fd);
    return io_error(str("rendezvous store: listen on port ", port, ": ", why));
  }
  socklen_t len = sizeof addr;
  ::getsockname(state->listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int bound = ntohs(addr.sin_port);
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(bound, std::move(state)));
}

// ---- client

Expected<TcpStoreClient> TcpStoreClient::connect(const std::string& host, int port, double timeout_s) {
  const std::string endpoint = str(host, ":", port);
  if (port <= 0 || port > 65535)
    return invalid_argument(str("rendezvous store: port ", port, " (MASTER_PORT) is not a TCP port"));
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0 || found == nullptr)
    return invalid_argument(str("rendezvous store: cannot resolve MASTER_ADDR '", host, "': ", gai_strerror(rc)));
  sockaddr_in addr;
  std::memcpy(&addr, found->ai_addr, sizeof addr);
  ::freeaddrinfo(found);
  const Clock::time_point start = Clock::now();
  std::string last_error;
  for (int attempt = 0;; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return io_error(str("rendezvous store: socket: ", errno_text()));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      TcpStoreClient client(fd, endpoint);
      VLM_RETURN_IF_ERROR(client.send_all(std::string(kMagic, 4)));
      return client;
    }
    last_error = errno_text();
    ::close(fd);
    if (seconds_since(start) > timeout_s)
      return io_error(str("rendezvous store: could not reach rank 0 at ", endpoint,
                          " (MASTER_ADDR:MASTER_PORT) within ", timeout_s, " s: ", last_error));
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(20 * (attempt + 1), 500)));
  }
}

TcpStoreClient::TcpStoreClient(TcpStoreClient&& o) noexcept : fd_(o.fd_), endpoint_(std::move(o.endpoint_)) {
  o.fd_ = -1;
}

TcpStoreClient& TcpStoreClient::operator=(TcpStoreClient&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    endpoint_ = std::move(o.endpoint_);
    o.fd_ = -1;
  }
  return *this;
}

TcpStoreClient::~TcpStoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

Status TcpStoreClient::send_all(const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return io_error(str("rendezvous store at ", endpoint_, ": send failed: ", errno_text()));
    off += static_cast<size_t>(n);
  }
  return Status();
}

Status TcpStoreClient::receive(void* out, size_t n, double timeout_s, const char* what) {
  const Clock::time_point start = Clock::now();
  auto* p = static_cast<char*>(out);
  size_t got = 0;
  while (got < n) {
    const double left = timeout_s - seconds_since(start);
    if (left <= 0)
      return Status(StatusCode::internal,
                    str("rendezvous store at ", endpoint_, ": ", what, " not answered within ", timeout_s, " s"));
    pollfd pfd{fd_, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(std::min(left * 1000.0 + 1, 1e9)));
    if (ready < 0 && errno != EINTR) return io_error(str("rendezvous store at ", endpoint_, ": poll: ", errno_text()));
    if (ready <= 0) continue;
    const ssize_t r = ::recv(fd_, p + got, n - got, 0);
    if (r <= 0)
      return io_error(str("rendezvous store at ", endpoint_, ": connection closed during ", what,
                          " (the server, rank 0, ended or refused the request)"));
    got += static_cast<size_t>(r);
  }
  return Status();
}

namespace {
Status check_key(const std::string& key) {
  if (key.size() > kStoreMaxKey)
    return invalid_argument(str("rendezvous store: key of ", key.size(), " bytes (at most ", kStoreMaxKey, ")"));
  return Status();
}
std::string request(char op, const std::string& key) {
  std::string r(1, op);
  put_u32(r, static_cast<uint32_t>(key.size()));
  return r + key;
}
}  // namespace

Status TcpStoreClient::set(const std::string& key, const std::string& value) {
  VLM_RETURN_IF_ERROR(check_key(key));
  if (value.size() > kStoreMaxValue)
    return invalid_argument(str("rendezvous store: value of ", value.size(), " bytes for '", key, "' (at most ",
                                kStoreMaxValue, ")"));
  std::string r = request('S', key);
  put_u32(r, static_cast<uint32_t>(value.size()));
  VLM_RETURN_IF_ERROR(send_all(r + value));
  char ack = 0;
  VLM_RETURN_IF_ERROR(receive(&ack, 1, 60.0, "set"));
  if (ack != 'k') return parse_error(str("rendezvous store at ", endpoint_, ": malformed reply to set '", key, "'"));
  return Status();
}

Expected<std::string> TcpStoreClient::get(const std::string& key, double timeout_s) {
  VLM_RETURN_IF_ERROR(check_key(key));
  VLM_RETURN_IF_ERROR(send_all(request('G', key)));
  char head[5];
  VLM_RETURN_IF_ERROR(receive(head, 5, timeout_s, str("get '", key, "'").c_str()));
  const uint32_t len = get_u32(head + 1);
  if (head[0] != 'v' || len > kStoreMaxValue)
    return parse_error(str("rendezvous store at ", endpoint_, ": malformed reply to get '", key, "'"));
  std::string value(len, '\0');
  VLM_RETURN_IF_ERROR(receive(value.data(), len, 60.0, "a value"));
  return value;
}

Expected<bool> TcpStoreClient::check(const std::string& key) {
  VLM_RETURN_IF_ERROR(check_key(key));
  VLM_RETURN_IF_ERROR(send_all(request('C', key)));
  char answer = 0;
  VLM_RETURN_IF_ERROR(receive(&answer, 1, 60.0, "check"));
  if (answer != '0' && answer != '1')
    return parse_error(str("rendezvous store at ", endpoint_, ": malformed reply to check '", key, "'"));
  return answer == '1';
}

Status store_rendezvous(TcpStoreClient& store, const std::string& prefix, int rank, int size, double timeout_s) {
  VLM_RETURN_IF_ERROR(store.set(str(prefix, "/joined/", rank), "1"));
  const Clock::time_point start = Clock::now();
  for (int r = 0; r < size; ++r) {
    const double left = std::max(timeout_s - seconds_since(start), 0.001);
    const Expected<std::string> joined = store.get(str(prefix, "/joined/", r), left);
    if (joined.ok()) continue;
    if (joined.status().code() != StatusCode::internal) return joined.status();
    // Timed out: the blocked get is still pending on the server, so ask again on a fresh connection.
    std::string missing;
    Expected<TcpStoreClient> probe = TcpStoreClient::connect(
        store.endpoint().substr(0, store.endpoint().rfind(':')),
        std::stoi(store.endpoint().substr(store.endpoint().rfind(':') + 1)), 5.0);
    for (int q = r; q < size; ++q) {
      const Expected<bool> there = probe.ok() ? probe->check(str(prefix, "/joined/", q)) : Expected<bool>(false);
      if (there.ok() && !*there) missing += str(missing.empty() ? "" : ", ", q);
    }
    return Status(StatusCode::internal,
                  str("rendezvous at ", store.endpoint(), ": rank ", rank, " of ", size, " waited ", timeout_s,
                      " s (VLM_DIST_TIMEOUT_S); rank", missing.find(',') != std::string::npos ? "s " : " ",
                      missing.empty() ? std::to_string(r) : missing, " never came"));
  }
  return Status();
}

Expected<StoreAddress> launch_store_address(const std::function<const char*(const char*)>& getenv) {
  const char* addr = getenv("MASTER_ADDR");
  const char* port_text = getenv("MASTER_PORT");
  if (port_text == nullptr || *port_text == '\0')
    return invalid_argument("launch environment: RANK and WORLD_SIZE are set but MASTER_PORT is not: the ranks need "
                            "rank 0's rendezvous port (vlm launch sets it)");
  const std::string_view text(port_text);
  int port = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (ec != std::errc() || end != text.data() + text.size() || port <= 0 || port > 65535)
    return invalid_argument(str("launch environment: MASTER_PORT=\"", port_text, "\" is not a TCP port"));
  const char* agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
  if (agent != nullptr && (std::strcmp(agent, "True") == 0 || std::strcmp(agent, "1") == 0)) {
    if (port == 65535)
      return invalid_argument("launch environment: torchrun's MASTER_PORT is 65535; vlm's rendezvous needs the next");
    ++port;
  }
  return StoreAddress{addr != nullptr && *addr != '\0' ? addr : "127.0.0.1", port};
}

std::string LaunchStore::next_prefix(const std::string& user) { return str("vlm/", user, "/", calls_++); }

Expected<LaunchStore*> launch_store(const LaunchInfo& info, double timeout_s) {
  static std::mutex mu;
  static LaunchStore store;
  std::lock_guard<std::mutex> lock(mu);
  if (store.client_) return &store;
  VLM_ASSIGN_OR_RETURN(StoreAddress at, launch_store_address([](const char* name) { return std::getenv(name); }));
  if (info.rank == 0) {
    VLM_ASSIGN_OR_RETURN(store.server_, TcpStoreServer::start(at.port));
  }
  VLM_ASSIGN_OR_RETURN(TcpStoreClient client, TcpStoreClient::connect(at.host, at.port, timeout_s));
  store.client_ = std::make_unique<TcpStoreClient>(std::move(client));
  return &store;
}

}  // namespace vlm::dist

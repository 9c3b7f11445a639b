// A small key-value store over TCP for the rendezvous of a launch's ranks where no MPI is there to carry it
// (torchrun-style environments and `vlm launch`): rank 0 serves it at MASTER_ADDR:MASTER_PORT, every rank (rank 0
// too) is a client that sets keys and waits for keys the others set. NCCL's unique id travels through it.
//
// Wire format (all integers little-endian u32): a connection opens with the 4 bytes "VLMS"; then requests
//   'S' key_len key value_len value   set (replaces)          reply: 'k'
//   'G' key_len key                    get, waiting until set  reply: 'v' value_len value
//   'C' key_len key                    check, without waiting  reply: '0' or '1'
// Keys are at most 1 KiB and values at most 16 MiB. A connection that breaks these rules (wrong magic, unknown
// request, a length over its limit) is closed by the server, which keeps serving the others and logs why; a client
// that gets a malformed reply reports it as an error.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "dist/launch_env.h"

namespace vlm::dist {

constexpr size_t kStoreMaxKey = 1024;
constexpr size_t kStoreMaxValue = size_t{16} << 20;

// One request of the wire format, as the server parses it from the front of a connection's bytes (after the magic).
struct StoreRequest {
  char op = 0;  // 'S', 'G' or 'C'
  std::string key, value;
};
enum class StoreParse { ok, need_more, malformed };
// ok: *request holds the request and *consumed its length in bytes; need_more: `bytes` holds the beginning of a valid
// request; malformed: no valid request starts with `bytes` (unknown type, a length over its limit).
StoreParse parse_store_request(std::string_view bytes, StoreRequest* request, size_t* consumed);

class TcpStoreServer {
 public:
  // Listens on `port` of every IPv4 interface (0: a free port, see port()) and serves from a thread of its own.
  static Expected<std::unique_ptr<TcpStoreServer>> start(int port);
  ~TcpStoreServer();  // stops the thread, closes every connection
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  int port() const { return port_; }
  // Connections the server closed for breaking the wire format (for tests).
  int rejected_connections() const;

 private:
  struct State;
  TcpStoreServer(int port, std::unique_ptr<State> state);
  int port_;
  std::unique_ptr<State> state_;
};

class TcpStoreClient {
 public:
  // Connects to host:port, retrying until `timeout_s` seconds passed (the server may start after its clients).
  static Expected<TcpStoreClient> connect(const std::string& host, int port, double timeout_s);
  TcpStoreClient(TcpStoreClient&& o) noexcept;
  TcpStoreClient& operator=(TcpStoreClient&& o) noexcept;
  ~TcpStoreClient();

  Status set(const std::string& key, const std::string& value);
  // The value of `key`, waiting until some client sets it; an error after `timeout_s` seconds.
  Expected<std::string> get(const std::string& key, double timeout_s);
  Expected<bool> check(const std::string& key);
  // This client's endpoint as "host:port" (for messages).
  const std::string& endpoint() const { return endpoint_; }

 private:
  TcpStoreClient(int fd, std::string endpoint) : fd_(fd), endpoint_(std::move(endpoint)) {}
  Status send_all(const std::string& bytes);
  Status receive(void* out, size_t n, double timeout_s, const char* what);
  int fd_ = -1;
  std::string endpoint_;
};

// Every one of `size` ranks checks in under `prefix` and waits for all the others: an error after `timeout_s` seconds
// names the ranks that never came.
Status store_rendezvous(TcpStoreClient& store, const std::string& prefix, int rank, int size, double timeout_s);

// Where a torchrun-style launch's store is: MASTER_ADDR (127.0.0.1 when unset) and MASTER_PORT, or the port after it
// under torchrun itself, whose agent keeps its own store on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True). An error
// names a missing or malformed variable. `getenv` as in launch_info_from_env.
struct StoreAddress {
  std::string host;
  int port = 0;
};
Expected<StoreAddress> launch_store_address(const std::function<const char*(const char*)>& getenv);

// The process's rendezvous store for a torchrun-style launch (`vlm launch` too): rank 0 serves it, every rank is a
// client. Opened by the first call (rank 0 starts the server, every rank connects within `timeout_s`), then kept
// for the life of the process; each user takes its own keys from next_prefix().
class LaunchStore {
 public:
  TcpStoreClient& client() { return *client_; }
  std::string next_prefix(const std::string& user);  // "vlm/<user>/<n>", n counting the calls

 private:
  friend Expected<LaunchStore*> launch_store(const LaunchInfo& info, double timeout_s);
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<TcpStoreClient> client_;
  int calls_ = 0;
};
Expected<LaunchStore*> launch_store(const LaunchInfo& info, double timeout_s);

}  // namespace vlm::dist

// The rendezvous store on loopback: clients in threads set and wait for keys, rendezvous of every rank, a rank that
// never comes (the error names it), a server that is not there, and malformed requests and replies.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "dist/tcp_store.h"

namespace vlm::dist {
namespace {

std::unique_ptr<TcpStoreServer> start_server() {
  Expected<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::start(0);
  EXPECT_TRUE(server.ok()) << server.status().message();
  return server.ok() ? std::move(*server) : nullptr;
}

TcpStoreClient connect_to(const TcpStoreServer& server) {
  Expected<TcpStoreClient> client = TcpStoreClient::connect("127.0.0.1", server.port(), 5.0);
  EXPECT_TRUE(client.ok()) << client.status().message();
  return std::move(*client);
}

// A raw loopback connection to `port`, for bytes no client would send.
int raw_connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  return fd;
}

// True when the server closed `fd` (recv sees the end of the stream within 5 s).
bool closed_by_peer(int fd) {
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char byte;
  return ::recv(fd, &byte, 1, 0) == 0;
}

TEST(TcpStore, GetWaitsForAValueAnotherClientSets) {
  auto server = start_server();
  ASSERT_TRUE(server);
  TcpStoreClient reader = connect_to(*server), writer = connect_to(*server);
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_TRUE(writer.set("nccl/id", std::string("\0\1\2binary", 9)).ok());
  });
  const Expected<std::string> v = reader.get("nccl/id", 10.0);
  later.join();
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(*v, std::string("\0\1\2binary", 9));
  EXPECT_TRUE(*reader.check("nccl/id"));
  EXPECT_FALSE(*reader.check("other"));
  // Values up to the limit travel whole; a set replaces.
  const std::string big(3 << 20, 'z');
  ASSERT_TRUE(writer.set("big", big).ok());
  EXPECT_EQ(*reader.get("big", 10.0), big);
  ASSERT_TRUE(writer.set("big", "small").ok());
  EXPECT_EQ(*reader.get("big", 10.0), "small");
  EXPECT_FALSE(writer.set(std::string(kStoreMaxKey + 1, 'k'), "v").ok());
}

TEST(TcpStore, EveryRankOfARendezvousMeetsTheOthers) {
  auto server = start_server();
  ASSERT_TRUE(server);
  constexpr int kRanks = 6;
  std::vector<std::thread> ranks;
  std::vector<Status> results(kRanks);
  for (int r = 0; r < kRanks; ++r)
    ranks.emplace_back([&, r] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30 * (kRanks - r)));  // arrive in any order
      TcpStoreClient c = connect_to(*server);
      results[static_cast<size_t>(r)] = store_rendezvous(c, "run1", r, kRanks, 10.0);
    });
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(results[static_cast<size_t>(r)].ok()) << results[r].message();
}

TEST(TcpStore, ARankThatNeverComesIsNamedAfterTheTimeout) {
  auto server = start_server();
  ASSERT_TRUE(server);
  std::vector<std::thread> ranks;
  std::vector<Status> results(4);
  const auto start = std::chrono::steady_clock::now();
  for (int r : {0, 2}) {  // of 4: ranks 1 and 3 never come
    ranks.emplace_back([&, r] {
      TcpStoreClient c = connect_to(*server);
      results[static_cast<size_t>(r)] = store_rendezvous(c, "run2", r, 4, 1.0);
    });
  }
  for (std::thread& t : ranks) t.join();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(took, 5.0);
  for (int r : {0, 2}) {
    const Status& s = results[static_cast<size_t>(r)];
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("ranks 1, 3 never came"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("VLM_DIST_TIMEOUT_S"), std::string::npos) << s.message();
  }
}

TEST(TcpStore, AServerThatIsNotThereIsAnErrorAfterTheTimeout) {
  int port = 0;
  {
    auto server = start_server();  // a port that was free a moment ago, and no longer served
    ASSERT_TRUE(server);
    port = server->port();
  }
  const Expected<TcpStoreClient> c = TcpStoreClient::connect("127.0.0.1", port, 0.5);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("could not reach rank 0 at 127.0.0.1:"), std::string::npos)
      << c.status().message();
  EXPECT_FALSE(TcpStoreClient::connect("no-such-host.invalid", 1234, 0.5).ok());
  EXPECT_FALSE(TcpStoreClient::connect("127.0.0.1", 70000, 0.5).ok());
}

TEST(TcpStore, MalformedRequestsCloseOnlyTheirConnection) {
  auto server = start_server();
  ASSERT_TRUE(server);
  TcpStoreClient good = connect_to(*server);
  auto le32 = [](uint32_t v) { return std::string{char(v), char(v >> 8), char(v >> 16), char(v >> 24)}; };
  const std::vector<std::string> bad = {
      "HTTP/1.1 GET /\r\n\r\n",                          // a stranger: wrong magic
      "VLMSX" + le32(1) + "k",                           // unknown request
      "VLMSG" + le32(kStoreMaxKey + 1),                  // key over its limit
      "VLMSS" + le32(1) + "k" + le32(kStoreMaxValue + 1),  // value over its limit
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    const int fd = raw_connect(server->port());
    ASSERT_EQ(::send(fd, bad[i].data(), bad[i].size(), 0), static_cast<ssize_t>(bad[i].size()));
    EXPECT_TRUE(closed_by_peer(fd)) << "case " << i;
    ::close(fd);
  }
  EXPECT_EQ(server->rejected_connections(), static_cast<int>(bad.size()));
  // A request cut short is waited for, not misread; a client that leaves mid-request costs nothing.
  const int fd = raw_connect(server->port());
  const std::string partial = "VLMSS" + le32(3) + "ke";
  ASSERT_EQ(::send(fd, partial.data(), partial.size(), 0), static_cast<ssize_t>(partial.size()));
  ::close(fd);
  ASSERT_TRUE(good.set("still", "served").ok());
  EXPECT_EQ(*good.get("still", 5.0), "served");
  EXPECT_FALSE(*good.check("ke"));
  EXPECT_EQ(server->rejected_connections(), static_cast<int>(bad.size()));
}

TEST(TcpStore, AMalformedReplyIsAnError) {
  // A fake server that accepts, reads the magic and the request, and answers garbage.
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t len = sizeof addr;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  std::thread fake([listener] {
    const int fd = ::accept(listener, nullptr, nullptr);
    char buf[256];
    (void)::recv(fd, buf, sizeof buf, 0);
    const char reply[] = "?\xff\xff\xff\xff";
    (void)::send(fd, reply, 5, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::close(fd);
  });
  Expected<TcpStoreClient> c = TcpStoreClient::connect("127.0.0.1", ntohs(addr.sin_port), 5.0);
  ASSERT_TRUE(c.ok());
  const Expected<std::string> v = c->get("key", 5.0);
  fake.join();
  ::close(listener);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("malformed reply"), std::string::npos) << v.status().message();
}

TEST(TcpStore, TheLaunchsAddressComesFromMasterAddrAndMasterPort) {
  auto from = [](std::map<std::string, std::string> vars) {
    return launch_store_address([vars](const char* name) -> const char* {
      const auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    });
  };
  Expected<StoreAddress> a = from({{"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "node7");
  EXPECT_EQ(a->port, 29500);
  a = from({{"MASTER_PORT", "29500"}});  // no address: this host
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  // Under torchrun itself its agent's store holds MASTER_PORT: ours is the next.
  a = from({{"MASTER_PORT", "29500"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->port, 29501);
  for (const char* bad : {"", "0", "65536", "29500x", " 1", "-5"}) {
    a = from({{"MASTER_PORT", bad}});
    ASSERT_FALSE(a.ok()) << bad;
    EXPECT_NE(a.status().message().find("MASTER_PORT"), std::string::npos) << a.status().message();
  }
  EXPECT_FALSE(from({{"MASTER_PORT", "65535"}, {"TORCHELASTIC_USE_AGENT_STORE", "1"}}).ok());
}

}  // namespace
}  // namespace vlm::dist

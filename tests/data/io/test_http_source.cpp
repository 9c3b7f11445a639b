// HttpSource against the loopback test server: bounded-memory streaming, exact resume after dropped connections,
// retry on 503, no retry on 404/403, Range ignored, stalls, redirects, retries exhausted, and a full
// ShardSampleStream over http:// shards (resume included) equal to the same shards read from disk.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>

#include "data/io/http_source.h"
#include "data/io/tar.h"
#include "data/loader/sample_stream.h"
#include "http_test_server.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

// Reads to the end in `chunk`-byte reads.
Expected<std::vector<uint8_t>> read_all(ByteSource& source, size_t chunk = 65536) {
  std::vector<uint8_t> out, buf(chunk);
  for (;;) {
    VLM_ASSIGN_OR_RETURN(size_t got, source.read(buf.data(), buf.size()));
    if (got == 0) return out;
    out.insert(out.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(got));
  }
}

// Tiny delays so retries cost milliseconds.
HttpOptions fast_options() {
  HttpOptions o;
  o.retry_base_delay_s = 0.005;
  o.retry_max_delay_s = 0.02;
  o.buffer_size = 256u << 10;
  return o;
}

class HttpSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Loopback only: a proxy from the environment must not see these requests.
    for (const char* v : {"http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"})
      ::unsetenv(v);
  }
  testing::HttpTestServer server_;
};

TEST_F(HttpSourceTest, StreamsAMultiMegabyteShardWithBoundedMemory) {
  const auto file = random_bytes(6u << 20, 1);
  server_.add_file("/big.tar", file);
  HttpOptions o = fast_options();
  auto source = HttpSource::open(server_.url("/big.tar"), o);
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  EXPECT_EQ((*source)->name(), server_.url("/big.tar"));
  // Small reads, so the network outruns the consumer and the ring fills up.
  auto got = read_all(**source, 4096);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_TRUE(*got == file);
  const HttpStats s = (*source)->stats();
  EXPECT_EQ((*source)->buffer_capacity(), o.buffer_size);
  EXPECT_LE(s.peak_buffered, (*source)->buffer_capacity());
  EXPECT_GE(s.peak_buffered, (*source)->buffer_capacity() / 2) << "the ring never filled: pausing untested";
  EXPECT_EQ(s.bytes_delivered, file.size());
  EXPECT_EQ(s.bytes_received, file.size());
  EXPECT_EQ(s.requests, 1u);
  EXPECT_EQ(s.retries, 0u);
  EXPECT_EQ((*source)->total_size(), static_cast<int64_t>(file.size()));
  auto more = (*source)->read(got->data(), 16);
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(*more, 0u);
}

TEST_F(HttpSourceTest, DroppedConnectionsResumeWithRangeAndLoseNothing) {
  const auto file = random_bytes(3u << 20, 2);
  server_.add_file("/s.tar", file);
  testing::HttpFaults f;
  f.drop_requests = 4;
  f.drop_after_bytes = 700000;
  server_.set_faults(f);
  auto source = HttpSource::open(server_.url("/s.tar"), fast_options());
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  auto got = read_all(**source, 10000);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_TRUE(*got == file);
  const HttpStats s = (*source)->stats();
  EXPECT_EQ(s.resumes, 4u);
  EXPECT_EQ(s.retries, 4u);
  EXPECT_EQ(s.requests, 5u);
  EXPECT_EQ(s.bytes_received, file.size());
  const auto log = server_.requests();
  ASSERT_EQ(log.size(), 5u);
  EXPECT_EQ(log[0].range, "");
  for (size_t i = 1; i < log.size(); ++i) {
    EXPECT_EQ(log[i].range, str("bytes=", 700000 * i, "-")) << i;
    EXPECT_EQ(log[i].status, 206);
  }
}

TEST_F(HttpSourceTest, RangeIgnoredByTheServerStillGivesExactBytes) {
  const auto file = random_bytes(2u << 20, 3);
  server_.add_file("/s.tar", file);
  testing::HttpFaults f;
  f.drop_requests = 2;
  f.drop_after_bytes = 500000;
  f.ignore_range = true;
  server_.set_faults(f);
  auto source = HttpSource::open(server_.url("/s.tar"), fast_options());
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  auto got = read_all(**source);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_TRUE(*got == file);
  const HttpStats s = (*source)->stats();
  EXPECT_EQ(s.ranges_ignored, 2u);  // requests 2 and 3 both asked for bytes=500000- and got 200
  EXPECT_EQ(s.resumes, 2u);
  EXPECT_EQ(s.bytes_received, file.size());
  const auto log = server_.requests();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[1].range, "bytes=500000-");
  EXPECT_EQ(log[1].status, 200);
}

TEST_F(HttpSourceTest, ServiceUnavailableIsRetried) {
  const auto file = random_bytes(300000, 4);
  server_.add_file("/s.tar", file);
  testing::HttpFaults f;
  f.fail_requests = 2;
  f.fail_status = 503;
  server_.set_faults(f);
  auto source = HttpSource::open(server_.url("/s.tar"), fast_options());
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  auto got = read_all(**source);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_TRUE(*got == file);
  EXPECT_EQ((*source)->stats().retries, 2u);
  EXPECT_EQ((*source)->stats().resumes, 0u);
  EXPECT_EQ(server_.requests().size(), 3u);
}

TEST_F(HttpSourceTest, NotFoundAndForbiddenFailAtOnceNamingUrlAndStatus) {
  const std::string url = server_.url("/missing.tar");
  auto missing = HttpSource::open(url, fast_options());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::not_found);
  EXPECT_NE(missing.status().message().find(url), std::string::npos) << missing.status().message();
  EXPECT_NE(missing.status().message().find("404"), std::string::npos) << missing.status().message();
  EXPECT_EQ(server_.requests().size(), 1u);

  server_.add_file("/private.tar", random_bytes(1000, 5));
  testing::HttpFaults f;
  f.fail_requests = 10;
  f.fail_status = 403;
  server_.set_faults(f);
  server_.clear_requests();
  auto forbidden = open_source(server_.url("/private.tar"));
  ASSERT_FALSE(forbidden.ok());
  EXPECT_EQ(forbidden.status().code(), StatusCode::io_error);
  EXPECT_NE(forbidden.status().message().find(server_.url("/private.tar")), std::string::npos);
  EXPECT_NE(forbidden.status().message().find("403"), std::string::npos) << forbidden.status().message();
  EXPECT_EQ(server_.requests().size(), 1u);
}

TEST_F(HttpSourceTest, RetriesExhaustedNameTheUrlAndTheAttempts) {
  server_.add_file("/down.tar", random_bytes(1000, 6));
  testing::HttpFaults f;
  f.fail_requests = 1000;
  f.fail_status = 500;
  server_.set_faults(f);
  HttpOptions o = fast_options();
  o.max_attempts = 3;
  auto source = HttpSource::open(server_.url("/down.tar"), o);
  ASSERT_FALSE(source.ok());
  const std::string msg = source.status().message();
  EXPECT_EQ(source.status().code(), StatusCode::io_error);
  EXPECT_NE(msg.find(server_.url("/down.tar")), std::string::npos) << msg;
  EXPECT_NE(msg.find("3 attempts"), std::string::npos) << msg;
  EXPECT_NE(msg.find("HTTP 500"), std::string::npos) << msg;
  EXPECT_EQ(server_.requests().size(), 3u);
}

TEST_F(HttpSourceTest, FailureMidBodyAfterRetriesExhaustedComesAfterTheGoodBytes) {
  const auto file = random_bytes(1u << 20, 7);
  server_.add_file("/s.tar", file);
  testing::HttpFaults f;
  f.drop_requests = 1;
  f.drop_after_bytes = 400000;
  server_.set_faults(f);
  HttpOptions o = fast_options();
  o.max_attempts = 2;
  auto source = HttpSource::open(server_.url("/s.tar"), o);
  ASSERT_TRUE(source.ok());
  // Once the first request is under way, make every later one fail.
  f = {};
  f.fail_requests = 1000;
  server_.set_faults(f);
  std::vector<uint8_t> got(file.size());
  size_t n = 0;
  Status error;
  while (n < got.size()) {
    auto r = (*source)->read(got.data() + n, got.size() - n);
    if (!r.ok()) {
      error = r.status();
      break;
    }
    ASSERT_GT(*r, 0u);
    n += *r;
  }
  ASSERT_FALSE(error.ok());
  EXPECT_EQ(n, 400000u);
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + 400000, file.begin()));
  EXPECT_NE(error.message().find("2 attempts"), std::string::npos) << error.message();
  // Sticky.
  EXPECT_FALSE((*source)->read(got.data(), 10).ok());
}

TEST_F(HttpSourceTest, StalledTransferTimesOutAndResumes) {
  const auto file = random_bytes(1u << 20, 8);
  server_.add_file("/s.tar", file);
  testing::HttpFaults f;
  f.stall_requests = 1;
  f.stall_after_bytes = 20000;
  f.stall_ms = 8000;
  server_.set_faults(f);
  HttpOptions o = fast_options();
  // curl averages the speed over the last few seconds, so the limit sits well above what the stalled request
  // managed (20 KB once) and far below loopback speed.
  o.low_speed_limit = 100000;
  o.low_speed_time_s = 1;
  const auto t0 = std::chrono::steady_clock::now();
  auto source = HttpSource::open(server_.url("/s.tar"), o);
  ASSERT_TRUE(source.ok());
  auto got = read_all(**source);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_TRUE(*got == file);
  EXPECT_EQ((*source)->stats().resumes, 1u);
  EXPECT_LT(seconds, 5.0);
  EXPECT_EQ(server_.requests().back().range, "bytes=20000-");
}

TEST_F(HttpSourceTest, RedirectsAreFollowedAndResumesGoThroughThem) {
  const auto file = random_bytes(1u << 20, 9);
  server_.add_file("/real/s.tar", file);
  server_.add_redirect("/s.tar", "/real/s.tar");
  testing::HttpFaults f;
  f.drop_requests = 1;
  f.drop_after_bytes = 300000;
  server_.set_faults(f);
  auto source = HttpSource::open(server_.url("/s.tar"), fast_options());
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  auto got = read_all(**source);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_TRUE(*got == file);
  const auto log = server_.requests();
  ASSERT_EQ(log.size(), 4u);  // 302, 200 (dropped), 302, 206
  EXPECT_EQ(log[0].status, 302);
  EXPECT_EQ(log[3].status, 206);
  EXPECT_EQ(log[3].range, "bytes=300000-");
}

TEST_F(HttpSourceTest, SkipAndReadInterleaved) {
  const auto file = random_bytes(1500000, 10);
  server_.add_file("/s.tar", file);
  testing::HttpFaults f;
  f.drop_requests = 1;
  f.drop_after_bytes = 600000;
  server_.set_faults(f);
  auto source = HttpSource::open(server_.url("/s.tar"), fast_options());
  ASSERT_TRUE(source.ok());
  size_t pos = 0;
  std::vector<uint8_t> buf(70000);
  for (uint64_t step : {10u, 500000u, 3u, 300000u, 123456u}) {
    auto skipped = (*source)->skip(step);
    ASSERT_TRUE(skipped.ok());
    ASSERT_EQ(*skipped, step);
    pos += step;
    auto n = read_full(**source, buf.data(), buf.size());
    ASSERT_TRUE(n.ok());
    ASSERT_EQ(*n, buf.size());
    EXPECT_TRUE(std::equal(buf.begin(), buf.end(), file.begin() + static_cast<std::ptrdiff_t>(pos))) << pos;
    pos += buf.size();
  }
  auto rest = (*source)->skip(10'000'000);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(*rest, file.size() - pos);
  EXPECT_EQ((*source)->stats().bytes_delivered, file.size());
}

TEST_F(HttpSourceTest, EmptyFileAndRefusedConnection) {
  server_.add_file("/empty.tar", {});
  auto empty = HttpSource::open(server_.url("/empty.tar"), fast_options());
  ASSERT_TRUE(empty.ok()) << empty.status().to_string();
  uint8_t b[8];
  auto n = (*empty)->read(b, sizeof(b));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);

  int port = 0;
  {
    testing::HttpTestServer gone;  // a port that was just free
    port = gone.port();
  }
  HttpOptions o = fast_options();
  o.max_attempts = 2;
  const std::string url = str("http://127.0.0.1:", port, "/x.tar");
  auto refused = HttpSource::open(url, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::io_error);
  EXPECT_NE(refused.status().message().find(url), std::string::npos) << refused.status().message();
  EXPECT_NE(refused.status().message().find("2 attempts"), std::string::npos) << refused.status().message();
}

// ---- ShardSampleStream over http:// ----

struct SampleRecord {
  std::string key;
  std::map<std::string, std::vector<uint8_t>> fields;
  bool operator==(const SampleRecord&) const = default;
};

std::vector<SampleRecord> drain(ShardSampleStream& stream, size_t limit = SIZE_MAX) {
  std::vector<SampleRecord> out;
  WebDatasetSample s;
  while (out.size() < limit) {
    auto more = stream.next(s);
    EXPECT_TRUE(more.ok()) << more.status().to_string();
    if (!more.ok() || !*more) break;
    out.push_back({s.key, s.fields});
  }
  return out;
}

std::unique_ptr<ShardSampleStream> make_stream(const std::vector<std::string>& shards, ShardStreamOptions o) {
  auto s = ShardSampleStream::create(shards, o);
  VLM_CHECK(s.ok(), s.status().to_string());
  return std::move(s).value();
}

TEST_F(HttpSourceTest, ShardSampleStreamOverHttpEqualsLocalFilesIncludingResume) {
  const std::string dir = testing::scratch_dir("http_stream");
  std::vector<std::string> local, remote;
  std::mt19937_64 rng(12);
  for (int s = 0; s < 3; ++s) {
    const std::string name = str("/shard-", s, ".tar");
    auto w = TarWriter::create(dir + name);
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < 40; ++i) {
      const std::string key = str("s", s, "_", i);
      ASSERT_TRUE((*w)->add(key + ".txt", std::string_view(key)).ok());
      ASSERT_TRUE((*w)->add(key + ".bin", random_bytes(5000 + rng() % 20000, rng())).ok());
    }
    ASSERT_TRUE((*w)->close().ok());
    std::ifstream in(dir + name, std::ios::binary);
    server_.add_file(name, std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {}));
    local.push_back(dir + name);
    remote.push_back(server_.url(name));
  }
  ShardStreamOptions o;
  o.epochs = 2;
  o.seed = 5;
  const auto expected = drain(*make_stream(local, o));
  ASSERT_EQ(expected.size(), 240u);

  // Connections dropped in the middle of shards along the way (open_source's default options: real backoff).
  testing::HttpFaults f;
  f.drop_requests = 2;
  f.drop_after_bytes = 200000;
  server_.set_faults(f);
  auto stream = make_stream(remote, o);
  EXPECT_TRUE(drain(*stream) == expected);
  EXPECT_EQ(stream->counters().shards_failed, 0u);
  EXPECT_EQ(stream->counters().shards_completed, 6u);

  for (size_t n : {1u, 57u, 120u, 200u}) {
    auto first = make_stream(remote, o);
    ASSERT_EQ(drain(*first, n).size(), n);
    ShardStreamOptions ro = o;
    ro.start = first->position();
    const auto rest = drain(*make_stream(remote, ro));
    EXPECT_TRUE(rest == std::vector<SampleRecord>(expected.begin() + static_cast<std::ptrdiff_t>(n), expected.end()))
        << "resume after " << n;
  }
}

}  // namespace
}  // namespace vlm

// PipeSource: `pipe:cat FILE` equals the file, a failing command is an error naming its status and stderr, a
// chatty stderr cannot deadlock the stream, early destruction kills and reaps the whole command, a ShardSampleStream
// reads pipe: shards like local ones, garbage output is reported and counted by the tar reader, a shard cut short by
// a failing command keeps its good samples and then fails naming the command, and a long stream (1 GiB by default;
// VLM_TEST_LONG_PIPE_MIB overrides) arrives byte-exact.
#include <gtest/gtest.h>

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "core/env.h"
#include "data/io/pipe_source.h"
#include "data/io/tar.h"
#include "data/io/webdataset.h"
#include "data/loader/sample_stream.h"
#include "data_test_util.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

Expected<std::vector<uint8_t>> read_all(ByteSource& source) {
  std::vector<uint8_t> out, buf(50000);
  for (;;) {
    VLM_ASSIGN_OR_RETURN(size_t got, source.read(buf.data(), buf.size()));
    if (got == 0) return out;
    out.insert(out.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(got));
  }
}

// Processes of process group `pgid` that are still running (zombies left to init do not count).
int live_members(pid_t pgid) {
  int live = 0;
  DIR* proc = ::opendir("/proc");
  if (!proc) return -1;
  while (dirent* e = ::readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream stat(str("/proc/", e->d_name, "/stat"));
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid pgrp ...; comm may hold spaces, so parse after the last ')'.
    size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    long ppid = 0, pgrp = 0;
    rest >> state >> ppid >> pgrp;
    if (pgrp == pgid && state != 'Z' && state != 'X') ++live;
  }
  ::closedir(proc);
  return live;
}

TEST(PipeSource, CatEqualsTheFile) {
  const std::string path = testing::scratch_dir("pipe_cat") + "/data.bin";
  const auto file = random_bytes(3u << 20, 1);
  write_file(path, file);
  auto source = open_source("pipe:cat " + path);
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  EXPECT_EQ((*source)->name(), "pipe:cat " + path);
  auto got = read_all(**source);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_TRUE(*got == file);
  auto again = (*source)->read(got->data(), 10);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0u);
  auto* pipe = dynamic_cast<PipeSource*>(source->get());
  ASSERT_NE(pipe, nullptr);
  EXPECT_EQ(pipe->bytes_read(), file.size());
  EXPECT_EQ(pipe->pid(), -1);  // reaped at the end of its output
}

TEST(PipeSource, FailingCommandNamesItsStatusAndStderr) {
  auto source = open_source("pipe:sh -c 'echo starting >&2; printf abc; echo oops >&2; exit 3'");
  ASSERT_TRUE(source.ok());
  uint8_t buf[16];
  size_t total = 0;
  Status error;
  for (;;) {
    auto r = (*source)->read(buf, sizeof(buf));
    if (!r.ok()) {
      error = r.status();
      break;
    }
    if (*r == 0) break;
    total += *r;
  }
  EXPECT_EQ(total, 3u);  // the output before the failure is delivered
  ASSERT_FALSE(error.ok()) << "a non-zero exit must not look like a clean end of stream";
  EXPECT_EQ(error.code(), StatusCode::io_error);
  const std::string& msg = error.message();
  EXPECT_NE(msg.find("status 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("oops"), std::string::npos) << msg;
  EXPECT_NE(msg.find("starting"), std::string::npos) << msg;
  EXPECT_NE(msg.find("pipe:sh -c"), std::string::npos) << msg;
  EXPECT_FALSE((*source)->read(buf, sizeof(buf)).ok()) << "the error is sticky";

  auto killed = open_source("pipe:kill -9 $$");
  ASSERT_TRUE(killed.ok());
  auto r = read_all(**killed);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("signal 9"), std::string::npos) << r.status().message();

  auto missing = open_source("pipe:/nonexistent/tool --flag");
  ASSERT_TRUE(missing.ok());
  auto m = read_all(**missing);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("status 127"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("/nonexistent/tool"), std::string::npos) << m.status().message();

  EXPECT_EQ(open_source("pipe:").status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(open_source("pipe:   ").status().code(), StatusCode::invalid_argument);
}

TEST(PipeSource, LoudStderrCannotBlockTheStreamAndStdinIsEmpty) {
  // 1 MB on stderr before any stdout: without draining stderr alongside, the command would block forever.
  auto source = open_source("pipe:head -c 1000000 /dev/zero | tr '\\000' x >&2; echo done");
  ASSERT_TRUE(source.ok());
  auto got = read_all(**source);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(std::string(got->begin(), got->end()), "done\n");
  auto* pipe = dynamic_cast<PipeSource*>(source->get());
  ASSERT_NE(pipe, nullptr);
  EXPECT_LE(pipe->stderr_tail().size(), PipeOptions{}.stderr_tail_bytes);
  EXPECT_GT(pipe->stderr_tail().size(), 0u);

  auto cat = open_source("pipe:cat");  // reads stdin: /dev/null, so it ends at once
  ASSERT_TRUE(cat.ok());
  auto empty = read_all(**cat);
  ASSERT_TRUE(empty.ok()) << empty.status().to_string();
  EXPECT_TRUE(empty->empty());
}

TEST(PipeSource, EarlyDestructionKillsAndReapsTheCommand) {
  for (const char* command : {"yes", "yes | cat", "trap '' TERM; yes"}) {
    PipeOptions o;
    o.kill_grace_ms = 300;  // the last command ignores SIGTERM: SIGKILL after this
    auto source = PipeSource::open(command, o);
    ASSERT_TRUE(source.ok());
    std::vector<uint8_t> buf(100000);
    auto n = read_full(**source, buf.data(), buf.size());
    ASSERT_TRUE(n.ok());
    ASSERT_EQ(*n, buf.size());
    EXPECT_EQ(buf[0], 'y');
    const pid_t pid = (*source)->pid();
    ASSERT_GT(pid, 0);
    EXPECT_GT(live_members(pid), 0);
    const auto t0 = std::chrono::steady_clock::now();
    source->reset();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(seconds, 2.0) << command;
    // Reaped: no longer our child, not even a zombie.
    EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), -1) << command;
    EXPECT_EQ(errno, ECHILD) << command;
    EXPECT_EQ(::kill(pid, 0), -1) << command;
    // The whole pipeline is gone (grandchildren end up with init; give it a moment).
    int live = 0;
    for (int i = 0; i < 100 && (live = live_members(pid)) != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(live, 0) << command;
  }
}

TEST(PipeSource, ShardSampleStreamReadsPipeShards) {
  const std::string dir = testing::scratch_dir("pipe_stream");
  std::vector<std::string> local, piped;
  for (int s = 0; s < 2; ++s) {
    const std::string path = str(dir, "/shard-", s, ".tar");
    auto w = TarWriter::create(path);
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < 25; ++i) {
      const std::string key = str("s", s, "_", i);
      ASSERT_TRUE((*w)->add(key + ".txt", std::string_view(key)).ok());
      ASSERT_TRUE((*w)->add(key + ".bin", random_bytes(3000 + 97 * i, s * 100 + i)).ok());
    }
    ASSERT_TRUE((*w)->close().ok());
    local.push_back(path);
    piped.push_back("pipe:cat '" + path + "'");
  }
  auto keys_of = [](std::vector<std::string> shards, StreamPosition start, size_t limit) {
    ShardStreamOptions o;
    o.seed = 3;
    o.epochs = 2;
    o.start = start;
    auto stream = ShardSampleStream::create(std::move(shards), o);
    VLM_CHECK(stream.ok(), stream.status().to_string());
    std::vector<std::string> keys;
    WebDatasetSample s;
    while (keys.size() < limit) {
      auto more = (*stream)->next(s);
      EXPECT_TRUE(more.ok()) << more.status().to_string();
      if (!more.ok() || !*more) break;
      keys.push_back(str(s.key, ":", s.get("bin") ? s.get("bin")->size() : 0));
    }
    EXPECT_EQ((*stream)->counters().shards_failed, 0u);
    return std::make_pair(keys, (*stream)->position());
  };
  const auto expected = keys_of(local, {}, SIZE_MAX).first;
  ASSERT_EQ(expected.size(), 100u);
  EXPECT_EQ(keys_of(piped, {}, SIZE_MAX).first, expected);
  const auto [head, pos] = keys_of(piped, {}, 37);  // resume inside a shard: the command is killed mid-stream
  EXPECT_EQ(head, std::vector<std::string>(expected.begin(), expected.begin() + 37));
  const auto tail = keys_of(piped, pos, SIZE_MAX).first;
  EXPECT_EQ(tail, std::vector<std::string>(expected.begin() + 37, expected.end()));
}

// A shard of `n` samples, each "KEY.txt" (the key) + "KEY.bin" (`bin_size` bytes): with a short key and
// bin_size <= 512 that is 4 blocks (header, body, header, body), so sample i starts at byte i * 2048.
std::string write_fixed_shard(const std::string& path, int n, size_t bin_size) {
  auto w = TarWriter::create(path);
  VLM_CHECK(w.ok(), w.status().to_string());
  for (int i = 0; i < n; ++i) {
    const std::string key = str("k", i);
    VLM_CHECK((*w)->add(key + ".txt", std::string_view(key)).ok(), "add");
    VLM_CHECK((*w)->add(key + ".bin", random_bytes(bin_size, static_cast<uint64_t>(i))).ok(), "add");
  }
  VLM_CHECK((*w)->close().ok(), "close");
  return path;
}

TEST(PipeSource, GarbageOutputIsReportedByTheTarReaderAndCountedByTheStream) {
  const std::string dir = testing::scratch_dir("pipe_garbage");
  const std::string good = write_fixed_shard(dir + "/good.tar", 12, 1000);
  const std::string random = "pipe:head -c 300000 /dev/urandom";
  const std::string text = "pipe:printf 'this is not a tar file'";

  // The tar reader names the pipe: source in its error.
  for (const std::string& url : {random, text}) {
    auto tar = TarReader::open(url);
    ASSERT_TRUE(tar.ok()) << tar.status().to_string();
    TarMember m;
    auto r = (*tar)->next(m);
    ASSERT_FALSE(r.ok()) << url << ": garbage must not parse";
    EXPECT_NE(r.status().message().find(url), std::string::npos) << r.status().message();
  }

  // The stream skips and counts both bad shards, and yields every sample of the good one, in every epoch.
  ShardStreamOptions o;
  o.shuffle_shards = false;
  o.epochs = 2;
  auto stream = ShardSampleStream::create({random, good, text}, o);
  ASSERT_TRUE(stream.ok());
  std::vector<std::string> keys;
  WebDatasetSample s;
  for (;;) {
    auto more = (*stream)->next(s);
    ASSERT_TRUE(more.ok()) << more.status().to_string();
    if (!*more) break;
    keys.push_back(s.key);
    EXPECT_EQ(s.text("txt"), s.key);
  }
  ASSERT_EQ(keys.size(), 24u);
  EXPECT_EQ(keys[0], "k0");
  EXPECT_EQ(keys[11], "k11");
  EXPECT_EQ((*stream)->counters().shards_failed, 4u);
  EXPECT_EQ((*stream)->counters().shards_completed, 2u);
}

TEST(PipeSource, CommandFailingMidShardKeepsTheGoodSamplesThenFailsNamingIt) {
  const std::string dir = testing::scratch_dir("pipe_midfail");
  const std::string shard = write_fixed_shard(dir + "/s.tar", 10, 500);
  ASSERT_EQ(testing::read_bytes(shard).size(), 10u * 2048 + 1024);  // + the two end-of-archive blocks
  // Seven whole samples arrive, then the command fails: the cut sits on a header boundary, where a tar stream could
  // legally end, so only the exit status tells a failed download from a short shard. The reader yields six: the
  // seventh might have had more members after the cut, so it is dropped with the broken rest of the shard.
  const std::string url = str("pipe:head -c ", 7 * 2048, " '", shard, "'; echo 'connection reset' >&2; exit 9");
  auto reader = WebDatasetReader::open(url);
  ASSERT_TRUE(reader.ok());
  WebDatasetSample s;
  int good = 0;
  Status error;
  for (;;) {
    auto more = (*reader)->next(s);
    if (!more.ok()) {
      error = more.status();
      break;
    }
    if (!*more) break;
    EXPECT_EQ(s.key, str("k", good));
    ++good;
  }
  EXPECT_EQ(good, 6);
  ASSERT_FALSE(error.ok()) << "a failed command must not look like the end of the shard";
  EXPECT_TRUE((*reader)->failed());
  EXPECT_NE(error.message().find("status 9"), std::string::npos) << error.message();
  EXPECT_NE(error.message().find("connection reset"), std::string::npos) << error.message();
  EXPECT_NE(error.message().find("pipe:head -c"), std::string::npos) << error.message();

  // Through the stream: the six samples, then the shard counts as failed, and the next shard follows.
  ShardStreamOptions o;
  o.shuffle_shards = false;
  auto stream = ShardSampleStream::create({url, shard}, o);
  ASSERT_TRUE(stream.ok());
  size_t n = 0;
  for (;;) {
    auto more = (*stream)->next(s);
    ASSERT_TRUE(more.ok()) << more.status().to_string();
    if (!*more) break;
    ++n;
  }
  EXPECT_EQ(n, 16u);
  EXPECT_EQ((*stream)->counters().shards_failed, 1u);
  EXPECT_EQ((*stream)->counters().shards_completed, 1u);
}

TEST(PipeSource, LongStreamArrivesExactly) {
  // One cat writes a 1 MiB random file `mib` times over (1 GiB by default; VLM_TEST_LONG_PIPE_MIB sets the MiB
  // count, e.g. 5000 to cross 4 GiB): every byte's value depends on its offset, so a lost, repeated or reordered
  // chunk shows up as a mismatch.
  const uint64_t mib = static_cast<uint64_t>(env::integer("VLM_TEST_LONG_PIPE_MIB"));
  constexpr size_t kUnit = 1u << 20;
  const std::string path = testing::scratch_dir("pipe_long") + "/unit.bin";
  const auto unit = random_bytes(kUnit, 99);
  write_file(path, unit);
  std::vector<uint8_t> twice(unit);
  twice.insert(twice.end(), unit.begin(), unit.end());  // a read that straddles two copies compares contiguously
  auto source = PipeSource::open(str("yes '", path, "' | head -n ", mib, " | xargs cat"));
  ASSERT_TRUE(source.ok());
  std::vector<uint8_t> buf(kUnit);
  uint64_t pos = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    auto got = (*source)->read(buf.data(), buf.size());
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    if (*got == 0) break;
    ASSERT_EQ(std::memcmp(buf.data(), twice.data() + pos % kUnit, *got), 0) << "wrong bytes near offset " << pos;
    pos += *got;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(pos, mib * kUnit);
  EXPECT_EQ((*source)->bytes_read(), mib * kUnit);
  std::printf("[info] pipe: %llu MiB in %.2f s (%.0f MiB/s)\n", static_cast<unsigned long long>(mib), seconds,
              static_cast<double>(mib) / seconds);
}

}  // namespace
}  // namespace vlm

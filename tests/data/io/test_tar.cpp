// Tar reader/writer: round trips, interoperability with Python's tarfile, every malformed case, a mutation fuzz loop.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/philox.h"
#include "data/io/tar.h"
#include "data_test_util.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

using testing::append;
using testing::tar_end;
using testing::tar_header;
using testing::tar_member;

struct ReadResult {
  std::vector<std::pair<std::string, std::string>> members;
  Status status;
};

ReadResult read_all(TarReader& reader) {
  ReadResult r;
  TarMember m;
  for (int guard = 0; guard < 100000; ++guard) {
    auto more = reader.next(m);
    if (!more.ok()) {
      r.status = more.status();
      return r;
    }
    if (!*more) return r;
    r.members.emplace_back(m.name, std::string(m.data.begin(), m.data.end()));
  }
  ADD_FAILURE() << "reader did not terminate";
  return r;
}

ReadResult read_bytes_tar(std::vector<uint8_t> bytes, TarReaderOptions options = {}) {
  TarReader reader(std::make_unique<MemorySource>(std::move(bytes), "mem.tar"), options);
  return read_all(reader);
}

std::string random_bytes(uint64_t seed, size_t n) {
  Philox rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng.next_u32() & 0xff);
  return s;
}

TEST(Tar, WriterReaderRoundTrip) {
  const std::string dir = testing::scratch_dir("tar_roundtrip");
  const std::string path = dir + "/a.tar";
  std::vector<std::pair<std::string, std::string>> expected = {
      {"hello.txt", "hello"},
      {"empty.bin", ""},
      {std::string(100, 'n'), "exactly 100 bytes of name"},
      {std::string(101, 'm'), "101 bytes of name"},
      {"deep/" + std::string(60, 'd') + "/" + std::string(90, 'e') + "/000001.seg.png", random_bytes(1, 1000)},
      {"b511", random_bytes(2, 511)},
      {"b512", random_bytes(3, 512)},
      {"b513", random_bytes(4, 513)},
  };
  {
    auto w = TarWriter::create(path);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    for (const auto& [name, body] : expected) ASSERT_TRUE((*w)->add(name, std::string_view(body)).ok());
    EXPECT_FALSE(std::filesystem::exists(path)) << "final name must not exist before close()";
    EXPECT_TRUE(std::filesystem::exists(path + ".tmp"));
    ASSERT_TRUE((*w)->close().ok());
  }
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(std::filesystem::file_size(path) % 512, 0u);

  auto reader = TarReader::open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  ReadResult r = read_all(**reader);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.members, expected);
}

TEST(Tar, WriterIsDeterministicAndRejectsBadNames) {
  const std::string dir = testing::scratch_dir("tar_determinism");
  for (const char* name : {"/x.tar", "/y.tar"}) {
    auto w = TarWriter::create(dir + name);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->add("k.txt", std::string_view("same")).ok());
    EXPECT_EQ((*w)->add("../up.txt", std::string_view("x")).code(), StatusCode::invalid_argument);
    EXPECT_EQ((*w)->add("/abs.txt", std::string_view("x")).code(), StatusCode::invalid_argument);
    EXPECT_EQ((*w)->add("", std::string_view("x")).code(), StatusCode::invalid_argument);
    ASSERT_TRUE((*w)->close().ok());
  }
  EXPECT_EQ(testing::read_bytes(dir + "/x.tar"), testing::read_bytes(dir + "/y.tar"));
}

TEST(Tar, WriterWithoutCloseLeavesNothing) {
  const std::string dir = testing::scratch_dir("tar_abandon");
  {
    auto w = TarWriter::create(dir + "/half.tar");
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->add("a.txt", std::string_view("abc")).ok());
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/half.tar"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/half.tar.tmp"));
}

TEST(Tar, ManyMembers) {
  const std::string path = testing::scratch_dir("tar_many") + "/many.tar";
  auto w = TarWriter::create(path);
  ASSERT_TRUE(w.ok());
  const int n = 3000;
  for (int i = 0; i < n; ++i) ASSERT_TRUE((*w)->add(str("m", i, ".txt"), std::string_view(str("body ", i * 7))).ok());
  ASSERT_TRUE((*w)->close().ok());
  auto reader = TarReader::open(path);
  ASSERT_TRUE(reader.ok());
  ReadResult r = read_all(**reader);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  ASSERT_EQ(r.members.size(), static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(r.members[i].first, str("m", i, ".txt"));
    EXPECT_EQ(r.members[i].second, str("body ", i * 7));
  }
}

TEST(Tar, ReadsPythonTarfileFormats) {
  const std::string long_name = "long_directory_name_" + std::string(40, 'x') + "/nested_directory_" +
                                std::string(30, 'y') + "/000042.seg.png";
  std::string long_body;
  for (int rep = 0; rep < 3; ++rep)
    for (int i = 0; i < 256; ++i) long_body += static_cast<char>(i);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"dir/000001.txt", "hello tar\n"},
      {long_name, long_body},
      {"dir/empty.json", ""},
      {"dotted/000002.txt", "dot slash"}};
  for (const char* fmt : {"ustar", "gnu", "pax"}) {
    SCOPED_TRACE(fmt);
    auto reader = TarReader::open(str(VLM_DATA_FIXTURES, "/tar/python_", fmt, ".tar"));
    ASSERT_TRUE(reader.ok()) << reader.status().to_string();
    ReadResult r = read_all(**reader);
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_EQ(r.members, expected);
  }
}

TEST(Tar, PaxPathAndSizeOverrideTheHeader) {
  const std::string pax_name = "pax/" + std::string(150, 'p') + ".txt";
  std::string records;
  auto add_record = [&](const std::string& kv) {
    // "<len> key=value\n", where len counts its own digits.
    size_t len = kv.size() + 3;
    while (std::to_string(len).size() + kv.size() + 2 != len) ++len;
    records += std::to_string(len) + " " + kv + "\n";
  };
  add_record("path=" + pax_name);
  add_record("size=5");
  add_record("mtime=1700000000.5");
  std::vector<uint8_t> tar = tar_member("PaxHeaders/x", records, 'x');
  append(tar, tar_header("short-name.txt", 999, '0'));  // header size is wrong on purpose: pax wins
  std::vector<uint8_t> body = {'a', 'b', 'c', 'd', 'e'};
  body.resize(512, 0);
  append(tar, body);
  append(tar, tar_member("next.txt", "n"));
  append(tar, tar_end());
  ReadResult r = read_bytes_tar(tar);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  ASSERT_EQ(r.members.size(), 2u);
  EXPECT_EQ(r.members[0].first, pax_name);
  EXPECT_EQ(r.members[0].second, "abcde");
  EXPECT_EQ(r.members[1].first, "next.txt");  // pax applies to one member only
}

TEST(Tar, UstarPrefixBase256DirsAndLinks) {
  std::vector<uint8_t> tar;
  append(tar, tar_header("some/dir/", 0, '5'));
  append(tar, tar_header("link", 0, '2'));
  append(tar, tar_header("hard", 0, '1'));
  std::vector<uint8_t> h = tar_header("file.txt", 3, '0', "some/dir");
  append(tar, h);
  std::vector<uint8_t> body = {'x', 'y', 'z'};
  body.resize(512, 0);
  append(tar, body);
  // Base-256 size (GNU): 0x80 then big-endian.
  h = tar_header("b256.txt", 0, '0');
  std::memset(h.data() + 124, 0, 12);
  h[124] = 0x80;
  h[135] = 2;
  testing::tar_fix_checksum(h.data());
  append(tar, h);
  body = {'o', 'k'};
  body.resize(512, 0);
  append(tar, body);
  append(tar, tar_member("./dot/slash.txt", "d"));
  append(tar, tar_member("vendor", "skipped body", 'V'));
  append(tar, tar_end());
  ReadResult r = read_bytes_tar(tar);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  std::vector<std::pair<std::string, std::string>> expected = {
      {"some/dir/file.txt", "xyz"}, {"b256.txt", "ok"}, {"dot/slash.txt", "d"}};
  EXPECT_EQ(r.members, expected);
}

TEST(Tar, EndOfArchiveForms) {
  std::vector<uint8_t> members = tar_member("a.txt", "a");
  append(members, tar_member("b.txt", "b"));
  // Clean EOF without end blocks; one zero block; two zero blocks followed by junk that must not be read.
  std::vector<uint8_t> one_zero = members, two_zero_junk = members;
  one_zero.resize(one_zero.size() + 512, 0);
  append(two_zero_junk, tar_end());
  two_zero_junk.resize(two_zero_junk.size() + 700, 0x55);
  for (const auto& bytes : {members, one_zero, two_zero_junk}) {
    ReadResult r = read_bytes_tar(bytes);
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_EQ(r.members.size(), 2u);
  }
  // Empty input: an empty archive, not an error.
  ReadResult empty = read_bytes_tar({});
  EXPECT_TRUE(empty.status.ok());
  EXPECT_TRUE(empty.members.empty());
}

TEST(Tar, ZeroByteMembers) {
  std::vector<uint8_t> tar = tar_member("z1.txt", "");
  append(tar, tar_member("z2.txt", ""));
  append(tar, tar_member("x.txt", "x"));
  append(tar, tar_end());
  ReadResult r = read_bytes_tar(tar);
  ASSERT_TRUE(r.status.ok());
  ASSERT_EQ(r.members.size(), 3u);
  EXPECT_EQ(r.members[0], std::make_pair(std::string("z1.txt"), std::string()));
  EXPECT_EQ(r.members[2].second, "x");
}

TEST(Tar, UnsafeNamesAreSkippedNotFatal) {
  std::vector<uint8_t> tar = tar_member("../evil.txt", "evil");
  append(tar, tar_member("/etc/passwd", "root"));
  append(tar, tar_member("a/../../b.txt", "sneaky"));
  append(tar, tar_member("ok..name.txt", "fine"));  // ".." inside a component is harmless
  append(tar, tar_end());
  TarReader reader(std::make_unique<MemorySource>(tar, "mem.tar"));
  ReadResult r = read_all(reader);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  ASSERT_EQ(r.members.size(), 1u);
  EXPECT_EQ(r.members[0].first, "ok..name.txt");
  EXPECT_EQ(reader.unsafe_names_skipped(), 3u);
}

TEST(Tar, TruncatedHeader) {
  std::vector<uint8_t> tar = tar_member("a.txt", "a");
  append(tar, tar_member("second.txt", "b"));
  tar.resize(512 + 512 + 100);
  ReadResult r = read_bytes_tar(tar);
  EXPECT_EQ(r.members.size(), 1u);
  EXPECT_EQ(r.status.code(), StatusCode::parse_error);
  EXPECT_NE(r.status.message().find("mem.tar"), std::string::npos) << r.status.message();
  EXPECT_NE(r.status.message().find("truncated header"), std::string::npos) << r.status.message();
  EXPECT_NE(r.status.message().find("offset 1024"), std::string::npos) << r.status.message();
}

TEST(Tar, TruncatedBody) {
  std::vector<uint8_t> tar = tar_member("a.txt", "a");
  append(tar, tar_member("big.bin", random_bytes(5, 3000)));
  tar.resize(512 + 512 + 512 + 1000);
  ReadResult r = read_bytes_tar(tar);
  EXPECT_EQ(r.members.size(), 1u);
  EXPECT_EQ(r.status.code(), StatusCode::parse_error);
  EXPECT_NE(r.status.message().find("truncated body"), std::string::npos) << r.status.message();
  EXPECT_NE(r.status.message().find("big.bin"), std::string::npos) << r.status.message();
  // The same through skip_body (headers-only reading).
  TarReader reader(std::make_unique<MemorySource>(tar, "mem.tar"));
  TarEntry e;
  ASSERT_TRUE(*reader.next_entry(e));
  ASSERT_TRUE(*reader.next_entry(e));
  EXPECT_EQ(e.name, "big.bin");
  EXPECT_FALSE(reader.skip_body().ok());
}

TEST(Tar, BadChecksum) {
  std::vector<uint8_t> tar = tar_member("a.txt", "a");
  tar[3] ^= 0x01;  // a name byte changes; the stored checksum no longer matches
  append(tar, tar_end());
  ReadResult r = read_bytes_tar(tar);
  EXPECT_TRUE(r.members.empty());
  EXPECT_NE(r.status.message().find("checksum"), std::string::npos) << r.status.message();
}

TEST(Tar, BadSizeField) {
  std::vector<uint8_t> tar = tar_header("a.txt", 0, '0', "", "00000012x45");
  tar.resize(1024, 0);
  append(tar, tar_end());
  ReadResult r = read_bytes_tar(tar);
  EXPECT_TRUE(r.members.empty());
  EXPECT_EQ(r.status.code(), StatusCode::parse_error);
  EXPECT_NE(r.status.message().find("size field"), std::string::npos) << r.status.message();
  EXPECT_NE(r.status.message().find("a.txt"), std::string::npos) << r.status.message();
}

TEST(Tar, SizeOverLimit) {
  std::vector<uint8_t> tar = tar_member("big.bin", std::string(1000, 'b'));
  append(tar, tar_end());
  TarReaderOptions options;
  options.max_member_size = 999;
  ReadResult r = read_bytes_tar(tar, options);
  EXPECT_EQ(r.status.code(), StatusCode::out_of_range);
  EXPECT_NE(r.status.message().find("big.bin"), std::string::npos);
  options.max_member_size = 1000;
  EXPECT_TRUE(read_bytes_tar(tar, options).status.ok());
}

TEST(Tar, OversizedLongNameAndBadPax) {
  std::vector<uint8_t> tar = tar_member("././@LongLink", std::string(5000, 'L'), 'L');
  append(tar, tar_member("x", "x"));
  TarReaderOptions options;
  options.max_extension_size = 4096;
  EXPECT_FALSE(read_bytes_tar(tar, options).status.ok());

  std::vector<uint8_t> pax = tar_member("PaxHeader", "30 path=abc\n", 'x');  // length lies
  append(pax, tar_member("x", "x"));
  ReadResult r = read_bytes_tar(pax);
  EXPECT_EQ(r.status.code(), StatusCode::parse_error);
  EXPECT_NE(r.status.message().find("pax"), std::string::npos) << r.status.message();

  // An extension header with nothing after it.
  std::vector<uint8_t> dangling = tar_member("././@LongLink", "name.txt", 'L');
  EXPECT_FALSE(read_bytes_tar(dangling).status.ok());
}

TEST(Tar, GarbageIsAnErrorAndErrorsAreSticky) {
  std::string junk = random_bytes(42, 2000);
  TarReader reader(std::make_unique<MemorySource>(std::vector<uint8_t>(junk.begin(), junk.end()), "junk.tar"));
  TarMember m;
  auto first = reader.next(m);
  ASSERT_FALSE(first.ok());
  EXPECT_NE(first.status().message().find("junk.tar"), std::string::npos);
  auto second = reader.next(m);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().message(), first.status().message());
}

TEST(Tar, MutationFuzzTerminates) {
  const std::string path = testing::scratch_dir("tar_fuzz") + "/seed.tar";
  {
    auto w = TarWriter::create(path);
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < 6; ++i) ASSERT_TRUE((*w)->add(str("k", i, i == 3 ? std::string(120, 'l') : "", ".txt"),
                                                      std::string_view(random_bytes(i, 100 * i))).ok());
    ASSERT_TRUE((*w)->close().ok());
  }
  const std::vector<uint8_t> seed = testing::read_bytes(path);
  Philox rng(7);
  int errors = 0;
  for (int iter = 0; iter < 400; ++iter) {
    std::vector<uint8_t> bytes = seed;
    const int edits = 1 + static_cast<int>(rng.uniform_int(8));
    for (int e = 0; e < edits; ++e) bytes[rng.uniform_int(bytes.size())] = static_cast<uint8_t>(rng.next_u32());
    if (rng.uniform_int(3) == 0) bytes.resize(rng.uniform_int(bytes.size()));
    ReadResult r = read_bytes_tar(bytes);
    errors += !r.status.ok();
    for (const auto& m : r.members) EXPECT_LE(m.second.size(), seed.size());
  }
  EXPECT_GT(errors, 0);
}

TEST(ByteSource, OpenSourceSchemes) {
  // http(s):// and pipe: are tested against real servers and commands in test_http_source.cpp and
  // test_pipe_source.cpp.
  for (const char* url : {"s3://bucket/a.tar", "ftp://host/a.tar"}) {
    auto s = open_source(url);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::unsupported);
    EXPECT_NE(s.status().message().find(std::string(url).substr(0, std::string(url).find(':'))), std::string::npos);
  }
  auto pipe = open_source("pipe:");
  ASSERT_FALSE(pipe.ok());
  EXPECT_EQ(pipe.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(pipe.status().message().find("pipe:"), std::string::npos);
  EXPECT_EQ(open_source("/nonexistent/dir/x.tar").status().code(), StatusCode::not_found);
  EXPECT_EQ(open_source(testing::scratch_dir("bs_dir")).status().code(), StatusCode::invalid_argument);

  const std::string path = testing::scratch_dir("bs_file") + "/f.bin";
  testing::write_bytes(path, {1, 2, 3, 4, 5, 6, 7});
  for (std::string url : {path, "file://" + path}) {
    auto s = open_source(url);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    uint8_t buf[4];
    EXPECT_EQ(*read_full(**s, buf, 2), 2u);
    EXPECT_EQ(buf[1], 2);
    EXPECT_EQ(*(*s)->skip(3), 3u);
    EXPECT_EQ(*read_full(**s, buf, 4), 2u);  // 6, 7 then EOF
    EXPECT_EQ(buf[0], 6);
    EXPECT_EQ(*(*s)->skip(10), 0u);  // clamped at the end, not past it
    EXPECT_EQ(*read_full(**s, buf, 4), 0u);
  }
}

}  // namespace
}  // namespace vlm

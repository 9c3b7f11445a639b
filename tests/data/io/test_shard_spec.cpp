// Shard spec expansion: braces, ranges, directories, @list files, "::" joins, errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "data/io/shard_spec.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

using Names = std::vector<std::string>;

Names expand_ok(const std::string& spec) {
  auto r = expand_shard_spec(spec);
  EXPECT_TRUE(r.ok()) << spec << ": " << r.status().to_string();
  return r.ok() ? *r : Names{};
}

TEST(ShardSpec, Braces) {
  EXPECT_EQ(expand_ok("d/shapes-{000000..000003}.tar"),
            (Names{"d/shapes-000000.tar", "d/shapes-000001.tar", "d/shapes-000002.tar", "d/shapes-000003.tar"}));
  EXPECT_EQ(expand_ok("x{8..11}"), (Names{"x8", "x9", "x10", "x11"}));
  EXPECT_EQ(expand_ok("x{08..11}"), (Names{"x08", "x09", "x10", "x11"}));
  EXPECT_EQ(expand_ok("x{3..1}"), (Names{"x3", "x2", "x1"}));
  EXPECT_EQ(expand_ok("{a,b}-{0..1}.tar"), (Names{"a-0.tar", "a-1.tar", "b-0.tar", "b-1.tar"}));
  EXPECT_EQ(expand_ok("p{a,b{1,2}}q"), (Names{"paq", "pb1q", "pb2q"}));
  EXPECT_EQ(expand_ok("s3{,x}"), (Names{"s3", "s3x"}));
  EXPECT_EQ(expand_ok("http://host/data-{00..02}.tar"),
            (Names{"http://host/data-00.tar", "http://host/data-01.tar", "http://host/data-02.tar"}));
  EXPECT_EQ(expand_ok("plain/path.tar"), (Names{"plain/path.tar"}));
  EXPECT_EQ(expand_ok("a.tar::b{1..2}.tar"), (Names{"a.tar", "b1.tar", "b2.tar"}));
}

TEST(ShardSpec, BraceErrors) {
  for (const char* bad : {"a{0..3", "a}0", "a{}", "a{abc}", "a{1..x}", "", "a.tar::"}) {
    auto r = expand_shard_spec(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::invalid_argument) << bad;
    }
  }
  auto huge = expand_braces("{0..999}{0..999}{0..999}", 100000);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("more than"), std::string::npos) << huge.status().message();
}

TEST(ShardSpec, DirectoryAndListFile) {
  const std::string dir = testing::scratch_dir("shard_spec");
  for (const char* f : {"b.tar", "a.tar", "c.txt", "d.tar.tmp"}) std::ofstream(dir + "/" + f) << "x";
  std::filesystem::create_directories(dir + "/sub.tar");  // a directory named *.tar is not a shard
  EXPECT_EQ(expand_ok(dir), (Names{dir + "/a.tar", dir + "/b.tar"}));
  const std::string empty = testing::scratch_dir("shard_spec_empty");
  EXPECT_EQ(expand_shard_spec(empty).status().code(), StatusCode::not_found);

  {
    std::ofstream list(dir + "/list.txt");
    list << "# training shards\n"
         << "\n"
         << "rel-{0..1}.tar\n"
         << "  /abs/x.tar  \r\n"
         << "http://host/y.tar\n";
  }
  EXPECT_EQ(expand_ok("@" + dir + "/list.txt"),
            (Names{dir + "/rel-0.tar", dir + "/rel-1.tar", "/abs/x.tar", "http://host/y.tar"}));
  EXPECT_EQ(expand_shard_spec("@" + dir + "/missing.txt").status().code(), StatusCode::not_found);
  {
    std::ofstream list(dir + "/bad.txt");
    list << "ok.tar\nbroken{.tar\n";
  }
  auto bad = expand_shard_spec("@" + dir + "/bad.txt");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.txt:2"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace vlm

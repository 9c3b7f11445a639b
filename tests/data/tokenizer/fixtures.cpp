// Fixture helpers and the tiny hand-written tokenizer the tests derive expected ids from.
#include "data/tokenizer/fixtures.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#ifdef VLM_HAVE_ZLIB_TESTS
#include <zlib.h>
#endif

namespace vlm::testing {

std::string tokenizer_fixture_path(const std::string& name) { return std::string(VLM_TOKENIZER_FIXTURES) + "/" + name; }

std::string read_file_or_die(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot open fixture %s\n", path.c_str());
    std::abort();
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

std::string read_gzip_or_die(const std::string& path) {
#ifdef VLM_HAVE_ZLIB_TESTS
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot open fixture %s\n", path.c_str());
    std::abort();
  }
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  bool failed = n < 0;
  gzclose(f);
  if (failed) {
    std::fprintf(stderr, "gunzip failed for %s\n", path.c_str());
    std::abort();
  }
  return out;
#else
  std::fprintf(stderr, "built without zlib: cannot read %s\n", path.c_str());
  std::abort();
#endif
}

// ids   0 <|endoftext|> (special)   1 <image> (special)
//       2 a  3 b  4 c  5 d  6 Ġ (space)  7 1  8 2
//       9 ab  10 bc  11 abc  12 Ġab  13 cc  14 dd  15 abcd (reachable only with ignore_merges)
// merges by rank: 0 "a b"  1 "b c"  2 "ab c"  3 "Ġ ab"  4 "c c"  5 "d d"
nlohmann::json tiny_tokenizer_json() {
  using nlohmann::json;
  json vocab = {{"<|endoftext|>", 0}, {"<image>", 1}, {"a", 2},   {"b", 3},    {"c", 4},    {"d", 5},
                {"\xC4\xA0", 6},      {"1", 7},       {"2", 8},   {"ab", 9},   {"bc", 10},  {"abc", 11},
                {"\xC4\xA0" "ab", 12}, {"cc", 13},    {"dd", 14}, {"abcd", 15}};
  json merges = {"a b", "b c", "ab c", "\xC4\xA0 ab", "c c", "d d"};
  auto added = [](int id, const char* content) {
    return json{{"id", id},           {"content", content}, {"single_word", false}, {"lstrip", false},
                {"rstrip", false},    {"normalized", false}, {"special", true}};
  };
  return json{
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", {added(0, "<|endoftext|>"), added(1, "<image>")}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
        {"vocab", vocab}, {"merges", merges}}}};
}

}  // namespace vlm::testing

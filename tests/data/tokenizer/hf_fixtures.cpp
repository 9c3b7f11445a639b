// Reading the fixtures/hf files: xz through liblzma, JSON through nlohmann.
#include "data/tokenizer/hf_fixtures.h"

#include <lzma.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "data/tokenizer/fixtures.h"

namespace vlm::testing {

std::string hf_fixture_path(const std::string& relative) { return tokenizer_fixture_path("hf/" + relative); }

std::vector<std::string> hf_families() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(hf_fixture_path(""))) {
    if (std::filesystem::exists(e.path() / "tokenizer.json.xz")) out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string hf_tokenizer_json(const std::string& family) {
  std::string path = hf_fixture_path(family + "/tokenizer.json.xz");
  std::string packed = read_file_or_die(path);
  lzma_stream strm = LZMA_STREAM_INIT;
  if (lzma_stream_decoder(&strm, UINT64_MAX, 0) != LZMA_OK) {
    std::fprintf(stderr, "lzma_stream_decoder failed for %s\n", path.c_str());
    std::abort();
  }
  std::string out;
  char buf[1 << 16];
  strm.next_in = reinterpret_cast<const uint8_t*>(packed.data());
  strm.avail_in = packed.size();
  lzma_ret ret = LZMA_OK;
  while (ret == LZMA_OK) {
    strm.next_out = reinterpret_cast<uint8_t*>(buf);
    strm.avail_out = sizeof(buf);
    ret = lzma_code(&strm, LZMA_FINISH);
    out.append(buf, sizeof(buf) - strm.avail_out);
  }
  lzma_end(&strm);
  if (ret != LZMA_STREAM_END) {
    std::fprintf(stderr, "cannot decompress %s (lzma error %d)\n", path.c_str(), static_cast<int>(ret));
    std::abort();
  }
  return out;
}

nlohmann::ordered_json hf_json(const std::string& relative) {
  std::string path = hf_fixture_path(relative);
  try {
    return nlohmann::ordered_json::parse(read_file_or_die(path));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "malformed fixture %s: %s\n", path.c_str(), e.what());
    std::abort();
  }
}

}  // namespace vlm::testing

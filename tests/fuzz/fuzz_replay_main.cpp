// main() for the fuzz targets when they are built without libFuzzer (the normal gcc build, run by ctest): replays
// every file of the given folders and files through LLVMFuzzerTestOneInput, then deterministic mutations of each
// (bit flips, byte overwrites with 0x00/0xff/0x7f, truncations, chunk duplication), so CI exercises the malformed-input
// paths on every run. Usage: fuzz_X [--mutations N] PATH...   (exit 0 = no crash)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<uint8_t> read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void mutate(std::vector<uint8_t>& b, std::mt19937_64& rng) {
  if (b.empty()) {
    b.push_back(static_cast<uint8_t>(rng()));
    return;
  }
  switch (rng() % 5) {
    case 0:  // flip a few bits
      for (int i = 0, n = 1 + static_cast<int>(rng() % 8); i < n; ++i) b[rng() % b.size()] ^= 1u << (rng() % 8);
      break;
    case 1: {  // overwrite a run with an interesting byte
      static const uint8_t vals[] = {0x00, 0xff, 0x7f, 0x80, '0', '9'};
      const size_t at = rng() % b.size(), n = 1 + rng() % 16;
      for (size_t i = at; i < b.size() && i < at + n; ++i) b[i] = vals[rng() % sizeof(vals)];
      break;
    }
    case 2:  // truncate
      b.resize(rng() % b.size());
      break;
    case 3: {  // duplicate a chunk in place
      const size_t at = rng() % b.size(), n = std::min<size_t>(1 + rng() % 1024, b.size() - at);
      std::vector<uint8_t> chunk(b.begin() + static_cast<long>(at), b.begin() + static_cast<long>(at + n));
      b.insert(b.begin() + static_cast<long>(at), chunk.begin(), chunk.end());
      break;
    }
    default: {  // write a random 32-bit value (sizes, offsets, lengths)
      const size_t at = rng() % b.size();
      const uint32_t v = static_cast<uint32_t>(rng());
      for (size_t i = 0; i < 4 && at + i < b.size(); ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int mutations = 200;
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--mutations") && i + 1 < argc) {
      mutations = std::atoi(argv[++i]);
      continue;
    }
    std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (std::filesystem::exists(p)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "fuzz replay: %s does not exist\n", argv[i]);
      return 2;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: %s [--mutations N] FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  std::mt19937_64 rng(0x5eed);
  size_t runs = 0;
  for (const auto& f : files) {
    const std::vector<uint8_t> seed = read_all(f);
    LLVMFuzzerTestOneInput(seed.data(), seed.size());
    ++runs;
    for (int m = 0; m < mutations; ++m) {
      std::vector<uint8_t> b = seed;
      for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k) mutate(b, rng);
      LLVMFuzzerTestOneInput(b.data(), b.size());
      ++runs;
    }
  }
  std::printf("fuzz replay: %zu inputs from %zu seed files, no crash\n", runs, files.size());
  return 0;
}

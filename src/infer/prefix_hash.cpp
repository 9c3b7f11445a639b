// Prefix-cache keys: MurmurHash3_x64_128 over the parent key and the token keys.
#include "infer/prefix_hash.h"

#include <string>

#include "core/status.h"

namespace vlm::infer {

ImageContentHash image_key(std::string_view encoded_bytes, std::string_view preprocessing) {
  const ImageContentHash bytes = content_hash(encoded_bytes);
  // The settings and the byte hash, length-prefixed so no two (bytes, settings) pairs give the same buffer.
  std::string buf;
  const uint64_t words[3] = {bytes.lo, bytes.hi, static_cast<uint64_t>(preprocessing.size())};
  buf.append(reinterpret_cast<const char*>(words), sizeof(words));
  buf.append(preprocessing);
  return murmur3_x64_128(buf.data(), buf.size(), 0x1a6e);
}

BlockHash block_hash(const BlockHash& parent, const int32_t* tokens, const int32_t* image_rows, int n,
                     const std::vector<ImageContentHash>& image_keys, int per_image) {
  std::vector<uint64_t> words;
  words.reserve(2 + 3 * static_cast<size_t>(n));
  words.push_back(parent.lo);
  words.push_back(parent.hi);
  for (int i = 0; i < n; ++i) {
    const int32_t r = image_rows ? image_rows[i] : -1;
    if (r < 0) {
      words.push_back(static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])));  // < 2^32: never an image tag
      continue;
    }
    const size_t image = static_cast<size_t>(r / per_image);
    VLM_CHECK(image < image_keys.size(), "block_hash: image row ", r, " of ", image_keys.size(), " images");
    words.push_back((uint64_t{1} << 63) | static_cast<uint64_t>(r % per_image));
    words.push_back(image_keys[image].lo);
    words.push_back(image_keys[image].hi);
  }
  return murmur3_x64_128(words.data(), words.size() * sizeof(uint64_t), 0xb10c);
}

}  // namespace vlm::infer

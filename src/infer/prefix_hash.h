// Prefix-cache keys. A full KV block is keyed by a hash chain: its parent block's key and the keys of its tokens,
// where a text token contributes its id and an image placeholder the content key of its image (the encoded bytes
// and the preprocessing settings, hashed together) and its row within the image. The same image in two requests
// therefore shares KV; two different images never do, whatever their length or leading bytes, and neither do the
// same bytes preprocessed differently. 128-bit MurmurHash3 (data/io/content_hash.h): not cryptographic.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "data/io/content_hash.h"
#include "infer/block_pool.h"

namespace vlm::infer {

// The content key of an image: its encoded bytes and the preprocessing that turns them into pixels (size, crop,
// normalization: any setting that changes the pixels the encoder sees).
ImageContentHash image_key(std::string_view encoded_bytes, std::string_view preprocessing);

// The key of the first block's parent: the empty prefix.
inline BlockHash root_block_hash() { return BlockHash{0x9e3779b97f4a7c15ull, 0x6a09e667f3bcc909ull}; }

// The key of a block of `n` tokens after the prefix keyed `parent`. image_rows[i] is -1 for a text token, else
// image * per_image + row into `image_keys` (one key per image of the sequence, in placeholder order).
BlockHash block_hash(const BlockHash& parent, const int32_t* tokens, const int32_t* image_rows, int n,
                     const std::vector<ImageContentHash>& image_keys, int per_image);

}  // namespace vlm::infer

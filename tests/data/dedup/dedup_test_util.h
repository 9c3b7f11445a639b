// Planted-duplicate data for the dedup tests: procedural photo-like images (smooth colour fields, soft blobs, edges
// and fine texture, all from a seed), the edits a web crawl produces (JPEG re-encoding at another quality, resizing,
// a light crop, a brightness shift), random captions and their near-duplicate edits (two words swapped,
// punctuation and case changed), and webdataset shard writing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/philox.h"
#include "data/image/image.h"

namespace vlm::testing {

Image photo_like_image(uint64_t seed, int width = 160, int height = 120);
std::vector<uint8_t> jpeg_bytes(const Image& image, int quality);
Image crop_fraction(const Image& image, double fraction);  // removes `fraction` of each side, resizes back
Image brightness_shift(const Image& image, int delta);      // + delta on every channel, clamped

// 8-14 words from a fixed vocabulary of made-up words, with a final period.
std::string random_caption(Philox& rng);
// Swaps two adjacent words, lower-cases the first letter, replaces the period by '!' and adds a comma.
std::string caption_near_duplicate(const std::string& caption, Philox& rng);

struct PlainSample {
  std::string key;
  std::vector<uint8_t> jpg;  // empty: no image field
  std::string caption;       // empty: no txt field
  std::string json;          // empty: no json field
};
// Writes samples [begin, end) of `samples` as one shard at `path` (KEY.jpg, KEY.txt, KEY.json).
void write_plain_shard(const std::string& path, const std::vector<PlainSample>& samples, size_t begin, size_t end);

// A planted-duplicate dataset written as `shards` shards "planted-00000{i}.tar" in `dir`: `distinct` base samples
// (photo-like image, random caption) first, then, in random order, for each kind `per_kind` samples that
// duplicate a random base: exact (same bytes, new caption), reencoded (JPEG quality 60 vs 92), resized (to 70%),
// cropped (2% per side), brighter (+20), caption (new image, near-duplicate caption); plus `corrupt` samples whose
// image bytes do not decode (new caption). truth[i] names the kind of sample i ("" for base samples), keys are
// "s%06d" of the sample index.
struct PlantedDataset {
  std::vector<std::string> shards;
  std::vector<std::string> keys;
  std::vector<std::string> truth;
};
PlantedDataset write_planted_dataset(const std::string& dir, int shards, int distinct, int per_kind, int corrupt,
                                     uint64_t seed);

// A fresh empty directory under the test temp dir.
std::string fresh_temp_dir(const std::string& name);

}  // namespace vlm::testing

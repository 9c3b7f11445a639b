// The input of `vlm bench data`: a webdataset shard of JPEG photos with captions (key.jpg, key.txt, key.json, as
// img2dataset writes them), either cut from real photos found in a folder or rendered, and its samples loaded into
// memory for timing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace vlm::bench {

struct BenchShardOptions {
  std::string photos_dir;  // photos (jpg / png / webp, any size) to cut images from; empty: render images
  int n_images = 512;
  int min_side = 256, max_side = 512;  // the longer side of each image is drawn in [min_side, max_side]
  int quality = 90;                    // JPEG quality (4:2:0, as Pillow's and img2dataset's default)
  uint64_t seed = 0;
};

// Writes `path` (a tar shard). Photo mode: each image is a random window (aspect 3:4 .. 16:9, at least half the
// photo's extent) of the next photo, resized (antialiased bicubic) to its drawn size and JPEG-encoded. Render mode:
// sky and ground gradients, multi-octave value-noise texture, shaded blobs and soft shadows, a blur of random
// strength and sensor noise. Errors name the photo folder or the output file.
Status write_bench_shard(const std::string& path, const BenchShardOptions& options);

struct BenchSample {
  std::string key;
  std::vector<uint8_t> image;  // encoded bytes (the first of jpg, jpeg, png, webp)
  std::string caption;         // the .txt field
};

// Every sample of the shards that has an image, in order.
Expected<std::vector<BenchSample>> load_bench_samples(const std::vector<std::string>& shards);

}  // namespace vlm::bench

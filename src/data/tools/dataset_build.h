// `vlm data build`: turn images + captions you have (a folder, a CSV or a JSONL file) into webdataset shards in
// img2dataset's layout — "<shard>.tar" holding KEY.jpg|png|webp, KEY.txt (caption), KEY.json (source path, width,
// height, caption and any extra input fields), plus "<shard>_stats.json" with the counts ("successes" is what the
// data plan reads). Keys are 9-digit global indices. Unreadable or undecodable images are skipped, counted and
// named (the first few) in the report; nothing stops the build.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace vlm {

struct BuildInput {
  std::string image_path;  // absolute or relative to the process
  std::string caption;
  std::string extra_json;  // "{...}" of other input fields ("" = none)
};

// Lists the inputs of `source`: a directory (images found recursively, sorted; caption from a same-stem .txt),
// a .csv (header row; image and caption columns by name) or a .jsonl file (one object per line). Relative image
// paths in CSV/JSONL are resolved against the file's folder. Errors name the file and line.
Expected<std::vector<BuildInput>> list_build_inputs(const std::string& source, const std::string& image_column = "",
                                                    const std::string& caption_column = "");

struct BuildOptions {
  std::string out_dir;
  uint64_t samples_per_shard = 10000;
  int max_side = 0;           // > 0: images larger than this are resized (longer side) and re-encoded as JPEG
  int jpeg_quality = 95;
  uint64_t max_pixels = 64ull << 20;
  int threads = 0;            // image workers besides the caller
};

struct BuildReport {
  uint64_t inputs = 0, written = 0, failed = 0, shards = 0, bytes = 0;
  std::vector<std::string> failures;  // the first few, "path: reason"
  std::string to_json() const;
};

// `progress(done, total)` is called as inputs are processed.
Expected<BuildReport> build_shards(const std::vector<BuildInput>& inputs, const BuildOptions& options,
                                   const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace vlm

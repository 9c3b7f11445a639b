// `vlm data inspect`: what a set of shards holds — sample and field counts, image formats, resolution, aspect and
// byte-size distributions, caption lengths, json keys, problems found — read from headers where possible, plus an
// optional contact sheet (a grid of thumbnails) to look at the data.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace vlm {

struct Distribution {
  uint64_t n = 0;
  double min = 0, p5 = 0, p50 = 0, p95 = 0, max = 0, mean = 0;
};

struct InspectReport {
  uint64_t shards = 0, samples = 0, samples_without_image = 0, bad_images = 0, bad_samples = 0, shards_failed = 0;
  uint64_t unsafe_members = 0;  // tar members skipped for an absolute or '..' name (never extracted, never read)
  std::map<std::string, uint64_t> fields;   // "jpg" -> samples having it
  std::map<std::string, uint64_t> formats;  // sniffed: "jpeg", "png", ...
  std::map<std::string, uint64_t> json_keys;
  Distribution width, height, aspect, image_bytes, caption_chars, caption_words;
  std::vector<std::string> problems;  // the first few, naming shard and key
  std::string to_json() const;
  std::string to_text() const;
};

struct InspectOptions {
  uint64_t max_samples = 0;          // 0 = all
  std::string contact_sheet;         // write a JPEG grid here ("" = none)
  int sheet_columns = 8, sheet_rows = 8, thumb = 128;
};

Expected<InspectReport> inspect_shards(const std::vector<std::string>& shards, const InspectOptions& options,
                                       const std::function<void(uint64_t)>& progress = {});

}  // namespace vlm

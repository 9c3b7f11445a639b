// webdataset grouping on top of the tar reader: a sample is a run of consecutive members sharing a key.
// Key and field follow webdataset's rule: the key is the member path up to the first dot of its basename (the
// directory part stays in the key), the field is the rest, lower-cased: "dir/000042.seg.PNG" -> key "dir/000042",
// field "seg.png". Members whose basename has no key or no field ("README", ".hidden") are ignored.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/io/tar.h"

namespace vlm {

struct WebDatasetSample {
  std::string shard;            // shard name (path or URL), for messages
  std::string key;              // "dir/000042"
  uint64_t index_in_shard = 0;  // 0-based ordinal among the shard's samples (bad samples included)
  std::map<std::string, std::vector<uint8_t>> fields;  // "jpg" -> bytes

  bool has(const std::string& field) const { return fields.count(field) != 0; }
  // nullptr when absent.
  const std::vector<uint8_t>* get(const std::string& field) const;
  // The field as text ("" when absent).
  std::string text(const std::string& field) const;
};

// Splits a member name into (key, field); false when the name has no key or no field.
bool webdataset_split_name(const std::string& name, std::string& key, std::string& field);

class WebDatasetReader {
 public:
  explicit WebDatasetReader(std::unique_ptr<TarReader> tar);
  static Expected<std::unique_ptr<WebDatasetReader>> open(const std::string& url, TarReaderOptions options = {});

  // Reads the next sample. Returns false at the end of the shard. Two kinds of error:
  //  - sample-level (a field repeated within one sample): the sample is consumed, the error names shard and key,
  //    failed() stays false and the next call continues with the next sample;
  //  - shard-level (the tar stream is broken): failed() turns true and every later call returns the same error.
  //    A sample whose members were cut off by the break is never returned.
  Expected<bool> next(WebDatasetSample& sample);
  // Skips up to `n` samples (counted exactly as next() counts them) without reading their bodies.
  // Returns the number skipped: fewer than `n` only at the end of the shard.
  Expected<uint64_t> skip(uint64_t n);

  bool failed() const { return !tar_->status().ok(); }
  uint64_t samples_consumed() const { return samples_consumed_; }
  const std::string& shard() const { return tar_->name(); }
  const TarReader& tar() const { return *tar_; }

 private:
  Expected<bool> read_group(WebDatasetSample* sample);  // nullptr: skip bodies
  Expected<bool> fill_pending();

  std::unique_ptr<TarReader> tar_;
  bool has_pending_ = false;  // pending_ is read, its body not yet consumed
  TarEntry pending_;
  std::string pending_key_, pending_field_;
  uint64_t samples_consumed_ = 0;
};

}  // namespace vlm

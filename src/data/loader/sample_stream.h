// ShardSampleStream: raw webdataset samples from a list of shards, for one or more epochs, resumable.
//
// Each epoch visits every shard once, in an order reshuffled per epoch from the seed (Philox(seed, epoch)) or in
// the given order. Problems never stop the stream:
//  - a sample with a repeated field is skipped with a warning naming shard and key (samples_skipped);
//  - a shard that cannot be opened or is corrupt ends there with a warning (shards_failed): its samples before the
//    break were already yielded, the stream moves to the next shard;
//  - an epoch that yields no sample at all is an error (every shard bad), so the stream cannot spin forever.
// The position after any sample (StreamPosition) restarts a new stream right after that sample: it reopens the
// shard and skips the consumed samples by reading headers only. Given the same shards and options, the resumed
// stream yields exactly what the original would have.
// Decoding is up to the caller; decode_image() below decodes the image field and counts failures.
// Not thread-safe, except counters(), which may be read from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "data/image/image.h"
#include "data/io/webdataset.h"

namespace vlm {

struct StreamPosition {
  uint64_t epoch = 0;
  uint64_t shard_cursor = 0;     // index into this epoch's shard order
  uint64_t sample_in_shard = 0;  // samples consumed from that shard (skipped ones included)

  bool operator==(const StreamPosition& o) const = default;
  nlohmann::json to_json() const;
  static Expected<StreamPosition> from_json(const nlohmann::json& j);
  std::string to_string() const;  // the JSON text
  static Expected<StreamPosition> parse(const std::string& text);
};

struct StreamCounters {
  uint64_t samples_ok = 0;       // yielded to the caller
  uint64_t samples_skipped = 0;  // malformed samples dropped inside the stream
  uint64_t bad_images = 0;       // image fields that failed to decode in decode_image()
  uint64_t shards_opened = 0;
  uint64_t shards_completed = 0;  // read to the end without error
  uint64_t shards_failed = 0;     // could not be opened, or broke in the middle
  uint64_t unsafe_members = 0;    // tar members skipped for absolute / '..' names
  uint64_t bytes_read = 0;        // tar bytes consumed (including skipped bodies)
};

struct ShardStreamOptions {
  uint64_t epochs = 1;          // 0: repeat forever
  bool shuffle_shards = true;   // reshuffle the shard order every epoch; false keeps the given order
  uint64_t seed = 0;
  StreamPosition start;         // resume point (default: the beginning)
  TarReaderOptions tar;
};

class ShardSampleStream {
 public:
  // invalid_argument when `shards` is empty or `options.start` points past the shard list.
  static Expected<std::unique_ptr<ShardSampleStream>> create(std::vector<std::string> shards,
                                                             ShardStreamOptions options = {});

  // The next good sample; false when all epochs are done.
  Expected<bool> next(WebDatasetSample& sample);
  // Resume point right after the last sample returned by next().
  StreamPosition position() const { return pos_; }
  StreamCounters counters() const;
  // Shard indices (into the list given to create()) in the order epoch `epoch` reads them.
  std::vector<size_t> shard_order(uint64_t epoch) const;
  const std::vector<std::string>& shards() const { return shards_; }

  // Decodes the sample's image (see decode_sample_image); on failure warns with shard and key and counts
  // bad_images, and the caller drops the sample.
  Expected<Image> decode_image(const WebDatasetSample& sample, const ImageDecodeOptions& options = {});

 private:
  ShardSampleStream(std::vector<std::string> shards, ShardStreamOptions options);
  void open_current_shard();
  void close_shard(bool failed, const Status& why);
  void account_bytes();  // adds the current shard's newly read bytes to counters_.bytes_read

  struct AtomicCounters {
    std::atomic<uint64_t> samples_ok{0}, samples_skipped{0}, bad_images{0}, shards_opened{0}, shards_completed{0},
        shards_failed{0}, unsafe_members{0}, bytes_read{0};
  };

  std::vector<std::string> shards_;
  ShardStreamOptions options_;
  StreamPosition pos_;
  uint64_t order_epoch_ = UINT64_MAX;
  std::vector<size_t> order_;
  std::unique_ptr<WebDatasetReader> reader_;
  uint64_t reader_bytes_seen_ = 0;
  bool epoch_started_fresh_ = true;  // the current epoch began at its first shard (not a resume mid-epoch)
  uint64_t samples_this_epoch_ = 0;
  AtomicCounters counters_;
};

// The first image field present among jpg, jpeg, png, webp, decoded. Errors name the shard and the key.
Expected<Image> decode_sample_image(const WebDatasetSample& sample, const ImageDecodeOptions& options = {});

}  // namespace vlm

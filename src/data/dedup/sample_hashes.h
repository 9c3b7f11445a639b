// Per-sample dedup hashes of webdataset shards: the content hash of the encoded image bytes (exact duplicates), the
// pHash of the decoded image (near duplicates) and the MinHash signature of the caption (near-duplicate captions),
// computed on a thread pool while the shards are read in order. A sample is identified by (shard index in the job's
// list, ordinal in its shard), the same ordinal WebDatasetSample::index_in_shard counts, so a later pass over the
// same shards (rewrite) finds it again.
// Bad input never stops a scan: a corrupt image is recorded as bad_image with its decode error (its bytes still get
// a content hash), a sample without an image field as no_image, a broken shard ends at the break with its error in
// ShardScanStats. Records can be packed into bytes (for the MPI gather) and unpacked with full length checks.
// Thread-safety: hash_sample() is pure; scan_shards() uses the given pool (one scan per pool at a time).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "data/dedup/minhash.h"
#include "data/io/content_hash.h"
#include "data/io/webdataset.h"

namespace vlm {

enum class SampleImageState : uint8_t { ok = 0, no_image = 1, bad_image = 2 };
const char* sample_image_state_name(SampleImageState state);  // "ok", "no_image", "bad_image"

struct SampleHashes {
  uint32_t shard = 0;           // index into the job's shard list
  uint64_t index_in_shard = 0;  // WebDatasetSample::index_in_shard
  std::string key;
  SampleImageState image = SampleImageState::no_image;
  std::string image_error;        // bad_image: why the image did not decode
  ImageContentHash content;       // of the encoded image bytes; set unless no_image
  uint64_t phash = 0;             // set when image == ok and pHash was requested
  bool has_caption = false;       // a caption with at least one shingle, and MinHash was requested
  std::vector<uint32_t> minhash;  // num_perm slots when has_caption
};

struct HashOptions {
  bool phash = false;    // decode images and compute pHash
  bool minhash = false;  // MinHash the caption (.txt, else json "caption")
  int num_perm = 128;
  uint64_t minhash_seed = 0x5eed;
  uint64_t max_pixels = 64ull << 20;  // larger images are bad_image (decompression bombs)
};

// The caption of a sample: its .txt field, else the "caption" string of its .json field, else "".
std::string sample_caption(const WebDatasetSample& sample);

// Hashes one sample. `minhasher` is needed when options.minhash (its num_perm is used).
SampleHashes hash_sample(const WebDatasetSample& sample, uint32_t shard_index, const HashOptions& options,
                         const MinHasher* minhasher);

struct ShardScanStats {
  uint64_t samples = 0;           // records produced
  uint64_t shards_read = 0;       // read to the end
  uint64_t shards_failed = 0;     // could not be opened, or broke (their earlier samples are kept)
  uint64_t samples_skipped = 0;   // malformed samples the reader dropped (a repeated field)
  std::vector<std::string> errors;  // the first few shard / sample errors, for the report
  ShardScanStats& operator+=(const ShardScanStats& other);
};

// Called after each batch with the totals so far (samples hashed, shards finished).
using ScanProgressFn = std::function<void(uint64_t samples, uint64_t shards)>;

// Reads shards[which[0]], shards[which[1]], ... in that order and appends their records to `out` in read order.
// Samples are hashed in batches of `batch` on `pool`. Never fails on bad data (see above).
ShardScanStats scan_shards(const std::vector<std::string>& shards, const std::vector<uint32_t>& which,
                           const HashOptions& options, ThreadPool& pool, std::vector<SampleHashes>& out,
                           const ScanProgressFn& progress = {}, size_t batch = 256);

// Byte form of records + scan stats (little-endian, versioned); unpack checks every length against the buffer and
// returns parse_error naming the record on malformed input.
std::vector<uint8_t> pack_sample_hashes(const std::vector<SampleHashes>& records, const ShardScanStats& stats);
Status unpack_sample_hashes(const uint8_t* data, size_t size, std::vector<SampleHashes>& records,
                            ShardScanStats& stats);

}  // namespace vlm

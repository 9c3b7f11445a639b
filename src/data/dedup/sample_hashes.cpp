// Hashing samples of webdataset shards on a thread pool, and the byte form of the records (see sample_hashes.h).
#include "data/dedup/sample_hashes.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "data/dedup/phash.h"

namespace vlm {
namespace {

constexpr size_t kMaxReportedErrors = 20;
constexpr uint32_t kPackMagic = 0x31484456;  // "VDH1"

void note_error(ShardScanStats& stats, std::string message) {
  if (stats.errors.size() < kMaxReportedErrors) stats.errors.push_back(std::move(message));
}

// Little-endian writer / bounds-checked reader for the packed form.
class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>& out) : out_(out) {}
  template <class T>
  void put(T v) {
    for (size_t i = 0; i < sizeof(T); ++i) out_.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
  }
  void put_string(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }

 private:
  std::vector<uint8_t>& out_;
};

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  template <class T>
  bool get(T& v) {
    if (static_cast<size_t>(end_ - p_) < sizeof(T)) return false;
    uint64_t x = 0;
    for (size_t i = 0; i < sizeof(T); ++i) x |= static_cast<uint64_t>(p_[i]) << (8 * i);
    v = static_cast<T>(x);
    p_ += sizeof(T);
    return true;
  }
  bool get_string(std::string& s) {
    uint32_t n = 0;
    if (!get(n) || static_cast<size_t>(end_ - p_) < n) return false;
    s.assign(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return true;
  }
  size_t left() const { return static_cast<size_t>(end_ - p_); }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace

const char* sample_image_state_name(SampleImageState state) {
  switch (state) {
    case SampleImageState::ok: return "ok";
    case SampleImageState::no_image: return "no_image";
    case SampleImageState::bad_image: return "bad_image";
  }
  return "unknown";
}

std::string sample_caption(const WebDatasetSample& sample) {
  if (sample.has("txt")) return sample.text("txt");
  const auto* json_bytes = sample.get("json");
  if (!json_bytes) return "";
  const auto j = nlohmann::json::parse(json_bytes->begin(), json_bytes->end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    auto it = j.find("caption");
    if (it != j.end() && it->is_string()) return it->get<std::string>();
  }
  return "";
}

SampleHashes hash_sample(const WebDatasetSample& sample, uint32_t shard_index, const HashOptions& options,
                         const MinHasher* minhasher) {
  SampleHashes h;
  h.shard = shard_index;
  h.index_in_shard = sample.index_in_shard;
  h.key = sample.key;
  for (const char* field : {"jpg", "jpeg", "png", "webp"}) {
    const auto* bytes = sample.get(field);
    if (!bytes) continue;
    h.content = content_hash(bytes->data(), bytes->size());
    h.image = SampleImageState::ok;
    if (options.phash) {
      auto phash = perceptual_hash_encoded(bytes->data(), bytes->size(), options.max_pixels);
      if (phash.ok()) {
        h.phash = *phash;
      } else {
        h.image = SampleImageState::bad_image;
        h.image_error = str(field, ": ", phash.status().message());
      }
    }
    break;
  }
  if (options.minhash) {
    VLM_CHECK(minhasher != nullptr, "hash_sample: MinHash requested without a MinHasher");
    h.minhash.resize(static_cast<size_t>(minhasher->num_perm()));
    h.has_caption = minhasher->signature(sample_caption(sample), h.minhash.data());
    if (!h.has_caption) h.minhash.clear();
  }
  return h;
}

ShardScanStats& ShardScanStats::operator+=(const ShardScanStats& o) {
  samples += o.samples;
  shards_read += o.shards_read;
  shards_failed += o.shards_failed;
  samples_skipped += o.samples_skipped;
  for (const auto& e : o.errors) note_error(*this, e);
  return *this;
}

ShardScanStats scan_shards(const std::vector<std::string>& shards, const std::vector<uint32_t>& which,
                           const HashOptions& options, ThreadPool& pool, std::vector<SampleHashes>& out,
                           const ScanProgressFn& progress, size_t batch) {
  VLM_CHECK(batch > 0, "scan_shards: batch must be > 0");
  ShardScanStats stats;
  std::unique_ptr<MinHasher> minhasher;
  if (options.minhash) minhasher = std::make_unique<MinHasher>(options.num_perm, options.minhash_seed);
  std::vector<WebDatasetSample> pending;
  std::vector<uint32_t> pending_shard;
  uint64_t shards_done = 0;

  auto flush = [&] {
    const size_t base = out.size();
    out.resize(base + pending.size());
    pool.parallel_for(pending.size(), [&](size_t i) {
      out[base + i] = hash_sample(pending[i], pending_shard[i], options, minhasher.get());
    });
    stats.samples += pending.size();
    pending.clear();
    pending_shard.clear();
    if (progress) progress(stats.samples, shards_done);
  };

  for (uint32_t shard_index : which) {
    VLM_CHECK(shard_index < shards.size(), "scan_shards: shard index ", shard_index, " of ", shards.size());
    const std::string& name = shards[shard_index];
    auto reader = WebDatasetReader::open(name);
    if (!reader.ok()) {
      ++stats.shards_failed;
      VLM_WARN("dedup: cannot open shard ", name, ": ", reader.status().message());
      note_error(stats, str(name, ": ", reader.status().message()));
    } else {
      while (true) {
        WebDatasetSample sample;
        auto more = (*reader)->next(sample);
        if (!more.ok()) {
          if ((*reader)->failed()) {
            ++stats.shards_failed;
            VLM_WARN("dedup: shard ", name, " broke: ", more.status().message());
            note_error(stats, str(name, ": ", more.status().message()));
            break;
          }
          ++stats.samples_skipped;  // a sample-level error: the sample was consumed, go on
          note_error(stats, more.status().message());
          continue;
        }
        if (!*more) {
          ++stats.shards_read;
          break;
        }
        pending.push_back(std::move(sample));
        pending_shard.push_back(shard_index);
        if (pending.size() >= batch) flush();
      }
    }
    ++shards_done;
    if (!pending.empty()) flush();
    else if (progress) progress(stats.samples, shards_done);
  }
  return stats;
}

std::vector<uint8_t> pack_sample_hashes(const std::vector<SampleHashes>& records, const ShardScanStats& stats) {
  std::vector<uint8_t> out;
  ByteWriter w(out);
  w.put<uint32_t>(kPackMagic);
  w.put<uint64_t>(stats.samples);
  w.put<uint64_t>(stats.shards_read);
  w.put<uint64_t>(stats.shards_failed);
  w.put<uint64_t>(stats.samples_skipped);
  w.put<uint32_t>(static_cast<uint32_t>(stats.errors.size()));
  for (const auto& e : stats.errors) w.put_string(e);
  w.put<uint64_t>(records.size());
  for (const SampleHashes& r : records) {
    w.put<uint32_t>(r.shard);
    w.put<uint64_t>(r.index_in_shard);
    w.put_string(r.key);
    w.put<uint8_t>(static_cast<uint8_t>(r.image));
    w.put_string(r.image_error);
    w.put<uint64_t>(r.content.lo);
    w.put<uint64_t>(r.content.hi);
    w.put<uint64_t>(r.phash);
    w.put<uint32_t>(static_cast<uint32_t>(r.minhash.size()));
    for (uint32_t slot : r.minhash) w.put<uint32_t>(slot);
  }
  return out;
}

Status unpack_sample_hashes(const uint8_t* data, size_t size, std::vector<SampleHashes>& records,
                            ShardScanStats& stats) {
  ByteReader r(data, size);
  uint32_t magic = 0, n_errors = 0;
  if (!r.get(magic) || magic != kPackMagic) return parse_error("packed dedup hashes: bad magic (not a VDH1 buffer)");
  ShardScanStats s;
  if (!r.get(s.samples) || !r.get(s.shards_read) || !r.get(s.shards_failed) || !r.get(s.samples_skipped) ||
      !r.get(n_errors))
    return parse_error("packed dedup hashes: truncated header");
  for (uint32_t i = 0; i < n_errors; ++i) {
    std::string e;
    if (!r.get_string(e)) return parse_error(str("packed dedup hashes: truncated error message ", i));
    s.errors.push_back(std::move(e));
  }
  uint64_t n = 0;
  if (!r.get(n)) return parse_error("packed dedup hashes: truncated record count");
  // Each record takes at least 49 bytes: reject impossible counts before reserving.
  if (n > r.left() / 49) return parse_error(str("packed dedup hashes: ", n, " records cannot fit in ", r.left(), " bytes"));
  std::vector<SampleHashes> out(n);
  for (uint64_t i = 0; i < n; ++i) {
    SampleHashes& h = out[i];
    uint8_t state = 0;
    uint32_t slots = 0;
    if (!r.get(h.shard) || !r.get(h.index_in_shard) || !r.get_string(h.key) || !r.get(state) ||
        !r.get_string(h.image_error) || !r.get(h.content.lo) || !r.get(h.content.hi) || !r.get(h.phash) ||
        !r.get(slots))
      return parse_error(str("packed dedup hashes: record ", i, " is truncated"));
    if (state > static_cast<uint8_t>(SampleImageState::bad_image))
      return parse_error(str("packed dedup hashes: record ", i, " ('", h.key, "') has image state ", int(state)));
    h.image = static_cast<SampleImageState>(state);
    if (slots > r.left() / 4) return parse_error(str("packed dedup hashes: record ", i, " ('", h.key, "') is truncated"));
    h.minhash.resize(slots);
    for (uint32_t& slot : h.minhash) r.get(slot);
    h.has_caption = slots > 0;
  }
  if (r.left() != 0) return parse_error(str("packed dedup hashes: ", r.left(), " trailing bytes"));
  records = std::move(out);
  stats = std::move(s);
  return Status();
}

}  // namespace vlm

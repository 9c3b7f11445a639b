// ShardSampleStream (see sample_stream.h).
#include "data/loader/sample_stream.h"

#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "core/philox.h"

namespace vlm {

// ---- StreamPosition ----

nlohmann::json StreamPosition::to_json() const {
  return {{"epoch", epoch}, {"shard_cursor", shard_cursor}, {"sample_in_shard", sample_in_shard}};
}

Expected<StreamPosition> StreamPosition::from_json(const nlohmann::json& j) {
  if (!j.is_object()) return parse_error("stream position: not a JSON object");
  StreamPosition p;
  const std::pair<const char*, uint64_t*> fields[] = {
      {"epoch", &p.epoch}, {"shard_cursor", &p.shard_cursor}, {"sample_in_shard", &p.sample_in_shard}};
  for (const auto& [name, dst] : fields) {
    auto it = j.find(name);
    if (it == j.end()) return parse_error(str("stream position: missing field '", name, "'"));
    if (!it->is_number_unsigned())
      return parse_error(str("stream position: field '", name, "' is not an unsigned integer"));
    *dst = it->get<uint64_t>();
  }
  return p;
}

std::string StreamPosition::to_string() const { return to_json().dump(); }

Expected<StreamPosition> StreamPosition::parse(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return parse_error(str("stream position: invalid JSON '", text, "'"));
  return from_json(j);
}

// ---- ShardSampleStream ----

ShardSampleStream::ShardSampleStream(std::vector<std::string> shards, ShardStreamOptions options)
    : shards_(std::move(shards)), options_(options), pos_(options.start) {
  epoch_started_fresh_ = pos_.shard_cursor == 0 && pos_.sample_in_shard == 0;
}

Expected<std::unique_ptr<ShardSampleStream>> ShardSampleStream::create(std::vector<std::string> shards,
                                                                       ShardStreamOptions options) {
  if (shards.empty()) return invalid_argument("sample stream: the shard list is empty");
  if (options.start.shard_cursor > shards.size())
    return invalid_argument(str("sample stream: resume position ", options.start.to_string(), " is past the ",
                                shards.size(), " shards"));
  if (options.start.shard_cursor == shards.size() && options.start.sample_in_shard != 0)
    return invalid_argument(str("sample stream: resume position ", options.start.to_string(), " is inconsistent"));
  return std::unique_ptr<ShardSampleStream>(new ShardSampleStream(std::move(shards), options));
}

std::vector<size_t> ShardSampleStream::shard_order(uint64_t epoch) const {
  std::vector<size_t> order(shards_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (options_.shuffle_shards) {
    Philox rng(options_.seed, epoch);
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.uniform_int(i)]);
  }
  return order;
}

StreamCounters ShardSampleStream::counters() const {
  StreamCounters c;
  c.samples_ok = counters_.samples_ok.load();
  c.samples_skipped = counters_.samples_skipped.load();
  c.bad_images = counters_.bad_images.load();
  c.shards_opened = counters_.shards_opened.load();
  c.shards_completed = counters_.shards_completed.load();
  c.shards_failed = counters_.shards_failed.load();
  c.unsafe_members = counters_.unsafe_members.load();
  c.bytes_read = counters_.bytes_read.load();
  return c;
}

void ShardSampleStream::account_bytes() {
  const uint64_t offset = reader_->tar().offset();
  counters_.bytes_read += offset - reader_bytes_seen_;
  reader_bytes_seen_ = offset;
}

void ShardSampleStream::close_shard(bool failed, const Status& why) {
  if (reader_) {
    account_bytes();
    counters_.unsafe_members += reader_->tar().unsafe_names_skipped();
  }
  if (failed) {
    ++counters_.shards_failed;
    VLM_WARN("sample stream: skipping the rest of shard ", shards_[order_[pos_.shard_cursor]], " after ",
             pos_.sample_in_shard, " samples: ", why.to_string());
  } else {
    ++counters_.shards_completed;
  }
  reader_.reset();
  ++pos_.shard_cursor;
  pos_.sample_in_shard = 0;
}

void ShardSampleStream::open_current_shard() {
  const std::string& path = shards_[order_[pos_.shard_cursor]];
  auto opened = WebDatasetReader::open(path, options_.tar);
  if (!opened.ok()) {
    close_shard(true, opened.status());
    return;
  }
  ++counters_.shards_opened;
  reader_ = std::move(opened).value();
  reader_bytes_seen_ = 0;
  if (pos_.sample_in_shard > 0) {  // resuming: skip what was consumed, reading headers only
    auto skipped = reader_->skip(pos_.sample_in_shard);
    if (!skipped.ok()) close_shard(true, skipped.status());
  }
}

Expected<bool> ShardSampleStream::next(WebDatasetSample& sample) {
  for (;;) {
    if (options_.epochs != 0 && pos_.epoch >= options_.epochs) return false;
    if (order_epoch_ != pos_.epoch) {
      order_ = shard_order(pos_.epoch);
      order_epoch_ = pos_.epoch;
    }
    if (!reader_) {
      if (pos_.shard_cursor >= shards_.size()) {
        if (epoch_started_fresh_ && samples_this_epoch_ == 0)
          return not_found(str("sample stream: epoch ", pos_.epoch, " yielded no sample from ", shards_.size(),
                               " shards (", counters_.shards_failed.load(), " shard failures, ",
                               counters_.samples_skipped.load(), " bad samples so far)"));
        ++pos_.epoch;
        pos_.shard_cursor = 0;
        pos_.sample_in_shard = 0;
        epoch_started_fresh_ = true;
        samples_this_epoch_ = 0;
        continue;
      }
      open_current_shard();
      continue;
    }
    auto got = reader_->next(sample);
    account_bytes();
    if (!got.ok()) {
      if (reader_->failed()) {
        close_shard(true, got.status());
        continue;
      }
      pos_.sample_in_shard = reader_->samples_consumed();
      ++counters_.samples_skipped;
      VLM_WARN("sample stream: skipping a sample: ", got.status().to_string());
      continue;
    }
    if (!*got) {
      close_shard(false, Status());
      continue;
    }
    pos_.sample_in_shard = reader_->samples_consumed();
    ++samples_this_epoch_;
    ++counters_.samples_ok;
    return true;
  }
}

Expected<Image> ShardSampleStream::decode_image(const WebDatasetSample& sample, const ImageDecodeOptions& options) {
  auto image = decode_sample_image(sample, options);
  if (!image.ok()) {
    ++counters_.bad_images;
    VLM_WARN("sample stream: dropping a sample: ", image.status().to_string());
  }
  return image;
}

Expected<Image> decode_sample_image(const WebDatasetSample& sample, const ImageDecodeOptions& options) {
  for (const char* field : {"jpg", "jpeg", "png", "webp"}) {
    const auto* bytes = sample.get(field);
    if (!bytes) continue;
    auto image = decode_image(*bytes, field, options);
    if (!image.ok())
      return image.status().with_context(str(sample.shard, ": sample '", sample.key, "' field '", field, "'"));
    return image;
  }
  return not_found(str(sample.shard, ": sample '", sample.key, "' has no jpg/jpeg/png/webp field"));
}

}  // namespace vlm

// PartitionedSampleStream (see partitioned_stream.h).
#include "data/loader/partitioned_stream.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "core/philox.h"

namespace vlm {
namespace {
constexpr uint64_t kWindowSalt = 0x5b0ffull;
}

nlohmann::json SlotPosition::to_json() const { return {{"epoch", epoch}, {"index", index}}; }

Expected<SlotPosition> SlotPosition::from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("epoch") || !j.contains("index") || !j["epoch"].is_number_unsigned() ||
      !j["index"].is_number_unsigned())
    return parse_error("slot position: needs unsigned \"epoch\" and \"index\"");
  return SlotPosition{j["epoch"].get<uint64_t>(), j["index"].get<uint64_t>()};
}

PartitionedSampleStream::PartitionedSampleStream(DataPlan plan, Options options)
    : plan_(std::move(plan)), options_(options), pos_(options.start) {}

Expected<std::unique_ptr<PartitionedSampleStream>> PartitionedSampleStream::create(DataPlan plan, Options options) {
  if (options.start.index > plan.samples_per_rank())
    return invalid_argument(str("slot position ", options.start.to_json().dump(), " is past the ",
                                plan.samples_per_rank(), " slots of an epoch"));
  return std::unique_ptr<PartitionedSampleStream>(new PartitionedSampleStream(std::move(plan), options));
}

PartitionedStreamCounters PartitionedSampleStream::counters() const {
  return {n_slots_.load(), n_bad_.load(), n_opened_.load(), n_failed_.load(), n_unsafe_.load()};
}

void PartitionedSampleStream::finish_epoch() {
  pos_.index = slots_per_epoch();
}

void PartitionedSampleStream::seek_reading_order(uint64_t index) {
  segments_ = plan_.segments(pos_.epoch);
  seg_ = 0;
  while (seg_ < segments_.size() && index >= segments_[seg_].count) index -= segments_[seg_++].count;
  seg_offset_ = index;
  reader_.reset();
  reader_dead_ = false;
}

Status PartitionedSampleStream::read_slot(Slot& slot) {
  slot = Slot();
  VLM_CHECK(seg_ < segments_.size(), "partitioned stream: read past the epoch's segments");
  const ShardSegment& seg = segments_[seg_];
  const std::string& shard = plan_.shards()[seg.shard];
  if (!reader_ && !reader_dead_) {
    ++n_opened_;
    auto r = WebDatasetReader::open(shard);
    if (r.ok()) {
      reader_ = std::move(*r);
      auto skipped = reader_->skip(seg.first + seg_offset_);
      reader_unsafe_seen_ = reader_->tar().unsafe_names_skipped();  // before the resume point: counted back then
      if (!skipped.ok() || *skipped < seg.first + seg_offset_) {
        reader_dead_ = true;
        reader_error_ = skipped.ok() ? shard + ": ends before sample " + std::to_string(seg.first + seg_offset_)
                                     : skipped.status().message();
      }
    } else {
      reader_dead_ = true;
      reader_error_ = r.status().message();
    }
    if (reader_dead_) {
      ++n_failed_;
      VLM_WARN("shard unreadable, its remaining samples this epoch are skipped: ", reader_error_);
    }
  }
  if (reader_dead_) {
    slot.error = reader_error_;
  } else {
    auto more = reader_->next(slot.sample);
    const uint64_t unsafe = reader_->tar().unsafe_names_skipped();
    n_unsafe_ += unsafe - reader_unsafe_seen_;
    reader_unsafe_seen_ = unsafe;
    if (!more.ok()) {
      slot.error = more.status().message();
      if (reader_->failed()) {
        reader_dead_ = true;
        reader_error_ = slot.error;
        ++n_failed_;
        VLM_WARN("shard broke, its remaining samples this epoch are skipped: ", slot.error);
      }
    } else if (!*more) {
      reader_dead_ = true;
      reader_error_ = shard + ": fewer samples than counted (the shard changed or is truncated)";
      slot.error = reader_error_;
      ++n_failed_;
    } else {
      slot.ok = true;
    }
  }
  if (++seg_offset_ == seg.count) {
    ++seg_;
    seg_offset_ = 0;
    reader_.reset();
    reader_dead_ = false;
  }
  return Status();
}

Status PartitionedSampleStream::load_window() {
  const uint64_t q = slots_per_epoch();
  const uint64_t w = std::max<uint64_t>(1, options_.shuffle_window);
  const uint64_t start = pos_.index / w * w;
  const uint64_t size = std::min(w, q - start);
  // Continue reading sequentially when this window follows the previous one; otherwise seek.
  const bool contiguous = window_epoch_ == pos_.epoch && window_start_ + window_.size() == start && !segments_.empty();
  if (!contiguous) seek_reading_order(start);
  window_.assign(size, Slot());
  for (uint64_t i = 0; i < size; ++i) VLM_RETURN_IF_ERROR(read_slot(window_[i]));
  perm_.resize(size);
  for (uint32_t i = 0; i < size; ++i) perm_[i] = i;
  if (w > 1) {
    Philox rng(plan_.seed() ^ kWindowSalt, (pos_.epoch << 32) ^ (start / w));
    for (size_t i = size; i > 1; --i) std::swap(perm_[i - 1], perm_[rng.uniform_int(i)]);
  }
  window_epoch_ = pos_.epoch;
  window_start_ = start;
  return Status();
}

Expected<bool> PartitionedSampleStream::next(Slot& slot) {
  if (pos_.index >= slots_per_epoch()) {
    ++pos_.epoch;
    pos_.index = 0;
  }
  if (options_.epochs > 0 && pos_.epoch >= options_.epochs) return false;
  if (window_epoch_ != pos_.epoch || pos_.index < window_start_ || pos_.index >= window_start_ + window_.size())
    VLM_RETURN_IF_ERROR(load_window());
  slot = std::move(window_[perm_[pos_.index - window_start_]]);
  slot.epoch = pos_.epoch;
  slot.index = pos_.index;
  slot.global_index = pos_.epoch * plan_.total_samples() +
                      static_cast<uint64_t>(plan_.rank()) * plan_.samples_per_rank() + pos_.index;
  ++pos_.index;
  ++n_slots_;
  if (!slot.ok) ++n_bad_;
  return true;
}

}  // namespace vlm

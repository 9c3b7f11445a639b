// DataStreams: fixed data streams hosted round-robin by the ranks (see data_streams.h).
#include "train/data_streams.h"

#include <nlohmann/json.hpp>

namespace vlm {

void add_loader_counters(LoaderCounters& a, const LoaderCounters& b) {
  a.slots += b.slots;
  a.samples_ok += b.samples_ok;
  a.samples_skipped += b.samples_skipped;
  a.samples_filtered += b.samples_filtered;
  a.samples_duplicate += b.samples_duplicate;
  a.bad_images += b.bad_images;
  a.bad_text += b.bad_text;
  a.bad_members += b.bad_members;
  a.truncated_sequences += b.truncated_sequences;
  a.too_long += b.too_long;
  a.truncated_captions += b.truncated_captions;
  a.bad_utf8 += b.bad_utf8;
  a.repaired_utf8 += b.repaired_utf8;
  a.shards_failed += b.shards_failed;
  a.unsafe_members += b.unsafe_members;
  a.epochs_completed = std::max(a.epochs_completed, b.epochs_completed);  // the streams go through epochs together
  a.filter += b.filter;
}

Expected<DataStreams> DataStreams::open(VlmDataOptions options, const Tokenizer& tokenizer, int streams, int rank,
                                        int world) {
  if (streams < 1) return invalid_argument(str("train.data_streams: ", streams, " streams (at least 1)"));
  DataStreams d;
  d.streams_ = streams;
  d.rank_ = rank;
  d.world_ = world;
  d.max_hosted_ = (streams + world - 1) / world;
  for (int s = rank; s < streams; s += world) {
    options.rank = s;
    options.world = streams;
    VLM_ASSIGN_OR_RETURN(auto loader, VlmBatchLoader::open(options, tokenizer));
    d.hosted_.push_back(s);
    d.loaders_.push_back(std::move(loader));
  }
  return d;
}

StreamStepBatches DataStreams::read_step(int batch_size, int grad_accum) {
  StreamStepBatches s;
  for (int m = 0; m < grad_accum; ++m) {
    for (auto& loader : loaders_) {
      Expected<PackedBatch> b = loader->next_batch(batch_size);
      if (!b.ok()) {
        s.error = b.status();
        return s;
      }
      s.target_tokens += static_cast<int64_t>(b->loss_rows.size());
      s.micro.push_back(std::move(*b));
    }
    for (size_t k = loaders_.size(); k < static_cast<size_t>(max_hosted_); ++k) s.micro.emplace_back();
  }
  for (auto& loader : loaders_) s.states.push_back(loader->state());
  s.counters = counters();
  return s;
}

LoaderCounters DataStreams::counters() const {
  LoaderCounters c;
  for (const auto& loader : loaders_) add_loader_counters(c, loader->counters());
  return c;
}

std::string DataStreams::join(const std::vector<std::string>& hosted_states) {
  nlohmann::json a = nlohmann::json::array();
  for (const std::string& s : hosted_states) a.push_back(nlohmann::json::parse(s));
  return a.dump();
}

std::vector<std::string> DataStreams::assemble(const std::vector<std::string>& rank_states_json) const {
  std::vector<std::string> all(static_cast<size_t>(streams_));
  for (size_t r = 0; r < rank_states_json.size(); ++r) {
    const auto a = nlohmann::json::parse(rank_states_json[r]);
    for (size_t k = 0; k < a.size(); ++k) all[r + k * static_cast<size_t>(world_)] = a[k].dump();
  }
  return all;
}

Status DataStreams::restore(const std::vector<std::string>& all_states) {
  if (all_states.size() != static_cast<size_t>(streams_))
    return invalid_argument(
        str("the checkpoint holds ", all_states.size(), " data stream states, the run has ", streams_, " streams"));
  for (size_t k = 0; k < hosted_.size(); ++k)
    VLM_RETURN_IF_ERROR(loaders_[k]
                            ->restore(all_states[static_cast<size_t>(hosted_[k])])
                            .with_context(str("data stream ", hosted_[k])));
  return Status();
}

}  // namespace vlm

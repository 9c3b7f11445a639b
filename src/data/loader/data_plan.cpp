// DataPlan and shard sample counting.
#include "data/loader/data_plan.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "core/philox.h"
#include "data/io/webdataset.h"

namespace vlm {
namespace {

constexpr uint64_t kShardOrderSalt = 0x0de5ull;  // keeps this stream apart from other uses of the seed

// img2dataset writes "<shard stem>_stats.json" with {"successes": n, ...} beside "<shard stem>.tar".
bool read_stats_count(const std::string& shard, uint64_t* count) {
  namespace fs = std::filesystem;
  if (shard.find("://") != std::string::npos || shard.rfind("pipe:", 0) == 0) return false;
  fs::path p(shard);
  if (p.extension() != ".tar") return false;
  fs::path stats = p.parent_path() / (p.stem().string() + "_stats.json");
  std::ifstream in(stats);
  if (!in) return false;
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.contains("successes") || !j["successes"].is_number_unsigned()) return false;
  *count = j["successes"].get<uint64_t>();
  return true;
}

}  // namespace

Expected<std::vector<uint64_t>> count_shard_samples(const std::vector<std::string>& shards,
                                                    std::vector<std::string>* problems,
                                                    const std::function<void(size_t, size_t)>& progress) {
  std::vector<uint64_t> counts(shards.size(), 0);
  auto problem = [&](const std::string& message) {
    VLM_WARN(message);
    if (problems) problems->push_back(message);
  };
  for (size_t i = 0; i < shards.size(); ++i) {
    if (!read_stats_count(shards[i], &counts[i])) {
      auto reader = WebDatasetReader::open(shards[i]);
      if (!reader.ok()) {
        counts[i] = 0;
        problem("shard skipped: " + reader.status().message());
      } else {
        // skip() counts exactly as next() does; a broken shard counts the samples before the break.
        auto n = (*reader)->skip(UINT64_MAX);
        counts[i] = n.ok() ? *n : (*reader)->samples_consumed();
        if (!n.ok())
          problem("shard broken, only its first " + std::to_string(counts[i]) + " samples are used: " +
                  n.status().message());
      }
    }
    if (progress) progress(i + 1, shards.size());
  }
  return counts;
}

Expected<DataPlan> DataPlan::create(std::vector<std::string> shards, std::vector<uint64_t> counts, uint64_t seed,
                                    bool shuffle_shards, int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world)
    return invalid_argument(str("data plan: rank ", rank, " of world ", world, " is not valid"));
  if (counts.size() != shards.size())
    return invalid_argument(str("data plan: ", counts.size(), " counts for ", shards.size(), " shards"));
  if (shards.empty()) return invalid_argument("data plan: the shard list is empty");
  DataPlan p;
  p.shards_ = std::move(shards);
  p.counts_ = std::move(counts);
  for (uint64_t c : p.counts_) p.total_ += c;
  p.seed_ = seed;
  p.shuffle_ = shuffle_shards;
  p.rank_ = rank;
  p.world_ = world;
  if (p.samples_per_rank() == 0)
    return invalid_argument(str("data plan: ", p.total_, " samples cannot give each of ", world, " ranks one"));
  return p;
}

std::vector<size_t> DataPlan::shard_order(uint64_t epoch) const {
  std::vector<size_t> order(shards_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (shuffle_) {
    Philox rng(seed_ ^ kShardOrderSalt, epoch);
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.uniform_int(i)]);
  }
  return order;
}

std::vector<ShardSegment> DataPlan::segments(uint64_t epoch) const {
  const uint64_t q = samples_per_rank();
  const uint64_t begin = static_cast<uint64_t>(rank_) * q, end = begin + q;
  std::vector<ShardSegment> out;
  uint64_t at = 0;  // global index of the first sample of the current shard
  for (size_t s : shard_order(epoch)) {
    const uint64_t n = counts_[s];
    const uint64_t lo = std::max(at, begin), hi = std::min(at + n, end);
    if (lo < hi) out.push_back({s, lo - at, hi - lo});
    at += n;
    if (at >= end) break;
  }
  return out;
}

}  // namespace vlm

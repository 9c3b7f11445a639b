// `vlm data filter`: filter_sample() on every sample, rewrite keeping the passing ones (see filter_job.h).
#include "data/dedup/filter_job.h"

#include <chrono>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>

#include "data/dedup/dedup_job.h"

namespace vlm {

Status add_where_rule(FilterConfig& config, const std::string& text) {
  VLM_ASSIGN_OR_RETURN(JsonFieldRule rule, parse_json_field_rule(text));
  if (!rule.text_value) {
    if (rule.field == "similarity" && rule.op == JsonFieldRule::Op::ge) {
      config.min_similarity = rule.number;
      return Status();
    }
    if (rule.field == "punsafe" && rule.op == JsonFieldRule::Op::lt) {
      config.max_punsafe = rule.number;
      return Status();
    }
    if (rule.field == "pwatermark" && rule.op == JsonFieldRule::Op::lt) {
      config.max_pwatermark = rule.number;
      return Status();
    }
  }
  config.json_rules.push_back(std::move(rule));
  return Status();
}

Expected<FilterJobReport> run_filter_job(const FilterJobOptions& options) {
  if (options.shards.empty()) return invalid_argument("filter: no shards");
  if (options.out_dir.empty()) return invalid_argument("filter: no output directory (--out)");
  if (options.threads < 0) return invalid_argument(str("filter: threads ", options.threads, " < 0"));
  VLM_RETURN_IF_ERROR(options.config.validate());
  const auto t0 = std::chrono::steady_clock::now();

  std::vector<uint32_t> all(options.shards.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint32_t>(i);
  // Per shard: counters and examples, written only by the thread rewriting that shard.
  std::vector<FilterCounters> counters(options.shards.size());
  std::vector<std::array<std::vector<std::string>, kFilterReasonCount>> examples(options.shards.size());
  std::mutex progress_mu;
  uint64_t seen = 0;
  auto keep = [&](uint32_t shard, const WebDatasetSample& sample) {
    const FilterResult r = filter_sample(sample, options.config);
    counters[shard].add(r.reason);
    auto& ex = examples[shard][static_cast<size_t>(r.reason)];
    if (!r.passed() && ex.size() < options.examples_per_reason)
      ex.push_back(str(options.shards[shard], " ", sample.key, r.detail.empty() ? "" : ": " + r.detail));
    if (options.progress) {
      std::lock_guard<std::mutex> lock(progress_mu);
      options.progress(++seen);
    }
    return r.passed();
  };
  ThreadPool pool(options.threads);
  FilterJobReport report;
  VLM_ASSIGN_OR_RETURN(report.rewrite, rewrite_shard_subset(options.shards, all, options.out_dir, keep, pool));
  for (size_t s = 0; s < options.shards.size(); ++s) {
    report.counters += counters[s];
    for (int k = 0; k < kFilterReasonCount; ++k)
      for (const auto& e : examples[s][k])
        if (report.examples[k].size() < options.examples_per_reason) report.examples[k].push_back(e);
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  VLM_RETURN_IF_ERROR(write_text_file_atomic(
      (std::filesystem::path(options.out_dir) / "filter_report.json").string(), report.to_json()));
  return report;
}

std::string FilterJobReport::to_text() const {
  std::string t;
  const uint64_t total = counters.total(), kept = counters.get(FilterReason::pass);
  t += str("filter: ", total, " samples, kept ", kept, ", rejected ", counters.rejected(), "\n");
  for (int k = 1; k < kFilterReasonCount; ++k) {
    const uint64_t n = counters.counts[static_cast<size_t>(k)];
    if (!n) continue;
    char buf[160];
    std::snprintf(buf, sizeof(buf), "  %-22s %10llu  %5.1f%%\n", filter_reason_name(static_cast<FilterReason>(k)),
                  static_cast<unsigned long long>(n), total ? 100.0 * static_cast<double>(n) / total : 0.0);
    t += buf;
    for (const auto& e : examples[static_cast<size_t>(k)]) t += "      e.g. " + e + "\n";
  }
  t += str("  shards: ", rewrite.shards_written, " written, ", rewrite.shards_empty, " empty (not written), ",
           rewrite.shards_failed, " with errors; ", rewrite.samples_skipped, " malformed samples skipped; ",
           rewrite.unsafe_members, " unsafe member names skipped; ",
           rewrite.bytes_written, " bytes; ", seconds, " s\n");
  for (const auto& e : rewrite.errors) t += "  error: " + e + "\n";
  return t;
}

std::string FilterJobReport::to_json() const {
  nlohmann::json j;
  j["counters"] = nlohmann::json::parse(counters.to_json());
  nlohmann::json ex = nlohmann::json::object();
  for (int k = 1; k < kFilterReasonCount; ++k)
    if (!examples[static_cast<size_t>(k)].empty())
      ex[filter_reason_name(static_cast<FilterReason>(k))] = examples[static_cast<size_t>(k)];
  j["examples"] = ex;
  j["shards"] = {{"written", rewrite.shards_written}, {"empty", rewrite.shards_empty},
                 {"failed", rewrite.shards_failed}, {"errors", rewrite.errors}};
  j["samples_skipped"] = rewrite.samples_skipped;
  j["unsafe_members"] = rewrite.unsafe_members;
  j["bytes_written"] = rewrite.bytes_written;
  j["seconds"] = seconds;
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace vlm

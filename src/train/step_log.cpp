// StepLog: see step_log.h.
#include "train/step_log.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "data/loader/filters.h"
#include "kernels/ops.h"

namespace vlm {

StepLog::StepLog(MultiSink& sinks, bool dedup_exact, double t_start, dist::Communicator* ranks)
    : sinks_(sinks), dedup_exact_(dedup_exact), ranks_(ranks), t_start_(t_start), t_window_(now_seconds()) {}

void StepLog::queued(int64_t step, std::vector<StepLoss> losses, GradNorm grad_norm, int64_t target_tokens, float lr,
                     bool log, const LoaderCounters& counters) {
  VLM_CHECK(!pending_, "StepLog: step ", step, " queued before step ", pending_ ? pending_->step : 0, " was finished");
  Pending p;
  p.step = step;
  p.losses = std::move(losses);
  p.grad_norm = std::move(grad_norm);
  p.target_tokens = target_tokens;
  p.lr = lr;
  p.log = log;
  if (log) {
    const double now = now_seconds();
    p.counters = counters;
    p.times = window_;
    p.dt = std::max(1e-9, now - t_window_);
    p.elapsed = now - t_start_;
    t_window_ = now;
    window_ = WindowTimes();
  }
  pending_ = std::move(p);
}

Status StepLog::finish(Device device) {
  if (!pending_) return Status();
  const Pending p = std::move(*pending_);
  pending_.reset();
  const double t_wait = now_seconds();
  double loss_sum = 0;
  for (const StepLoss& l : p.losses) loss_sum += l.loss_sum();
  if (ranks_ != nullptr && ranks_->size() > 1) {  // the step's loss over every rank's tokens
    const Expected<double> total = dist::all_reduce_value(*ranks_, loss_sum, dist::ReduceOp::sum);
    if (!total.ok()) return total.status().with_context("data parallel: the step's loss");
    loss_sum = *total;
  }
  const double loss = p.target_tokens ? loss_sum / static_cast<double>(p.target_tokens) : 0.0;
  const double grad_norm = p.grad_norm.value();
  const double waited = now_seconds() - t_wait;  // waiting for the device counts as compute
  window_.compute += waited;
  window_.device_wait += waited;
  if (!std::isfinite(loss)) {
    // On CUDA a bad index (token id, target, row) makes its op write NaN and records itself: name it if so.
    const Status bad_index = ops::check_index_errors(device);
    return internal_error(str("loss became ", loss, " at step ", p.step,
                              bad_index.ok() ? "" : " (" + bad_index.message() + ")", "; stopping"));
  }
  last_loss_ = loss;
  if (!p.log) return Status();
  const LoaderCounters& lc = p.counters;
  const WindowTimes& w = p.times;
  MetricRecord rec;
  rec.step = p.step;
  rec.add("loss", loss).add("lr", p.lr).add("grad_norm", grad_norm);
  rec.add("samples_per_s", w.samples / p.dt).add("tokens_per_s", w.tokens / p.dt);
  const double tflops = w.model_flops / p.dt / 1e12;
  rec.add("tflops", tflops);
  if (peak_tflops_ > 0) rec.add("mfu", tflops / peak_tflops_);
  rec.add("target_tokens", static_cast<double>(p.target_tokens));
  rec.add("samples_skipped", static_cast<double>(lc.samples_skipped));
  rec.add("samples_filtered", static_cast<double>(lc.samples_filtered));  // dropped by data filters
  // Why samples were skipped or changed, each reason once it happened (run totals, like the counts above).
  for (const auto& [name, n] : {std::pair{"bad_images", lc.bad_images}, {"bad_text", lc.bad_text},
                                {"bad_members", lc.bad_members}, {"too_long", lc.too_long}, {"bad_utf8", lc.bad_utf8},
                                {"truncated_captions", lc.truncated_captions}, {"repaired_utf8", lc.repaired_utf8},
                                {"unsafe_members", lc.unsafe_members}})
    if (n) rec.add(name, static_cast<double>(n));
  if (dedup_exact_) rec.add("samples_duplicate", static_cast<double>(lc.samples_duplicate));
  for (int r = 1; r < kFilterReasonCount; ++r)  // and why (reasons seen so far; 0 = pass)
    if (const uint64_t n = lc.filter.counts[static_cast<size_t>(r)])
      rec.add(std::string("filtered_") + filter_reason_name(static_cast<FilterReason>(r)), static_cast<double>(n));
  rec.add("data_wait_s", w.data_wait).add("data_wait_frac", w.data_wait / p.dt);
  rec.add("upload_s", w.upload);
  rec.add("compute_s", w.compute).add("compute_frac", w.compute / p.dt);
  rec.add("device_wait_s", w.device_wait).add("device_wait_frac", w.device_wait / p.dt);
  rec.add("elapsed_s", p.elapsed);
  sinks_.write(rec);
  return Status();
}

}  // namespace vlm

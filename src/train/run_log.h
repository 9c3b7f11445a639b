// What a training run logs besides its step records: rank 0's sinks (metrics.jsonl, TensorBoard event files in
// <run>/tb, the console line), the session they open (the resolved config as TensorBoard hparams and as text), and
// eval samples as images beside their questions, answers and predictions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/loader/vlm_batch.h"
#include "eval/eval_runner.h"
#include "model/parameters.h"
#include "track/metrics.h"

namespace vlm {

struct RunSinkOptions {
  std::string run_dir;
  std::string resolved_toml;  // the session's hparams, and a text record
  int64_t start_step = 0;     // the step a resumed run continues after (0: a fresh run)
  bool resumed = false;
  int64_t total_steps = 0;    // for the console line
  bool console = true;
};

// Adds the JSONL, TensorBoard and (when asked) console sinks to `sinks`, then starts their session.
Status open_run_sinks(MultiSink& sinks, const RunSinkOptions& options);

// An "eval" record without scalars: the first `max_images` distinct images of `examples`, read again from the
// held-out shards `val` (scaled to 128..256 px on the long side), each described by its questions, answers and
// predictions, and every example as a markdown table. Images that cannot be found are left out with a warning.
MetricRecord eval_samples_record(int64_t step, const std::vector<EvalExample>& examples, const VlmDataOptions& val,
                                 int max_images = 4);

// Histograms "norms/weights" and "norms/grads": the L2 norm of every trainable parameter tensor (each module's
// weight, bias, norm scale) and of its gradient from the last step, from their sums of squares in the store's order
// (Fsdp::param_sums_of_squares: over the ranks' shards). For steps that synchronize anyway (checkpoints).
MetricRecord param_norms_record(int64_t step, const ParameterStore& params, const std::vector<double>& weight_sq,
                                const std::vector<double>& grad_sq);

// Ends the sinks' session when it goes out of scope: a failure unless success() was called first.
class SessionEnd {
 public:
  explicit SessionEnd(MetricSink& sinks) : sinks_(sinks) {}
  ~SessionEnd() { sinks_.session_end(success_); }
  void success() { success_ = true; }

 private:
  MetricSink& sinks_;
  bool success_ = false;
};

}  // namespace vlm

// The trainer's per-step bookkeeping: where the training thread's time goes in each log window (blocked in the
// loader, staging uploads, queuing and waiting for the forward/backward and optimizer, and within that, waiting for
// the device), and each step's loss and grad norm, left on the device while the next step is queued and then read,
// checked and written as the step's metrics record (metrics.jsonl, console).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/device.h"
#include "core/status.h"
#include "data/loader/vlm_batch.h"
#include "dist/communicator.h"
#include "model/vlm.h"
#include "track/metrics.h"
#include "train/optimizer.h"

namespace vlm {

// The current window's counters; the trainer adds to them as it goes.
struct WindowTimes {
  double samples = 0, tokens = 0;
  double data_wait = 0;    // blocked in the loader
  double upload = 0;       // staging + enqueueing host->device copies (CPU: building the inputs)
  double compute = 0;      // forward/backward and optimizer, including device_wait
  double device_wait = 0;  // reading a step's loss and grad norm: near zero on a GPU, the host sets the pace
  double model_flops = 0;  // train_flops_of_batch() of this rank's micro-batches
};

class StepLog {
 public:
  // dedup_exact: records carry samples_duplicate. t_start: the run's start (now_seconds()), for elapsed_s. ranks:
  // with several, finish() sums the step's loss over them (a collective: every rank calls finish() at the same
  // steps), and the target tokens given to queued() are the ranks' total.
  StepLog(MultiSink& sinks, bool dedup_exact, double t_start, dist::Communicator* ranks = nullptr);

  WindowTimes& window() { return window_; }
  // The device's peak TFLOP/s: records carry mfu = tflops / peak when > 0 (tflops, this rank's model TFLOP/s, always).
  void set_peak_tflops(double peak) { peak_tflops_ = peak; }

  // Step `step` is queued (its losses, one per micro-batch, and its norm still on the device); a log step closes the
  // current window, whose counters become its record's. Call finish() first for the step before.
  void queued(int64_t step, std::vector<StepLoss> losses, GradNorm grad_norm, int64_t target_tokens, float lr,
              bool log, const LoaderCounters& counters);
  // Reads the queued step's values (waiting for the device), stops on a non-finite loss (naming the step, and the bad
  // index a CUDA kernel recorded on `device` if any), and writes its record if it closed a window. No-op when no step
  // is queued.
  Status finish(Device device);
  double last_loss() const { return last_loss_; }

 private:
  struct Pending {
    int64_t step = 0;
    std::vector<StepLoss> losses;
    GradNorm grad_norm;
    int64_t target_tokens = 0;
    float lr = 0;
    bool log = false;
    LoaderCounters counters;
    WindowTimes times;  // the window it closed (log steps)
    double dt = 0, elapsed = 0;
  };
  MultiSink& sinks_;
  bool dedup_exact_;
  dist::Communicator* ranks_;
  double t_start_, t_window_;
  WindowTimes window_;
  std::optional<Pending> pending_;
  double last_loss_ = 0;
  double peak_tflops_ = 0;
};

}  // namespace vlm

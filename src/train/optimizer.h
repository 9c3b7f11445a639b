// AdamW over a ParameterStore: fp32 master weights, fp32 first and second moments, the run file's settings
// (ops::AdamWSettings, the struct the op takes), per-part learning-rate multipliers, frozen parts skipped,
// global-norm gradient clipping. One step is a few multi-tensor launches (one per model part and weight-decay
// setting), which in bf16 mode also refresh the parameters' bf16 compute copies.
// The clipping factor is computed and applied on the device, so a step never waits for the device.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kernels/ops.h"
#include "model/parameters.h"

namespace vlm {

// A step's pre-clip gradient norm, on the device until read: value() waits for that step's norm alone.
class GradNorm {
 public:
  GradNorm() = default;
  explicit GradNorm(ops::HostReadback sum_of_squares) : sum_of_squares_(std::move(sum_of_squares)) {}
  double value() const;  // 0 for a step with nothing trainable

 private:
  ops::HostReadback sum_of_squares_;
};

// Learning-rate multipliers per model part (train.lr_scale_*); a part not listed: 1.
using LrScales = std::map<ParamGroup, float>;

class AdamW {
 public:
  // settings.lr (the schedule's peak) is not read: step() takes each step's learning rate.
  AdamW(ParameterStore& params, const ops::AdamWSettings& settings, LrScales lr_scale = {});
  // Over a list of parameters (the trainable ones are updated): sharded training passes this rank's pieces.
  AdamW(const std::vector<Param*>& params, const ops::AdamWSettings& settings, LrScales lr_scale = {});
  // Sharded training: sums the gradients' sum of squares (f64 [1]) over the ranks before it sets the clipping factor.
  // Called on every step, also by a rank that holds no trainable piece. An error ends step() early (returned by
  // status()).
  void set_norm_reduction(std::function<Status(Tensor& norm_sq)> reduce) { reduce_norm_ = std::move(reduce); }
  Status status() const { return status_; }

  // Global L2 norm of the trainable gradients (computed in double; synchronizes).
  double grad_norm() const;
  // One update with learning rate `lr`; increments the step count. The gradients' norm and the clipping factor
  // are computed on the device: nothing here waits for the device. Returns the step's pre-clip gradient norm.
  GradNorm step(float lr);
  int64_t steps_taken() const { return step_; }
  // Bytes held by the moments (m and v of every trainable parameter).
  uint64_t state_bytes() const;

  // Moments as safetensors ("<param>.exp_avg", "<param>.exp_avg_sq") with the step count in the metadata.
  Status save(const std::string& path) const;
  Status load(const std::string& path);
  // Sets every trainable parameter's moments from `read(param, m, v)` (which fills m and v, f32 of the parameter's
  // shape) and the step count: loading from checkpoints of another layout.
  Status load_from(const std::function<Status(const Param& param, Tensor& m, Tensor& v)>& read, int64_t step);
  // The moments of each trainable parameter, in order.
  template <class F>
  void for_each_moment(F f) const {
    for (const auto& s : states_) f(*s.param, s.m, s.v);
  }

 private:
  struct State {
    Param* param;
    Tensor m, v;
  };
  void init(const std::vector<Param*>& params);

  ops::AdamWSettings settings_;
  LrScales lr_scale_;
  std::vector<State> states_;  // trainable params only
  // states_ split by (model part, weight decay): each set shares its AdamW settings and is one adamw_step_multi call.
  struct UpdateSet {
    ParamGroup group;
    bool decay;
    std::vector<ops::AdamWTensors> tensors;
  };
  std::vector<UpdateSet> update_sets_;
  std::vector<Tensor> grads_;  // the trainable gradients, in states_ order
  int64_t step_ = 0;
  Device device_ = Device::cpu();
  std::function<Status(Tensor&)> reduce_norm_;
  Status status_;
};

// Linear warm-up from 0 to `peak` over `warmup` steps, then cosine decay to peak * min_ratio at `total`.
// `step` is 1-based (the step being taken).
float lr_at_step(int64_t step, int64_t total, int64_t warmup, float peak, float min_ratio);

}  // namespace vlm

// AdamW and the learning-rate schedule.
#include "train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/safetensors.h"
#include "kernels/ops.h"

namespace vlm {

namespace {
std::vector<Param*> all_params(ParameterStore& store) {
  std::vector<Param*> out;
  for (Param& p : store.all()) out.push_back(&p);
  return out;
}
}  // namespace

AdamW::AdamW(ParameterStore& params, const ops::AdamWSettings& settings, LrScales lr_scale)
    : settings_(settings), lr_scale_(std::move(lr_scale)) {
  init(all_params(params));
}

AdamW::AdamW(const std::vector<Param*>& params, const ops::AdamWSettings& settings, LrScales lr_scale)
    : settings_(settings), lr_scale_(std::move(lr_scale)) {
  init(params);
}

void AdamW::init(const std::vector<Param*>& params) {
  for (Param* p : params) {
    device_ = p->value.device();
    if (!p->trainable) continue;
    states_.push_back({p, Tensor::zeros(p->value.shape(), DType::f32, p->value.device()),
                       Tensor::zeros(p->value.shape(), DType::f32, p->value.device())});
  }
  for (const State& s : states_) {
    auto set = std::find_if(update_sets_.begin(), update_sets_.end(), [&](const UpdateSet& u) {
      return u.group == s.param->group && u.decay == s.param->decay;
    });
    if (set == update_sets_.end()) set = update_sets_.insert(update_sets_.end(), {s.param->group, s.param->decay, {}});
    // Tensors are shared handles: the set sees the same memory as states_ and the store.
    set->tensors.push_back({s.param->value, s.param->grad, s.m, s.v, s.param->compute});
    grads_.push_back(s.param->grad);
  }
}

uint64_t AdamW::state_bytes() const {
  uint64_t n = 0;
  for (const auto& s : states_) n += s.m.nbytes() + s.v.nbytes();
  return n;
}

double AdamW::grad_norm() const { return std::sqrt(ops::sum_of_squares(grads_)); }

double GradNorm::value() const {
  return sum_of_squares_.defined() ? std::sqrt(sum_of_squares_.scalar_f64()) : 0.0;
}

GradNorm AdamW::step(float lr) {
  ++step_;
  if (states_.empty() && !reduce_norm_) return GradNorm();  // nothing trainable
  Tensor norm_sq = Tensor::empty(Shape{1}, DType::f64, device_);
  if (grads_.empty()) {
    norm_sq.zero_();
  } else {
    ops::sum_of_squares(norm_sq, grads_);
  }
  if (reduce_norm_) {
    status_ = reduce_norm_(norm_sq);
    if (!status_.ok()) return GradNorm();
  }
  for (const UpdateSet& set : update_sets_) {
    auto it = lr_scale_.find(set.group);
    const float scale = it == lr_scale_.end() ? 1.f : it->second;
    if (scale == 0.f) continue;
    ops::AdamWSettings s = settings_;
    s.lr = lr * scale;
    if (!set.decay) s.weight_decay = 0.f;
    ops::adamw_step_multi(set.tensors, s, step_, norm_sq);
  }
  return GradNorm(ops::HostReadback(norm_sq));
}

Status AdamW::save(const std::string& path) const {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& s : states_) {
    tensors.emplace_back(s.param->name + ".exp_avg", s.m);
    tensors.emplace_back(s.param->name + ".exp_avg_sq", s.v);
  }
  return safetensors_save(path, tensors, {{"step", std::to_string(step_)}, {"optimizer", "adamw"}});
}

Status AdamW::load(const std::string& path) {
  VLM_ASSIGN_OR_RETURN(SafetensorsFile f, safetensors_load(path));
  auto step_it = f.metadata.find("step");
  if (step_it == f.metadata.end()) return parse_error(path + ": metadata has no 'step'");
  for (auto& s : states_) {
    for (auto [suffix, dst] : {std::pair<const char*, Tensor*>{".exp_avg", &s.m}, {".exp_avg_sq", &s.v}}) {
      auto it = f.tensors.find(s.param->name + suffix);
      if (it == f.tensors.end()) return not_found(path + ": optimizer state '" + s.param->name + suffix + "' missing");
      if (it->second.shape() != dst->shape() || it->second.dtype() != DType::f32)
        return invalid_argument(path + ": optimizer state '" + s.param->name + suffix + "' has the wrong shape/dtype");
      dst->copy_from(it->second);
    }
  }
  step_ = std::stoll(step_it->second);
  return Status();
}

Status AdamW::load_from(const std::function<Status(const Param&, Tensor&, Tensor&)>& read, int64_t step) {
  for (auto& s : states_) VLM_RETURN_IF_ERROR(read(*s.param, s.m, s.v));
  step_ = step;
  return Status();
}

float lr_at_step(int64_t step, int64_t total, int64_t warmup, float peak, float min_ratio) {
  if (warmup > 0 && step <= warmup) return peak * static_cast<float>(step) / static_cast<float>(warmup);
  if (total <= warmup) return peak;
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(total - warmup));
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return static_cast<float>(peak * (min_ratio + (1.0 - min_ratio) * cosine));
}

}  // namespace vlm

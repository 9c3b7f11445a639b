// Modality projector: pixel shuffle (r x r neighbouring patches -> one token with r*r times the channels), then a
// linear layer (Idefics3 / nanoVLM) or a Linear-GELU-Linear MLP into the decoder's width.
// Names: "model.connector.modality_projection.proj.weight" (linear) or ".fc1"/".fc2" (MLP).
#pragma once

#include "model/layers.h"
#include "model/model_config.h"

namespace vlm {

class Projector {
 public:
  struct Saved {
    Tensor shuffled, fc1_out, act_out;
  };
  Projector(ParameterStore& store, const ModelConfig& config, Device device);
  // vision features [N * P, Dv] -> image tokens [N * P / r^2, Dt].
  Tensor forward(const Tensor& features, Saved& saved) const;
  // Returns dfeatures [N * P, Dv] (when need_dx); accumulates parameter grads.
  Tensor backward(const Tensor& dtokens, const Saved& saved, bool need_dx) const;
  int unit() const { return unit_; }  // the projector is one sharding unit

 private:
  const ParameterStore* store_;  // its unit hooks (UnitScope)
  int unit_ = -1;                // the projector is one sharding unit
  int factor_, n_patches_, vision_hidden_;
  bool mlp_;
  Linear proj_, fc1_, fc2_;
};

}  // namespace vlm

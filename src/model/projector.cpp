// Projector forward/backward.
#include "model/projector.h"

#include "kernels/ops.h"

namespace vlm {

Projector::Projector(ParameterStore& store, const ModelConfig& c, Device device)
    : store_(&store),
      unit_(store.begin_unit("projector")),
      factor_(c.projector.pixel_shuffle),
      n_patches_(c.vision.n_patches()),
      vision_hidden_(c.vision.hidden),
      mlp_(c.projector.mlp_hidden > 0) {
  const std::string root = "model.connector.modality_projection.";
  const int in = c.vision.hidden * factor_ * factor_;
  if (mlp_) {
    fc1_ = Linear::create(store, root + "fc1", ParamGroup::projector, in, c.projector.mlp_hidden, true, device);
    fc2_ = Linear::create(store, root + "fc2", ParamGroup::projector, c.projector.mlp_hidden, c.text.hidden, true,
                          device);
  } else {
    proj_ = Linear::create(store, root + "proj", ParamGroup::projector, in, c.text.hidden, false, device);
  }
}

Tensor Projector::forward(const Tensor& features, Saved& s) const {
  const UnitScope unit(*store_, unit_, UnitUse::forward);
  const int64_t N = features.dim(0) / n_patches_;
  const int64_t tokens = n_patches_ / (factor_ * factor_);
  const int64_t width = static_cast<int64_t>(vision_hidden_) * factor_ * factor_;
  Tensor shuffled = new_like({N, tokens, width}, features);
  ops::pixel_shuffle_forward(shuffled, features.view({N, n_patches_, vision_hidden_}), factor_);
  s.shuffled = shuffled.view({N * tokens, width});
  if (!mlp_) return proj_.forward(s.shuffled);
  s.fc1_out = fc1_.forward(s.shuffled);
  s.act_out = new_like(s.fc1_out.shape(), features);
  ops::gelu_tanh_forward(s.act_out, s.fc1_out);
  return fc2_.forward(s.act_out);
}

Tensor Projector::backward(const Tensor& dtokens, const Saved& s, bool need_dx) const {
  Tensor dshuffled;
  UnitScope unit(*store_, unit_, UnitUse::backward);
  if (!mlp_) {
    dshuffled = proj_.backward(dtokens, s.shuffled, need_dx);
  } else {
    Tensor d_act = fc2_.backward(dtokens, s.act_out, true);
    Tensor d_fc1 = new_like(s.fc1_out.shape(), dtokens);
    ops::gelu_tanh_backward(d_fc1, d_act, s.fc1_out);
    dshuffled = fc1_.backward(d_fc1, s.shuffled, need_dx);
  }
  unit.release();
  if (!need_dx) return Tensor();
  const int64_t tokens = n_patches_ / (factor_ * factor_);
  const int64_t N = s.shuffled.dim(0) / tokens;
  Tensor dfeatures = new_like({N, n_patches_, vision_hidden_}, dtokens);
  ops::pixel_shuffle_backward(dfeatures, dshuffled.view({N, tokens, s.shuffled.dim(1)}), factor_);
  return dfeatures.view({N * n_patches_, vision_hidden_});
}

}  // namespace vlm

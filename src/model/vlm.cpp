// VlmModel: composition of the parts, the loss, and the pieces generation needs.
#include "model/vlm.h"

#include <algorithm>
#include <optional>

#include "kernels/op_profile.h"
#include "kernels/ops.h"

namespace vlm {

namespace {
constexpr int kIgnore = -100;
// Logits elements per LM-head chunk (256 MiB in bf16): all rows at once for small vocabularies, ~2700 rows of a 49k
// vocabulary. Each chunk also reads and writes the whole f32 LM-head weight gradient once (dw += dlogits^T h: 226 MB
// at 49152 x 576), so fewer, larger chunks save that traffic; measured on the nanoVLM shape, 64 MiB chunks (12 per
// step) spent 2.1 ms in the LM head's backward GEMMs.
constexpr int64_t kLmHeadChunkElements = int64_t{1} << 27;

bool group_trainable(const ParameterStore& store, ParamGroup g) {
  for (const auto& p : store.all())
    if (p.group == g && p.trainable) return true;
  return false;
}

// The text's sequences, their cu_seqlens checked once for all layers (forward and backward).
SeqInfo seq_info(const VlmInputs& in) {
  return checked_seq_info(SeqInfo{in.cu_seqlens, in.max_seqlen, in.positions}, in.tokens.dim(0));
}
}  // namespace

VlmModel::VlmModel(const ModelConfig& config, Device device, DType compute_dtype)
    : config_(config), device_(device) {
  VLM_CHECK(validate_model_config(config).ok(), validate_model_config(config).message());
  VLM_CHECK(compute_dtype == DType::f32 || (compute_dtype == DType::bf16 && device.is_cuda()),
            "VlmModel: compute dtype ", dtype_name(compute_dtype), " on ", device.to_string(),
            " is not supported (f32 anywhere, bf16 on cuda)");
  params_.set_compute_dtype(compute_dtype);  // before the parts add their parameters: they get compute copies
  if (config.has_vision()) vision_ = std::make_unique<VisionTransformer>(params_, config.vision, device);
  if (config.model_parts() == ModelParts::vlm) projector_ = std::make_unique<Projector>(params_, config, device);
  if (config.has_text()) text_ = std::make_unique<TextDecoder>(params_, config.text, device);
}

Expected<Recompute> parse_recompute(const std::string& name) {
  if (name == "none") return Recompute::none;
  if (name == "blocks") return Recompute::blocks;
  return invalid_argument("'" + name + "' is not one of none, blocks");
}

const char* recompute_name(Recompute recompute) { return recompute == Recompute::blocks ? "blocks" : "none"; }

void VlmModel::set_recompute(Recompute recompute) {
  recompute_ = recompute;
  if (vision_) vision_->set_recompute_blocks(recompute == Recompute::blocks);
  if (text_) text_->set_recompute_blocks(recompute == Recompute::blocks);
}

void VlmModel::init_weights(uint64_t seed) {
  params_.init_normal(seed, config_.init_std);
  if (vision_ && config_.vision.pos_init_scale > 0) vision_->init_position_embedding_sincos(config_.vision.pos_init_scale);
}

Tensor VlmModel::embed_with_images(const VlmInputs& in, const Tensor& image_tokens) const {
  Tensor x0 = text_->embed(in.tokens);
  if (image_tokens.defined() && image_tokens.numel() > 0) {
    VLM_CHECK(image_tokens.dim(0) == in.image_rows.dim(0), "image tokens ", image_tokens.describe(),
              " do not match image_rows ", in.image_rows.describe());
    ops::scatter_rows(x0, image_tokens, in.image_rows);
  }
  return x0;
}

Tensor VlmModel::encode_images(const Tensor& images) {
  VLM_CHECK(projector_ != nullptr, "encode_images: a ", config_.parts, " model has no vision tower and projector");
  VisionTransformer::Saved vs;
  Projector::Saved ps;
  return projector_->forward(vision_->forward(images, vs), ps);
}

Tensor VlmModel::vision_features(const Tensor& images) {
  VLM_CHECK(vision_ != nullptr, "vision_features: a ", config_.parts, " model has no vision tower");
  VisionTransformer::Saved vs;
  Tensor features = vision_->forward(images, vs);
  if (features.dtype() == DType::f32) return features;
  Tensor f32 = new_f32_like(features.shape(), features);
  ops::cast(f32, features);
  return f32;
}

StepLoss::StepLoss(const Tensor& loss_sum, int64_t tokens) : sum_(loss_sum), tokens_(tokens) {}

double StepLoss::loss_sum() const { return sum_.defined() ? sum_.scalar_f64() : 0.0; }

StepLoss VlmModel::loss_at_targets(const Tensor& hidden, const VlmInputs& in, float dloss, Tensor* dhidden) const {
  const int64_t R = in.loss_rows.numel();
  if (R == 0) return StepLoss();
  const int64_t C = hidden.dim(1);
  Tensor hsel = new_like({R, C}, hidden);
  ops::gather_rows(hsel, hidden, in.loss_rows);
  const Param* w = text_->lm_head().w;
  Tensor losses = new_f32_like({R}, hidden);
  Tensor dhsel, dw;
  if (dhidden) {
    dhsel = new_like({R, C}, hidden);
    if (w->trainable) dw = w->grad;
  }
  const int64_t chunk_rows = std::max<int64_t>(1, kLmHeadChunkElements / w->value.dim(0));
  ops::lm_head_cross_entropy(losses, dhsel, dw, hsel, w->weight(), in.loss_targets, dloss, kIgnore, chunk_rows);
  if (dhidden) {
    *dhidden = Tensor::zeros(hidden.shape(), hidden.dtype(), hidden.device());
    ops::scatter_rows(*dhidden, dhsel, in.loss_rows);
  }
  Tensor sum = Tensor::empty(Shape{1}, DType::f64, hidden.device());
  ops::sum(sum, losses);
  return StepLoss(sum, R);
}

namespace {
// Whether the batch's images feed the model: a text model ignores them, but takes no placeholder rows.
bool uses_images(const VlmInputs& in, bool has_projector) {
  const bool rows = in.image_rows.defined() && in.image_rows.numel() > 0;
  VLM_CHECK(has_projector || !rows, "a text model got ", in.image_rows.numel(), " image placeholder rows");
  return has_projector && in.images.defined() && in.images.numel() > 0;
}
}  // namespace

StepLoss VlmModel::forward_loss(const VlmInputs& in) {
  VLM_CHECK(text_ != nullptr, "forward_loss: a vision model has no decoder");
  Tensor image_tokens = uses_images(in, projector_ != nullptr) ? encode_images(in.images) : Tensor();
  Tensor x0 = embed_with_images(in, image_tokens);
  TextDecoder::Saved ts;
  Tensor hidden = text_->forward(x0, seq_info(in), ts);
  return loss_at_targets(hidden, in, 0.f, nullptr);
}

StepLoss VlmModel::forward_backward(const VlmInputs& in, float grad_scale) {
  VLM_CHECK(text_ != nullptr, "forward_backward: a vision model has no decoder");
  const bool has_images = uses_images(in, projector_ != nullptr);
  const bool train_vision = group_trainable(params_, ParamGroup::vision);
  const bool train_projector = group_trainable(params_, ParamGroup::projector);

  VisionTransformer::Saved vs;
  Projector::Saved ps;
  Tensor features, image_tokens;
  if (has_images) {
    const ops::profile::ProfileScope scope("vision_fwd");  // op profile labels (kernels/op_profile.h)
    features = vision_->forward(in.images, vs);
    image_tokens = projector_->forward(features, ps);
  }
  Tensor x0 = embed_with_images(in, image_tokens);
  TextDecoder::Saved ts;
  const SeqInfo seq = seq_info(in);
  Tensor hidden;
  {
    const ops::profile::ProfileScope scope("text_fwd");
    hidden = text_->forward(x0, seq, ts);
  }

  Tensor dhidden;  // the LM head's backward runs inside the chunked loss
  // The LM head's unit; tied to the embeddings it stays acquired until the embedding's backward added its part, so
  // the shared gradient is reduced once.
  std::optional<UnitScope> head(std::in_place, params_, text_->lm_head_unit(), UnitUse::backward);
  const StepLoss out = loss_at_targets(hidden, in, grad_scale, &dhidden);
  if (out.tokens() == 0) return out;
  if (!config_.text.tie_embeddings) head.reset();

  Tensor dx0;
  {
    const ops::profile::ProfileScope scope("text_bwd");
    dx0 = text_->backward(dhidden, seq, ts);
  }
  Tensor dimage;
  if (has_images) {
    dimage = new_like({in.image_rows.numel(), dx0.dim(1)}, dx0);
    ops::gather_rows(dimage, dx0, in.image_rows);
    // The placeholder embeddings were replaced in the forward: they get no gradient.
    Tensor zeros = Tensor::zeros(dimage.shape(), dx0.dtype(), dx0.device());
    ops::scatter_rows(dx0, zeros, in.image_rows);
  }
  text_->embed_backward(dx0, in.tokens);
  head.reset();
  if (has_images && (train_projector || train_vision)) {
    const ops::profile::ProfileScope scope("vision_bwd");
    Tensor dfeatures = projector_->backward(dimage, ps, train_vision);
    if (train_vision) vision_->backward(dfeatures, vs);
  }
  return out;
}

std::vector<UnitEvent> VlmModel::unit_schedule() const {
  std::vector<UnitEvent> events;
  auto use = [&](int unit, UnitUse u) {
    events.push_back({unit, u, true});
    events.push_back({unit, u, false});
  };
  if (!text_) return events;
  const bool vlm = projector_ != nullptr;
  if (vlm) {
    use(vision_->stem_unit(), UnitUse::forward);
    for (int u : vision_->block_units()) use(u, UnitUse::forward);
    use(vision_->post_unit(), UnitUse::forward);
    use(projector_->unit(), UnitUse::forward);
  }
  use(text_->embed_unit(), UnitUse::forward);
  for (int u : text_->block_units()) use(u, UnitUse::forward);
  use(text_->norm_unit(), UnitUse::forward);
  const bool tied = config_.text.tie_embeddings;
  events.push_back({text_->lm_head_unit(), UnitUse::backward, true});
  if (!tied) events.push_back({text_->lm_head_unit(), UnitUse::backward, false});
  use(text_->norm_unit(), UnitUse::backward);
  const std::vector<int> text_blocks = text_->block_units();
  for (auto it = text_blocks.rbegin(); it != text_blocks.rend(); ++it) use(*it, UnitUse::backward);
  use(text_->embed_unit(), UnitUse::gradients);
  if (tied) events.push_back({text_->lm_head_unit(), UnitUse::backward, false});
  const bool train_vision = group_trainable(params_, ParamGroup::vision);
  if (vlm && (train_vision || group_trainable(params_, ParamGroup::projector))) {
    use(projector_->unit(), UnitUse::backward);
    if (train_vision) {
      use(vision_->post_unit(), UnitUse::backward);
      const std::vector<int> blocks = vision_->block_units();
      for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) use(*it, UnitUse::backward);
      use(vision_->stem_unit(), UnitUse::backward);
    }
  }
  return events;
}

Tensor VlmModel::logits_at_rows(const VlmInputs& in, const Tensor& image_tokens, const Tensor& rows) {
  VLM_CHECK(text_ != nullptr, "logits_at_rows: a vision model has no decoder");
  Tensor x0 = embed_with_images(in, image_tokens);
  TextDecoder::Saved ts;
  Tensor hidden = text_->forward(x0, seq_info(in), ts);
  Tensor hsel = new_like({rows.numel(), hidden.dim(1)}, hidden);
  ops::gather_rows(hsel, hidden, rows);
  Tensor logits = text_->lm_head().forward(hsel);
  if (logits.dtype() == DType::f32) return logits;
  Tensor logits_f32 = new_f32_like(logits.shape(), logits);
  ops::cast(logits_f32, logits);
  return logits_f32;
}

}  // namespace vlm

// The VLM: vision transformer -> projector -> image tokens spliced into the text embeddings at the rows of the
// `<image>` placeholders -> Llama decoder -> LM head and cross-entropy on the target rows only (chunked, so the
// [rows x vocab] logits never exist at once). Precision: the compute dtype (f32, or bf16 on CUDA) is the dtype of
// the weights the ops read and of every activation; master weights, gradients, statistics and losses stay f32.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/model_config.h"
#include "model/parameters.h"
#include "model/projector.h"
#include "model/text_decoder.h"
#include "model/vision.h"

namespace vlm {

// One packed batch on the model's device. Sequences lie back to back in `tokens`.
struct VlmInputs {
  Tensor images;        // f32 (or the compute dtype) [N, C, H, W], normalized; N may be 0
  Tensor tokens;        // i32 [T]; rows in image_rows hold the placeholder id (their embedding is replaced)
  Tensor positions;     // i32 [T] position within the sequence
  Tensor cu_seqlens;    // i32 [B+1]
  int max_seqlen = 0;
  Tensor image_rows;    // i32 [N * image_tokens]: rows receiving image tokens, image after image
  Tensor loss_rows;     // i32 [R]: rows whose next token is a target
  Tensor loss_targets;  // i32 [R]: the target token of each loss row
};

// Activation memory of forward_backward (train.recompute): `none` keeps every activation the backward reads;
// `blocks` keeps only the input of each vision and text transformer block and recomputes the block's forward just
// before its backward: the same gradients bit for bit (the same deterministic ops run again on the same inputs) for
// one more forward of the blocks, with one block's activations alive at a time instead of all of them.
enum class Recompute { none, blocks };
// "none" | "blocks"; anything else is an invalid_argument quoting the name and listing both.
Expected<Recompute> parse_recompute(const std::string& name);
const char* recompute_name(Recompute recompute);

// The summed per-token loss of one forward pass. The sum is reduced on the model's device and copied to the host in
// the background (ops::HostReadback): loss_sum() and mean() wait for that copy alone, so a caller that queues more
// work before reading (the trainer reads step n's loss after queuing step n + 1) never leaves the device idle.
class StepLoss {
 public:
  StepLoss() = default;
  // loss_sum: f64 [1] on any device; its readback starts now.
  StepLoss(const Tensor& loss_sum, int64_t tokens);
  double loss_sum() const;  // sum of per-token losses (waits for the copy)
  int64_t tokens() const { return tokens_; }  // target tokens counted
  double mean() const { return tokens_ ? loss_sum() / static_cast<double>(tokens_) : 0.0; }

 private:
  ops::HostReadback sum_;
  int64_t tokens_ = 0;
};

// One step of the sequence of unit uses forward_backward brackets (UnitHooks): acquire or release of `unit`.
struct UnitEvent {
  int unit = -1;
  UnitUse use = UnitUse::forward;
  bool acquire = true;
  bool operator==(const UnitEvent& o) const = default;
};

class VlmModel {
 public:
  // compute_dtype: f32 (default) or bf16 (CUDA only: the CPU backend computes in f32 and aborts on bf16).
  VlmModel(const ModelConfig& config, Device device, DType compute_dtype = DType::f32);

  // Random init: every weight N(0, init_std^2) from Philox(seed), norms 1, biases 0, and the vision position
  // embeddings 2-D sine-cosine (model.vision.pos_init_scale rms; 0 keeps them random).
  void init_weights(uint64_t seed);

  ParameterStore& params() { return params_; }
  const ParameterStore& params() const { return params_; }
  const ModelConfig& config() const { return config_; }
  Device device() const { return device_; }
  DType compute_dtype() const { return params_.compute_dtype(); }
  // Applies to the forward passes that follow (none by default).
  void set_recompute(Recompute recompute);
  Recompute recompute() const { return recompute_; }

  // Forward + backward. Parameter grads += d(loss_sum * grad_scale)/dθ, where loss_sum is the sum of the per-token
  // losses (so grad_scale = 1 / total target tokens of the optimizer step gives a mean). Returns the loss sum.
  StepLoss forward_backward(const VlmInputs& in, float grad_scale);
  // Forward only.
  StepLoss forward_loss(const VlmInputs& in);
  // The acquire/release events of forward_backward on a batch with images and target tokens, with the current
  // trainable flags, in order. A batch without images or targets skips some of them: a sharded trainer runs the
  // skipped ones' collectives anyway (without compute), so every rank issues the same collectives in the same order.
  std::vector<UnitEvent> unit_schedule() const;

  // Image tokens for generation: images [N, C, H, W] -> [N * image_tokens, text hidden] in the compute dtype.
  Tensor encode_images(const Tensor& images);
  // The vision tower's output (its last hidden state, after the final LayerNorm): images [N, C, H, W] ->
  // f32 [N * patches, vision hidden].
  Tensor vision_features(const Tensor& images);
  // The language model alone (the inference engine's decode step: TextDecoder::forward_paged).
  const TextDecoder& text_decoder() const { return *text_; }
  // Logits [R, V] at `rows` (i32 [R]) for packed tokens whose image rows are filled from `image_tokens`. Always
  // f32 (bf16 logits are cast on the device), ready for a host copy.
  Tensor logits_at_rows(const VlmInputs& in, const Tensor& image_tokens, const Tensor& rows);

 private:
  Tensor embed_with_images(const VlmInputs& in, const Tensor& image_tokens) const;
  // LM head + cross-entropy at the target rows of the final hidden states. With `dhidden`, also the backward:
  // *dhidden = d(loss_sum * dloss)/d(hidden) (zero on other rows) and the LM head's weight gradient (+=).
  StepLoss loss_at_targets(const Tensor& hidden, const VlmInputs& in, float dloss, Tensor* dhidden) const;

  ModelConfig config_;
  Device device_;
  // Null when config.parts leaves them out: text models have no vision_/projector_, vision models no
  // projector_/text_.
  Recompute recompute_ = Recompute::none;
  ParameterStore params_;
  std::unique_ptr<VisionTransformer> vision_;
  std::unique_ptr<Projector> projector_;
  std::unique_ptr<TextDecoder> text_;
};

}  // namespace vlm

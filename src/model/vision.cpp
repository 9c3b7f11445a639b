// VisionTransformer forward/backward.
#include "model/vision.h"

#include <cmath>

#include "kernels/ops.h"

namespace vlm {

VisionTransformer::VisionTransformer(ParameterStore& store, const VisionConfig& c, Device device)
    : config_(c), store_(&store) {
  const std::string root = "model.vision_model.";
  const ParamGroup g = ParamGroup::vision;
  stem_unit_ = store.begin_unit("vision.embeddings");
  patch_w_ = store.add(root + "embeddings.patch_embedding.weight", g, {c.hidden, c.channels, c.patch_size, c.patch_size},
                       true, device);
  patch_b_ = store.add(root + "embeddings.patch_embedding.bias", g, {c.hidden}, false, device);
  pos_ = store.add(root + "embeddings.position_embedding.weight", g, {c.n_patches(), c.hidden}, false, device);
  AttentionShape shape{c.heads, c.heads, c.head_dim(), /*causal=*/false, /*rope=*/false, 0.f};
  for (int i = 0; i < c.layers; ++i) {
    const std::string p = root + "encoder.layers." + std::to_string(i) + ".";
    Block b;
    b.unit = store.begin_unit("vision.layers." + std::to_string(i));
    b.ln1 = LayerNorm::create(store, p + "layer_norm1", g, c.hidden, c.ln_eps, device);
    b.attn = SelfAttention::create(store, p + "self_attn", "out_proj", g, c.hidden, shape, true, true, device);
    b.ln2 = LayerNorm::create(store, p + "layer_norm2", g, c.hidden, c.ln_eps, device);
    b.fc1 = Linear::create(store, p + "mlp.fc1", g, c.hidden, c.mlp_hidden, true, device);
    b.fc2 = Linear::create(store, p + "mlp.fc2", g, c.mlp_hidden, c.hidden, true, device);
    blocks_.push_back(b);
  }
  post_unit_ = store.begin_unit("vision.post_layernorm");
  post_ln_ = LayerNorm::create(store, root + "post_layernorm", g, c.hidden, c.ln_eps, device);
}

Tensor VisionTransformer::forward(const Tensor& images_in, Saved& s) const {
  // Images arrive f32 (loader, eval); in bf16 mode they are cast once, on the device, to the compute dtype.
  UnitScope stem(*store_, stem_unit_, UnitUse::forward);
  const DType dt = patch_w_->weight().dtype();
  Tensor images = images_in;
  if (images.dtype() != dt) {
    images = Tensor::empty(images_in.shape(), dt, images_in.device());
    ops::cast(images, images_in);
  }
  const int64_t N = images.dim(0);
  const int P = config_.n_patches(), D = config_.hidden;
  const int64_t T = N * P;
  const int64_t K = static_cast<int64_t>(config_.channels) * config_.patch_size * config_.patch_size;
  s.patches = new_like({T, K}, images);
  ops::image_to_patches(s.patches, images, config_.patch_size);
  Tensor x = new_like({T, D}, images);
  ops::linear_forward(x, s.patches, patch_w_->weight().view({D, K}), patch_b_->weight());
  ops::add_rows_broadcast(x, pos_->weight());
  stem.release();

  // Every image is one sequence of P patches.
  std::vector<int32_t> cu(static_cast<size_t>(N + 1));
  for (int64_t i = 0; i <= N; ++i) cu[static_cast<size_t>(i)] = static_cast<int32_t>(i * P);
  s.seq.cu_seqlens = Tensor::from_vector(cu, {N + 1}).to(images.device());
  s.seq.max_seqlen = P;
  s.seq = checked_seq_info(s.seq, T);  // once, for every block's forward and backward

  s.blocks.assign(blocks_.size(), {});
  s.recompute = recompute_blocks_;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const UnitScope unit(*store_, blocks_[i].unit, UnitUse::forward);
    if (s.recompute) {
      BlockSaved full;  // freed at the end of the block: only the input stays
      x = block_forward(blocks_[i], x, s.seq, full, true);
      s.blocks[i].x = full.x;
    } else {
      x = block_forward(blocks_[i], x, s.seq, s.blocks[i], true);
    }
  }
  s.pre_final = x;
  const UnitScope post(*store_, post_unit_, UnitUse::forward);
  return post_ln_.forward(x, s.final_ln);
}

Tensor VisionTransformer::block_forward(const Block& b, const Tensor& x, const SeqInfo& seq, BlockSaved& bs,
                                        bool need_output) const {
  bs.x = x;
  bs.ln1_out = b.ln1.forward(x, bs.ln1);
  Tensor attn = b.attn.forward(bs.ln1_out, seq, bs.attn);
  bs.ln2_out = b.ln2.forward_add(bs.h, x, attn, bs.ln2);  // h = x + attn
  bs.fc1_out = new_like({x.dim(0), b.fc1.out_features()}, x);  // the pre-activation, for the backward
  bs.act_out = new_like(bs.fc1_out.shape(), x);
  ops::linear_gelu_forward(bs.act_out, bs.fc1_out, bs.ln2_out, b.fc1.w->weight(), b.fc1.b->weight());
  if (!need_output) return Tensor();
  return b.fc2.forward_add(bs.act_out, bs.h);  // out = h + mlp
}

void VisionTransformer::backward(const Tensor& dfeatures, const Saved& s) const {
  Tensor dx;
  {
    const UnitScope post(*store_, post_unit_, UnitUse::backward);
    dx = post_ln_.backward(dfeatures, s.pre_final, s.final_ln);
  }
  for (size_t i = blocks_.size(); i-- > 0;) {
    const Block& b = blocks_[i];
    const UnitScope unit(*store_, b.unit, UnitUse::backward);  // released after the overlap below joined
    BlockSaved redone;
    if (s.recompute) block_forward(b, s.blocks[i].x, s.seq, redone, false);
    const BlockSaved& bs = s.recompute ? redone : s.blocks[i];
    // The block's weight gradients run on a side stream beside its input gradients, joined at the block's end.
    const ops::WeightGradOverlap overlap(dx.device());
    // out = h + fc2(gelu(fc1(ln2(h))))
    b.fc2.backward(dx, bs.act_out, false);  // fc2's weight and bias gradients
    Tensor d_fc1 = new_like(bs.fc1_out.shape(), dx);
    ops::linear_dgelu_backward(d_fc1, dx, b.fc2.w->weight(), bs.fc1_out);  // through fc2 and the GELU at once
    Tensor d_ln2 = b.fc1.backward(d_fc1, bs.ln2_out, true);
    Tensor dh = b.ln2.backward_add(d_ln2, dx, bs.h, bs.ln2);  // + the residual path's dx
    // h = x + attn(ln1(x))
    Tensor d_ln1 = b.attn.backward(dh, bs.ln1_out, s.seq, bs.attn);
    dx = b.ln1.backward_add(d_ln1, dh, bs.x, bs.ln1);
  }
  // x0 = patches @ W^T + b + pos
  const UnitScope stem(*store_, stem_unit_, UnitUse::backward);
  if (pos_->trainable) ops::add_rows_broadcast_backward(pos_->grad, dx);
  const int D = config_.hidden;
  const int64_t K = s.patches.dim(1);
  Tensor no_dx;
  Tensor dw = patch_w_->trainable ? patch_w_->grad.view({D, K}) : Tensor();
  Tensor db = patch_b_->trainable ? patch_b_->grad : Tensor();
  ops::linear_backward(no_dx, dw, db, dx, s.patches, patch_w_->weight().view({D, K}));
}

std::vector<int> VisionTransformer::block_units() const {
  std::vector<int> units;
  for (const Block& b : blocks_) units.push_back(b.unit);
  return units;
}

void VisionTransformer::init_position_embedding_sincos(float scale) {
  const int grid = config_.image_size / config_.patch_size, D = config_.hidden;
  Tensor host = Tensor::zeros({grid * grid, D}, DType::f32);
  float* e = host.data<float>();
  // Half of the channels encode the row, half the column; each half is sin/cos pairs of geometric frequencies.
  const int half = D / 2, pairs = half / 2;
  for (int y = 0; y < grid; ++y)
    for (int x = 0; x < grid; ++x) {
      float* row = e + static_cast<int64_t>(y * grid + x) * D;
      for (int i = 0; i < pairs; ++i) {
        const double freq = std::pow(10000.0, -static_cast<double>(i) / std::max(pairs, 1));
        row[2 * i] = static_cast<float>(std::sin(y * freq));
        row[2 * i + 1] = static_cast<float>(std::cos(y * freq));
        row[half + 2 * i] = static_cast<float>(std::sin(x * freq));
        row[half + 2 * i + 1] = static_cast<float>(std::cos(x * freq));
      }
    }
  // sin/cos pairs have rms 1/sqrt(2) over the filled channels; rescale to the requested rms.
  double ss = 0;
  for (int64_t i = 0; i < host.numel(); ++i) ss += static_cast<double>(e[i]) * e[i];
  const float k = ss > 0 ? static_cast<float>(scale / std::sqrt(ss / static_cast<double>(host.numel()))) : 0.f;
  for (int64_t i = 0; i < host.numel(); ++i) e[i] *= k;
  pos_->value.copy_from(host);
  pos_->sync_compute();
}

}  // namespace vlm

// Training FLOPs and device peaks: see train_flops.h.
#include "train/train_flops.h"

#include <string>

#include "track/run_dir.h"

namespace vlm {

namespace {

// Forward FLOPs of one image through the ViT (patch embedding, blocks) and the projector.
double vision_forward_flops(const ModelConfig& c) {
  const double p = c.vision.n_patches();
  const double vw = c.vision.hidden, vm = c.vision.mlp_hidden, vl = c.vision.layers;
  const double vit_layer = 4 * vw * vw + 2 * vw * vm;
  const double patch_embed = 3.0 * c.vision.patch_size * c.vision.patch_size * vw;
  const double vit = 2 * p * (vl * vit_layer + patch_embed) + vl * 4 * p * p * vw;
  const double r2 = c.projector.pixel_shuffle * c.projector.pixel_shuffle;
  const double proj = 2.0 * c.image_tokens() * (vw * r2) * c.text.hidden;
  return vit + proj;
}

// Forward FLOPs of the decoder blocks over one sequence of `t` tokens (causal attention), without the LM head.
double decoder_forward_flops(const ModelConfig& c, double t) {
  const double lw = c.text.hidden, hd = c.text.head_dim();
  const double lm_layer = 2 * lw * lw + 2 * lw * c.text.kv_heads * hd + 3 * lw * c.text.intermediate;
  return 2 * t * c.text.layers * lm_layer + c.text.layers * 4 * t * t * lw / 2;
}

double head_forward_flops(const ModelConfig& c, double text_tokens) {
  return 2.0 * text_tokens * c.text.hidden * c.text.vocab_size;
}

}  // namespace

double train_flops_per_sample(const ModelConfig& c, int text_tokens) {
  return 3.0 * (vision_forward_flops(c) + decoder_forward_flops(c, c.image_tokens() + text_tokens) +
                head_forward_flops(c, text_tokens));
}

double train_flops_of_batch(const ModelConfig& c, const PackedBatch& b) {
  const int image_tokens = c.image_tokens();
  const double images = image_tokens > 0 ? static_cast<double>(b.image_rows.size()) / image_tokens : 0.0;
  double decoder = 0;
  for (size_t i = 0; i + 1 < b.cu_seqlens.size(); ++i)
    decoder += decoder_forward_flops(c, b.cu_seqlens[i + 1] - b.cu_seqlens[i]);
  const double text_tokens = static_cast<double>(b.tokens.size()) - static_cast<double>(b.image_rows.size());
  return 3.0 * (images * vision_forward_flops(c) + decoder + head_forward_flops(c, text_tokens));
}

double device_peak_tflops(Device device, DType compute_dtype) {
  if (!device.is_cuda()) return 0;
  std::string name;
  for (const GpuInfo& g : gpu_info())
    if (g.index == device.index) name = g.name;
  const bool bf16 = compute_dtype == DType::bf16;
  const bool pcie = name.find("PCIe") != std::string::npos;
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos)
    return pcie ? (bf16 ? 756.0 : 51.0) : (bf16 ? 989.0 : 67.0);
  if (name.find("A100") != std::string::npos) return bf16 ? 312.0 : 19.5;
  return 0;
}

}  // namespace vlm

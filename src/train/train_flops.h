// Model FLOPs of training, and the peak a device can reach, for the trainer's `tflops` / `mfu` metrics and
// `vlm bench train`. One training sample costs 3 x forward; forward = 2 x matmul MACs + attention (causal counted
// as half), the LM head on the text positions only. bench/peers/train_nanovlm.py's model_flops_per_sample() is the
// same formula, so TFLOP/s and MFU compare directly with the peer.
#pragma once

#include "core/device.h"
#include "core/dtype.h"
#include "data/loader/vlm_batch.h"
#include "model/model_config.h"

namespace vlm {

// One sample: one image, then `text_tokens` text tokens in its sequence.
double train_flops_per_sample(const ModelConfig& c, int text_tokens);

// One packed batch: every image through the vision tower and projector, every sequence (cu_seqlens) through the
// decoder with attention within the sequence, the LM head on the text (non-image) positions.
double train_flops_of_batch(const ModelConfig& c, const PackedBatch& batch);

// Dense peak TFLOP/s of `device` at the training precision (bf16: tensor cores; f32: CUDA cores, as our GEMMs run
// fp32 without TF32), from the GPU's name: H100 / H200 SXM, H100 PCIe, A100. 0 when unknown (and on the CPU), in
// which case no MFU is logged unless train.peak_tflops gives it.
double device_peak_tflops(Device device, DType compute_dtype);

}  // namespace vlm

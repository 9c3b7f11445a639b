// ops::decoder_layer_decode on CUDA (cuda/decode_layer.cu): the persistent fused kernel. Kept out of cuda_ops.h with
// the op (kernels/decode_layer.h).
#pragma once

#include "core/tensor.h"
#include "kernels/decode_layer.h"

namespace vlm::ops::cuda {

// The layer as one cooperative kernel (validated tensors; the tables checked by an earlier op of the step). Returns
// false, launching nothing, when the call does not fit it: more than 8 rows or a prefill chunk, not bf16, a head dim
// other than 64, more than 8 q heads per kv head, a projection whose input rows overflow the staged shared memory,
// misaligned tensors, or a device without cooperative launch. The caller then runs the composition.
bool decoder_layer_decode(Tensor& y, const Tensor& x, const DecoderLayerWeights& w, Tensor& k_cache, Tensor& v_cache,
                          const PagedStepTables& step, float theta, float scale);

}  // namespace vlm::ops::cuda

// The forward transformers runs for a batch named as transformers names it, for parity checks (`vlm forward`):
// input_ids (i32 or i64 [B, T]), an optional attention_mask (all ones: padding is not supported) and pixel_values
// (f32 [N, C, H, W], the images in the order of their placeholders) -> logits (f32 [B, T, V]); a vision model takes
// pixel_values alone and gives last_hidden_state (f32 [N, patches, hidden]). Every sequence attends causally to
// itself only; positions start at 0 in each.
#pragma once

#include <map>
#include <string>

#include "model/vlm.h"

namespace vlm {

// `image_token_id` < 0 takes the model's (model.image_token_id). Errors name the input tensor and what is wrong.
Expected<std::map<std::string, Tensor>> model_forward(VlmModel& model, const std::map<std::string, Tensor>& inputs,
                                                      int image_token_id = -1);

}  // namespace vlm

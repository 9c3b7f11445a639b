// Export to a Hugging Face model folder transformers loads: config.json (hf_config_json), generation_config.json
// and model.safetensors with each family's names (Idefics3 for a VLM, Llama/Qwen2 for a text model, SiglipVisionModel
// for a vision tower). Tokenizer and image-processor files come from the layers that own them (see `vlm convert`).
#pragma once

#include <string>

#include "model/vlm.h"

namespace vlm {

struct HfExportOptions {
  int image_token_id = -1;  // required for a VLM: the <image> placeholder id
  int bos_token_id = -1, eos_token_id = -1, pad_token_id = -1;  // for generation_config.json; -1 = not written
  bool bf16 = false;        // weights in bf16 (else f32, exact)
};

// Writes `dir` (created if needed; existing files of these names are replaced atomically).
Status hf_export_model(const VlmModel& model, const std::string& dir, const HfExportOptions& options);

}  // namespace vlm

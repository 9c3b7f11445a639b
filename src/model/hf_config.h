// Hugging Face config.json <-> ModelConfig. Reads the architectures vlm.cpp runs: Idefics3ForConditionalGeneration
// (SmolVLM; SmolVLMForConditionalGeneration has the same layout), LlamaForCausalLM, Qwen2ForCausalLM,
// SiglipVisionModel (and SiglipModel, whose vision tower is used), and nanoVLM's own config.json (VLMConfig fields).
// Both transformers 4.x and 5.x spellings are read: rope_theta or rope_parameters.rope_theta (rope_scaling /
// rope_parameters.rope_type other than "default" is unsupported), tie_word_embeddings at the top level (which wins)
// or in text_config, an explicit head_dim (which must be hidden_size / num_attention_heads). Anything the model
// cannot represent is an error naming the key, never silently dropped.
#pragma once

#include <string>

#include "core/status.h"
#include "model/model_config.h"

namespace vlm {

enum class HfFamily { idefics3, llama, qwen2, siglip, nanovlm };
const char* hf_family_name(HfFamily family);

struct HfModelInfo {
  HfFamily family = HfFamily::idefics3;
  std::string architecture;  // config.json's architectures[0]; "nanoVLM" for nanoVLM's layout
  ModelConfig config;        // parts: vlm (Idefics3, nanoVLM), text (Llama, Qwen2) or vision (SigLIP)
  int image_token_id = -1;   // the <image> placeholder id when the config names one (Idefics3), else -1
};

// Parses the text of a config.json; `source` names it in errors.
Expected<HfModelInfo> hf_parse_config(const std::string& json_text, const std::string& source);
// Reads dir/config.json.
Expected<HfModelInfo> hf_read_config(const std::string& dir);
// True when `path` is a directory holding a config.json (a Hugging Face model folder).
bool hf_is_model_dir(const std::string& path);

// config.json text transformers loads for `config`: Idefics3ForConditionalGeneration for a VLM (image_token_id
// required), LlamaForCausalLM / Qwen2ForCausalLM (qkv bias) for a text model, SiglipVisionModel for a vision tower.
// Written in the 5.x spelling plus rope_theta, which 4.x reads. `dtype` is "float32" or "bfloat16".
Expected<std::string> hf_config_json(const ModelConfig& config, int image_token_id, const std::string& dtype);

}  // namespace vlm

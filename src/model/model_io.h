// Model folders: a Hugging Face folder (config.json + safetensors, any family hf_config.h reads) or vlm.cpp's own
// (model.toml with the model.* options + model.safetensors with vlm.cpp's names, as `vlm convert --from hf` writes
// it). Loading is strict (hf_weights.h) and prints what was loaded.
#pragma once

#include <memory>
#include <string>

#include "model/hf_weights.h"
#include "model/vlm.h"

namespace vlm {

// The model config of a folder without loading its weights.
Expected<ModelConfig> read_model_dir_config(const std::string& dir);
// Builds the model a folder describes on `device` (compute dtype f32, or bf16 on CUDA) and loads its weights.
Expected<std::unique_ptr<VlmModel>> load_model_dir(const std::string& dir, Device device,
                                                   const LoadPolicy& policy = {}, DType compute_dtype = DType::f32);
// Takes the shapes of pretrained folders into `config`: all of init_from's model (when it is a folder), the
// vision tower of config.vision_from, the decoder of config.text_from (the parts become vlm; the projector keeps
// the config's settings). A no-op when none is set.
Status apply_pretrained_config(ModelConfig& config, const std::string& init_from);
// Loads init_from (a folder or a safetensors file), then the vision tower of config.vision_from and the decoder of
// config.text_from; each load is strict (what a part-load leaves out is allowed) and logs what it loaded.
Status load_pretrained(VlmModel& model, const std::string& init_from, const LoadPolicy& policy);
// Writes vlm.cpp's folder: dir/model.toml and dir/model.safetensors.
Status save_model_dir(const VlmModel& model, const std::string& dir);
// The [model] section of a run file for `config` (every model.* option).
std::string model_config_toml(const ModelConfig& config);

}  // namespace vlm

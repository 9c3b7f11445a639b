// Weights of Hugging Face model folders: model.safetensors or the shards model.safetensors.index.json names, in
// f32, bf16 or f16 (converted to the f32 master weights), renamed from each family's layout to vlm.cpp's names
// (the Idefics3 ones), and loaded strictly: every missing, unexpected or mis-shaped tensor is listed in one error
// unless the caller names what may be missing. What was loaded is printed.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "model/hf_config.h"
#include "model/parameters.h"

namespace vlm {

// The tensors of a model folder: dir/model.safetensors, or every shard of dir/model.safetensors.index.json (a shard
// the index names that is absent, unreadable or lacks a tensor the index places in it is an error naming both).
Expected<SafetensorsFile> hf_read_tensors(const std::string& dir);

// Renames `family`'s tensors to vlm.cpp's (Idefics3) names for `config`: Llama/Qwen2 "model.*" ->
// "model.text_model.*", SigLIP "vision_model.*" -> "model.vision_model.*", nanoVLM's names (its fused ViT qkv_proj
// split into q/k/v). Tensors the model has no use for by design (SigLIP's pooling head, SiglipModel's text tower, a
// tied model's copy of lm_head.weight) are dropped and counted in `dropped`.
Expected<std::map<std::string, Tensor>> hf_rename_tensors(HfFamily family, const ModelConfig& config,
                                                           std::map<std::string, Tensor> tensors, int* dropped);

// What a load may leave out: model parts ("vision", "projector", "text") or tensor names, where a trailing '*'
// matches any suffix ("model.text_model.layers.1.*").
struct LoadPolicy {
  std::vector<std::string> allow_missing;
  bool allow_unexpected = false;  // extra tensors are ignored instead of an error
  bool allows(const Param& p) const;
};

struct LoadReport {
  int loaded = 0;                                        // parameters set from the file
  std::vector<std::string> missing, unexpected, shape;   // what the file lacked / had extra / had mis-shaped
  std::string summary() const;                           // one line for the log
};

// Sets the parameters of `store` from `tensors` (any float dtype). Errors (nothing is changed then) list every
// missing (not allowed by `policy`), unexpected and mis-shaped tensor; `source` names the file or folder.
Status load_parameters(ParameterStore& store, const std::map<std::string, Tensor>& tensors, const LoadPolicy& policy,
                       const std::string& source, LoadReport* report = nullptr);

// A Hugging Face folder's config and renamed tensors, ready for load_parameters.
struct HfCheckpoint {
  HfModelInfo info;
  std::map<std::string, Tensor> tensors;
  int dropped = 0;
};
Expected<HfCheckpoint> hf_read_checkpoint(const std::string& dir);

}  // namespace vlm

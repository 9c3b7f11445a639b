// What `vlm generate` and `vlm serve` load from MODEL: a run directory (its config.toml and newest valid
// checkpoint, or a model.safetensors beside the config), a checkpoint folder inside a run, or a model folder
// (Hugging Face or vlm.cpp's own, as `vlm convert` writes: its tokenizer.json and chat template). Gives the model on
// its device, the tokenizer, the chat template and the held-out image preprocessing (center crop, no augmentation),
// and the PromptBuilder that combines them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/loader/prompt.h"
#include "data/tokenizer/tokenizer.h"
#include "cli.h"
#include "infer/engine.h"
#include "infer/prompt_builder.h"
#include "model/vlm.h"

namespace vlm::cli {

struct InferenceModel {
  std::string name;  // the folder's name (a run's directory name)
  Tokenizer tokenizer;
  ChatTemplate chat;
  std::unique_ptr<VlmModel> model;
  std::unique_ptr<infer::PromptBuilder> prompts;  // refers to `tokenizer`: the struct stays where it was built
};

// `overrides` (--set) apply to a run's config.toml; `device_name` and `dtype_name` may be empty (the run's
// train.device or cpu; bf16 on cuda, f32 on cpu).
Expected<std::unique_ptr<InferenceModel>> load_inference_model(const std::string& path,
                                                               const std::vector<std::string>& overrides,
                                                               const std::string& device_name,
                                                               const std::string& dtype_name);

// The flags `vlm generate` and `vlm serve` share: the engine's (--kv-memory, --block-size, --max-num-seqs,
// --max-step-tokens, --no-prefix-cache) and the model's (--device, --dtype, --set).
struct InferenceFlags {
  std::string kv_memory, device, dtype;
  std::vector<std::string> overrides;
  int64_t block_size = 16, max_seqs = 256, step_tokens = 2048;
  bool no_prefix_cache = false;
  void add_to(Flags& f);
  // load_inference_model(path, --set, --device, --dtype).
  Expected<std::unique_ptr<InferenceModel>> load_model(const std::string& path) const {
    return load_inference_model(path, overrides, device, dtype);
  }
  // The engine's options for `m` (its image token, its tokenizer as the detokenizer: `m` must outlive them).
  // Errors name the flag.
  Expected<infer::EngineOptions> engine_options(const InferenceModel& m) const;
};

// "1073741824", "512M", "2G", "64k" -> bytes; `flag` names the option in errors. Empty text gives 0.
Expected<int64_t> parse_bytes(const std::string& flag, const std::string& text);

}  // namespace vlm::cli

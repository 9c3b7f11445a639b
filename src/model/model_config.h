// Shapes of the VLM family: a SigLIP-style ViT, a pixel-shuffle projector and a Llama-family decoder.
// Presets: "tiny" (trains on a laptop CPU in minutes), "nanovlm-222m" (SigLIP-B/16-224 + SmolLM2-135M shape),
// "vlm-1b" (SigLIP-B/16-224 + the Llama-3.2-1B decoder shape with SmolLM2's 49152-token vocabulary: the multi-GPU
// benchmark shape).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/options.h"

namespace vlm {

// Defaults are the "tiny" preset, tuned so the demo learns the shapes dataset on two CPU cores in minutes
// (see configs/shapes-tiny.toml); "nanovlm-222m" sets every field explicitly.
struct VisionConfig {
  int image_size = 64;
  int patch_size = 8;
  int channels = 3;
  int hidden = 128;
  int layers = 2;
  int heads = 4;
  int mlp_hidden = 512;
  float ln_eps = 1e-6f;
  float pos_init_scale = 0.f;  // rms of the 2-D sine-cosine position init (0 = random like other weights)
  int n_patches() const { return (image_size / patch_size) * (image_size / patch_size); }
  int head_dim() const { return hidden / heads; }
};

struct ProjectorConfig {
  int pixel_shuffle = 2;   // factor r: r*r neighbouring patches are concatenated into one token
  int mlp_hidden = 0;      // 0: a single linear layer (nanoVLM / Idefics3); > 0: Linear-GELU-Linear
};

struct TextConfig {
  int vocab_size = 512;
  int hidden = 128;
  int layers = 2;
  int heads = 4;
  int kv_heads = 2;
  int intermediate = 384;
  float rope_theta = 10000.f;
  float rms_eps = 1e-5f;
  bool qkv_bias = false;       // Qwen2 style
  bool tie_embeddings = false;  // true: SmolLM2 style
  int max_seq_len = 512;
  int head_dim() const { return hidden / heads; }
};

// Which parts the model has: the whole VLM, only the decoder (a Llama/Qwen2 LM that trains on text and
// generates), or only the vision tower (a SigLIP encoder whose output is its last hidden state).
enum class ModelParts { vlm, text, vision };
const char* model_parts_name(ModelParts parts);

struct ModelConfig {
  std::string preset = "tiny";
  std::string parts = "vlm";  // "vlm" | "text" | "vision" (see ModelParts)
  VisionConfig vision;
  ProjectorConfig projector;
  TextConfig text;
  float init_std = 0.04f;
  int image_token_id = -1;
  // Pretrained parts from model folders (Hugging Face or vlm): the vision tower of one (e.g. a SigLIP) and the
  // decoder of another (e.g. a SmolLM2); their config.json sets model.vision.* / model.text.*, the projector is new.
  std::string vision_from, text_from;  // the <image> placeholder id when the checkpoint names one (Hugging Face import), else -1  // tiny widths learn faster from a wider init; nanovlm-222m uses 0.02

  ModelParts model_parts() const { return parts == "text" ? ModelParts::text : parts == "vision" ? ModelParts::vision
                                                                                            : ModelParts::vlm; }
  bool has_vision() const { return model_parts() != ModelParts::text; }
  bool has_text() const { return model_parts() != ModelParts::vision; }
  // Image tokens each image contributes to the text sequence (0 for a text or vision model: prompts carry no
  // placeholders, and the images a loader still delivers are ignored).
  int image_tokens() const {
    return model_parts() == ModelParts::vlm ? vision.n_patches() / (projector.pixel_shuffle * projector.pixel_shuffle)
                                            : 0;
  }
};

// Sets every field of `config` to the named preset. Unknown names are an invalid_argument listing the presets.
Status apply_model_preset(const std::string& name, ModelConfig& config);
// The preset names apply_model_preset knows.
const std::vector<std::string>& model_preset_names();

// The parameters VlmModel allocates for `config`, by part, counted from the shapes alone (so that presets too large
// to build in a test, or on this machine, can be counted). Tied embeddings count once.
struct ParameterCount {
  int64_t vision = 0, projector = 0, text = 0;
  int64_t total() const { return vision + projector + text; }
};
ParameterCount count_parameters(const ModelConfig& config);
// Declares every model option (model.vision.hidden, ...) on `options`.
void add_model_options(OptionSet& options, ModelConfig& config);
// Cross-field checks (divisibility, GQA ratio, grid sizes); errors name the field.
Status validate_model_config(const ModelConfig& config);

}  // namespace vlm

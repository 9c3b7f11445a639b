// Model presets, option declarations and validation.
#include "model/model_config.h"

#include <cmath>

namespace vlm {

const char* model_parts_name(ModelParts parts) {
  switch (parts) {
    case ModelParts::vlm: return "vlm";
    case ModelParts::text: return "text";
    case ModelParts::vision: return "vision";
  }
  return "?";
}

Status apply_model_preset(const std::string& name, ModelConfig& c) {
  ModelConfig fresh;
  if (name == "tiny") {
    c = fresh;
  } else if (name == "nanovlm-222m") {
    c = fresh;
    c.vision = {224, 16, 3, 768, 12, 12, 3072, 1e-6f, 0.f};
    c.projector = {2, 0};  // 196 patches -> 49 tokens
    c.text.vocab_size = 49152;
    c.text.hidden = 576;
    c.text.layers = 30;
    c.text.heads = 9;
    c.text.kv_heads = 3;
    c.text.intermediate = 1536;
    c.text.rope_theta = 100000.f;
    c.text.rms_eps = 1e-5f;
    c.text.tie_embeddings = true;
    c.text.max_seq_len = 8192;
    c.init_std = 0.02f;
  } else if (name == "vlm-1b") {
    c = fresh;
    c.vision = {224, 16, 3, 768, 12, 12, 3072, 1e-6f, 0.f};  // SigLIP-B/16-224
    c.projector = {2, 0};                                     // 196 patches -> 49 tokens of 3072 -> 2048
    c.text.vocab_size = 49152;                                // SmolLM2's tokenizer
    c.text.hidden = 2048;                                     // Llama-3.2-1B from here on
    c.text.layers = 16;
    c.text.heads = 32;
    c.text.kv_heads = 8;
    c.text.intermediate = 8192;
    c.text.rope_theta = 500000.f;
    c.text.rms_eps = 1e-5f;
    c.text.tie_embeddings = true;
    c.text.max_seq_len = 8192;
    c.init_std = 0.02f;
  } else {
    std::string known;
    for (const auto& n : model_preset_names()) known += (known.empty() ? "" : ", ") + n;
    return invalid_argument("unknown model preset '" + name + "' (known: " + known + ")");
  }
  c.preset = name;
  return Status();
}

const std::vector<std::string>& model_preset_names() {
  static const std::vector<std::string> names = {"tiny", "nanovlm-222m", "vlm-1b"};
  return names;
}

ParameterCount count_parameters(const ModelConfig& c) {
  ParameterCount n;
  auto linear = [](int64_t in, int64_t out, bool bias) { return in * out + (bias ? out : 0); };
  if (c.has_vision()) {
    const VisionConfig& v = c.vision;
    const int64_t d = v.hidden;
    const int64_t block = 2 * 2 * d                                 // two LayerNorms (weight, bias)
                          + 4 * linear(d, d, true)                  // q, k, v, out_proj
                          + linear(d, v.mlp_hidden, true) + linear(v.mlp_hidden, d, true);
    n.vision = d * v.channels * v.patch_size * v.patch_size + d     // patch embedding
               + int64_t{v.n_patches()} * d                         // positions
               + v.layers * block + 2 * d;                          // blocks, post LayerNorm
  }
  if (c.model_parts() == ModelParts::vlm) {
    const int64_t in = int64_t{c.vision.hidden} * c.projector.pixel_shuffle * c.projector.pixel_shuffle;
    n.projector = c.projector.mlp_hidden > 0
                      ? linear(in, c.projector.mlp_hidden, true) + linear(c.projector.mlp_hidden, c.text.hidden, true)
                      : linear(in, c.text.hidden, false);
  }
  if (c.has_text()) {
    const TextConfig& t = c.text;
    const int64_t d = t.hidden, q = int64_t{t.heads} * t.head_dim(), kv = int64_t{t.kv_heads} * t.head_dim();
    const int64_t block = 2 * d                                                           // two RMSNorms
                          + linear(d, q, t.qkv_bias) + 2 * linear(d, kv, t.qkv_bias)      // q, k, v
                          + linear(q, d, false)                                           // o_proj
                          + 3 * d * int64_t{t.intermediate};                              // gate, up, down
    n.text = int64_t{t.vocab_size} * d + t.layers * block + d                             // embeddings, blocks, norm
             + (t.tie_embeddings ? 0 : int64_t{t.vocab_size} * d);                        // lm_head
  }
  return n;
}

void add_model_options(OptionSet& o, ModelConfig& c) {
  o.add("model.preset", &c.preset, "shape preset the other model.* keys start from",
        one_of(model_preset_names()));
  o.add("model.parts", &c.parts, "vlm (vision tower + projector + decoder), text (decoder only) or vision (tower only)",
        one_of({"vlm", "text", "vision"}));
  o.add("model.image_token_id", &c.image_token_id,
        "<image> placeholder id of an imported checkpoint, for vlm forward and export (-1: from the tokenizer)");
  o.add("model.vision_from", &c.vision_from,
        "model folder (Hugging Face or vlm) whose vision tower starts this model; sets model.vision.*");
  o.add("model.text_from", &c.text_from,
        "model folder (Hugging Face or vlm) whose decoder starts this model; sets model.text.*");
  o.add("model.init_std", &c.init_std, "std of the normal init of weights", positive<float>());
  o.add("model.vision.image_size", &c.vision.image_size, "input image side in pixels", positive<int>());
  o.add("model.vision.patch_size", &c.vision.patch_size, "ViT patch side in pixels", positive<int>());
  o.add("model.vision.hidden", &c.vision.hidden, "ViT width", positive<int>());
  o.add("model.vision.layers", &c.vision.layers, "ViT blocks", positive<int>());
  o.add("model.vision.heads", &c.vision.heads, "ViT attention heads", positive<int>());
  o.add("model.vision.mlp_hidden", &c.vision.mlp_hidden, "ViT MLP width", positive<int>());
  o.add("model.vision.pos_init_scale", &c.vision.pos_init_scale,
        "rms of the 2-D sine-cosine init of the position embeddings (0 = random)", non_negative<float>());
  o.add("model.vision.ln_eps", &c.vision.ln_eps, "ViT LayerNorm epsilon", positive<float>());
  o.add("model.projector.pixel_shuffle", &c.projector.pixel_shuffle, "pixel shuffle factor r", positive<int>());
  o.add("model.projector.mlp_hidden", &c.projector.mlp_hidden, "projector MLP width (0 = one linear layer)",
        non_negative<int>());
  o.add("model.text.vocab_size", &c.text.vocab_size, "vocabulary size (must cover the tokenizer)", positive<int>());
  o.add("model.text.hidden", &c.text.hidden, "decoder width", positive<int>());
  o.add("model.text.layers", &c.text.layers, "decoder blocks", positive<int>());
  o.add("model.text.heads", &c.text.heads, "decoder query heads", positive<int>());
  o.add("model.text.kv_heads", &c.text.kv_heads, "decoder key/value heads (GQA)", positive<int>());
  o.add("model.text.intermediate", &c.text.intermediate, "SwiGLU hidden width", positive<int>());
  o.add("model.text.rope_theta", &c.text.rope_theta, "RoPE base", positive<float>());
  o.add("model.text.rms_eps", &c.text.rms_eps, "RMSNorm epsilon", positive<float>());
  o.add("model.text.qkv_bias", &c.text.qkv_bias, "bias on q/k/v projections (Qwen2)");
  o.add("model.text.tie_embeddings", &c.text.tie_embeddings, "share the input embedding with the LM head");
  o.add("model.text.max_seq_len", &c.text.max_seq_len, "longest sequence (tokens incl. image tokens)",
        positive<int>());
}

Status validate_model_config(const ModelConfig& c) {
  if (c.parts != "vlm" && c.parts != "text" && c.parts != "vision")
    return invalid_argument("model.parts '" + c.parts + "' is not one of vlm, text, vision");
  const auto& v = c.vision;
  if (v.image_size % v.patch_size != 0)
    return invalid_argument(str("model.vision.image_size (", v.image_size, ") must be a multiple of patch_size (",
                                v.patch_size, ")"));
  if (v.hidden % v.heads != 0)
    return invalid_argument(str("model.vision.hidden (", v.hidden, ") must be divisible by heads (", v.heads, ")"));
  const int grid = v.image_size / v.patch_size;
  if (c.model_parts() == ModelParts::vlm && grid % c.projector.pixel_shuffle != 0)
    return invalid_argument(str("model.projector.pixel_shuffle (", c.projector.pixel_shuffle,
                                ") must divide the patch grid side (", grid, ")"));
  const auto& t = c.text;
  if (t.hidden % t.heads != 0)
    return invalid_argument(str("model.text.hidden (", t.hidden, ") must be divisible by heads (", t.heads, ")"));
  if (t.heads % t.kv_heads != 0)
    return invalid_argument(str("model.text.heads (", t.heads, ") must be a multiple of kv_heads (", t.kv_heads, ")"));
  if (t.head_dim() % 2 != 0) return invalid_argument("model.text head dim must be even for RoPE");
  if (c.model_parts() == ModelParts::vlm && c.image_tokens() >= t.max_seq_len)
    return invalid_argument(str("model.text.max_seq_len (", t.max_seq_len, ") must exceed the image tokens (",
                                c.image_tokens(), ")"));
  return Status();
}

}  // namespace vlm

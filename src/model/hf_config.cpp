// config.json mapping of the Hugging Face families (see hf_config.h).
#include "model/hf_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace vlm {

using nlohmann::json;

const char* hf_family_name(HfFamily family) {
  switch (family) {
    case HfFamily::idefics3: return "idefics3";
    case HfFamily::llama: return "llama";
    case HfFamily::qwen2: return "qwen2";
    case HfFamily::siglip: return "siglip";
    case HfFamily::nanovlm: return "nanovlm";
  }
  return "?";
}

namespace {

// One JSON object and its dotted path ("text_config."), so every error names the key as the file spells it.
struct Obj {
  const json& j;
  std::string source, path;

  std::string key(const std::string& k) const { return source + ": " + path + k; }
  bool has(const std::string& k) const { return j.contains(k) && !j.at(k).is_null(); }

  Expected<double> number(const std::string& k) const {
    if (!has(k)) return invalid_argument(key(k) + " is missing");
    if (!j.at(k).is_number()) return invalid_argument(key(k) + " is " + j.at(k).dump() + ", not a number");
    return j.at(k).get<double>();
  }
  Expected<double> number(const std::string& k, double fallback) const {
    return has(k) ? number(k) : Expected<double>(fallback);
  }
  Expected<int> integer(const std::string& k) const {
    VLM_ASSIGN_OR_RETURN(double v, number(k));
    if (v != std::floor(v) || v < 0 || v > 1e9) return invalid_argument(key(k) + " is " + j.at(k).dump() + ", not a count");
    return static_cast<int>(v);
  }
  Expected<int> integer(const std::string& k, int fallback) const {
    return has(k) ? integer(k) : Expected<int>(fallback);
  }
  Expected<bool> boolean(const std::string& k, bool fallback) const {
    if (!has(k)) return fallback;
    if (!j.at(k).is_boolean()) return invalid_argument(key(k) + " is " + j.at(k).dump() + ", not true/false");
    return j.at(k).get<bool>();
  }
  Expected<std::string> string(const std::string& k, const std::string& fallback) const {
    if (!has(k)) return fallback;
    if (!j.at(k).is_string()) return invalid_argument(key(k) + " is " + j.at(k).dump() + ", not a string");
    return j.at(k).get<std::string>();
  }
  Expected<Obj> object(const std::string& k) const {
    if (!has(k)) return invalid_argument(key(k) + " is missing");
    if (!j.at(k).is_object()) return invalid_argument(key(k) + " is not an object");
    return Obj{j.at(k), source, path + k + "."};
  }
  // A key the model cannot honour unless it has the value the model implements.
  Status require_string(const std::string& k, std::initializer_list<const char*> allowed) const {
    if (!has(k)) return Status();
    VLM_ASSIGN_OR_RETURN(std::string v, string(k, ""));
    std::string list;
    for (const char* a : allowed) {
      if (v == a) return Status();
      list += std::string(list.empty() ? "" : ", ") + a;
    }
    return unsupported(key(k) + " '" + v + "' is not supported (supported: " + list + ")");
  }
  Status require_false(const std::string& k) const {
    VLM_ASSIGN_OR_RETURN(bool v, boolean(k, false));
    if (v) return unsupported(key(k) + " = true is not supported");
    return Status();
  }
};

// rope_theta (4.x) or rope_parameters.rope_theta (5.x); scaled RoPE variants are refused by name.
Expected<float> rope_theta(const Obj& t, double fallback) {
  if (t.has("rope_parameters")) {
    VLM_ASSIGN_OR_RETURN(Obj rp, t.object("rope_parameters"));
    if (rp.j.contains("rope_type") || rp.j.contains("type")) {
      const std::string k = rp.j.contains("rope_type") ? "rope_type" : "type";
      VLM_RETURN_IF_ERROR(rp.require_string(k, {"default"}));
    }
    if (rp.has("rope_theta")) {
      VLM_ASSIGN_OR_RETURN(double v, rp.number("rope_theta"));
      return static_cast<float>(v);
    }
  }
  if (t.has("rope_scaling")) {
    VLM_ASSIGN_OR_RETURN(Obj rs, t.object("rope_scaling"));
    const std::string k = rs.j.contains("rope_type") ? "rope_type" : "type";
    if (!rs.has(k)) return unsupported(rs.key("rope_type") + " is missing: a rope_scaling is not supported");
    VLM_RETURN_IF_ERROR(rs.require_string(k, {"default"}));
  }
  VLM_ASSIGN_OR_RETURN(double v, t.number("rope_theta", fallback));
  return static_cast<float>(v);
}

// A LlamaConfig or Qwen2Config (top level or Idefics3's text_config).
Status read_text(const Obj& t, const std::string& model_type, TextConfig& c) {
  const bool qwen2 = model_type == "qwen2";
  if (model_type != "llama" && !qwen2)
    return unsupported(t.key("model_type") + " '" + model_type + "' is not supported (llama, qwen2)");
  VLM_ASSIGN_OR_RETURN(c.vocab_size, t.integer("vocab_size"));
  VLM_ASSIGN_OR_RETURN(c.hidden, t.integer("hidden_size"));
  VLM_ASSIGN_OR_RETURN(c.layers, t.integer("num_hidden_layers"));
  VLM_ASSIGN_OR_RETURN(c.heads, t.integer("num_attention_heads"));
  VLM_ASSIGN_OR_RETURN(c.kv_heads, t.integer("num_key_value_heads", c.heads));
  VLM_ASSIGN_OR_RETURN(c.intermediate, t.integer("intermediate_size"));
  VLM_ASSIGN_OR_RETURN(double eps, t.number("rms_norm_eps", 1e-6));
  c.rms_eps = static_cast<float>(eps);
  VLM_ASSIGN_OR_RETURN(c.max_seq_len, t.integer("max_position_embeddings", qwen2 ? 32768 : 2048));
  VLM_ASSIGN_OR_RETURN(c.rope_theta, rope_theta(t, 10000.0));
  if (c.heads == 0 || c.hidden % c.heads != 0)
    return invalid_argument(t.key("hidden_size") + " (" + std::to_string(c.hidden) +
                            ") is not a multiple of num_attention_heads (" + std::to_string(c.heads) + ")");
  if (t.has("head_dim")) {
    VLM_ASSIGN_OR_RETURN(int hd, t.integer("head_dim"));
    if (hd != c.hidden / c.heads)
      return unsupported(t.key("head_dim") + " " + std::to_string(hd) + " != hidden_size / num_attention_heads (" +
                         std::to_string(c.hidden / c.heads) + ") is not supported");
  }
  VLM_RETURN_IF_ERROR(t.require_string("hidden_act", {"silu"}));
  VLM_RETURN_IF_ERROR(t.require_false("mlp_bias"));
  c.qkv_bias = qwen2;
  if (t.has("layer_types")) {  // 5.x: per-layer attention kinds; only full attention is implemented
    const json& kinds = t.j.at("layer_types");
    if (!kinds.is_array()) return invalid_argument(t.key("layer_types") + " is not a list");
    for (size_t i = 0; i < kinds.size(); ++i)
      if (!kinds[i].is_string() || kinds[i].get<std::string>() != "full_attention")
        return unsupported(t.key("layer_types") + "[" + std::to_string(i) + "] " + kinds[i].dump() +
                           " is not supported (full_attention)");
  }
  if (qwen2) {
    VLM_RETURN_IF_ERROR(t.require_false("use_sliding_window"));
  } else {
    VLM_RETURN_IF_ERROR(t.require_false("attention_bias"));  // Llama's also puts a bias on o_proj
  }
  VLM_ASSIGN_OR_RETURN(c.tie_embeddings, t.boolean("tie_word_embeddings", false));
  return Status();
}

// A SiglipVisionConfig / Idefics3VisionConfig.
Status read_vision(const Obj& v, VisionConfig& c) {
  VLM_ASSIGN_OR_RETURN(c.hidden, v.integer("hidden_size"));
  VLM_ASSIGN_OR_RETURN(c.mlp_hidden, v.integer("intermediate_size"));
  VLM_ASSIGN_OR_RETURN(c.layers, v.integer("num_hidden_layers"));
  VLM_ASSIGN_OR_RETURN(c.heads, v.integer("num_attention_heads"));
  VLM_ASSIGN_OR_RETURN(c.channels, v.integer("num_channels", 3));
  VLM_ASSIGN_OR_RETURN(c.image_size, v.integer("image_size"));
  VLM_ASSIGN_OR_RETURN(c.patch_size, v.integer("patch_size"));
  VLM_ASSIGN_OR_RETURN(double eps, v.number("layer_norm_eps", 1e-6));
  c.ln_eps = static_cast<float>(eps);
  c.pos_init_scale = 0.f;
  VLM_RETURN_IF_ERROR(v.require_string("hidden_act", {"gelu_pytorch_tanh", "gelu_new"}));
  return Status();
}

Status read_nanovlm(const Obj& o, ModelConfig& c) {
  VisionConfig& v = c.vision;
  VLM_ASSIGN_OR_RETURN(v.hidden, o.integer("vit_hidden_dim"));
  VLM_ASSIGN_OR_RETURN(v.mlp_hidden, o.integer("vit_inter_dim"));
  VLM_ASSIGN_OR_RETURN(v.patch_size, o.integer("vit_patch_size"));
  VLM_ASSIGN_OR_RETURN(v.image_size, o.integer("vit_img_size"));
  VLM_ASSIGN_OR_RETURN(v.heads, o.integer("vit_n_heads"));
  VLM_ASSIGN_OR_RETURN(v.layers, o.integer("vit_n_blocks"));
  VLM_ASSIGN_OR_RETURN(double ln_eps, o.number("vit_ln_eps", 1e-6));
  v.ln_eps = static_cast<float>(ln_eps);
  v.pos_init_scale = 0.f;
  VLM_RETURN_IF_ERROR(o.require_false("vit_cls_flag"));
  TextConfig& t = c.text;
  VLM_ASSIGN_OR_RETURN(t.hidden, o.integer("lm_hidden_dim"));
  VLM_ASSIGN_OR_RETURN(t.intermediate, o.integer("lm_inter_dim"));
  VLM_ASSIGN_OR_RETURN(double rms, o.number("lm_rms_eps", 1e-5));
  t.rms_eps = static_cast<float>(rms);
  VLM_ASSIGN_OR_RETURN(double theta, o.number("lm_re_base", 100000));
  t.rope_theta = static_cast<float>(theta);
  VLM_ASSIGN_OR_RETURN(t.max_seq_len, o.integer("lm_max_position_embeddings", 8192));
  VLM_ASSIGN_OR_RETURN(t.vocab_size, o.integer("lm_vocab_size"));
  VLM_ASSIGN_OR_RETURN(t.heads, o.integer("lm_n_heads"));
  VLM_ASSIGN_OR_RETURN(t.kv_heads, o.integer("lm_n_kv_heads"));
  VLM_ASSIGN_OR_RETURN(t.layers, o.integer("lm_n_blocks"));
  VLM_ASSIGN_OR_RETURN(t.tie_embeddings, o.boolean("lm_tie_weights", true));
  t.qkv_bias = false;
  VLM_ASSIGN_OR_RETURN(double attn_scaling, o.number("lm_attn_scaling", 1.0));
  if (attn_scaling != 1.0) return unsupported(o.key("lm_attn_scaling") + " other than 1.0 is not supported");
  VLM_ASSIGN_OR_RETURN(c.projector.pixel_shuffle, o.integer("mp_pixel_shuffle_factor"));
  c.projector.mlp_hidden = 0;
  if (o.has("mp_image_token_length")) {
    VLM_ASSIGN_OR_RETURN(int n, o.integer("mp_image_token_length"));
    if (v.patch_size > 0 && c.projector.pixel_shuffle > 0 && n != c.image_tokens())
      return invalid_argument(o.key("mp_image_token_length") + " " + std::to_string(n) + " does not match " +
                              std::to_string(c.image_tokens()) + " tokens of a " + std::to_string(v.image_size) +
                              " px image in " + std::to_string(v.patch_size) + " px patches, pixel shuffle " +
                              std::to_string(c.projector.pixel_shuffle));
  }
  return Status();
}

}  // namespace

Expected<HfModelInfo> hf_parse_config(const std::string& text, const std::string& source) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return parse_error(source + ": not valid JSON");
  if (!j.is_object()) return parse_error(source + ": not a JSON object");
  const Obj top{j, source, ""};
  HfModelInfo info;
  ModelConfig& c = info.config;

  if (top.has("vit_hidden_dim") && top.has("lm_hidden_dim")) {  // nanoVLM's VLMConfig, no architectures key
    info.family = HfFamily::nanovlm;
    info.architecture = "nanoVLM";
    VLM_RETURN_IF_ERROR(read_nanovlm(top, c));
  } else {
    if (!top.has("architectures")) return invalid_argument(top.key("architectures") + " is missing");
    const json& archs = j.at("architectures");
    if (!archs.is_array() || archs.empty() || !archs[0].is_string())
      return invalid_argument(top.key("architectures") + " is not a list of names");
    info.architecture = archs[0].get<std::string>();
    VLM_ASSIGN_OR_RETURN(std::string model_type, top.string("model_type", ""));
    const std::string& a = info.architecture;
    if (a == "Idefics3ForConditionalGeneration" || a == "SmolVLMForConditionalGeneration") {
      info.family = HfFamily::idefics3;
      VLM_ASSIGN_OR_RETURN(Obj t, top.object("text_config"));
      VLM_ASSIGN_OR_RETURN(std::string text_type, t.string("model_type", "llama"));
      VLM_RETURN_IF_ERROR(read_text(t, text_type, c.text));
      VLM_ASSIGN_OR_RETURN(Obj v, top.object("vision_config"));
      VLM_RETURN_IF_ERROR(read_vision(v, c.vision));
      VLM_ASSIGN_OR_RETURN(c.projector.pixel_shuffle, top.integer("scale_factor", 2));
      c.projector.mlp_hidden = 0;
      VLM_ASSIGN_OR_RETURN(info.image_token_id, top.integer("image_token_id"));
      c.image_token_id = info.image_token_id;
      // The top level decides in both 4.x and 5.x; Idefics3 defaults to untied.
      VLM_ASSIGN_OR_RETURN(c.text.tie_embeddings, top.boolean("tie_word_embeddings", c.text.tie_embeddings));
    } else if (a == "LlamaForCausalLM" || a == "Qwen2ForCausalLM") {
      info.family = a == "LlamaForCausalLM" ? HfFamily::llama : HfFamily::qwen2;
      c.parts = "text";
      VLM_RETURN_IF_ERROR(read_text(top, info.family == HfFamily::llama ? "llama" : "qwen2", c.text));
    } else if (a == "SiglipVisionModel" || a == "SiglipModel") {
      info.family = HfFamily::siglip;
      c.parts = "vision";
      if (a == "SiglipModel") {
        VLM_ASSIGN_OR_RETURN(Obj v, top.object("vision_config"));
        VLM_RETURN_IF_ERROR(read_vision(v, c.vision));
      } else {
        VLM_RETURN_IF_ERROR(read_vision(top, c.vision));
      }
    } else {
      return unsupported(top.key("architectures") + " '" + a +
                         "' is not supported (Idefics3ForConditionalGeneration, SmolVLMForConditionalGeneration, "
                         "LlamaForCausalLM, Qwen2ForCausalLM, SiglipVisionModel, SiglipModel, or nanoVLM's "
                         "config.json)");
    }
  }
  if (c.has_vision() && c.vision.image_size % c.vision.patch_size != 0)
    return invalid_argument(source + ": image_size " + std::to_string(c.vision.image_size) +
                            " is not a multiple of patch_size " + std::to_string(c.vision.patch_size));
  if (Status s = validate_model_config(c); !s.ok()) return s.with_context(source);
  return info;
}

bool hf_is_model_dir(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec) && std::filesystem::is_regular_file(path + "/config.json", ec);
}

Expected<HfModelInfo> hf_read_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return not_found(dir + ": not a directory");
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found(path + " is missing: a Hugging Face model folder needs its config.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return hf_parse_config(ss.str(), path);
}

namespace {

json text_json(const TextConfig& t, bool qwen2) {
  json j;
  j["model_type"] = qwen2 ? "qwen2" : "llama";
  j["vocab_size"] = t.vocab_size;
  j["hidden_size"] = t.hidden;
  j["intermediate_size"] = t.intermediate;
  j["num_hidden_layers"] = t.layers;
  j["num_attention_heads"] = t.heads;
  j["num_key_value_heads"] = t.kv_heads;
  j["head_dim"] = t.head_dim();
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = t.max_seq_len;
  j["rms_norm_eps"] = t.rms_eps;
  j["rope_theta"] = t.rope_theta;
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", t.rope_theta}};
  j["tie_word_embeddings"] = t.tie_embeddings;
  j["initializer_range"] = 0.02;
  if (qwen2) {
    j["use_sliding_window"] = false;
  } else {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  return j;
}

json vision_json(const VisionConfig& v) {
  json j;
  j["hidden_size"] = v.hidden;
  j["intermediate_size"] = v.mlp_hidden;
  j["num_hidden_layers"] = v.layers;
  j["num_attention_heads"] = v.heads;
  j["num_channels"] = v.channels;
  j["image_size"] = v.image_size;
  j["patch_size"] = v.patch_size;
  j["hidden_act"] = "gelu_pytorch_tanh";
  j["layer_norm_eps"] = v.ln_eps;
  return j;
}

}  // namespace

Expected<std::string> hf_config_json(const ModelConfig& c, int image_token_id, const std::string& dtype) {
  json j;
  switch (c.model_parts()) {
    case ModelParts::vlm: {
      if (c.projector.mlp_hidden > 0)
        return unsupported("model.projector.mlp_hidden > 0: Idefics3's connector is one linear layer; an MLP "
                           "projector has no transformers equivalent");
      if (image_token_id < 0 || image_token_id >= c.text.vocab_size)
        return invalid_argument(str("export: image token id ", image_token_id, " is not in the vocabulary (",
                                    c.text.vocab_size, " tokens)"));
      j["architectures"] = {"Idefics3ForConditionalGeneration"};
      j["model_type"] = "idefics3";
      j["text_config"] = text_json(c.text, c.text.qkv_bias);  // a Qwen2 text model when it has q/k/v biases
      j["text_config"]["dtype"] = dtype;
      j["vision_config"] = vision_json(c.vision);
      j["vision_config"]["model_type"] = "idefics3_vision";
      j["scale_factor"] = c.projector.pixel_shuffle;
      j["image_token_id"] = image_token_id;
      j["tie_word_embeddings"] = c.text.tie_embeddings;
      j["pad_token_id"] = nullptr;
      break;
    }
    case ModelParts::text:
      j = text_json(c.text, c.text.qkv_bias);
      j["architectures"] = {c.text.qkv_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
      break;
    case ModelParts::vision:
      j = vision_json(c.vision);
      j["architectures"] = {"SiglipVisionModel"};
      j["model_type"] = "siglip_vision_model";
      j["vision_use_head"] = false;  // the pooling head is not part of the tower vlm.cpp keeps
      break;
  }
  j["dtype"] = dtype;
  j["torch_dtype"] = dtype;  // the 4.x name
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

}  // namespace vlm

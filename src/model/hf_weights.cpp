// Hugging Face weights: shard reading, per-family renaming, strict loading (see hf_weights.h).
#include "model/hf_weights.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/logging.h"

namespace vlm {

using nlohmann::json;

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

Status merge(SafetensorsFile& into, SafetensorsFile&& part, const std::string& source) {
  for (auto& [name, t] : part.tensors) {
    if (into.tensors.count(name)) return invalid_argument(source + ": tensor '" + name + "' appears in two shards");
    into.tensors.emplace(name, std::move(t));
  }
  return Status();
}

}  // namespace

Expected<SafetensorsFile> hf_read_tensors(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
  if (fs::is_regular_file(single, ec)) return safetensors_load(single);
  if (!fs::is_regular_file(index, ec))
    return not_found(dir + " holds neither model.safetensors nor model.safetensors.index.json");
  std::ifstream f(index, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return parse_error(index + ": not valid JSON");
  if (!j.contains("weight_map") || !j["weight_map"].is_object())
    return parse_error(index + ": weight_map is missing or not an object");
  std::map<std::string, std::vector<std::string>> by_shard;  // shard file -> tensors the index places there
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) return parse_error(index + ": weight_map['" + name + "'] is not a file name");
    const std::string shard = file.get<std::string>();
    if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos)
      return parse_error(index + ": weight_map['" + name + "'] names '" + shard + "', not a file in the folder");
    by_shard[shard].push_back(name);
  }
  if (by_shard.empty()) return parse_error(index + ": weight_map is empty");
  SafetensorsFile all;
  for (const auto& [shard, names] : by_shard) {
    const std::string path = dir + "/" + shard;
    if (!fs::is_regular_file(path, ec))
      return not_found(index + " names shard '" + shard + "' (for '" + names.front() + "'), which is missing");
    Expected<SafetensorsFile> part = safetensors_load(path);
    if (!part.ok()) return part.status().with_context(index);
    for (const auto& name : names)
      if (!part->tensors.count(name))
        return parse_error(index + " places '" + name + "' in " + shard + ", which does not hold it");
    VLM_RETURN_IF_ERROR(merge(all, std::move(*part), index));
  }
  return all;
}

namespace {

// nanoVLM (models/vision_transformer.py, language_model.py, modality_projector.py) -> Idefics3 names.
Status rename_nanovlm(const ModelConfig& c, std::map<std::string, Tensor>& in, std::map<std::string, Tensor>& out) {
  auto take = [&](const std::string& from, const std::string& to) -> Status {
    auto it = in.find(from);
    if (it == in.end()) return Status();  // reported as missing under the Idefics3 name
    out[to] = it->second;
    in.erase(it);
    return Status();
  };
  const std::string v = "model.vision_model.", t = "model.text_model.";
  VLM_RETURN_IF_ERROR(take("vision_encoder.patch_embedding.conv.weight", v + "embeddings.patch_embedding.weight"));
  VLM_RETURN_IF_ERROR(take("vision_encoder.patch_embedding.conv.bias", v + "embeddings.patch_embedding.bias"));
  if (auto it = in.find("vision_encoder.patch_embedding.position_embedding"); it != in.end()) {
    Tensor pos = it->second;  // [1, P, D] -> [P, D]
    if (pos.ndim() == 3 && pos.dim(0) == 1) pos = pos.view({pos.dim(1), pos.dim(2)});
    out[v + "embeddings.position_embedding.weight"] = pos;
    in.erase(it);
  }
  VLM_RETURN_IF_ERROR(take("vision_encoder.layer_norm.weight", v + "post_layernorm.weight"));
  VLM_RETURN_IF_ERROR(take("vision_encoder.layer_norm.bias", v + "post_layernorm.bias"));
  const int64_t D = c.vision.hidden;
  for (int i = 0; i < c.vision.layers; ++i) {
    const std::string src = "vision_encoder.blocks." + std::to_string(i) + ".";
    const std::string dst = v + "encoder.layers." + std::to_string(i) + ".";
    const std::pair<const char*, const char*> pairs[] = {{"ln1", "layer_norm1"}, {"ln2", "layer_norm2"},
                                                         {"mlp.fc1", "mlp.fc1"}, {"mlp.fc2", "mlp.fc2"},
                                                         {"attn.out_proj", "self_attn.out_proj"}};
    for (const auto& [a, b] : pairs)
      for (const char* s : {".weight", ".bias"}) VLM_RETURN_IF_ERROR(take(src + a + s, dst + b + s));
    for (const char* s : {"weight", "bias"}) {
      auto it = in.find(src + "attn.qkv_proj." + s);
      if (it == in.end()) continue;
      const Tensor qkv = it->second;  // [3D, D] or [3D]: q, k, v stacked along dim 0
      if (qkv.dim(0) != 3 * D)
        return invalid_argument(str(src, "attn.qkv_proj.", s, " has shape ", qkv.shape().to_string(), ", expected ",
                                    3 * D, " rows (q, k, v of width ", D, ")"));
      const char* parts[] = {"q_proj.", "k_proj.", "v_proj."};
      for (int p = 0; p < 3; ++p) out[dst + "self_attn." + parts[p] + s] = qkv.slice(0, p * D, (p + 1) * D).clone();
      in.erase(it);
    }
  }
  VLM_RETURN_IF_ERROR(take("MP.proj.weight", "model.connector.modality_projection.proj.weight"));
  VLM_RETURN_IF_ERROR(take("decoder.norm.weight", t + "norm.weight"));
  // Tied: safetensors' save_model keeps one of the two names (decoder.head.weight, the first in sorted order).
  if (c.text.tie_embeddings) {
    if (!in.count("decoder.token_embedding.weight"))
      VLM_RETURN_IF_ERROR(take("decoder.head.weight", t + "embed_tokens.weight"));
    VLM_RETURN_IF_ERROR(take("decoder.token_embedding.weight", t + "embed_tokens.weight"));
  } else {
    VLM_RETURN_IF_ERROR(take("decoder.token_embedding.weight", t + "embed_tokens.weight"));
    VLM_RETURN_IF_ERROR(take("decoder.head.weight", "lm_head.weight"));
  }
  for (int i = 0; i < c.text.layers; ++i) {
    const std::string src = "decoder.blocks." + std::to_string(i) + ".";
    const std::string dst = t + "layers." + std::to_string(i) + ".";
    const std::pair<const char*, const char*> pairs[] = {
        {"attn.q_proj", "self_attn.q_proj"}, {"attn.k_proj", "self_attn.k_proj"},
        {"attn.v_proj", "self_attn.v_proj"}, {"attn.out_proj", "self_attn.o_proj"},
        {"mlp.gate_proj", "mlp.gate_proj"},  {"mlp.up_proj", "mlp.up_proj"},
        {"mlp.down_proj", "mlp.down_proj"},  {"norm1", "input_layernorm"},
        {"norm2", "post_attention_layernorm"}};
    for (const auto& [a, b] : pairs) VLM_RETURN_IF_ERROR(take(src + a + ".weight", dst + b + ".weight"));
  }
  for (auto& [name, tensor] : in) out[name] = tensor;  // leftovers: reported as unexpected
  return Status();
}

}  // namespace

Expected<std::map<std::string, Tensor>> hf_rename_tensors(HfFamily family, const ModelConfig& c,
                                                           std::map<std::string, Tensor> in, int* dropped) {
  std::map<std::string, Tensor> out;
  int n_dropped = 0;
  const bool tied = c.has_text() && c.text.tie_embeddings;
  if (family == HfFamily::nanovlm) {
    VLM_RETURN_IF_ERROR(rename_nanovlm(c, in, out));
  } else {
    for (auto& [name, t] : in) {
      std::string to = name;
      if (family == HfFamily::llama || family == HfFamily::qwen2) {
        if (starts_with(name, "model.")) to = "model.text_model." + name.substr(6);
      } else if (family == HfFamily::siglip) {
        // transformers 4.x saves SiglipVisionModel under vision_model., 5.x without the prefix.
        const std::string bare = starts_with(name, "vision_model.") ? name.substr(13) : name;
        if (starts_with(bare, "head.") || starts_with(name, "text_model.") || name == "logit_scale" ||
            name == "logit_bias") {  // the pooling head and SiglipModel's text side: a VLM uses neither
          ++n_dropped;
          continue;
        }
        if (starts_with(bare, "embeddings.") || starts_with(bare, "encoder.") || starts_with(bare, "post_layernorm."))
          to = "model.vision_model." + bare;
      }
      out[to] = t;
    }
  }
  if (tied && out.count("lm_head.weight") && out.count("model.text_model.embed_tokens.weight")) {
    out.erase("lm_head.weight");  // a tied model's saved copy of the embeddings
    ++n_dropped;
  }
  if (dropped) *dropped = n_dropped;
  return out;
}

bool LoadPolicy::allows(const Param& p) const {
  for (const std::string& a : allow_missing) {
    if (a == param_group_name(p.group) || a == p.name) return true;
    if (!a.empty() && a.back() == '*' && starts_with(p.name, a.substr(0, a.size() - 1))) return true;
  }
  return false;
}

std::string LoadReport::summary() const {
  return str(loaded, " tensors loaded", missing.empty() ? "" : str(", ", missing.size(), " missing"),
             unexpected.empty() ? "" : str(", ", unexpected.size(), " unexpected"),
             shape.empty() ? "" : str(", ", shape.size(), " mis-shaped"));
}

namespace {
std::string name_list(const std::vector<std::string>& names) {
  constexpr size_t kShown = 12;
  std::string s;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > kShown) s += str(", ... (", names.size() - kShown, " more)");
  return s;
}
}  // namespace

Status load_parameters(ParameterStore& store, const std::map<std::string, Tensor>& tensors, const LoadPolicy& policy,
                       const std::string& source, LoadReport* report_out) {
  LoadReport r;
  std::vector<std::string> allowed_missing;
  std::set<std::string> known;
  for (const Param& p : store.all()) {
    known.insert(p.name);
    auto it = tensors.find(p.name);
    if (it == tensors.end()) {
      (policy.allows(p) ? allowed_missing : r.missing).push_back(p.name);
      continue;
    }
    const Tensor& t = it->second;
    if (t.shape() != p.value.shape()) {
      r.shape.push_back(p.name + " " + t.shape().to_string() + " (model " + p.value.shape().to_string() + ")");
    } else if (t.dtype() != DType::f32 && t.dtype() != DType::bf16 && t.dtype() != DType::f16) {
      r.shape.push_back(p.name + " is " + dtype_name(t.dtype()) + " (weights must be f32, bf16 or f16)");
    }
  }
  for (const auto& [name, t] : tensors)
    if (!known.count(name)) r.unexpected.push_back(name);
  std::string err;
  if (!r.missing.empty()) err += str("; missing ", r.missing.size(), ": ", name_list(r.missing));
  if (!r.unexpected.empty() && !policy.allow_unexpected)
    err += str("; unexpected ", r.unexpected.size(), ": ", name_list(r.unexpected));
  if (!r.shape.empty()) err += str("; mis-shaped ", r.shape.size(), ": ", name_list(r.shape));
  if (!err.empty()) {
    if (report_out) *report_out = r;
    return invalid_argument(source + ": the weights do not fit the model" + err +
                            (r.missing.empty() ? "" : " (a run may allow missing parts with train.init_allow_missing)"));
  }
  for (Param& p : store.all()) {
    auto it = tensors.find(p.name);
    if (it == tensors.end()) continue;
    Tensor t = it->second.is_contiguous() ? it->second : it->second.clone();
    if (t.dtype() != DType::f32) t = t.to(DType::f32);
    p.value.copy_from(t);
    ++r.loaded;
  }
  store.sync_compute();
  VLM_INFO(source, ": ", r.summary(),
           allowed_missing.empty() ? "" : str(", ", allowed_missing.size(), " kept their initial values (allowed: ",
                                              name_list(allowed_missing), ")"),
           r.unexpected.empty() ? "" : str(", ", r.unexpected.size(), " unexpected ignored"));
  if (report_out) *report_out = r;
  return Status();
}

Expected<HfCheckpoint> hf_read_checkpoint(const std::string& dir) {
  HfCheckpoint ck;
  VLM_ASSIGN_OR_RETURN(ck.info, hf_read_config(dir));
  VLM_ASSIGN_OR_RETURN(SafetensorsFile file, hf_read_tensors(dir));
  Expected<std::map<std::string, Tensor>> renamed =
      hf_rename_tensors(ck.info.family, ck.info.config, std::move(file.tensors), &ck.dropped);
  if (!renamed.ok()) return renamed.status().with_context(dir);
  ck.tensors = std::move(*renamed);
  return ck;
}

}  // namespace vlm

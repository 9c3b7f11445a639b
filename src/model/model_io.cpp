// Model folders: reading Hugging Face or vlm.cpp folders, writing vlm.cpp's (see model_io.h).
#include "model/model_io.h"

#include <filesystem>

#include "core/logging.h"

namespace vlm {

namespace {
bool is_file(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}
}  // namespace

std::string model_config_toml(const ModelConfig& config) {
  ModelConfig c = config;
  OptionSet o;
  add_model_options(o, c);
  return o.to_toml();
}

Expected<ModelConfig> read_model_dir_config(const std::string& dir) {
  if (hf_is_model_dir(dir)) {
    VLM_ASSIGN_OR_RETURN(HfModelInfo info, hf_read_config(dir));
    return info.config;
  }
  const std::string toml = dir + "/model.toml";
  if (!is_file(toml))
    return not_found(dir + ": neither a Hugging Face model folder (config.json) nor a vlm model folder (model.toml)");
  ModelConfig c;
  OptionSet o;
  add_model_options(o, c);
  VLM_RETURN_IF_ERROR(o.load_toml_file(toml));
  VLM_RETURN_IF_ERROR(o.validate());
  VLM_RETURN_IF_ERROR(validate_model_config(c).with_context(toml));
  return c;
}

Expected<std::unique_ptr<VlmModel>> load_model_dir(const std::string& dir, Device device, const LoadPolicy& policy,
                                                   DType compute_dtype) {
  if (hf_is_model_dir(dir)) {
    VLM_ASSIGN_OR_RETURN(HfCheckpoint ck, hf_read_checkpoint(dir));
    auto model = std::make_unique<VlmModel>(ck.info.config, device, compute_dtype);
    model->init_weights(0);
    VLM_RETURN_IF_ERROR(load_parameters(model->params(), ck.tensors, policy, dir));
    VLM_INFO(dir, ": ", ck.info.architecture, " (", model_parts_name(ck.info.config.model_parts()), ", ",
             model->params().numel(), " parameters)",
             ck.dropped ? str(", ", ck.dropped, " tensors it has no use for left out") : "");
    return model;
  }
  VLM_ASSIGN_OR_RETURN(ModelConfig c, read_model_dir_config(dir));
  auto model = std::make_unique<VlmModel>(c, device, compute_dtype);
  model->init_weights(0);
  VLM_RETURN_IF_ERROR(model->params().load(dir + "/model.safetensors", policy));
  return model;
}

Status save_model_dir(const VlmModel& model, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error(dir + ": cannot create (" + ec.message() + ")");
  VLM_RETURN_IF_ERROR(model.params().save(dir + "/model.safetensors"));
  const std::string toml = "# vlm.cpp model folder: the model.* options of a run file\n" +
                           model_config_toml(model.config());
  return write_file_atomic(dir + "/model.toml", toml.data(), toml.size());
}

Status apply_pretrained_config(ModelConfig& c, const std::string& init_from) {
  const ModelConfig before = c;
  std::error_code ec;
  if (!init_from.empty() && std::filesystem::is_directory(init_from, ec)) {
    VLM_ASSIGN_OR_RETURN(ModelConfig from, read_model_dir_config(init_from));
    c.parts = from.parts;
    c.vision = from.vision;
    c.projector = from.projector;
    c.text = from.text;
    c.image_token_id = from.image_token_id;
  }
  if (!c.vision_from.empty()) {
    VLM_ASSIGN_OR_RETURN(ModelConfig from, read_model_dir_config(c.vision_from));
    if (!from.has_vision()) return invalid_argument("model.vision_from: " + c.vision_from + " has no vision tower");
    c.vision = from.vision;
    c.parts = "vlm";
  }
  if (!c.text_from.empty()) {
    VLM_ASSIGN_OR_RETURN(ModelConfig from, read_model_dir_config(c.text_from));
    if (!from.has_text()) return invalid_argument("model.text_from: " + c.text_from + " has no decoder");
    c.text = from.text;
    if (from.image_token_id >= 0) c.image_token_id = from.image_token_id;
    c.parts = "vlm";
  }
  if (!c.vision_from.empty() || !c.text_from.empty()) c.parts = c.has_vision() && c.has_text() ? "vlm" : c.parts;
  return validate_model_config(c).with_context("pretrained model folders");
}

namespace {

// The tensors of a folder (Hugging Face: renamed to vlm's names) or a safetensors file.
Expected<std::map<std::string, Tensor>> pretrained_tensors(const std::string& path) {
  if (hf_is_model_dir(path)) {
    VLM_ASSIGN_OR_RETURN(HfCheckpoint ck, hf_read_checkpoint(path));
    return std::move(ck.tensors);
  }
  std::error_code ec;
  const std::string file = std::filesystem::is_directory(path, ec) ? path + "/model.safetensors" : path;
  VLM_ASSIGN_OR_RETURN(SafetensorsFile f, safetensors_load(file));
  return std::move(f.tensors);
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// Loads the tensors of `path` whose names begin with one of `prefixes`; the other parts may be missing.
Status load_part(VlmModel& model, const std::string& path, const std::vector<std::string>& prefixes,
                 std::vector<std::string> other_parts, const LoadPolicy& policy) {
  VLM_ASSIGN_OR_RETURN(auto tensors, pretrained_tensors(path));
  std::map<std::string, Tensor> part;
  for (auto& [name, t] : tensors)
    for (const auto& p : prefixes)
      if (starts_with(name, p)) part[name] = t;
  LoadPolicy pol = policy;
  for (auto& o : other_parts) pol.allow_missing.push_back(o);
  return load_parameters(model.params(), part, pol, path);
}

}  // namespace

Status load_pretrained(VlmModel& model, const std::string& init_from, const LoadPolicy& policy) {
  const ModelConfig& c = model.config();
  if (!init_from.empty()) {
    VLM_ASSIGN_OR_RETURN(auto tensors, pretrained_tensors(init_from));
    LoadPolicy pol = policy;
    if (!c.vision_from.empty()) pol.allow_missing.push_back("vision");
    if (!c.text_from.empty()) pol.allow_missing.push_back("text");
    VLM_RETURN_IF_ERROR(load_parameters(model.params(), tensors, pol, init_from));
  }
  if (!c.vision_from.empty())
    VLM_RETURN_IF_ERROR(load_part(model, c.vision_from, {"model.vision_model."}, {"projector", "text"}, policy));
  if (!c.text_from.empty())
    VLM_RETURN_IF_ERROR(
        load_part(model, c.text_from, {"model.text_model.", "lm_head."}, {"vision", "projector"}, policy));
  return Status();
}

}  // namespace vlm

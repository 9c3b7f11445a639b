// Writing Hugging Face model folders (see hf_export.h).
#include "model/hf_export.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "model/hf_config.h"

namespace vlm {

namespace {

// vlm.cpp's (Idefics3) name -> the exported family's name.
std::string export_name(ModelParts parts, const std::string& name) {
  const std::string text = "model.text_model.", vision = "model.vision_model.";
  if (parts == ModelParts::text && name.compare(0, text.size(), text) == 0) return "model." + name.substr(text.size());
  if (parts == ModelParts::vision && name.compare(0, vision.size(), vision) == 0) return name.substr(6);
  return name;
}

}  // namespace

Status hf_export_model(const VlmModel& model, const std::string& dir, const HfExportOptions& o) {
  const ModelConfig& c = model.config();
  const std::string dtype = o.bf16 ? "bfloat16" : "float32";
  VLM_ASSIGN_OR_RETURN(std::string config, hf_config_json(c, o.image_token_id, dtype));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error(dir + ": cannot create (" + ec.message() + ")");
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const Param& p : model.params().all()) {
    Tensor host = p.value.to(Device::cpu());
    if (o.bf16) host = host.to(DType::bf16);
    tensors.emplace_back(export_name(c.model_parts(), p.name), host);
  }
  VLM_RETURN_IF_ERROR(safetensors_save(dir + "/model.safetensors", tensors, {{"format", "pt"}}));
  VLM_RETURN_IF_ERROR(write_file_atomic(dir + "/config.json", config.data(), config.size()));
  if (c.has_text()) {
    nlohmann::json g = nlohmann::json::object();  // "{}" without token ids, never "null"
    if (o.bos_token_id >= 0) g["bos_token_id"] = o.bos_token_id;
    if (o.eos_token_id >= 0) g["eos_token_id"] = o.eos_token_id;
    if (o.pad_token_id >= 0) g["pad_token_id"] = o.pad_token_id;
    const std::string text = g.dump(2) + "\n";
    VLM_RETURN_IF_ERROR(write_file_atomic(dir + "/generation_config.json", text.data(), text.size()));
  }
  VLM_INFO("exported ", tensors.size(), " tensors (", dtype, ") to ", dir);
  return Status();
}

}  // namespace vlm

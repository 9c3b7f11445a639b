// Loading a run, checkpoint or model folder for generation and serving.
#include "inference_model.h"

#include <filesystem>


#include "core/logging.h"
#include "core/safetensors.h"
#include "data/image/image_pipeline.h"
#include "data/loader/data_config.h"
#include "data/loader/idefics3_prompt.h"
#include "data/loader/vlm_batch.h"
#include "model/model_io.h"
#include "train/checkpoint.h"
#include "train/train_config.h"

namespace vlm::cli {

namespace {

namespace fs = std::filesystem;

// SmolVLM / Idefics3 preprocessing `o` (a model folder's, or the one a run trained with) when the tokenizer has its
// layout tokens: images go in as tiles plus a global image, as the training loader feeds them.
Status maybe_use_idefics3(const std::string& source, const std::optional<Idefics3Options>& o,
                          const Tokenizer& tokenizer, infer::PromptBuilder& builder) {
  if (!o || !has_idefics3_tokens(tokenizer)) return Status();
  if (Status s = builder.use_idefics3(*o); !s.ok()) return invalid_argument(source + ": " + s.message());
  VLM_INFO("images: Idefics3 tiles of ", o->max_image_size, " px plus the global image (longest edge ",
           o->longest_edge, o->do_image_splitting ? "" : ", splitting off", ")");
  return Status();
}

// A run directory (config.toml + checkpoints/, or + model.safetensors) or a checkpoint folder inside one; empty
// config when `model` is neither.
struct RunFiles {
  std::string config, weights;
};

Expected<RunFiles> find_run_files(const std::string& model) {
  const fs::path dir(model);
  if (!fs::is_directory(dir))
    return not_found(model + " is not a directory (a run directory, a checkpoint folder or a model folder)");
  if (fs::exists(dir / "config.toml")) {
    if (fs::exists(dir / "model.safetensors"))
      return RunFiles{(dir / "config.toml").string(), (dir / "model.safetensors").string()};
    VLM_ASSIGN_OR_RETURN(CheckpointInfo latest, newest_valid_checkpoint(model, "generate"));
    return RunFiles{(dir / "config.toml").string(), latest.path + "/model.safetensors"};
  }
  if (fs::exists(dir / "model.safetensors") && fs::exists(dir / ".." / ".." / "config.toml"))
    return RunFiles{(dir / ".." / ".." / "config.toml").string(), (dir / "model.safetensors").string()};
  return RunFiles{};
}

Expected<DType> pick_dtype(const Device& device, const std::string& dtype_name) {
  DType dtype = device.is_cuda() ? DType::bf16 : DType::f32;
  if (dtype_name == "f32")
    dtype = DType::f32;
  else if (dtype_name == "bf16")
    dtype = DType::bf16;
  else if (!dtype_name.empty())
    return invalid_argument("--dtype '" + dtype_name + "' is not f32 or bf16");
  if (dtype == DType::bf16 && !device.is_cuda()) return invalid_argument("--dtype bf16 needs a cuda device");
  return dtype;
}

}  // namespace

Expected<int64_t> parse_bytes(const std::string& flag, const std::string& text) {
  if (text.empty()) return int64_t{0};
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  double scale = 1;
  const std::string unit(end);
  if (unit == "k" || unit == "K")
    scale = 1024.0;
  else if (unit == "m" || unit == "M")
    scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "G")
    scale = 1024.0 * 1024 * 1024;
  else if (!unit.empty() || end == text.c_str())
    return invalid_argument(flag + " '" + text + "' is not a size (e.g. 4G, 512M)");
  if (!(v > 0)) return invalid_argument(flag + " must be positive");
  return static_cast<int64_t>(v * scale);
}

void InferenceFlags::add_to(Flags& f) {
  f.add_string("--kv-memory", &kv_memory, "KV cache size, e.g. 4G (default: 90% of free GPU memory; 1G on CPU)");
  f.add_int("--block-size", &block_size, "tokens per KV block");
  f.add_int("--max-num-seqs", &max_seqs, "sequences decoded at once");
  f.add_int("--max-step-tokens", &step_tokens, "rows per forward step (decodes + prompt chunks)");
  f.add_bool("--no-prefix-cache", &no_prefix_cache, "do not share KV blocks of identical prefixes");
  f.add_string("--device", &device, "cpu | cuda[:N] (default: the run's train.device; cpu for a model folder)");
  f.add_string("--dtype", &dtype, "f32 | bf16 (default: bf16 on cuda, f32 on cpu)");
  f.add_multi("--set", &overrides, "override one run option, e.g. --set model.text.max_seq_len=1024 (repeatable)");
}

Expected<infer::EngineOptions> InferenceFlags::engine_options(const InferenceModel& m) const {
  if (block_size < 1 || max_seqs < 1 || step_tokens < 1)
    return invalid_argument("--block-size, --max-num-seqs and --max-step-tokens must be positive");
  VLM_ASSIGN_OR_RETURN(int64_t kv_bytes, parse_bytes("--kv-memory", kv_memory));
  infer::EngineOptions eo;
  eo.block_size = static_cast<int>(block_size);
  eo.kv_memory = kv_bytes;
  eo.max_num_seqs = static_cast<int>(max_seqs);
  eo.max_tokens_per_step = static_cast<int>(step_tokens);
  eo.prefix_cache = !no_prefix_cache;
  eo.image_token_id = m.prompts->image_token_id();
  const Tokenizer* tokenizer = &m.tokenizer;
  eo.detokenize = [tokenizer](const std::vector<int32_t>& ids) { return tokenizer->decode(ids); };
  return eo;
}

Expected<std::unique_ptr<InferenceModel>> load_inference_model(const std::string& path,
                                                               const std::vector<std::string>& overrides,
                                                               const std::string& device_name,
                                                               const std::string& dtype_name) {
  auto out = std::make_unique<InferenceModel>();
  out->name = fs::path(path).lexically_normal().filename().string();
  if (out->name.empty() || out->name == ".") out->name = fs::path(path).lexically_normal().parent_path().filename();
  VLM_ASSIGN_OR_RETURN(RunFiles files, find_run_files(path));
  ImagePipelineOptions pipeline;
  std::optional<Idefics3Options> idefics3;
  if (!files.config.empty()) {  // a training run
    VLM_ASSIGN_OR_RETURN(RunConfig config, load_run_config(files.config, overrides));
    VLM_ASSIGN_OR_RETURN(Device device, parse_device(device_name.empty() ? config.train.device : device_name));
    VLM_ASSIGN_OR_RETURN(DType dtype, pick_dtype(device, dtype_name));
    VLM_ASSIGN_OR_RETURN(out->tokenizer, Tokenizer::load(config.data.tokenizer));
    VLM_ASSIGN_OR_RETURN(out->chat, chat_template_for(config.data.chat_template, config.data.tokenizer));
    VlmDataOptions data;  // the held-out preprocessing: center crop, no augmentation
    data.image_size = config.model.vision.image_size;
    data.resize = config.data.resize;
    data.resize_mode = "center_crop";
    data.max_pixels = static_cast<uint64_t>(config.data.max_pixels);
    data.dct_scaling = config.data.dct_scaling;
    for (int i = 0; i < 3; ++i) {
      data.mean[i] = config.data.image_mean[static_cast<size_t>(i)];
      data.std[i] = config.data.image_std[static_cast<size_t>(i)];
    }
    VLM_ASSIGN_OR_RETURN(pipeline, image_pipeline_options(data));
    // A run fine-tuned from a SmolVLM folder generates with the tiling it trained with (read from that folder).
    if (!config.train.init_from.empty() && !fs::exists(config.train.init_from))
      VLM_WARN("train.init_from ", config.train.init_from, " is gone: if it is a SmolVLM folder, images are not tiled "
               "as in training (restore the folder)");
    VLM_ASSIGN_OR_RETURN(idefics3, run_idefics3_preprocessing(config.data, config.train.init_from,
                                                              config.model.image_tokens()));
    out->model = std::make_unique<VlmModel>(config.model, device, dtype);
    VLM_RETURN_IF_ERROR(out->model->params().load(files.weights));
  } else {  // a model folder: config.json (Hugging Face) or model.toml, with its tokenizer.json
    auto mc = read_model_dir_config(path);
    if (!mc.ok())
      return not_found(path +
                       " is neither a run directory (config.toml), a checkpoint folder in one, nor a model "
                       "folder: " +
                       mc.status().message());
    if (!overrides.empty())
      return invalid_argument("--set applies to a run's config.toml; " + path + " is a model folder");
    VLM_ASSIGN_OR_RETURN(Device device, parse_device(device_name.empty() ? "cpu" : device_name));
    VLM_ASSIGN_OR_RETURN(DType dtype, pick_dtype(device, dtype_name));
    VLM_ASSIGN_OR_RETURN(out->tokenizer, Tokenizer::load(path));
    auto chat = chat_template_for("hf", (fs::path(path) / "tokenizer.json").string());
    if (chat.ok()) {
      out->chat = std::move(*chat);
    } else {
      VLM_ASSIGN_OR_RETURN(out->chat, chat_template_by_name("chat"));
    }
    pipeline.size = mc->vision.image_size;
    VLM_ASSIGN_OR_RETURN(out->model, load_model_dir(path, device, {}, dtype));
    VLM_ASSIGN_OR_RETURN(idefics3, read_idefics3_preprocessing(path, out->model->config().image_tokens()));
  }
  VLM_ASSIGN_OR_RETURN(
      infer::PromptBuilder builder,
      infer::PromptBuilder::create(out->tokenizer, out->chat, out->model->config().image_tokens(), pipeline));
  VLM_RETURN_IF_ERROR(
      maybe_use_idefics3(files.config.empty() ? path : files.config, idefics3, out->tokenizer, builder));
  out->prompts = std::make_unique<infer::PromptBuilder>(std::move(builder));
  return out;
}

}  // namespace vlm::cli

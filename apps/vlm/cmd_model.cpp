// `vlm forward` (a transformers-style batch through a model, for parity checks) and `vlm convert` (Hugging Face
// folders in and out).
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "commands.h"
#include "core/device.h"
#include "core/logging.h"
#include "core/safetensors.h"
#include "data/loader/prompt.h"
#include "data/tokenizer/tokenizer.h"
#include "model/hf_export.h"
#include "model/model_forward.h"
#include "model/model_io.h"
#include "train/checkpoint.h"
#include "train/sharded_checkpoint.h"
#include "train/train_config.h"

namespace vlm::cli {
namespace {

int fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
  return 1;
}

// A Jinja string literal ('...') of `text`.
std::string jinja_literal(const std::string& text) {
  std::string out = "'";
  for (char ch : text) {
    if (ch == '\n') out += "\\n";
    else if (ch == '\'' || ch == '\\') out += std::string("\\") + ch;
    else out += ch;
  }
  return out + "'";
}

// The run's chat template (data/loader/prompt.h) as the Jinja transformers' apply_chat_template renders: user turns
// in user_prefix/suffix, assistant turns in assistant_prefix/suffix + separator, the generation prompt last.
std::string chat_template_jinja(const ChatTemplate& t) {
  return "{% for message in messages %}{% if message['role'] == 'user' %}{{ " + jinja_literal(t.user_prefix) +
         " + message['content'] + " + jinja_literal(t.user_suffix) + " }}{% else %}{{ " +
         jinja_literal(t.assistant_prefix) + " + message['content'] + " +
         jinja_literal(t.assistant_suffix + t.turn_separator) +
         " }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ " + jinja_literal(t.assistant_prefix) +
         " }}{% endif %}";
}

// tokenizer.json + tokenizer_config.json (with the chat template) of `tokenizer_path`, and preprocessor_config.json
// of an Idefics3 image processor that takes the whole image at the model's input size.
Status export_processing_files(const VlmModel& model, const std::string& tokenizer_path,
                               const std::string& chat_template, const std::string& dir) {
  const ModelConfig& c = model.config();
  if (!tokenizer_path.empty()) {
    VLM_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::load(tokenizer_path));
    VLM_RETURN_IF_ERROR(tok.save(dir + "/tokenizer.json"));
    nlohmann::json t;
    t["tokenizer_class"] = "PreTrainedTokenizerFast";
    VLM_ASSIGN_OR_RETURN(ChatTemplate tmpl, chat_template_by_name(chat_template));
    t["chat_template"] = chat_template_jinja(tmpl);
    t["model_max_length"] = c.text.max_seq_len;
    auto name = [&](std::optional<int32_t> id) { return id ? nlohmann::json(tok.id_to_token(*id)) : nlohmann::json(); };
    t["bos_token"] = name(tok.bos_id());
    t["eos_token"] = name(tok.eos_id());
    t["pad_token"] = name(tok.pad_id());
    const std::string text = t.dump(2) + "\n";
    VLM_RETURN_IF_ERROR(write_file_atomic(dir + "/tokenizer_config.json", text.data(), text.size()));
  }
  if (c.has_vision()) {
    nlohmann::json p;
    p["image_processor_type"] = c.has_text() ? "Idefics3ImageProcessor" : "SiglipImageProcessor";
    p["do_resize"] = true;
    p["do_rescale"] = true;
    p["rescale_factor"] = 1.0 / 255.0;
    p["do_normalize"] = true;
    p["image_mean"] = {0.5, 0.5, 0.5};
    p["image_std"] = {0.5, 0.5, 0.5};
    if (c.has_text()) {
      p["size"] = {{"longest_edge", c.vision.image_size}};
      p["max_image_size"] = {{"longest_edge", c.vision.image_size}};
      p["do_image_splitting"] = false;
      p["do_pad"] = true;
    } else {
      p["size"] = {{"height", c.vision.image_size}, {"width", c.vision.image_size}};
    }
    const std::string text = p.dump(2) + "\n";
    VLM_RETURN_IF_ERROR(write_file_atomic(dir + "/preprocessor_config.json", text.data(), text.size()));
  }
  return Status();
}

// A training run (its config.toml and newest checkpoint), one of its checkpoint folders, or a model folder.
struct AnyModel {
  std::unique_ptr<VlmModel> model;
  std::string tokenizer;               // the run's data.tokenizer, when MODEL is a run
  std::string chat_template = "chat";  // the run's data.chat_template
};

Expected<AnyModel> load_any_model(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string run_dir, checkpoint;
  if (fs::is_regular_file(path + "/config.toml", ec) && fs::is_directory(path + "/checkpoints", ec)) {
    run_dir = path;
    VLM_ASSIGN_OR_RETURN(CheckpointInfo latest, newest_valid_checkpoint(path, "convert"));
    checkpoint = latest.path;
  } else if (fs::is_regular_file(path + "/trainer_state.json", ec) &&
             fs::is_regular_file(fs::path(path).parent_path().parent_path() / "config.toml", ec)) {
    run_dir = fs::path(path).parent_path().parent_path().string();
    checkpoint = path;
  }
  AnyModel out;
  if (run_dir.empty()) {
    VLM_ASSIGN_OR_RETURN(out.model, load_model_dir(path, Device::cpu()));
    return out;
  }
  VLM_ASSIGN_OR_RETURN(RunConfig config, load_run_config(run_dir + "/config.toml", {}));
  out.model = std::make_unique<VlmModel>(config.model, Device::cpu());
  VLM_RETURN_IF_ERROR(load_checkpoint_weights(checkpoint, out.model->params()));  // replicated or sharded layout
  out.tokenizer = config.data.tokenizer;
  out.chat_template = config.data.chat_template;
  return out;
}

}  // namespace

int cmd_forward(int argc, char** argv, int first) {
  std::string inputs_path, out_path, device_name = "cpu";
  int64_t image_token_id = -1;
  Flags f("vlm forward MODEL --inputs in.safetensors --out out.safetensors [--device cpu|cuda]",
          "Run a model (a Hugging Face folder or a vlm model folder) in fp32 on a batch named as transformers "
          "names it: input_ids (i32/i64 [B, T]), attention_mask (all ones), pixel_values (f32 [N, 3, H, W], images "
          "in placeholder order). Writes logits (f32 [B, T, V]), or last_hidden_state for a vision model.");
  f.add_string("--inputs", &inputs_path, "safetensors with input_ids / pixel_values");
  f.add_string("--out", &out_path, "safetensors to write");
  f.add_string("--device", &device_name, "cpu or cuda[:N]");
  f.add_int("--image-token-id", &image_token_id, "<image> placeholder id (default: the model's, e.g. config.json)");
  f.require("--inputs");
  f.require("--out");
  if (int code = parse_command_flags(f, argc, argv, first); code >= 0) return code;
  if (f.positional().size() != 1) return fail(invalid_argument("vlm forward takes one MODEL folder"));
  auto device = parse_device(device_name);
  if (!device.ok()) return fail(device.status());
  auto model = load_model_dir(f.positional()[0], *device);
  if (!model.ok()) return fail(model.status());
  auto inputs = safetensors_load(inputs_path);
  if (!inputs.ok()) return fail(inputs.status());
  auto out = model_forward(**model, inputs->tensors, static_cast<int>(image_token_id));
  if (!out.ok()) return fail(out.status().with_context(inputs_path));
  std::vector<std::pair<std::string, Tensor>> tensors(out->begin(), out->end());
  if (Status s = safetensors_save(out_path, tensors); !s.ok()) return fail(s);
  for (const auto& [name, t] : tensors) std::printf("%s %s -> %s\n", name.c_str(), t.shape().to_string().c_str(),
                                                    out_path.c_str());
  return 0;
}

int cmd_convert(int argc, char** argv, int first) {
  std::string from = "hf", to, out, tokenizer;
  int64_t image_token_id = -1;
  bool bf16 = false;
  Flags f("vlm convert MODEL --out DIR [--to hf] [--tokenizer tokenizer.json]",
          "Convert model folders. MODEL is a Hugging Face folder (Idefics3/SmolVLM, nanoVLM, Llama, Qwen2, SigLIP), "
          "a vlm model folder (model.toml + model.safetensors), a training run directory (its newest checkpoint) or "
          "one of its checkpoint folders. Default: write a vlm model folder (train.init_from "
          "and vlm forward take it). --to hf: write a folder transformers loads (config.json, "
          "generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json, "
          "preprocessor_config.json).");
  f.add_string("--from", &from, "hf or vlm: informational, the folder's contents decide");
  f.add_string("--to", &to, "hf: a Hugging Face folder; vlm (default): a vlm model folder");
  f.add_string("--out", &out, "output folder");
  f.add_string("--tokenizer", &tokenizer, "tokenizer.json to export with the model (--to hf; default: a run's)");
  f.add_int("--image-token-id", &image_token_id, "<image> placeholder id (default: the model's, else the tokenizer's)");
  f.add_bool("--bf16", &bf16, "write bf16 weights (--to hf; default f32, exact)");
  f.require("--out");
  if (int code = parse_command_flags(f, argc, argv, first); code >= 0) return code;
  if (f.positional().size() != 1) return fail(invalid_argument("vlm convert takes one MODEL folder"));
  if (from != "hf" && from != "vlm") return fail(invalid_argument("--from '" + from + "' is not hf or vlm"));
  if (!to.empty() && to != "hf" && to != "vlm") return fail(invalid_argument("--to '" + to + "' is not hf or vlm"));
  auto any = load_any_model(f.positional()[0]);
  if (!any.ok()) return fail(any.status());
  std::unique_ptr<VlmModel>* model = &any->model;
  if (tokenizer.empty()) tokenizer = any->tokenizer;
  if (to != "hf") {
    if (Status s = save_model_dir(**model, out); !s.ok()) return fail(s);
    std::printf("wrote %s (model.toml, model.safetensors)\n", out.c_str());
    return 0;
  }
  HfExportOptions o;
  o.bf16 = bf16;
  o.image_token_id = image_token_id >= 0 ? static_cast<int>(image_token_id) : (*model)->config().image_token_id;
  if (!tokenizer.empty()) {
    auto tok = Tokenizer::load(tokenizer);
    if (!tok.ok()) return fail(tok.status());
    if (o.image_token_id < 0 && tok->token_to_id("<image>")) o.image_token_id = *tok->token_to_id("<image>");
    if (tok->bos_id()) o.bos_token_id = *tok->bos_id();
    if (tok->eos_id()) o.eos_token_id = *tok->eos_id();
    if (tok->pad_id()) o.pad_token_id = *tok->pad_id();
  }
  if (Status s = hf_export_model(**model, out, o); !s.ok()) return fail(s);
  if (Status s = export_processing_files(**model, tokenizer, any->chat_template, out); !s.ok()) return fail(s);
  std::printf("wrote %s (config.json, generation_config.json, model.safetensors%s)\n", out.c_str(),
              tokenizer.empty() ? "; no --tokenizer: no tokenizer files" : ", tokenizer.json, tokenizer_config.json");
  return 0;
}

}  // namespace vlm::cli

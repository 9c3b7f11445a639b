// `vlm train` and `vlm eval`.
#include <cstdio>
#include <filesystem>

#include "cli.h"
#include "commands.h"
#include "core/logging.h"
#include "data/tokenizer/tokenizer.h"
#include "eval/eval_runner.h"
#include "model/model_io.h"
#include "train/checkpoint.h"
#include "track/progress.h"
#include "train/trainer.h"

namespace vlm::cli {
namespace {

std::string run_options_help() {
  RunConfig c;
  OptionSet o;
  add_run_options(o, c);
  return "\nrun-file options (TOML sections, or --set key=value):\n" + o.help();
}

int fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
  return 1;
}

}  // namespace

int cmd_train(int argc, char** argv, int first) {
  std::string config_path, run_dir;
  std::vector<std::string> overrides;
  bool resume = false, quiet = false;
  Flags f("vlm train --config FILE [--set key=value ...] [--run-dir DIR] [--resume]",
          "Train a VLM. The resolved configuration, metrics.jsonl, eval results and checkpoints go to the run "
          "directory.");
  f.add_string("--config", &config_path, "run file (TOML); without it, defaults + --set");
  f.add_multi("--set", &overrides, "override one option, e.g. --set train.lr=3e-4 (repeatable)");
  f.add_string("--run-dir", &run_dir, "where outputs go (default runs/<config name>)");
  f.add_bool("--resume", &resume, "continue from the newest checkpoint in the run directory");
  f.add_bool("--quiet", &quiet, "no progress line");
  if (int code = parse_command_flags(f, argc, argv, first, run_options_help()); code >= 0) return code;
  // A resumed run without --config uses the configuration it was started with.
  if (config_path.empty() && resume && !run_dir.empty() && std::filesystem::exists(run_dir + "/config.toml"))
    config_path = run_dir + "/config.toml";
  TrainerOptions o;
  auto config = load_run_config(config_path, overrides, &o.resolved_toml);
  if (!config.ok()) return fail(config.status());
  o.config = *config;
  if (run_dir.empty())
    run_dir = "runs/" + (config_path.empty() ? std::string("default") : std::filesystem::path(config_path).stem().string());
  o.run_dir = run_dir;
  o.resume = resume;
  o.quiet = quiet;
  for (int i = 0; i < argc; ++i) o.argv.emplace_back(argv[i]);
  auto result = run_training(o);
  if (!result.ok()) return fail(result.status());
  std::printf("trained steps %lld..%lld in %.1f s, final loss %.4f\n", static_cast<long long>(result->start_step + 1),
              static_cast<long long>(result->final_step), result->wall_seconds, result->final_loss);
  if (result->has_eval) std::printf("%s", result->eval.summary().c_str());
  std::printf("results: %s (config.toml, metrics.jsonl, eval/, checkpoints/)\n", run_dir.c_str());
  return 0;
}

int cmd_eval(int argc, char** argv, int first) {
  std::string config_path, checkpoint, out, run_dir;
  std::vector<std::string> overrides, tasks;
  int64_t samples = 0, examples = -1;
  bool json = false;
  Flags f("vlm eval (--run-dir DIR | --config FILE --checkpoint PATH) [--task vqa|caption|retrieval ...] "
          "[--samples N] [--examples N] [--out FILE] [--json]",
          "Evaluate a trained model on the held-out shards (data.val_shards) and print the metrics of the tasks run: "
          "vqa (VQA accuracy over the human answers, exact match, per question type, answer type and class), "
          "caption (CIDEr-D, BLEU-1..4, ROUGE-L with coco-caption's tokenization, exact match, per class), "
          "retrieval (image->text and text->image recall@1/5/10 by model scoring of every image-caption pair).");
  f.add_string("--run-dir", &run_dir, "a training run: its config.toml and newest checkpoint are used");
  f.add_string("--config", &config_path, "run file (TOML)");
  f.add_string("--checkpoint", &checkpoint,
               "checkpoint folder, model.safetensors, or a model folder (Hugging Face or vlm convert's)");
  f.add_multi("--set", &overrides, "override one option (repeatable)");
  f.add_multi("--task", &tasks, "vqa, caption or retrieval (repeatable, or comma-separated; default: eval.tasks)");
  f.add_int("--samples", &samples, "held-out images (default: eval.samples)");
  f.add_int("--examples", &examples, "examples kept per task in the result JSON (default: eval.examples)");
  f.add_string("--out", &out, "write the result JSON here");
  f.add_bool("--json", &json, "print the result JSON instead of the summary");
  if (int code = parse_command_flags(f, argc, argv, first, run_options_help()); code >= 0) return code;
  if (!run_dir.empty()) {
    if (config_path.empty()) config_path = run_dir + "/config.toml";
    if (checkpoint.empty()) {
      auto latest = newest_valid_checkpoint(run_dir, "eval");
      if (!latest.ok()) return fail(latest.status());
      checkpoint = latest->path;
    }
  }
  if (checkpoint.empty()) return fail(invalid_argument("--checkpoint or --run-dir is required"));
  auto config = load_run_config(config_path, overrides);
  if (!config.ok()) return fail(config.status());
  if (!tasks.empty()) {
    config->eval.tasks.clear();
    for (const std::string& t : tasks)  // "vqa,caption" or repeated --task
      for (size_t b = 0; b <= t.size();) {
        size_t e = t.find(',', b);
        if (e == std::string::npos) e = t.size();
        if (e > b) config->eval.tasks.push_back(t.substr(b, e - b));
        b = e + 1;
      }
  }
  if (samples > 0) config->eval.samples = static_cast<int>(samples);
  if (examples >= 0) config->eval.examples = static_cast<int>(examples);
  auto eo = make_eval_options(*config);
  if (!eo.ok()) return fail(eo.status().with_context("--task / eval.tasks"));
  if (config->data.val_shards.empty()) return fail(invalid_argument("data.val_shards is empty: nothing to evaluate"));
  auto device = parse_device(config->train.device);
  if (!device.ok()) return fail(device.status());
  auto tokenizer = Tokenizer::load(config->data.tokenizer);
  if (!tokenizer.ok()) return fail(tokenizer.status());
  std::unique_ptr<VlmModel> loaded;
  if (hf_is_model_dir(checkpoint) || std::filesystem::exists(checkpoint + "/model.toml")) {
    // A model folder (Hugging Face or vlm convert's) carries its own shape.
    auto m = load_model_dir(checkpoint, *device);
    if (!m.ok()) return fail(m.status());
    loaded = std::move(*m);
    config->model = loaded->config();
  } else {
    loaded = std::make_unique<VlmModel>(config->model, *device);
    std::string weights = std::filesystem::is_directory(checkpoint) ? checkpoint + "/model.safetensors" : checkpoint;
    if (Status s = loaded->params().load(weights); !s.ok()) return fail(s);
  }
  VlmModel& model = *loaded;
  auto data = make_data_options(*config, config->data.val_shards, true);
  if (!data.ok()) return fail(data.status());
  ProgressLine progress("eval images", static_cast<uint64_t>(eo->samples));
  eo->on_image = [&](int images, int) { progress.update(static_cast<uint64_t>(images)); };
  auto r = evaluate(model, *tokenizer, *data, *eo);
  if (!r.ok()) return fail(r.status());
  progress.finish(static_cast<uint64_t>(r->images));
  std::printf("%s", json ? r->to_json().c_str() : r->summary().c_str());
  if (!out.empty()) {
    FILE* fo = std::fopen(out.c_str(), "w");
    if (!fo) return fail(io_error(out + ": cannot write"));
    const std::string text = r->to_json();
    const bool ok = std::fwrite(text.data(), 1, text.size(), fo) == text.size();
    if (std::fclose(fo) != 0 || !ok) return fail(io_error(out + ": write failed"));
  }
  return 0;
}

}  // namespace vlm::cli

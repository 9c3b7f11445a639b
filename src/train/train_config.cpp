// Run-file option declarations and loading.
#include "train/train_config.h"

#include "model/model_io.h"

#include <toml++/toml.h>

namespace vlm {

void add_run_options(OptionSet& o, RunConfig& c) {
  add_model_options(o, c.model);
  add_data_options(o, c.data, c.filter);
  OptimConfig& t = c.train;
  o.add("train.steps", &t.steps, "optimizer steps", positive<int64_t>());
  o.add("train.batch_size", &t.batch_size, "samples per micro-batch", positive<int>());
  o.add("train.grad_accum", &t.grad_accum, "micro-batches per optimizer step", positive<int>());
  o.add("train.lr", &t.adamw.lr, "peak learning rate", positive<float>());
  o.add("train.lr_scale_vision", &t.lr_scale_vision, "learning-rate multiplier of the vision encoder",
        non_negative<float>());
  o.add("train.lr_scale_projector", &t.lr_scale_projector, "learning-rate multiplier of the projector",
        non_negative<float>());
  o.add("train.lr_scale_text", &t.lr_scale_text, "learning-rate multiplier of the decoder", non_negative<float>());
  o.add("train.warmup_steps", &t.warmup_steps, "linear warm-up steps", non_negative<int64_t>());
  o.add("train.min_lr_ratio", &t.min_lr_ratio, "final lr as a fraction of the peak (cosine)", in_range(0.f, 1.f));
  o.add("train.weight_decay", &t.adamw.weight_decay, "decoupled weight decay", non_negative<float>());
  o.add("train.beta1", &t.adamw.beta1, "AdamW beta1", in_range(0.f, 0.99999f));
  o.add("train.beta2", &t.adamw.beta2, "AdamW beta2", in_range(0.f, 0.99999f));
  o.add("train.eps", &t.adamw.eps, "AdamW epsilon", positive<float>());
  o.add("train.grad_clip", &t.adamw.grad_clip, "global gradient-norm clip (0 = off)", non_negative<float>());
  o.add("train.freeze", &t.freeze, "model parts to freeze (vision, projector, text)",
        OptionCheck<std::vector<std::string>>([](const std::vector<std::string>& v) {
          for (const auto& s : v)
            if (s != "vision" && s != "projector" && s != "text") return "unknown part '" + s + "'";
          return std::string();
        }));
  o.add("train.seed", &t.seed, "seed of the init and the data order", non_negative<int64_t>());
  o.add("train.device", &t.device, "cpu or cuda[:N]");
  o.add("train.precision", &t.precision, "fp32, or bf16 weights/activations with fp32 master weights (cuda only)",
        one_of({"fp32", "bf16"}));
  o.add("train.recompute", &t.recompute,
        "activation recomputation: none, or blocks (each transformer block keeps only its input in the forward and "
        "recomputes its activations just before its backward: less memory, one more block forward)",
        one_of({"none", "blocks"}));
  o.add("train.deterministic", &t.deterministic,
        "cuda: bit-identical results run to run (attention's backward sums dQ in a fixed order, about half as fast on "
        "Hopper; GEMMs take cuBLASLt's heuristic algorithm instead of the fastest one timed per shape); off by "
        "default, as in PyTorch");
  o.add("train.threads", &t.threads, "CPU threads (0 = all cores)", non_negative<int>());
  o.add("train.log_every", &t.log_every, "steps between metric records", positive<int64_t>());
  o.add("train.peak_tflops", &t.peak_tflops,
        "the device's dense peak TFLOP/s at the training precision, for the mfu metric (0 = known GPUs by name: "
        "H100/H200, A100; none on the CPU)",
        non_negative<double>());
  o.add("train.ckpt_every", &t.ckpt_every, "steps between checkpoints (0 = final only)", non_negative<int64_t>());
  o.add("train.keep_last", &t.keep_last, "checkpoints kept", positive<int>());
  o.add("train.data_streams", &t.data_streams,
        "data streams the training samples are read as, each step taking grad_accum batches of batch_size from each: "
        "fixed for the run (kept by checkpoints), so a run resumed on another number of ranks reads the same "
        "samples; 0 = the first launch's number of ranks. Ranks host streams round-robin: choose a multiple of the "
        "world sizes you will use (12 for 1, 2, 3, 4, 6)",
        non_negative<int>());
  o.add("train.fsdp", &t.fsdp,
        "how the ranks of a launch share the model: no_shard (data parallel: full replicas, gradients all-reduced), "
        "shard_grad_op (ZeRO-2: gradients and optimizer state sharded, weights gathered from a unit's forward to its "
        "backward), full_shard (ZeRO-3: weights sharded too, gathered before each unit's forward and again before "
        "its backward), hybrid_shard (full_shard inside groups of fsdp_shard_group_size ranks, replicated across the "
        "groups: gradients reduce-scattered in the group, then all-reduced across groups); docs/fsdp.md",
        one_of({"no_shard", "shard_grad_op", "full_shard", "hybrid_shard"}));
  o.add("train.fsdp_prefetch", &t.fsdp_prefetch,
        "sharded strategies: gather the next unit's weights before the current unit computes (one more unit "
        "gathered at a time)");
  o.add("train.fsdp_reduce_dtype", &t.fsdp_reduce_dtype,
        "sharded strategies: dtype of the gradients on the wire: fp32, or bf16 (half the traffic; summed in fp32 and "
        "accumulated into fp32 shards)",
        one_of({"fp32", "bf16"}));
  o.add("train.fsdp_shard_group_size", &t.fsdp_shard_group_size,
        "hybrid_shard: ranks a shard group (consecutive ranks; must divide the world size); 0 = the ranks of a node "
        "(LOCAL_WORLD_SIZE, or the launcher's local size)",
        non_negative<int>());
  o.add("train.fsdp_allgather_dtype", &t.fsdp_allgather_dtype,
        "sharded strategies: weights on the wire of the all-gathers: compute (the compute dtype's copies: bf16 or "
        "fp32), or fp8_e4m3 (the f32 master shards quantized in blocks of 128 with an f32 scale each, dequantized "
        "to the compute dtype after the gather: about half bf16's traffic; masters, gradients and optimizer stay "
        "fp32; evaluation gathers the exact weights); docs/fsdp.md measures its effect on the loss",
        one_of({"compute", "fp8_e4m3"}));
  o.add("train.init_from", &t.init_from,
        "weights to start from: a Hugging Face model folder (its config.json sets the model.* shape), a vlm model "
        "folder (vlm convert) or a safetensors file with vlm's names; loading is strict");
  o.add("train.init_allow_missing", &t.init_allow_missing,
        "what init_from (and model.vision_from / text_from) may lack: parts (vision, projector, text) or tensor "
        "names, a trailing * matching any suffix; the rest keep their random init");
  EvalConfig& e = c.eval;
  o.add("eval.every", &e.every, "steps between evals (0 = at the end only)", non_negative<int64_t>());
  o.add("eval.samples", &e.samples, "held-out images per eval", positive<int>());
  o.add("eval.max_new_tokens", &e.max_new_tokens, "longest generated answer (vqa)", positive<int>());
  o.add("eval.caption_max_new_tokens", &e.caption_max_new_tokens, "longest generated caption", positive<int>());
  o.add("eval.batch_size", &e.batch_size, "prompts generated (pairs scored) together", positive<int>());
  o.add("eval.tasks", &e.tasks,
        "tasks evaluated: vqa, caption, retrieval (empty: what data.task trains; mixed = vqa and caption)",
        OptionCheck<std::vector<std::string>>([](const std::vector<std::string>& v) {
          for (const auto& s : v)
            if (s != "vqa" && s != "caption" && s != "retrieval")
              return "unknown task '" + s + "' (expected vqa, caption or retrieval)";
          return std::string();
        }));
  o.add("eval.examples", &e.examples, "question/answer/prediction examples kept per task", non_negative<int>());
  o.add("eval.retrieval_samples", &e.retrieval_samples,
        "retrieval: held-out images ranked against each other (every image-caption pair is scored)", positive<int>());
}

Expected<RunConfig> load_run_config(const std::string& path, const std::vector<std::string>& overrides,
                                    std::string* resolved_toml) {
  // The preset decides the starting values of every model.* key, so find it first: --set wins over the file.
  std::string preset = "tiny";
  if (!path.empty()) {
    try {
      toml::table t = toml::parse_file(path);
      if (auto p = t.at_path("model.preset").value<std::string>()) preset = *p;
    } catch (const toml::parse_error& e) {
      return parse_error(str(path, ":", e.source().begin.line, ":", e.source().begin.column, ": ", e.description()));
    }
  }
  for (const auto& s : overrides)
    if (s.rfind("model.preset=", 0) == 0) preset = s.substr(13);
  RunConfig config;
  VLM_RETURN_IF_ERROR(apply_model_preset(preset, config.model).with_context(path.empty() ? "--set" : path));
  OptionSet options;
  add_run_options(options, config);
  if (!path.empty()) VLM_RETURN_IF_ERROR(options.load_toml_file(path));
  for (const auto& s : overrides) VLM_RETURN_IF_ERROR(options.set(s));
  VLM_RETURN_IF_ERROR(options.validate());
  // Pretrained folders (train.init_from, model.vision_from / text_from) decide the shapes they hold.
  VLM_RETURN_IF_ERROR(apply_pretrained_config(config.model, config.train.init_from));
  VLM_RETURN_IF_ERROR(validate_model_config(config.model).with_context(path.empty() ? "config" : path));
  VLM_RETURN_IF_ERROR(config.data.validate().with_context(path.empty() ? "config" : path));
  VLM_RETURN_IF_ERROR(training_compute_dtype(config.train).status().with_context(path.empty() ? "config" : path));
  if (resolved_toml) *resolved_toml = options.to_toml();
  return config;
}

Expected<DType> training_compute_dtype(const OptimConfig& t) {
  if (t.precision == "fp32") return DType::f32;
  if (t.precision != "bf16")
    return invalid_argument("train.precision: '" + t.precision + "' is not one of fp32, bf16");
  Expected<Device> device = parse_device(t.device);
  if (!device.ok()) return device.status().with_context("train.device");
  if (!device->is_cuda())
    return invalid_argument("train.precision = \"bf16\" needs train.device = cuda[:N] (got \"" + t.device +
                            "\"): the CPU backend computes in fp32 only");
  return DType::bf16;
}

}  // namespace vlm

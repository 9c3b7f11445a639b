// run_training: set-up, the step loop, eval and checkpoints.
#include "train/trainer.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "core/logging.h"
#include "core/safetensors.h"
#include "data/loader/idefics3_prompt.h"
#include "kernels/ops.h"
#include "model/model_io.h"
#include "track/metrics.h"
#include "track/run_dir.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/data_streams.h"
#include "train/device_batch.h"
#include "train/fsdp.h"
#include "train/memory_report.h"
#include "train/optimizer.h"
#include "train/run_log.h"
#include "train/sharded_checkpoint.h"
#include "train/skip_window.h"
#include "train/step_log.h"
#include "train/train_flops.h"

namespace vlm {

Expected<VlmDataOptions> make_data_options(const RunConfig& c, const std::string& shard_spec, bool for_eval) {
  // A SmolVLM folder's preprocessor_config.json (train.init_from) decides Idefics3 tiling, as at inference.
  const LoaderModelShape shape{c.model.vision.image_size, c.model.image_tokens(), c.model.text.max_seq_len,
                               c.train.init_from};
  return build_loader_options(c.data, c.filter, shape, static_cast<uint64_t>(c.train.seed), shard_spec, for_eval);
}

Expected<EvalOptions> make_eval_options(const RunConfig& c) {
  EvalOptions eo;
  VLM_ASSIGN_OR_RETURN(eo.tasks, resolve_eval_tasks(c.eval.tasks, c.data.task));
  eo.samples = c.eval.samples;
  eo.max_new_tokens = c.eval.max_new_tokens;
  eo.caption_max_new_tokens = c.eval.caption_max_new_tokens;
  eo.batch_size = c.eval.batch_size;
  eo.examples_kept = c.eval.examples;
  eo.retrieval_samples = c.eval.retrieval_samples;
  return eo;
}

namespace {

struct TrainerState {
  int64_t step = 0;
  std::vector<std::string> hosted_states;  // this rank's data streams' loader states (DataStreams::hosted order)
  std::vector<std::string> stream_states;  // every stream's, in stream order (checkpoints)
  double samples_seen = 0, tokens_seen = 0;  // over every rank, as of the last checkpoint
  double rank_samples = 0, rank_tokens = 0;  // this rank's since then (summed into the above at checkpoints)
};

using StepBatches = StreamStepBatches;

// Index of the first micro-batch at or after `from` that has samples (micro.size() when none).
size_t first_with_samples(const StepBatches& s, size_t from) {
  while (from < s.micro.size() && s.micro[from].n_samples == 0) ++from;  // all samples bad: counted by the loader
  return from;
}

// Every rank writes its model and optimizer files (sharded_checkpoint.h), rank 0 also the trainer state.
Status write_checkpoint(CheckpointManager& ckpt, Fsdp& fsdp, AdamW& opt, const TrainerState& st,
                        const std::string& resolved_toml) {
  return save_checkpoint_all_ranks(ckpt, st.step, fsdp, opt, [&](const std::string& dir) -> Status {
    nlohmann::json j;
    j["step"] = st.step;
    j["loader_state"] = nlohmann::json::parse(st.stream_states.at(0));  // stream 0's (a run of one stream: all)
    j["data_streams"] = st.stream_states.size();  // each stream's position (train/data_streams.h)
    j["stream_loader_states"] = nlohmann::json::array();
    for (const std::string& r : st.stream_states) j["stream_loader_states"].push_back(nlohmann::json::parse(r));
    j["world_size"] = fsdp.world();
    j["samples_seen"] = st.samples_seen;
    j["tokens_seen"] = st.tokens_seen;
    j["fsdp"] = fsdp_strategy_name(fsdp.strategy());
    j["config_toml"] = resolved_toml;
    const std::string text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    return write_file_atomic(dir + "/trainer_state.json", text.data(), text.size());
  });
}

Expected<TrainerState> read_trainer_state(const std::string& dir) {
  VLM_ASSIGN_OR_RETURN(auto bytes, read_file_bytes(dir + "/trainer_state.json"));
  auto j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (j.is_discarded() || !j.contains("step") || !j.contains("loader_state"))
    return parse_error(dir + "/trainer_state.json: not a trainer state (needs step, loader_state)");
  TrainerState st;
  st.step = j["step"].get<int64_t>();
  st.samples_seen = j.value("samples_seen", 0.0);
  st.tokens_seen = j.value("tokens_seen", 0.0);
  // Data streams; earlier checkpoints kept one state per rank (rank_loader_states: the rank's stream) or one.
  const char* key = j.contains("stream_loader_states") ? "stream_loader_states" : "rank_loader_states";
  if (j.contains(key)) {
    const auto& all = j[key];
    if (!all.is_array() || all.empty())
      return parse_error(str(dir, "/trainer_state.json: ", key, " is not a non-empty array"));
    for (const auto& r : all) st.stream_states.push_back(r.dump());
  } else {
    st.stream_states.push_back(j["loader_state"].dump());
  }
  return st;
}

Status write_eval(const std::string& run_dir, const std::string& name, const EvalResult& r) {
  VLM_RETURN_IF_ERROR(ensure_dir(run_dir + "/eval"));
  const std::string text = r.to_json();
  return write_file_atomic(run_dir + "/eval/" + name + ".json", text.data(), text.size());
}

MetricRecord eval_record(int64_t step, const EvalResult& r) {
  MetricRecord rec;
  rec.step = step;
  rec.kind = "eval";
  for (const auto& [name, value] : r.scalars()) rec.add(name, value);  // "eval/<task>/<metric>"
  return rec;
}

// The run on this rank of `dp` (see run_training).
Expected<TrainResult> train_rank(const TrainerOptions& o, Device device, DataParallel& dp) {
  RunConfig resolved = o.config;  // pretrained folders decide the shapes they hold (as load_run_config does)
  VLM_RETURN_IF_ERROR(apply_pretrained_config(resolved.model, resolved.train.init_from));
  const RunConfig& c = resolved;
  const double t_start = now_seconds();
  if (c.train.threads > 0) {
    omp_set_num_threads(c.train.threads);
    openblas_set_num_threads(c.train.threads);
  }
  VLM_ASSIGN_OR_RETURN(DType compute_dtype, training_compute_dtype(c.train));
  if (c.data.tokenizer.empty()) return invalid_argument("data.tokenizer: no tokenizer.json given");
  VLM_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::load(c.data.tokenizer));
  if (tokenizer.vocab_size() > c.model.text.vocab_size)
    return invalid_argument(str("model.text.vocab_size (", c.model.text.vocab_size, ") is smaller than the tokenizer's ",
                                tokenizer.vocab_size(), " tokens (", c.data.tokenizer, ")"));
  if (c.data.train_shards.empty()) return invalid_argument("data.train_shards: no training shards given");

  // Run directory: refuse to overwrite a run that has checkpoints unless resuming.
  VLM_RETURN_IF_ERROR(ensure_dir(o.run_dir));
  CheckpointManager ckpt(o.run_dir + "/checkpoints", c.train.keep_last);
  std::optional<CheckpointInfo> resume_from;
  if (dp.lead()) {
    if (const int n = ckpt.clean_leftovers())
      VLM_INFO("removed ", n, " folder(s) left in ", ckpt.dir(), " by an interrupted checkpoint write or prune");
  }
  if (o.resume) {
    std::vector<DamagedCheckpoint> damaged;
    resume_from = ckpt.latest_valid(&damaged);
    if (!resume_from && !damaged.empty()) {
      std::string why;
      for (const auto& d : damaged) why += "\n  " + d.problem.message();
      return invalid_argument(str("--resume: every checkpoint in ", ckpt.dir(), " is damaged:", why,
                                  "\nmove them away to start the run again from step 0"));
    }
    for (const auto& d : damaged) {
      // Out of the namespace (kept for inspection), so that pruning after this resume never counts it and never
      // deletes the checkpoint resumed from.
      std::string moved = "(not moved: another rank does that)";
      if (dp.lead()) {
        Expected<std::string> m = ckpt.set_aside(d.info);
        moved = m.ok() ? "moved to " + *m : "could not move it aside: " + m.status().message();
      }
      VLM_WARN("--resume: checkpoint ", d.info.path, " is damaged (", d.problem.message(), "); resuming from ",
               resume_from->path, " instead; the damaged one is ", moved);
    }
    if (!resume_from) VLM_WARN("--resume: no checkpoint in ", ckpt.dir(), ", starting from step 0");
  } else if (ckpt.latest()) {
    return invalid_argument(o.run_dir + " already holds checkpoints: pass --resume to continue it, or choose another "
                                        "--run-dir");
  }
  if (dp.lead()) {  // rank 0 writes the run directory (the other ranks share it and read checkpoints from it)
    VLM_RETURN_IF_ERROR(
        write_file_atomic(o.run_dir + "/config.toml", o.resolved_toml.data(), o.resolved_toml.size()));
    VLM_RETURN_IF_ERROR(write_run_info(o.run_dir, o.argv));
  }

  // Model and optimizer.
  VlmModel model(c.model, device, compute_dtype);  // bf16: weights read as bf16 copies of the f32 masters
  const Expected<Recompute> recompute = parse_recompute(c.train.recompute);
  if (!recompute.ok()) return recompute.status().with_context("train.recompute");
  model.set_recompute(*recompute);
  if (device.is_cuda()) ops::set_deterministic(c.train.deterministic);
  model.init_weights(static_cast<uint64_t>(c.train.seed));
  if (!resume_from) {
    LoadPolicy policy;
    policy.allow_missing = c.train.init_allow_missing;
    VLM_RETURN_IF_ERROR(load_pretrained(model, c.train.init_from, policy));
  }
  for (const auto& part : c.train.freeze) {
    VLM_ASSIGN_OR_RETURN(ParamGroup g, parse_param_group(part));
    for (auto& p : model.params().all())
      if (p.group == g) p.trainable = false;
  }
  const int64_t n_params = model.params().numel(), n_trainable = model.params().numel(true);
  // The ranks share the model as train.fsdp says (a world of one: the model itself, no collectives).
  VLM_ASSIGN_OR_RETURN(const FsdpStrategy strategy, parse_fsdp_strategy(c.train.fsdp));
  FsdpOptions fsdp_options{strategy, c.train.fsdp_prefetch,
                           c.train.fsdp_reduce_dtype == "bf16" ? DType::bf16 : DType::f32};
  fsdp_options.shard_group_size =
      c.train.fsdp_shard_group_size > 0 ? c.train.fsdp_shard_group_size : dp.local_size();
  fsdp_options.gather_fp8 = c.train.fsdp_allgather_dtype == "fp8_e4m3";
  VLM_ASSIGN_OR_RETURN(std::unique_ptr<Fsdp> fsdp, Fsdp::create(model, dp.comm(), fsdp_options));
  AdamW opt(fsdp->optimizer_params(), c.train.adamw,
            {{ParamGroup::vision, c.train.lr_scale_vision},
             {ParamGroup::projector, c.train.lr_scale_projector},
             {ParamGroup::text, c.train.lr_scale_text}});
  if (fsdp->sharded()) opt.set_norm_reduction([&](Tensor& norm_sq) { return fsdp->reduce_norm(norm_sq); });

  TrainerState st;
  if (resume_from) {
    VLM_ASSIGN_OR_RETURN(st, read_trainer_state(resume_from->path));
  }
  // The data streams: the checkpoint's count when resuming (on any world size), else train.data_streams.
  const int n_streams = resume_from ? static_cast<int>(st.stream_states.size())
                                    : c.train.data_streams > 0 ? c.train.data_streams : dp.size();
  if (n_streams % dp.size() != 0)
    VLM_WARN(n_streams, " data streams on ", dp.size(), " ranks: some ranks host more streams than others and the "
             "others wait for them (choose a world size that divides ", n_streams, ")");
  VLM_ASSIGN_OR_RETURN(VlmDataOptions train_data, make_data_options(c, c.data.train_shards, false));
  VLM_ASSIGN_OR_RETURN(DataStreams data, DataStreams::open(train_data, tokenizer, n_streams, dp.rank(), dp.size()));
  if (const auto& t = train_data.idefics3; t && has_idefics3_tokens(tokenizer)) {
    const int side = (std::min(t->longest_edge, 4096) + t->max_image_size - 1) / t->max_image_size;
    const int frames = t->do_image_splitting && side > 1 ? side * side + 1 : 1;  // a square image's
    VLM_INFO("images: Idefics3 preprocessing of ", c.train.init_from, ": longest edge ", t->longest_edge,
             t->do_image_splitting ? ", tiles of " : ", the global image alone of ", t->max_image_size,
             " px; at most ", frames, " frames (", frames * t->image_seq_len,
             " image tokens) per image; data.longest_edge and data.image_splitting lower it");
  }
  if (resume_from) {
    VLM_RETURN_IF_ERROR(load_model_and_optimizer(resume_from->path, *fsdp, opt));
    VLM_RETURN_IF_ERROR(data.restore(st.stream_states).with_context(resume_from->path));
    VLM_INFO("resumed from ", resume_from->path, " at step ", st.step, " (", n_streams, " data streams on ",
             dp.size(), " rank(s))");
  }

  MultiSink sinks;  // rank 0's: the other ranks log nothing of their own
  if (dp.lead())
    VLM_RETURN_IF_ERROR(open_run_sinks(
        sinks, {o.run_dir, o.resolved_toml, st.step, resume_from.has_value(), c.train.steps, !o.quiet}));
  SessionEnd session_end(sinks);

  VLM_INFO("model: ", n_params, " parameters (", n_trainable, " trainable), ",
           c.model.image_tokens(), " image tokens per image; training steps ", st.step + 1, "..", c.train.steps,
           " on ", device.to_string(), " in ", c.train.precision,
           *recompute == Recompute::blocks ? ", recomputing block activations" : "",
           dp.distributed() || std::string(dp.comm().backend()) != "local"
               ? str("; ", dp.size(), " rank(s) over ", dp.comm().backend(), ", fsdp ", c.train.fsdp)
               : std::string(),
           "; run dir ",
           o.run_dir);

  std::optional<VlmDataOptions> val_data;
  if (!c.data.val_shards.empty()) {
    VLM_ASSIGN_OR_RETURN(auto vd, make_data_options(c, c.data.val_shards, true));
    val_data = vd;
  }
  VLM_ASSIGN_OR_RETURN(const EvalOptions eo, make_eval_options(c));

  TrainResult result;
  result.start_step = st.step;
  // Per log window, where the training thread's time goes, and each step's values read once the next is queued.
  StepLog step_log(sinks, c.data.dedup_exact, t_start, &dp.comm());
  WindowTimes& window = step_log.window();
  step_log.set_peak_tflops(c.train.peak_tflops > 0 ? c.train.peak_tflops : device_peak_tflops(device, compute_dtype));
  const int64_t start_step = st.step;
  StepMemoryMeter memory_meter(device);  // over the first step of this process: memory.json

  // Micro-batches flow through one pipeline: right after micro-batch j's forward/backward is launched (on CUDA its
  // backward kernels are still running when forward_backward returns), the trainer reads ahead and starts the upload
  // of micro-batch j+1, which may be the first of the next step, so the copy overlaps compute. Double-buffered
  // (BatchUploader): j+1 goes to the other slot while j's kernels still read theirs.
  BatchUploader uploader(device);
  auto read_ahead = [&] {
    const double t = now_seconds();
    StepBatches s = data.read_step(c.train.batch_size, c.train.grad_accum);
    window.data_wait += now_seconds() - t;
    return s;
  };
  auto start_upload = [&](const PackedBatch& b) {
    const double t = now_seconds();
    UploadedBatch u = uploader.upload(b);
    window.upload += now_seconds() - t;
    return u;
  };
  StepBatches next;                     // the next step's batches
  std::optional<UploadedBatch> next_up;  // the upload of its first micro-batch with samples, when started
  auto read_next_step = [&] {
    next = read_ahead();
    const size_t f = first_with_samples(next, 0);
    if (next.error.ok() && f < next.micro.size()) next_up = start_upload(next.micro[f]);
  };
  // Bad samples are skipped, but a run made mostly of them stops (data.max_skip_fraction) rather than "succeed".
  SkipWindow skips(c.data.max_skip_fraction, c.data.skip_window, data.counters());
  int64_t empty_steps_warned = 0;
  if (st.step < c.train.steps) read_next_step();

  while (st.step < c.train.steps) {
    const int64_t step = st.step + 1;
    // Read ahead only for a step this call will run (the last step's read-ahead would be wasted work, or an error).
    const bool more_steps = step < c.train.steps && (o.stop_after_step < 0 || step < o.stop_after_step);
    const bool measure_memory = step == start_step + 1;
    if (measure_memory && dp.lead()) memory_meter.begin();
    if (measure_memory) fsdp->reset_peaks();
    fsdp->zero_grads();
    StepBatches cur = std::move(next);
    next = StepBatches();
    if (!cur.error.ok()) {
      VLM_RETURN_IF_ERROR(skips.check_partial());  // the data ran out mostly skipped: say why
      return cur.error;
    }
    VLM_RETURN_IF_ERROR(skips.add(cur.counters));
    if (step == c.train.steps) VLM_RETURN_IF_ERROR(skips.check_partial());  // a short run: before its checkpoint
    std::optional<UploadedBatch> up = std::move(next_up);
    next_up.reset();
    std::vector<StepLoss> losses;  // one per micro-batch, on the device until read
    // The gradient is the mean over the step's target tokens on every rank.
    VLM_ASSIGN_OR_RETURN(const int64_t step_tokens, dp.global_tokens(cur.target_tokens));
    const float grad_scale = step_tokens > 0 ? 1.f / static_cast<float>(step_tokens) : 0.f;
    // Every rank runs every micro-batch's collectives (Fsdp), also for the micro-batches it has no samples in.
    size_t fsdp_done = 0;
    auto fsdp_skip_to = [&](size_t upto) -> Status {
      for (; fsdp_done < upto; ++fsdp_done) {
        fsdp->begin_micro_batch(fsdp_done + 1 == cur.micro.size());
        VLM_RETURN_IF_ERROR(fsdp->end_micro_batch());
      }
      return Status();
    };
    size_t i = first_with_samples(cur, 0);
    if (i == cur.micro.size() && more_steps) read_next_step();
    while (i < cur.micro.size()) {
      const PackedBatch& b = cur.micro[i];
      if (!up) up = start_upload(b);
      VLM_RETURN_IF_ERROR(fsdp_skip_to(i));
      const double t_compute = now_seconds();
      uploader.acquire(*up);
      fsdp->begin_micro_batch(i + 1 == cur.micro.size());
      losses.push_back(model.forward_backward(up->inputs, grad_scale));
      VLM_RETURN_IF_ERROR(fsdp->end_micro_batch());
      fsdp_done = i + 1;
      uploader.release(*up);
      window.compute += now_seconds() - t_compute;
      up.reset();
      window.samples += b.n_samples;
      window.tokens += static_cast<double>(b.tokens.size());
      window.model_flops += train_flops_of_batch(c.model, b);
      st.rank_samples += b.n_samples;
      st.rank_tokens += static_cast<double>(b.tokens.size());
      i = first_with_samples(cur, i + 1);
      if (i < cur.micro.size()) {
        up = start_upload(cur.micro[i]);
      } else if (more_steps) {
        read_next_step();
      }
    }
    VLM_RETURN_IF_ERROR(fsdp_skip_to(cur.micro.size()));
    if (step_tokens == 0) {
      // Nothing to learn from (every sample of the step was skipped): not an optimizer step, and not counted.
      skips.count_empty_step();
      if (empty_steps_warned < 10) {
        ++empty_steps_warned;
        VLM_WARN("step ", step, ": no target token in its ", cur.micro.size(), " micro-batch(es) (every sample skipped);",
                 " no optimizer step taken", empty_steps_warned == 10 ? " (further ones not reported)" : "");
      }
      if (next.micro.empty() && next.error.ok()) read_next_step();  // the step's read-ahead was skipped (last step)
      continue;
    }
    const float lr = lr_at_step(step, c.train.steps, c.train.warmup_steps, c.train.adamw.lr, c.train.min_lr_ratio);
    const double t_opt = now_seconds();
    GradNorm grad_norm = opt.step(lr);  // the gradients were reduced over the ranks as each unit's backward ended
    VLM_RETURN_IF_ERROR(opt.status());
    window.compute += now_seconds() - t_opt;
    // The previous step's values, now that this one is queued: reading them at once would leave the device idle
    // while the host queued this step.
    VLM_RETURN_IF_ERROR(step_log.finish(device));
    if (measure_memory) {
      // Every rank's accounting (a collective) into rank 0's memory.json.
      const FsdpMemory measured = fsdp->memory(opt.state_bytes());
      VLM_ASSIGN_OR_RETURN(const std::vector<std::string> ranks,
                           dp.loader_states(str("{\"rank\": ", dp.rank(), ", \"measured\": ", measured.to_json(),
                                                ", \"formula\": ", fsdp->memory_formula(c.train.grad_accum).to_json(),
                                                "}")));
      if (dp.lead()) {
      MemoryReport mem = memory_meter.end(model.params(), opt.state_bytes(), c.train.precision);
      mem.master_weight_bytes = measured.parameters;  // this rank's, whatever the strategy keeps of them
      mem.compute_copy_bytes = measured.compute_copies;
      mem.gradient_bytes = measured.gradients;
      std::string layout = fsdp->layout_json();
      layout.pop_back();  // the ranks' records join the layout's object
      layout += ", \"ranks\": [";
      for (size_t r = 0; r < ranks.size(); ++r) layout += (r ? ", " : "") + ranks[r];
      mem.fsdp_json = layout + "]}";
      VLM_INFO(mem.summary());
      const std::string text = mem.to_json();
      VLM_RETURN_IF_ERROR(write_file_atomic(o.run_dir + "/memory.json", text.data(), text.size()));
      }
    }
    st.step = step;
    st.hosted_states = cur.states;  // after this step's last batch, not after the read-ahead

    step_log.queued(step, std::move(losses), std::move(grad_norm), step_tokens, lr,
                    step % c.train.log_every == 0 || step == c.train.steps, cur.counters);
    const bool last = step == c.train.steps;
    const bool stop = o.stop_after_step >= 0 && step >= o.stop_after_step;
    // An eval step is the same on every rank (finish() below is a collective); rank 0 alone evaluates.
    const bool eval_step = val_data && c.eval.every > 0 && step % c.eval.every == 0 && !last;
    const bool eval_now = eval_step && dp.lead();
    const bool ckpt_now = last || (c.train.ckpt_every > 0 && step % c.train.ckpt_every == 0);
    // This step's values now, so that nothing is saved or evaluated before its loss was checked.
    if (last || stop || eval_step || ckpt_now) VLM_RETURN_IF_ERROR(step_log.finish(device));
    if (eval_step) {
      VLM_RETURN_IF_ERROR(fsdp->begin_full_weights());  // sharded: every rank gathers, rank 0 evaluates
      if (eval_now) {
        VLM_ASSIGN_OR_RETURN(EvalResult r, evaluate(model, tokenizer, *val_data, eo));
        sinks.write(eval_record(step, r));
        sinks.write(eval_samples_record(step, r.examples, *val_data));
        VLM_RETURN_IF_ERROR(write_eval(o.run_dir, "step_" + std::to_string(step), r));
      }
      fsdp->end_full_weights();
    }
    if (ckpt_now) {
      if (dp.distributed() && !fsdp->sharded()) VLM_RETURN_IF_ERROR(dp.check_replicas(model.params()).status());
      VLM_ASSIGN_OR_RETURN(const std::vector<std::string> per_rank,
                           dp.loader_states(DataStreams::join(st.hosted_states)));  // every rank takes part
      st.stream_states = data.assemble(per_rank);
      for (auto [global, mine] : {std::pair{&st.samples_seen, &st.rank_samples}, {&st.tokens_seen, &st.rank_tokens}}) {
        VLM_ASSIGN_OR_RETURN(const double sum, dist::all_reduce_value(dp.comm(), *mine, dist::ReduceOp::sum));
        *global += sum;
        *mine = 0;
      }
      std::vector<double> weight_sq, grad_sq;
      VLM_RETURN_IF_ERROR(fsdp->param_sums_of_squares(weight_sq, grad_sq));
      if (dp.lead()) sinks.write(param_norms_record(step, model.params(), weight_sq, grad_sq));
      VLM_RETURN_IF_ERROR(write_checkpoint(ckpt, *fsdp, opt, st, o.resolved_toml));
      VLM_RETURN_IF_ERROR(dp.comm().barrier());  // no rank runs ahead of a checkpoint it may resume from
    }
    if (stop) break;
  }
  VLM_RETURN_IF_ERROR(step_log.finish(device));
  if (dp.distributed() && !fsdp->sharded()) {
    VLM_ASSIGN_OR_RETURN(const uint64_t checksum, dp.check_replicas(model.params()));
    if (dp.lead()) VLM_INFO("data parallel: the ", dp.size(), " ranks' weights agree (checksum ", checksum, ")");
  }
  sinks.flush();
  result.final_step = st.step;
  result.final_loss = step_log.last_loss();
  if (val_data && st.step == c.train.steps && st.step > start_step) {
    VLM_RETURN_IF_ERROR(fsdp->begin_full_weights());  // sharded: every rank gathers, rank 0 evaluates
    if (dp.lead()) {
      VLM_INFO("evaluating on ", c.eval.samples, " held-out images ...");
      VLM_ASSIGN_OR_RETURN(EvalResult r, evaluate(model, tokenizer, *val_data, eo));
      sinks.write(eval_record(st.step, r));
      sinks.write(eval_samples_record(st.step, r.examples, *val_data));
      VLM_RETURN_IF_ERROR(write_eval(o.run_dir, "final", r));
      result.has_eval = true;
      result.eval = r;
    }
    fsdp->end_full_weights();
  }
  sinks.flush();
  session_end.success();
  result.wall_seconds = now_seconds() - t_start;
  return result;
}

}  // namespace

Expected<TrainResult> run_training(const TrainerOptions& o) {
  VLM_ASSIGN_OR_RETURN(Device device, parse_device(o.config.train.device));
  VLM_ASSIGN_OR_RETURN(DataParallel dp, DataParallel::open(device));  // a world of one unless launched on several
  if (device.is_cuda()) device = dp.device();  // each GPU rank trains on its own GPU (LOCAL_RANK)
  Expected<TrainResult> r = train_rank(o, device, dp);
  if (!r.ok() && dp.distributed()) {
    // The other ranks wait in a collective this rank will never join: end the whole job, with this rank's error.
    VLM_ERROR("rank ", dp.rank(), " of ", dp.size(), ": ", r.status().to_string(), "; aborting every rank");
    dp.comm().abort(1);
  }
  return r;
}

}  // namespace vlm

// The run file: model, data, train and eval sections as typed structs with defaults. One declaration per option
// (add_run_options) drives TOML parsing, --set, --help and the resolved config.toml in the run directory.
#pragma once

#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/options.h"
#include "kernels/ops.h"
#include "model/model_config.h"

namespace vlm {

struct DataConfig {
  std::string train_shards;               // shard spec: dir, brace pattern, list file (@list.txt)
  std::string val_shards;                 // held-out shards for eval ("" = no eval)
  std::string tokenizer;                  // tokenizer.json path
  std::string task = "vqa";               // vqa (json "qa" pairs) | caption (txt / json caption) | mixed
  int max_turns = 8;                      // question/answer turns per training sequence (vqa, mixed)
  std::string caption_prompt = "describe the image.";
  std::string chat_template = "chat";     // chat (ChatML markers) | plain
  std::string resize = "bicubic";         // bicubic | bilinear
  std::vector<float> image_mean = {0.5f, 0.5f, 0.5f};
  std::vector<float> image_std = {0.5f, 0.5f, 0.5f};
  int epochs = 0;                         // passes over the train shards (0 = forever: train.steps ends training)
  bool shuffle_shards = true;
  int64_t shuffle_window = 256;           // samples shuffled within windows of this many (0 = read order)
  int decode_threads = 1;                 // image decode workers besides the training thread
  int prefetch_batches = 2;               // batches built ahead on a background thread
  std::string resize_mode = "center_crop";  // center_crop | border_pad | random_resized_crop (train only)
  int64_t max_pixels = 64ll << 20;        // source images larger than this are skipped from the header (bombs)
  bool dct_scaling = false;               // JPEG decoded at 1/2..1/8 scale when the output needs no more
  bool dedup_exact = false;               // drop samples whose image bytes repeat within the epoch (per rank)
};

// Pre-decode sample filters (data/loader/filters.h); every value's default disables its check. Counters per reason land
// in metrics.jsonl (samples_filtered) and the loader state.
struct DataFilterConfig {
  int min_side = 0;                       // both sides at least this many pixels
  double max_aspect_ratio = 0;            // max(w, h) / min(w, h)
  int min_caption_chars = 0;              // on the cleaned caption
  int max_caption_chars = 0;
  double min_similarity = -1;             // LAION json "similarity" >= this (< 0: off)
  double max_punsafe = -1;                // json "punsafe" < this (< 0: off)
  double max_pwatermark = -1;             // json "pwatermark" < this (< 0: off)
  std::vector<std::string> rules;         // generic "field op value" rules on the json, e.g. "aesthetic >= 5"
  bool missing_field_fails = true;        // a sample without a thresholded field is dropped
  bool any() const {
    return min_side > 0 || max_aspect_ratio > 0 || min_caption_chars > 0 || max_caption_chars > 0 ||
           min_similarity >= 0 || max_punsafe >= 0 || max_pwatermark >= 0 || !rules.empty();
  }
};

struct OptimConfig {
  int64_t steps = 1000;
  int batch_size = 32;                    // samples per micro-batch
  int grad_accum = 1;                     // micro-batches per optimizer step
  ops::AdamWSettings adamw;               // train.lr (the peak), beta1, beta2, eps, weight_decay, grad_clip
  float lr_scale_vision = 1.f;            // per-part learning-rate multipliers
  float lr_scale_projector = 1.f;
  float lr_scale_text = 1.f;
  int64_t warmup_steps = 50;
  float min_lr_ratio = 0.1f;              // cosine decays to lr * min_lr_ratio
  std::vector<std::string> freeze;        // parts not trained: vision, projector, text
  int64_t seed = 1234;
  std::string device = "cpu";
  std::string precision = "fp32";         // fp32 | bf16 (bf16 weights/activations, fp32 master + moments; cuda only)
  std::string recompute = "none";         // none | blocks (transformer blocks keep their input, redo the forward)
  bool deterministic = false;             // cuda: bit-identical results run to run (ops::set_deterministic)
  int threads = 0;                        // CPU threads (0 = all cores)
  int64_t log_every = 1;
  int64_t ckpt_every = 200;               // 0 disables periodic checkpoints (a final one is always written)
  int keep_last = 3;
  std::string init_from;                  // safetensors to start from (HF names); "" = random init
};

struct EvalConfig {
  int64_t every = 0;                      // steps between evals during training (0 = only at the end)
  int samples = 200;                      // held-out images per eval
  int max_new_tokens = 12;
  int batch_size = 64;
};

struct RunConfig {
  ModelConfig model;
  DataConfig data;
  DataFilterConfig filter;
  OptimConfig train;
  EvalConfig eval;
};

void add_run_options(OptionSet& options, RunConfig& config);
// Loads the run file (if any), applies the model preset first, then the file and the --set overrides, validates.
// `preset_from_file` handles "model.preset" so the preset's values sit below the file's own values.
Expected<RunConfig> load_run_config(const std::string& path, const std::vector<std::string>& overrides,
                                    std::string* resolved_toml = nullptr);
// The model's compute dtype for train.precision on train.device: f32 for "fp32", bf16 for "bf16" on cuda; an error
// naming both options otherwise (the CPU backend computes in fp32 only).
Expected<DType> training_compute_dtype(const OptimConfig& train);

}  // namespace vlm

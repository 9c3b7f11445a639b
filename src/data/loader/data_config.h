// The run file's [data] and [filter] sections: typed structs with defaults, their option declarations (the OptionSet
// that also parses TOML, --set and --help for the rest of the run file), their cross-key check, and the loader
// options built from them plus the few values the loader takes from the model and the run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/options.h"
#include "data/loader/filters.h"
#include "data/loader/idefics3_layout.h"
#include "data/loader/vlm_batch.h"

namespace vlm {

struct DataConfig {
  std::string train_shards;               // shard spec: dir, brace pattern, list file (@list.txt)
  std::string val_shards;                 // held-out shards for eval ("" = no eval)
  std::string tokenizer;                  // tokenizer.json path
  std::string task = "vqa";               // vqa (json "qa" pairs) | caption (txt / json caption) | mixed
  int max_turns = 8;                      // question/answer turns per training sequence (vqa, mixed)
  std::string caption_prompt = "describe the image.";
  std::string chat_template = "chat";     // chat (ChatML markers) | plain | hf | path to a model's chat template
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
  std::string overlong_caption = "truncate";  // a caption longer than max_seq_len: truncate | skip (counted)
  std::string invalid_utf8 = "skip";      // a .txt caption that is not UTF-8: skip | repair (U+FFFD; counted)
  // SmolVLM / Idefics3 models (the model folder's preprocessor_config.json; idefics3_prompt.h): tiles plus the
  // global image (on), the global image alone (off), or as the file says (auto); and the longest edge images are
  // resized to before tiling (0: the file's size.longest_edge). Both lower the image tokens per sample.
  std::string image_splitting = "auto";
  int longest_edge = 0;
  // Training stops with an error when more than this fraction of the last skip_window samples were bad (skipped:
  // undecodable, malformed, too long, invalid UTF-8), naming the main reason; 1 = never.
  double max_skip_fraction = 0.5;
  int64_t skip_window = 1000;

  // What single options cannot check: image_mean and image_std hold 3 values (invalid_argument naming both).
  Status validate() const;
};

// Pre-decode sample filters (filters.h); every value's default disables its check. Counters per reason land in
// metrics.jsonl (samples_filtered) and the loader state.
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
  // The filters' settings: a bad rule is an error naming filter.rules, inconsistent bounds one naming [filter].
  Expected<FilterConfig> filter_config() const;
};

// Declares the data.* and filter.* keys (defaults: the structs' current values), in run-file order.
void add_data_options(OptionSet& options, DataConfig& data, DataFilterConfig& filter);

// What the loader takes from outside [data] and [filter].
struct LoaderModelShape {
  int image_size = 0;    // model.vision.image_size
  int image_tokens = 0;  // placeholders per image
  int max_seq_len = 0;   // model.text.max_seq_len
  std::string model_dir;  // the model folder trained from (train.init_from): its preprocessing, when Idefics3's
};

// The Idefics3 preprocessing a run feeds its model: model folder `model_dir`'s (read_idefics3_preprocessing) with
// data.image_splitting and data.longest_edge applied; nullopt when the folder declares none. Errors: the folder's
// files, naming them.
Expected<std::optional<Idefics3Options>> run_idefics3_preprocessing(const DataConfig& data,
                                                                   const std::string& model_dir, int image_tokens);

// The loader options for `shard_spec` (expanded; not_found when it matches nothing). Training reads data.* as set,
// with the filters of [filter] when any is on and `seed` for the data order; eval (`for_eval`) reads one pass in a
// fixed order, center-cropped, without filters, online dedup or prefetching. Both tile as shape.model_dir's
// Idefics3 preprocessing says (run_idefics3_preprocessing).
Expected<VlmDataOptions> build_loader_options(const DataConfig& data, const DataFilterConfig& filter,
                                              const LoaderModelShape& shape, uint64_t seed,
                                              const std::string& shard_spec, bool for_eval);

}  // namespace vlm

// The [data] and [filter] run-file sections: option declarations, checks, and the loader options built from them.
#include "data/loader/data_config.h"

#include "core/logging.h"
#include "data/io/shard_spec.h"
#include "data/loader/idefics3_prompt.h"

namespace vlm {

Status DataConfig::validate() const {
  if (image_mean.size() != 3 || image_std.size() != 3)
    return invalid_argument("data.image_mean and data.image_std need 3 values");
  return Status();
}

Expected<FilterConfig> DataFilterConfig::filter_config() const {
  FilterConfig fc;
  fc.min_width = fc.min_height = min_side;
  fc.max_aspect_ratio = max_aspect_ratio;
  fc.min_caption_chars = min_caption_chars;
  fc.max_caption_chars = max_caption_chars;
  if (min_similarity >= 0) fc.min_similarity = min_similarity;
  if (max_punsafe >= 0) fc.max_punsafe = max_punsafe;
  if (max_pwatermark >= 0) fc.max_pwatermark = max_pwatermark;
  for (const auto& r : rules) {
    auto rule = parse_json_field_rule(r);
    if (!rule.ok()) return rule.status().with_context("filter.rules");
    fc.json_rules.push_back(std::move(*rule));
  }
  fc.missing_field_fails = missing_field_fails;
  VLM_RETURN_IF_ERROR(fc.validate().with_context("[filter]"));
  return fc;
}

void add_data_options(OptionSet& o, DataConfig& d, DataFilterConfig& f) {
  o.add("data.train_shards", &d.train_shards, "training shards (dir, brace pattern or @list.txt)");
  o.add("data.val_shards", &d.val_shards, "held-out shards for eval");
  o.add("data.tokenizer", &d.tokenizer, "tokenizer.json path");
  o.add("data.task", &d.task, "what the samples teach", one_of({"vqa", "caption", "mixed"}));
  o.add("data.max_turns", &d.max_turns, "question/answer turns per training sequence", positive<int>());
  o.add("data.caption_prompt", &d.caption_prompt, "user prompt for captioning");
  o.add("data.chat_template", &d.chat_template,
        "prompt format: chat | plain | hf (the Jinja chat template beside data.tokenizer) | a path to a "
        "tokenizer_config.json, chat_template.jinja or model directory");
  o.add("data.resize", &d.resize, "resize filter", one_of({"bicubic", "bilinear"}));
  o.add("data.image_mean", &d.image_mean, "per-channel mean for normalization");
  o.add("data.image_std", &d.image_std, "per-channel std for normalization");
  o.add("data.epochs", &d.epochs, "passes over the training shards (0 = until train.steps)", non_negative<int>());
  o.add("data.shuffle_shards", &d.shuffle_shards, "reshuffle the shard order every epoch");
  o.add("data.shuffle_window", &d.shuffle_window, "shuffle samples within windows of this many (0 = read order)",
        non_negative<int64_t>());
  o.add("data.decode_threads", &d.decode_threads, "image decode workers besides the training thread",
        non_negative<int>());
  o.add("data.prefetch_batches", &d.prefetch_batches, "batches built ahead on a background thread",
        non_negative<int>());
  o.add("data.resize_mode", &d.resize_mode, "how images become squares (training; eval always center-crops)",
        one_of({"center_crop", "border_pad", "random_resized_crop"}));
  o.add("data.max_pixels", &d.max_pixels, "skip source images with more pixels (decompression bombs)",
        positive<int64_t>());
  o.add("data.dct_scaling", &d.dct_scaling, "decode large JPEGs at 1/2..1/8 scale in the DCT domain (Pillow draft())");
  o.add("data.dedup_exact", &d.dedup_exact, "drop samples whose image bytes already appeared this epoch (online)");
  o.add("data.overlong_caption", &d.overlong_caption,
        "a caption turn longer than model.text.max_seq_len: truncate it to fit, or skip the sample (a question/answer "
        "turn that long is always skipped; both counted)",
        one_of({"truncate", "skip"}));
  o.add("data.invalid_utf8", &d.invalid_utf8,
        "a .txt caption that is not valid UTF-8: skip the sample, or repair it (U+FFFD for each bad sequence); counted",
        one_of({"skip", "repair"}));
  o.add("data.image_splitting", &d.image_splitting,
        "SmolVLM / Idefics3 models: cut each image into tiles plus a global image (on), feed the global image alone "
        "(off: 1 frame per image), or as the model's preprocessor_config.json says (auto)",
        one_of({"auto", "on", "off"}));
  o.add("data.longest_edge", &d.longest_edge,
        "SmolVLM / Idefics3 models: resize images to this longest edge before tiling (0: preprocessor_config.json's "
        "size.longest_edge; lower means fewer tiles, image tokens and activation memory)",
        in_range(0, 4096));
  o.add("data.max_skip_fraction", &d.max_skip_fraction,
        "training stops with an error when more than this fraction of the last data.skip_window samples were bad "
        "(1 = never)",
        in_range(0.0, 1.0));
  o.add("data.skip_window", &d.skip_window, "samples over which data.max_skip_fraction is measured",
        positive<int64_t>());
  o.add("filter.min_side", &f.min_side, "drop images whose shorter side is below this (0 = off)", non_negative<int>());
  o.add("filter.max_aspect_ratio", &f.max_aspect_ratio, "drop images with max(w,h)/min(w,h) above this (0 = off)",
        non_negative<double>());
  o.add("filter.min_caption_chars", &f.min_caption_chars, "drop cleaned captions shorter than this (0 = off)",
        non_negative<int>());
  o.add("filter.max_caption_chars", &f.max_caption_chars, "drop cleaned captions longer than this (0 = off)",
        non_negative<int>());
  o.add("filter.min_similarity", &f.min_similarity, "keep json similarity >= this, e.g. 0.28 (< 0 = off)");
  o.add("filter.max_punsafe", &f.max_punsafe, "keep json punsafe < this, e.g. 0.5 (< 0 = off)");
  o.add("filter.max_pwatermark", &f.max_pwatermark, "keep json pwatermark < this, e.g. 0.8 (< 0 = off)");
  o.add("filter.rules", &f.rules, "json rules that must all hold, e.g. [\"aesthetic >= 5\", \"lang == en\"]");
  o.add("filter.missing_field_fails", &f.missing_field_fails, "drop samples lacking a thresholded json field");
}

Expected<VlmDataOptions> build_loader_options(const DataConfig& data, const DataFilterConfig& filter,
                                              const LoaderModelShape& shape, uint64_t seed,
                                              const std::string& shard_spec, bool for_eval) {
  VlmDataOptions d;
  VLM_ASSIGN_OR_RETURN(d.shards, expand_shard_spec(shard_spec));
  if (d.shards.empty()) return not_found("no shards match '" + shard_spec + "'");
  d.task = data.task;
  d.max_turns = data.max_turns;
  d.caption_prompt = data.caption_prompt;
  d.image_size = shape.image_size;
  d.resize = data.resize;
  for (int i = 0; i < 3; ++i) {
    d.mean[i] = data.image_mean[static_cast<size_t>(i)];
    d.std[i] = data.image_std[static_cast<size_t>(i)];
  }
  d.image_tokens = shape.image_tokens;
  d.max_seq_len = shape.max_seq_len;
  d.epochs = for_eval ? 1 : data.epochs;
  d.shuffle_shards = for_eval ? false : data.shuffle_shards;
  d.shuffle_window = for_eval ? 0 : static_cast<uint64_t>(data.shuffle_window);
  d.decode_threads = data.decode_threads;
  d.prefetch_batches = for_eval ? 0 : data.prefetch_batches;
  d.seed = seed;
  d.resize_mode = for_eval ? "center_crop" : data.resize_mode;
  d.max_pixels = static_cast<uint64_t>(data.max_pixels);
  d.dct_scaling = data.dct_scaling;
  d.dedup_exact = data.dedup_exact && !for_eval;
  d.truncate_long_captions = data.overlong_caption == "truncate";
  d.invalid_utf8 = data.invalid_utf8 == "repair" ? InvalidUtf8::repair : InvalidUtf8::reject;
  if (filter.any() && !for_eval) {
    VLM_ASSIGN_OR_RETURN(d.filters, filter.filter_config());
  }
  VLM_ASSIGN_OR_RETURN(d.chat, chat_template_for(data.chat_template, data.tokenizer));
  VLM_ASSIGN_OR_RETURN(d.idefics3, run_idefics3_preprocessing(data, shape.model_dir, shape.image_tokens));
  return d;
}

Expected<std::optional<Idefics3Options>> run_idefics3_preprocessing(const DataConfig& data,
                                                                   const std::string& model_dir, int image_tokens) {
  VLM_ASSIGN_OR_RETURN(std::optional<Idefics3Options> o, read_idefics3_preprocessing(model_dir, image_tokens));
  if (!o) {
    if (data.image_splitting != "auto" || data.longest_edge != 0)
      VLM_WARN("data.image_splitting and data.longest_edge apply to SmolVLM / Idefics3 models only (train.init_from "
               "is not a folder whose preprocessor_config.json is Idefics3's): ignored");
    return o;
  }
  if (data.image_splitting != "auto") o->do_image_splitting = data.image_splitting == "on";
  if (data.longest_edge > 0) o->longest_edge = data.longest_edge;
  return o;
}

}  // namespace vlm

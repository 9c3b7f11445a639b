// `vlm data <tool>`: the tools' table, synth (generate the embedded datasets) and tokenizer-train (BPE vocabulary
// from shards).
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "commands.h"
#include "core/logging.h"
#include "data/io/shard_spec.h"
#include "data/loader/filters.h"
#include "data/loader/prompt.h"
#include "data/loader/sample_stream.h"
#include "data/tokenizer/bpe_trainer.h"
#include "data/tools/synth_shapes.h"
#include "track/metrics.h"

namespace vlm::cli {
namespace {

int usage_error(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.message().c_str());
  return 2;
}
int fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
  return 1;
}

int data_synth(int argc, char** argv, int first) {
  std::string out;
  int64_t samples = 10000, seed = 0, image_size = 64, shard_size = 2000, first_index = 0, quality = 90;
  Flags f("vlm data synth shapes --out DIR [--samples N] [--seed S]",
          "Render the 'shapes' dataset: 1-3 coloured shapes per image with a caption and question/answer pairs, "
          "written as webdataset shards (KEY.jpg, KEY.json, KEY.txt).");
  f.add_string("--out", &out, "output directory");
  f.add_int("--samples", &samples, "number of samples");
  f.add_int("--seed", &seed, "dataset seed (a different seed gives a disjoint random draw)");
  f.add_int("--first-index", &first_index, "global index of the first sample");
  f.add_int("--image-size", &image_size, "image side in pixels");
  f.add_int("--shard-size", &shard_size, "samples per shard");
  f.add_int("--quality", &quality, "JPEG quality");
  f.require("--out");
  if (int code = parse_command_flags(f, argc, argv, first); code >= 0) return code;
  if (f.positional().size() != 1 || f.positional()[0] != "shapes")
    return usage_error(invalid_argument("name the dataset: `vlm data synth shapes ...` (known: shapes)"));
  if (samples <= 0 || seed < 0 || image_size <= 0 || shard_size <= 0 || first_index < 0)
    return usage_error(invalid_argument("--samples, --image-size and --shard-size must be > 0; --seed >= 0"));
  SynthShapesOptions o;
  o.out_dir = out;
  o.samples = static_cast<uint64_t>(samples);
  o.seed = static_cast<uint64_t>(seed);
  o.first_index = static_cast<uint64_t>(first_index);
  o.image_size = static_cast<int>(image_size);
  o.samples_per_shard = static_cast<uint64_t>(shard_size);
  o.jpeg_quality = static_cast<int>(quality);
  if (Status s = o.validate(); !s.ok()) return usage_error(s);
  const double t0 = now_seconds();
  if (Status s = synth_shapes_write(o); !s.ok()) return fail(s);
  std::printf("wrote %lld samples (%lld shards) to %s in %.1f s\n", static_cast<long long>(samples),
              static_cast<long long>((samples + shard_size - 1) / shard_size), out.c_str(), now_seconds() - t0);
  return 0;
}

int data_tokenizer_train(int argc, char** argv, int first) {
  std::string shards, out, tmpl = "chat", invalid_utf8 = "skip";
  int64_t vocab = 1024, max_samples = 0, min_freq = 2;
  Flags f("vlm data tokenizer-train --shards SPEC --out tokenizer.json [--vocab-size N]",
          "Train a byte-level BPE tokenizer on the text of webdataset shards (captions from .txt or json "
          "\"caption\", questions and answers from json \"qa\", and the chat template's markup) and save it as a "
          "Hugging Face tokenizer.json. Special tokens: <|endoftext|> <|im_start|> <|im_end|> <image> <pad>.");
  f.add_string("--shards", &shards, "shard spec (dir, brace pattern, @list.txt)");
  f.add_string("--out", &out, "tokenizer.json to write");
  f.add_int("--vocab-size", &vocab, "ids in total (specials + 256 bytes + merges)");
  f.add_int("--min-frequency", &min_freq, "pairs rarer than this are not merged");
  f.add_int("--max-samples", &max_samples, "read at most this many samples (0 = all)");
  f.add_string("--template", &tmpl, "chat template whose markup is added to the corpus (chat, plain)");
  f.add_string("--invalid-utf8", &invalid_utf8, "a .txt caption that is not UTF-8: skip it or repair it (U+FFFD)");
  f.require("--shards");
  f.require("--out");
  if (int code = parse_command_flags(f, argc, argv, first); code >= 0) return code;
  auto list = expand_shard_spec(shards);
  if (!list.ok()) return fail(list.status());
  auto chat = chat_template_by_name(tmpl);
  if (!chat.ok()) return usage_error(chat.status());
  if (invalid_utf8 != "skip" && invalid_utf8 != "repair")
    return usage_error(invalid_argument("--invalid-utf8: '" + invalid_utf8 + "' (skip or repair)"));
  ShardStreamOptions so;
  so.shuffle_shards = false;
  auto stream = ShardSampleStream::create(*list, so);
  if (!stream.ok()) return fail(stream.status());

  std::vector<std::string> corpus;
  for (const std::string& s : {chat->user_prefix, chat->user_suffix, chat->assistant_prefix, chat->turn_separator})
    corpus.push_back(s);
  WebDatasetSample sample;
  int64_t n = 0, bad_utf8 = 0, bad_json = 0;
  double last = now_seconds();
  for (;;) {
    if (max_samples > 0 && n >= max_samples) break;
    auto more = (*stream)->next(sample);
    if (!more.ok()) return fail(more.status());
    if (!*more) break;
    ++n;
    if (std::string t = sample.text("txt"); !t.empty()) {
      // Raw bytes: invalid UTF-8 would become vocabulary of its own (JSON text is checked by the JSON parser).
      if (const size_t bad = first_invalid_utf8(t); bad != std::string::npos) {
        if (++bad_utf8 <= 5)
          VLM_WARN(sample.shard, ": ", sample.key, ".txt: not valid UTF-8 (byte ", bad, "); ",
                   invalid_utf8 == "skip" ? "skipped" : "repaired", bad_utf8 == 5 ? " (further ones counted only)" : "");
        if (invalid_utf8 == "repair") corpus.push_back(repair_utf8(t));
      } else {
        corpus.push_back(t);
      }
    }
    if (const auto* js = sample.get("json")) {
      auto j = nlohmann::json::parse(js->begin(), js->end(), nullptr, false);
      if (!j.is_object() && ++bad_json <= 5)
        VLM_WARN(sample.shard, ": ", sample.key, ".json: not a JSON object (invalid JSON or UTF-8); its text skipped");
      if (j.is_object()) {
        if (j.contains("caption") && j["caption"].is_string()) corpus.push_back(j["caption"].get<std::string>());
        if (j.contains("qa") && j["qa"].is_array())
          for (const auto& qa : j["qa"]) {
            if (qa.contains("question") && qa["question"].is_string()) corpus.push_back(qa["question"].get<std::string>());
            if (qa.contains("answer") && qa["answer"].is_string()) corpus.push_back(qa["answer"].get<std::string>());
          }
      }
    }
    if (now_seconds() - last > 5) {
      std::fprintf(stderr, "  read %lld samples, %zu texts\n", static_cast<long long>(n), corpus.size());
      last = now_seconds();
    }
  }
  BpeTrainOptions bo;
  bo.vocab_size = static_cast<int32_t>(vocab);
  bo.min_frequency = min_freq;
  bo.special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<pad>"};
  const double t0 = now_seconds();
  auto tok = train_bpe(corpus, bo);
  if (!tok.ok()) return fail(tok.status());
  if (Status s = tok->save(out); !s.ok()) return fail(s);
  std::printf("trained a %d-token BPE vocabulary on %zu texts from %lld samples in %.1f s -> %s\n", tok->vocab_size(),
              corpus.size(), static_cast<long long>(n), now_seconds() - t0, out.c_str());
  std::printf("captions not valid UTF-8: %lld %s; .json not readable: %lld skipped\n", static_cast<long long>(bad_utf8),
              invalid_utf8 == "skip" ? "skipped" : "repaired", static_cast<long long>(bad_json));
  return 0;
}

}  // namespace

const std::vector<Command>& data_tools() {
  static const std::vector<Command> tools = {
      {"synth", "render a synthetic dataset (shapes) as webdataset shards", data_synth},
      {"build", "images + captions (folder, CSV, JSONL) -> shards in img2dataset's layout", data_build},
      {"inspect", "statistics and a contact sheet of a set of shards", data_inspect},
      {"dedup", "exact / near-duplicate images and captions: keep-list, report, rewritten shards", data_dedup},
      {"filter", "rewrite shards keeping samples that pass size / aspect / caption / metadata filters", data_filter},
      {"tokenizer-train", "train a BPE tokenizer.json on the text of shards", data_tokenizer_train},
  };
  return tools;
}

int cmd_data(int argc, char** argv, int first) { return dispatch("vlm data", "tool", data_tools(), argc, argv, first); }

}  // namespace vlm::cli

// `vlm data build` and `vlm data inspect`.
#include <cstdio>

#include "cli.h"
#include "commands.h"
#include "data/io/shard_spec.h"
#include "data/tools/dataset_build.h"
#include "data/tools/dataset_inspect.h"
#include "track/progress.h"

namespace vlm::cli {
namespace {
int fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
  return 1;
}
}  // namespace

int data_build(int argc, char** argv, int first) {
  std::string source, out, image_col, caption_col;
  int64_t per_shard = 10000, max_side = 0, quality = 95, threads = 1;
  Flags f("vlm data build --from FOLDER|FILE.csv|FILE.jsonl --out DIR [--samples-per-shard N] [--max-side S]",
          "Write webdataset shards in img2dataset's layout (KEY.jpg|png|webp, KEY.txt, KEY.json, <shard>_stats.json) "
          "from a folder of images (captions from same-name .txt files), a CSV or a JSONL file. Unreadable images "
          "are skipped and reported.");
  f.add_string("--from", &source, "folder, .csv or .jsonl listing images and captions");
  f.add_string("--out", &out, "output folder for the shards");
  f.add_int("--samples-per-shard", &per_shard, "inputs per shard");
  f.add_int("--max-side", &max_side, "resize (and re-encode as JPEG) images whose longer side exceeds this (0 = keep)");
  f.add_int("--quality", &quality, "JPEG quality when re-encoding");
  f.add_int("--threads", &threads, "image workers besides the main thread");
  f.add_string("--image-column", &image_col, "CSV/JSONL field holding the image path");
  f.add_string("--caption-column", &caption_col, "CSV/JSONL field holding the caption");
  f.require("--from");
  f.require("--out");
  if (int code = parse_command_flags(f, argc, argv, first); code >= 0) return code;
  if (per_shard <= 0 || max_side < 0 || threads < 0 || quality < 1 || quality > 100)
    return fail(invalid_argument("--samples-per-shard > 0, --max-side >= 0, --threads >= 0, --quality 1..100"));
  auto inputs = list_build_inputs(source, image_col, caption_col);
  if (!inputs.ok()) return fail(inputs.status());
  BuildOptions o;
  o.out_dir = out;
  o.samples_per_shard = static_cast<uint64_t>(per_shard);
  o.max_side = static_cast<int>(max_side);
  o.jpeg_quality = static_cast<int>(quality);
  o.threads = static_cast<int>(threads);
  ProgressLine progress("build", inputs->size());
  auto r = build_shards(*inputs, o, [&](uint64_t done, uint64_t) { progress.update(done); });
  if (!r.ok()) return fail(r.status());
  progress.finish(inputs->size());
  std::printf("%s", r->to_json().c_str());
  return r->written > 0 ? 0 : 1;
}

int data_inspect(int argc, char** argv, int first) {
  std::string shards, json_out, sheet;
  int64_t max_samples = 0;
  Flags f("vlm data inspect --shards SPEC [--max-samples N] [--json FILE] [--contact-sheet FILE.jpg]",
          "Counts, fields, image formats, resolution / aspect / size distributions, caption lengths and problems of "
          "a set of shards; optionally a contact sheet of the first 64 images.");
  f.add_string("--shards", &shards, "shard spec (folder, brace pattern, @list.txt)");
  f.add_int("--max-samples", &max_samples, "read at most this many samples (0 = all)");
  f.add_string("--json", &json_out, "also write the report as JSON here");
  f.add_string("--contact-sheet", &sheet, "write an 8x8 grid of thumbnails here (JPEG)");
  f.require("--shards");
  if (int code = parse_command_flags(f, argc, argv, first); code >= 0) return code;
  auto list = expand_shard_spec(shards);
  if (!list.ok()) return fail(list.status());
  InspectOptions o;
  o.max_samples = static_cast<uint64_t>(std::max<int64_t>(0, max_samples));
  o.contact_sheet = sheet;
  ProgressLine progress("inspect", o.max_samples);
  auto r = inspect_shards(*list, o, [&](uint64_t n) { progress.update(n); });
  if (!r.ok()) return fail(r.status());
  progress.finish(r->samples);
  std::printf("%s", r->to_text().c_str());
  if (!json_out.empty()) {
    FILE* fo = std::fopen(json_out.c_str(), "w");
    if (!fo) return fail(io_error(json_out + ": cannot write"));
    std::fputs(r->to_json().c_str(), fo);
    std::fclose(fo);
  }
  if (!sheet.empty()) std::printf("contact sheet: %s\n", sheet.c_str());
  return 0;
}

}  // namespace vlm::cli

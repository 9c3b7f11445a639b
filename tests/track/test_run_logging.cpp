// What a training run logs beyond metrics.jsonl: its TensorBoard event file (scalars with tflops, eval sample images
// as PNG with their questions, the config as text, the hparams session started and ended), run.json's provenance,
// and the FLOP formula the tflops / mfu metrics use.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/options.h"
#include "core/safetensors.h"
#include "testing/test_util.h"
#include "track/metrics.h"
#include "track/proto_wire.h"
#include "track/run_dir.h"
#include "track/tfrecord.h"
#include "train/train_flops.h"
#include "train/trainer.h"
#include "train_fixture.h"

namespace vlm {
namespace {

std::map<int, std::string_view> first_fields(std::string_view msg) {
  std::map<int, std::string_view> out;
  auto f = proto::decode(msg);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  if (f.ok())
    for (const auto& x : *f) out.emplace(x.number, x.bytes);
  return out;
}

TEST(TrainingRun, WritesTensorBoardEventsAndProvenance) {
  const std::string root = testing::scratch_dir("run_logging");
  RunConfig c = testing::tiny_run_config(root + "/data");
  c.train.steps = 4;
  c.eval.samples = 3;
  TrainerOptions o;
  o.config = c;
  OptionSet options;
  add_run_options(options, o.config);
  o.resolved_toml = options.to_toml();
  o.run_dir = root + "/run";
  o.quiet = true;
  o.argv = {"vlm", "train", "--set", "train.lr=1e-3", "it's"};
  ASSERT_TRUE(run_training(o).ok());

  // metrics.jsonl: model TFLOP/s on every train record; no MFU on the CPU (no peak known).
  auto records = read_jsonl_metrics(o.run_dir + "/metrics.jsonl");
  ASSERT_TRUE(records.ok());
  int train_records = 0;
  for (const MetricRecord& r : *records) {
    double v;
    if (r.kind != "train") continue;
    ++train_records;
    ASSERT_TRUE(r.get("tflops", &v)) << "step " << r.step;
    EXPECT_GT(v, 0);
    EXPECT_FALSE(r.get("mfu", &v));
  }
  EXPECT_EQ(train_records, 4);

  // The event file: every record framed correctly, the kinds TensorBoard shows all present.
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(o.run_dir + "/tb")) files.push_back(e.path().string());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_NE(files[0].find("events.out.tfevents."), std::string::npos);
  auto bytes = read_file_bytes(files[0]);
  ASSERT_TRUE(bytes.ok());
  auto events = read_tfrecords(std::string(bytes->begin(), bytes->end()), files[0]);
  ASSERT_TRUE(events.ok()) << events.status().to_string();
  std::set<std::string> tags;
  int pngs = 0;
  std::string image_description;
  for (const std::string& e : *events) {
    auto event = first_fields(e);
    if (!event.count(5)) continue;
    auto values = proto::decode(event[5]);
    ASSERT_TRUE(values.ok());
    for (const auto& v : *values) {
      auto value = first_fields(v.bytes);
      tags.insert(std::string(value[1]));
      if (value.count(4)) {  // an image: its PNG signature, and the description beside it
        pngs += first_fields(value[4])[4].substr(0, 8) == std::string_view("\x89PNG\r\n\x1a\n", 8);
        image_description = std::string(first_fields(first_fields(v.bytes)[9])[3]);
      }
    }
  }
  for (const char* tag : {"train/loss", "train/lr", "train/grad_norm", "train/tflops", "train/data_wait_frac",
                          "eval/vqa/accuracy", "eval/examples", "eval/sample_0", "config/resolved",
                          "_hparams_/session_start_info", "_hparams_/session_end_info", "norms/weights",
                          "norms/grads"})
    EXPECT_TRUE(tags.count(tag)) << "no " << tag << " in the event file";
  EXPECT_GE(pngs, 1);
  EXPECT_NE(image_description.find("Q: "), std::string::npos) << image_description;
  EXPECT_NE(image_description.find("predicted: "), std::string::npos) << image_description;

  // run.json: the command line to paste, and where it ran.
  auto info_bytes = read_file_bytes(o.run_dir + "/run.json");
  ASSERT_TRUE(info_bytes.ok());
  auto info = nlohmann::json::parse(info_bytes->begin(), info_bytes->end());
  EXPECT_EQ(info["command_line"], "vlm train --set train.lr=1e-3 'it'\\''s'");
  EXPECT_TRUE(info.contains("cpu_model"));
  EXPECT_TRUE(info.contains("git_revision"));
  if (info["git_revision"] != "unknown") {
    EXPECT_TRUE(info["git_dirty"].is_boolean());
  }
  EXPECT_FALSE(info.contains("gpus")) << "a CPU build lists no GPU";
}

TEST(TrainFlops, APackedBatchCostsWhatItsSamplesCost) {
  ModelConfig c;
  c.vision = {32, 8, 3, 64, 2, 4, 128, 1e-6f};
  c.projector = {2, 0};
  c.text.vocab_size = 500;
  c.text.hidden = 64;
  c.text.layers = 2;
  c.text.heads = 4;
  c.text.kv_heads = 2;
  c.text.intermediate = 96;
  const int img = c.image_tokens();
  PackedBatch b;  // two samples: one image each, 10 and 25 text tokens
  b.cu_seqlens = {0, img + 10, img + 10 + img + 25};
  b.tokens.resize(static_cast<size_t>(b.cu_seqlens.back()));
  b.image_rows.resize(static_cast<size_t>(2 * img));
  const double expected = train_flops_per_sample(c, 10) + train_flops_per_sample(c, 25);
  EXPECT_NEAR(train_flops_of_batch(c, b), expected, expected * 1e-12);
  EXPECT_GT(train_flops_per_sample(c, 25), train_flops_per_sample(c, 10));
  EXPECT_EQ(device_peak_tflops(Device::cpu(), DType::bf16), 0.0);
}

TEST(RunDir, ShellCommandLineQuotesWhatTheShellWouldSplit) {
  EXPECT_EQ(shell_command_line({"vlm", "train", "--set", "a.b=c,d"}), "vlm train --set a.b=c,d");
  EXPECT_EQ(shell_command_line({"x", "two words", "", "a'b", "$HOME"}), "x 'two words' '' 'a'\\''b' '$HOME'");
}

}  // namespace
}  // namespace vlm

// Run logging: see run_log.h.
#include "train/run_log.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/logging.h"
#include "data/image/image.h"
#include "data/image/transforms.h"
#include "data/loader/sample_stream.h"
#include "kernels/ops.h"
#include "track/config_values.h"
#include "track/tensorboard.h"

namespace vlm {

namespace {

// Markdown code block: every line indented by four spaces.
std::string code_block(const std::string& text) {
  std::string out = "    ";
  for (char c : text) {
    out += c;
    if (c == '\n') out += "    ";
  }
  return out;
}

std::string table_cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
  return out;
}

}  // namespace

Status open_run_sinks(MultiSink& sinks, const RunSinkOptions& o) {
  VLM_ASSIGN_OR_RETURN(auto jsonl, JsonlSink::open(o.run_dir + "/metrics.jsonl", o.resumed ? o.start_step : 0));
  sinks.add(std::move(jsonl));
  VLM_ASSIGN_OR_RETURN(auto tb, TensorBoardSink::open(o.run_dir + "/tb", o.resumed ? o.start_step : -1));
  sinks.add(std::move(tb));
  if (o.console) sinks.add(std::make_unique<ConsoleProgress>(o.total_steps, o.start_step));
  Expected<std::vector<HParam>> hparams = flatten_toml(o.resolved_toml, o.run_dir + "/config.toml");
  if (!hparams.ok()) VLM_WARN("TensorBoard hparams left out: ", hparams.status().message());
  sinks.session_start(hparams.ok() ? *hparams : std::vector<HParam>{});
  MetricRecord config;
  config.step = o.start_step;
  config.kind = "config";
  config.texts.push_back({"config/resolved", code_block(o.resolved_toml)});
  sinks.write(config);
  return Status();
}

MetricRecord param_norms_record(int64_t step, const ParameterStore& params, const std::vector<double>& weight_sq,
                                const std::vector<double>& grad_sq) {
  MetricRecord rec;
  rec.step = step;
  MetricHistogram weights{"norms/weights", {}}, grads{"norms/grads", {}};
  size_t i = 0;
  for (const Param& p : params.all()) {
    if (p.trainable && i < weight_sq.size() && i < grad_sq.size()) {
      weights.values.push_back(std::sqrt(weight_sq[i]));
      grads.values.push_back(std::sqrt(grad_sq[i]));
    }
    ++i;
  }
  rec.histograms = {std::move(weights), std::move(grads)};
  return rec;
}

MetricRecord eval_samples_record(int64_t step, const std::vector<EvalExample>& examples, const VlmDataOptions& val,
                                 int max_images) {
  MetricRecord rec;
  rec.step = step;
  rec.kind = "eval";
  if (examples.empty()) return rec;
  std::string table = "| image | question | answer | prediction | |\n|---|---|---|---|---|\n";
  std::vector<std::string> keys;  // the first distinct images, in order
  std::map<std::string, std::string> descriptions;
  for (const EvalExample& e : examples) {
    const bool right = e.prediction == e.answer;
    table += "| " + table_cell(e.key) + " | " + table_cell(e.question) + " | " + table_cell(e.answer) + " | " +
             table_cell(e.prediction) + " | " + (right ? "right" : "wrong") + " |\n";
    if (!descriptions.count(e.key)) {
      if (static_cast<int>(keys.size()) >= max_images) continue;
      keys.push_back(e.key);
    }
    descriptions[e.key] += "Q: " + e.question + " — A: " + e.answer + " — predicted: " + e.prediction + "  \n";
  }
  rec.texts.push_back({"eval/examples", table});

  ShardStreamOptions so;
  so.shuffle_shards = false;
  auto stream = ShardSampleStream::create(val.shards, so);
  if (!stream.ok()) {
    VLM_WARN("eval sample images left out: ", stream.status().message());
    return rec;
  }
  std::map<std::string, MetricImage> found;
  WebDatasetSample sample;
  for (int scanned = 0; scanned < 100000 && found.size() < keys.size(); ++scanned) {
    Expected<bool> more = (*stream)->next(sample);
    if (!more.ok() || !*more) break;
    if (!descriptions.count(sample.key) || found.count(sample.key)) continue;
    Expected<Image> image = decode_sample_image(sample);
    if (!image.ok()) continue;
    Image img = std::move(*image);
    const int long_side = std::max(img.width, img.height);
    const double scale = long_side > 256 ? 256.0 / long_side : long_side < 128 ? 128.0 / long_side : 1.0;
    if (scale != 1.0)
      img = resize_to(img, std::max(1, static_cast<int>(img.width * scale + 0.5)),
                      std::max(1, static_cast<int>(img.height * scale + 0.5)));
    Expected<std::vector<uint8_t>> png = encode_png(img);
    if (!png.ok()) continue;
    found[sample.key] = {"", img.width, img.height, std::string(png->begin(), png->end()),
                         sample.key + "  \n" + descriptions[sample.key]};
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = found.find(keys[i]);
    if (it == found.end()) {
      VLM_WARN("eval sample image ", keys[i], " not found again in the held-out shards");
      continue;
    }
    it->second.tag = "eval/sample_" + std::to_string(i);
    rec.images.push_back(std::move(it->second));
  }
  return rec;
}

}  // namespace vlm

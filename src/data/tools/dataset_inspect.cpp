// Shard statistics and contact sheets (see dataset_inspect.h).
#include "data/tools/dataset_inspect.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/safetensors.h"
#include "data/image/image.h"
#include "data/image/transforms.h"
#include "data/loader/sample_stream.h"

namespace vlm {
namespace {

Distribution summarize(std::vector<double> v) {
  Distribution d;
  d.n = v.size();
  if (v.empty()) return d;
  std::sort(v.begin(), v.end());
  auto q = [&](double p) { return v[static_cast<size_t>(std::min<double>(v.size() - 1, std::floor(p * v.size())))]; };
  d.min = v.front();
  d.max = v.back();
  d.p5 = q(0.05);
  d.p50 = q(0.5);
  d.p95 = q(0.95);
  double s = 0;
  for (double x : v) s += x;
  d.mean = s / static_cast<double>(v.size());
  return d;
}

nlohmann::json dist_json(const Distribution& d) {
  return {{"n", d.n}, {"min", d.min}, {"p5", d.p5}, {"p50", d.p50}, {"p95", d.p95}, {"max", d.max}, {"mean", d.mean}};
}

const char* kImageFields[] = {"jpg", "jpeg", "png", "webp"};

}  // namespace

std::string InspectReport::to_json() const {
  nlohmann::json j = {{"shards", shards},
                      {"samples", samples},
                      {"samples_without_image", samples_without_image},
                      {"bad_images", bad_images},
                      {"bad_samples", bad_samples},
                      {"shards_failed", shards_failed},
                      {"unsafe_members", unsafe_members},
                      {"fields", fields},
                      {"formats", formats},
                      {"json_keys", json_keys},
                      {"width", dist_json(width)},
                      {"height", dist_json(height)},
                      {"aspect", dist_json(aspect)},
                      {"image_bytes", dist_json(image_bytes)},
                      {"caption_chars", dist_json(caption_chars)},
                      {"caption_words", dist_json(caption_words)},
                      {"problems", problems}};
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string InspectReport::to_text() const {
  std::ostringstream o;
  o << shards << " shards, " << samples << " samples (" << samples_without_image << " without an image, "
    << bad_images << " undecodable images, " << bad_samples << " malformed samples, " << unsafe_members
    << " unsafe member names skipped, " << shards_failed << " broken shards)\n";
  o << "fields:";
  for (const auto& [k, v] : fields) o << " " << k << "=" << v;
  o << "\nformats:";
  for (const auto& [k, v] : formats) o << " " << k << "=" << v;
  auto line = [&](const char* name, const Distribution& d) {
    char buf[200];
    std::snprintf(buf, sizeof(buf), "%-14s min %.0f  p5 %.0f  median %.0f  p95 %.0f  max %.0f  mean %.1f\n", name,
                  d.min, d.p5, d.p50, d.p95, d.max, d.mean);
    o << buf;
  };
  o << "\n";
  line("width", width);
  line("height", height);
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%-14s min %.2f  p5 %.2f  median %.2f  p95 %.2f  max %.2f\n", "aspect (w/h)",
                aspect.min, aspect.p5, aspect.p50, aspect.p95, aspect.max);
  o << buf;
  line("image bytes", image_bytes);
  line("caption chars", caption_chars);
  line("caption words", caption_words);
  for (const auto& p : problems) o << "problem: " << p << "\n";
  return o.str();
}

Expected<InspectReport> inspect_shards(const std::vector<std::string>& shards, const InspectOptions& o,
                                       const std::function<void(uint64_t)>& progress) {
  ShardStreamOptions so;
  so.shuffle_shards = false;
  VLM_ASSIGN_OR_RETURN(auto stream, ShardSampleStream::create(shards, so));
  InspectReport r;
  r.shards = shards.size();
  std::vector<double> w, h, aspect, bytes, chars, words;
  const int cells = o.contact_sheet.empty() ? 0 : o.sheet_columns * o.sheet_rows;
  Image sheet;
  if (cells > 0) {
    sheet = Image(o.sheet_columns * o.thumb, o.sheet_rows * o.thumb);
    std::fill(sheet.rgb.begin(), sheet.rgb.end(), 255);
  }
  int placed = 0;
  WebDatasetSample s;
  auto problem = [&](const std::string& m) {
    if (r.problems.size() < 20) r.problems.push_back(m);
  };
  for (;;) {
    if (o.max_samples > 0 && r.samples >= o.max_samples) break;
    auto more = stream->next(s);
    if (!more.ok()) return more.status();
    if (!*more) break;
    ++r.samples;
    for (const auto& [field, data] : s.fields) ++r.fields[field];
    const std::vector<uint8_t>* img = nullptr;
    for (const char* f : kImageFields)
      if ((img = s.get(f))) break;
    if (!img) {
      ++r.samples_without_image;
    } else {
      bytes.push_back(static_cast<double>(img->size()));
      auto info = read_image_info(img->data(), img->size());
      if (!info.ok()) {
        ++r.bad_images;
        problem(s.shard + ": " + s.key + ": " + info.status().message());
      } else {
        ++r.formats[image_format_name(info->format)];
        w.push_back(info->width);
        h.push_back(info->height);
        if (info->height > 0) aspect.push_back(static_cast<double>(info->width) / info->height);
        if (placed < cells) {
          auto decoded = decode_image(*img);
          if (decoded.ok()) {
            Image t = resize_shorter_then_center_crop(*decoded, o.thumb);
            const int cx = (placed % o.sheet_columns) * o.thumb, cy = (placed / o.sheet_columns) * o.thumb;
            for (int y = 0; y < o.thumb; ++y)
              std::copy(t.pixel(0, y), t.pixel(0, y) + 3 * o.thumb, sheet.pixel(cx, cy + y));
            ++placed;
          } else {
            ++r.bad_images;
            problem(s.shard + ": " + s.key + ": " + decoded.status().message());
          }
        }
      }
    }
    std::string caption = s.text("txt");
    if (const auto* js = s.get("json")) {
      auto j = nlohmann::json::parse(js->begin(), js->end(), nullptr, false);
      if (j.is_object()) {
        for (auto it = j.begin(); it != j.end(); ++it) ++r.json_keys[it.key()];
        if (caption.empty() && j.contains("caption") && j["caption"].is_string()) caption = j["caption"];
      } else {
        problem(s.shard + ": " + s.key + ".json: not a JSON object");
      }
    }
    if (!caption.empty()) {
      chars.push_back(static_cast<double>(caption.size()));
      std::istringstream ws(caption);
      std::string word;
      double n = 0;
      while (ws >> word) ++n;
      words.push_back(n);
    }
    if (progress) progress(r.samples);
  }
  const StreamCounters c = stream->counters();
  r.bad_samples = c.samples_skipped;
  r.shards_failed = c.shards_failed;
  r.unsafe_members = c.unsafe_members;
  r.width = summarize(w);
  r.height = summarize(h);
  r.aspect = summarize(aspect);
  r.image_bytes = summarize(bytes);
  r.caption_chars = summarize(chars);
  r.caption_words = summarize(words);
  if (cells > 0) {
    VLM_ASSIGN_OR_RETURN(auto jpg, encode_jpeg(sheet, 90));
    VLM_RETURN_IF_ERROR(write_file_atomic(o.contact_sheet, jpg.data(), jpg.size()));
  }
  return r;
}

}  // namespace vlm

// TensorBoard event files: see tensorboard.h. Field numbers follow tensorboard/compat/proto/{event,summary,tensor,
// tensor_shape,histogram}.proto and tensorboard/plugins/hparams/{api,plugin_data}.proto.
#include "track/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "track/proto_wire.h"
#include "track/run_dir.h"
#include "track/tfrecord.h"

namespace vlm {

double unix_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

namespace tensorboard_events {
namespace {

using proto::Writer;

// Event: wall_time = 1, step = 2, file_version = 3, summary = 5, session_log = 7.
Writer event(double wall_time, int64_t step) {
  Writer e;
  e.double_(1, wall_time);
  if (step != 0) e.int64(2, step);
  return e;
}

// SummaryMetadata { plugin_data = 1 { plugin_name = 1, content = 2 }, summary_description = 3 }.
Writer plugin_metadata(const std::string& plugin, const std::string& content) {
  Writer data;
  data.bytes(1, plugin);
  if (!content.empty()) data.bytes(2, content);
  Writer m;
  m.message(1, data);
  return m;
}

// TensorProto { dtype = 1, tensor_shape = 2 { dim = 2 { size = 1 } }, string_val = 8 }. DT_FLOAT = 1, DT_STRING = 7.
Writer string_tensor(const std::string& text) {
  Writer t;
  t.varint(1, 7);
  t.message(2, Writer());  // a scalar: a shape with no dimensions
  t.bytes(8, text);
  return t;
}

// The hparams plugin's placeholder value: an empty float vector (its metadata.NULL_TENSOR).
Writer null_tensor() {
  Writer dim;  // size 0: the default, so no field
  Writer shape;
  shape.message(2, dim);
  Writer t;
  t.varint(1, 1);
  t.message(2, shape);
  return t;
}

// HistogramProto { min = 1, max = 2, num = 3, sum = 4, sum_squares = 5, bucket_limit = 6, bucket = 7 }, over the
// finite values (a histogram with none has no buckets).
Writer histogram(const std::vector<double>& all) {
  std::vector<double> v;
  for (double x : all)
    if (std::isfinite(x)) v.push_back(x);
  Writer h;
  if (v.empty()) return h;
  const auto [lo_it, hi_it] = std::minmax_element(v.begin(), v.end());
  const double lo = *lo_it, hi = *hi_it;
  double sum = 0, sum_sq = 0;
  for (double x : v) sum += x, sum_sq += x * x;
  constexpr int kBuckets = 30;
  const int n = hi > lo ? kBuckets : 1;
  std::vector<double> limits(static_cast<size_t>(n)), counts(static_cast<size_t>(n), 0.0);
  for (int i = 0; i < n; ++i) limits[static_cast<size_t>(i)] = lo + (hi - lo) * (i + 1) / n;
  limits.back() = hi;
  for (double x : v) {
    int b = hi > lo ? static_cast<int>((x - lo) / (hi - lo) * n) : 0;
    counts[static_cast<size_t>(std::clamp(b, 0, n - 1))] += 1;
  }
  h.double_(1, lo).double_(2, hi).double_(3, static_cast<double>(v.size())).double_(4, sum).double_(5, sum_sq);
  h.packed_doubles(6, limits).packed_doubles(7, counts);
  return h;
}

// google.protobuf.Value { number_value = 2, string_value = 3, bool_value = 4 }.
Writer struct_value(const HParam& h) {
  Writer v;
  switch (h.kind) {
    case HParam::Kind::number:
      v.double_(2, h.number);
      break;
    case HParam::Kind::text:
      v.bytes(3, h.text);
      break;
    case HParam::Kind::boolean:
      v.boolean(4, h.flag);
      break;
  }
  return v;
}

// An Event holding one hparams summary value: HParamsPluginData { version = 1 (0), session_start_info = 3 |
// session_end_info = 4 } as the metadata's content, the null tensor as the value.
std::string hparams_event(double wall_time, const std::string& tag, int data_field, const Writer& info) {
  Writer plugin_data;
  plugin_data.message(data_field, info);
  Writer value;
  value.bytes(1, tag).message(9, plugin_metadata("hparams", plugin_data.data())).message(8, null_tensor());
  Writer summary;
  summary.message(1, value);
  Writer e = event(wall_time, 0);
  e.message(5, summary);
  return e.data();
}

}  // namespace

std::string file_version(double wall_time) {
  Writer e = event(wall_time, 0);
  e.bytes(3, "brain.Event:2");
  return e.data();
}

std::string session_log_start(double wall_time, int64_t step) {
  Writer log;  // SessionLog { status = 1 (START = 1) }
  log.varint(1, 1);
  Writer e = event(wall_time, step);
  e.message(7, log);
  return e.data();
}

// Summary { value = 1 }; Value { tag = 1, simple_value = 2, image = 4, histo = 5, tensor = 8, metadata = 9 }.
std::string summary(double wall_time, const MetricRecord& r) {
  Writer s;
  for (const auto& [name, v] : r.values) {
    Writer value;
    value.bytes(1, metric_tag(r.kind, name)).float_(2, static_cast<float>(v));
    s.message(1, value);
  }
  for (const MetricImage& img : r.images) {
    Writer image;  // Image { height = 1, width = 2, colorspace = 3 (3 = RGB), encoded_image_string = 4 }
    image.varint(1, static_cast<uint64_t>(img.height)).varint(2, static_cast<uint64_t>(img.width)).varint(3, 3);
    image.bytes(4, img.png);
    Writer value;
    value.bytes(1, img.tag).message(4, image);
    if (!img.description.empty()) {
      Writer meta;
      meta.bytes(3, img.description);
      value.message(9, meta);
    }
    s.message(1, value);
  }
  for (const MetricText& t : r.texts) {
    Writer value;  // TextPluginData { version = 1 } is 0: empty content
    value.bytes(1, t.tag).message(9, plugin_metadata("text", "")).message(8, string_tensor(t.markdown));
    s.message(1, value);
  }
  for (const MetricHistogram& h : r.histograms) {
    Writer value;
    value.bytes(1, h.tag).message(5, histogram(h.values));
    s.message(1, value);
  }
  Writer e = event(wall_time, r.step);
  e.message(5, s);
  return e.data();
}

// SessionStartInfo { hparams = 1 (map<string, Value>: entry { key = 1, value = 2 }), start_time_secs = 5 }.
std::string session_start(double wall_time, const std::vector<HParam>& hparams) {
  Writer info;
  for (const HParam& h : hparams) {
    Writer entry;
    entry.bytes(1, h.name).message(2, struct_value(h));
    info.message(1, entry);
  }
  info.double_(5, wall_time);
  return hparams_event(wall_time, "_hparams_/session_start_info", 3, info);
}

// SessionEndInfo { status = 1 (SUCCESS = 1, FAILURE = 2), end_time_secs = 2 }.
std::string session_end(double wall_time, bool success) {
  Writer info;
  info.varint(1, success ? 1 : 2).double_(2, wall_time);
  return hparams_event(wall_time, "_hparams_/session_end_info", 4, info);
}

}  // namespace tensorboard_events

Expected<std::unique_ptr<TensorBoardSink>> TensorBoardSink::open(const std::string& dir, int64_t resumed_from_step) {
  VLM_RETURN_IF_ERROR(ensure_dir(dir));
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  const double now = unix_seconds();
  std::string path = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host;
  // Two files in one second (a quick resume): a suffix keeps both; TensorBoard reads them in name order.
  for (int i = 1; std::filesystem::exists(path); ++i)
    path = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host + "." +
           std::to_string(i);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return io_error(path + ": cannot create");
  std::unique_ptr<TensorBoardSink> sink(new TensorBoardSink(f, path));
  sink->append(tensorboard_events::file_version(now));
  if (resumed_from_step >= 0) sink->append(tensorboard_events::session_log_start(now, resumed_from_step + 1));
  return sink;
}

TensorBoardSink::~TensorBoardSink() {
  if (f_) std::fclose(f_);
}

void TensorBoardSink::append(const std::string& event) {
  const std::string framed = tfrecord_frame(event);
  std::fwrite(framed.data(), 1, framed.size(), f_);
  std::fflush(f_);
}

void TensorBoardSink::write(const MetricRecord& record) {
  append(tensorboard_events::summary(unix_seconds(), record));
}

void TensorBoardSink::flush() { std::fflush(f_); }

void TensorBoardSink::session_start(const std::vector<HParam>& hparams) {
  append(tensorboard_events::session_start(unix_seconds(), hparams));
}

void TensorBoardSink::session_end(bool success) { append(tensorboard_events::session_end(unix_seconds(), success)); }

}  // namespace vlm

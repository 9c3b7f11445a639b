// TensorBoard event files written natively: a metric sink whose records become Event protos (hand-encoded,
// proto_wire.h) framed as TFRecords (tfrecord.h) in <dir>/events.out.tfevents.<unix time>.<host>, which
// `tensorboard --logdir <runs>` reads. What each record becomes (tags through metric_tag(): "train/loss"):
//   scalars      Summary.Value.simple_value                       -> the Scalars dashboard
//   images       Summary.Image (PNG), the description as metadata  -> Images
//   texts        a string tensor with plugin "text" (markdown)     -> Text
//   histograms   HistogramProto, 30 equal-width buckets            -> Histograms / Distributions
//   session      "_hparams_/session_start_info" / "session_end_info" with plugin "hparams" -> HParams
// Every event is flushed as it is written, so a crashed run keeps what it logged.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "track/metrics.h"

namespace vlm {

// The serialized Event protos (no framing), for tests and tools.
namespace tensorboard_events {
std::string file_version(double wall_time);
std::string session_log_start(double wall_time, int64_t step);
std::string summary(double wall_time, const MetricRecord& record);
std::string session_start(double wall_time, const std::vector<HParam>& hparams);
std::string session_end(double wall_time, bool success);
}  // namespace tensorboard_events

class TensorBoardSink final : public MetricSink {
 public:
  // Creates `dir` if needed and a new event file in it, starting with the file-version event. A resumed run passes
  // the step it resumes from: a SessionLog START at the next step makes TensorBoard drop the earlier files' events
  // from that step on (they are logged again).
  static Expected<std::unique_ptr<TensorBoardSink>> open(const std::string& dir, int64_t resumed_from_step = -1);
  ~TensorBoardSink() override;
  void write(const MetricRecord& record) override;
  void flush() override;
  void session_start(const std::vector<HParam>& hparams) override;
  void session_end(bool success) override;
  const std::string& path() const { return path_; }

 private:
  TensorBoardSink(FILE* f, std::string path) : f_(f), path_(std::move(path)) {}
  void append(const std::string& event);
  FILE* f_;
  std::string path_;
};

// Seconds since the Unix epoch (an Event's wall_time).
double unix_seconds();

}  // namespace vlm

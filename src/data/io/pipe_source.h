// PipeSource: the webdataset `pipe:CMD` shard, e.g. `pipe:aws s3 cp s3://bucket/x.tar -` or `pipe:curl -s URL`.
// CMD runs as `/bin/sh -c CMD` (posix_spawn; the shell sees exactly what the user wrote, nothing is pasted around
// it) in its own process group, with stdin from /dev/null and default signal dispositions. read() returns its
// stdout; its stderr is drained alongside (so the command can never block on it) and its tail kept. At the end of
// stdout the command is reaped: a non-zero exit or a death by signal is an io_error naming the command, the status
// and the last lines of stderr, so a failed download is never mistaken for a short shard.
// Destroying the source before the end sends SIGTERM to the command's process group, then SIGKILL after a grace
// period, and reaps it: no zombies, no orphaned pipelines.
// Used by one thread at a time.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "data/io/byte_source.h"

namespace vlm {

struct PipeOptions {
  int kill_grace_ms = 2000;         // SIGTERM -> SIGKILL delay when the source is destroyed early
  size_t stderr_tail_bytes = 8192;  // how much of the command's stderr is kept for error messages
  int stderr_tail_lines = 5;        // how many of its last lines an error message quotes
};

class PipeSource : public ByteSource {
 public:
  // `command` is the part after "pipe:"; name() is "pipe:" + command.
  static Expected<std::unique_ptr<PipeSource>> open(const std::string& command, const PipeOptions& options = {});
  ~PipeSource() override;
  PipeSource(const PipeSource&) = delete;
  PipeSource& operator=(const PipeSource&) = delete;

  Expected<size_t> read(void* buf, size_t n) override;
  const std::string& name() const override { return name_; }

  pid_t pid() const { return pid_; }  // the shell's pid (= its process group id); -1 once reaped
  uint64_t bytes_read() const { return bytes_read_; }
  // The kept tail of the command's stderr so far.
  const std::string& stderr_tail() const { return stderr_tail_; }

 private:
  PipeSource(std::string command, const PipeOptions& options);
  Status spawn();
  void drain_stderr();         // reads what stderr has now (non-blocking)
  Status finish();             // stdout ended: reap the command and judge its exit status
  void kill_and_reap();
  std::string stderr_last_lines() const;

  std::string command_, name_;
  PipeOptions options_;
  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  std::string stderr_tail_;
  uint64_t bytes_read_ = 0;
  bool eof_ = false;
  Status error_;  // sticky
};

}  // namespace vlm

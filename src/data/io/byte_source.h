// Byte sources: where shard bytes come from. A ByteSource is a forward-only stream (read, skip); the tar reader
// sits on top of it and never needs the whole shard in memory. Here: local files and in-memory buffers; http(s)://
// (http_source.h) and pipe:CMD (pipe_source.h) sources live in their own files, all behind open_source().
// A source is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace vlm {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to `n` bytes into `buf`. Returns the count read: 0 only at the end of the stream, fewer than `n`
  // possibly before it (call again). io_error naming the source on failure.
  virtual Expected<size_t> read(void* buf, size_t n) = 0;
  // Skips up to `n` bytes; returns how many were skipped (fewer only at the end of the stream). The default reads
  // and discards; seekable sources override it.
  virtual Expected<uint64_t> skip(uint64_t n);
  // The name used in every error and warning (the path or URL).
  virtual const std::string& name() const = 0;
};

// Reads until `n` bytes or the end of the stream; returns the count read.
Expected<size_t> read_full(ByteSource& source, void* buf, size_t n);

// A local file, read with POSIX read(); skip() seeks when the file is regular.
class FileSource : public ByteSource {
 public:
  static Expected<std::unique_ptr<FileSource>> open(const std::string& path);
  ~FileSource() override;
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

  Expected<size_t> read(void* buf, size_t n) override;
  Expected<uint64_t> skip(uint64_t n) override;
  const std::string& name() const override { return path_; }

 private:
  FileSource(int fd, std::string path, bool seekable, uint64_t size);
  int fd_ = -1;
  std::string path_;
  bool seekable_ = false;
  uint64_t size_ = 0;  // file size when seekable
  uint64_t pos_ = 0;
};

// Bytes already in memory (tests, fuzzers, data fetched by other means).
class MemorySource : public ByteSource {
 public:
  MemorySource(std::vector<uint8_t> bytes, std::string name);
  Expected<size_t> read(void* buf, size_t n) override;
  Expected<uint64_t> skip(uint64_t n) override;
  const std::string& name() const override { return name_; }

 private:
  std::vector<uint8_t> bytes_;
  std::string name_;
  size_t pos_ = 0;
};

// Opens a shard URL with default options:
//   a local path or file://path  -> FileSource
//   http://... or https://...     -> HttpSource (http_source.h: streamed, retried, resumed with Range)
//   pipe:CMD                      -> PipeSource (pipe_source.h: CMD's stdout; a non-zero exit is an error)
// Any other scheme:// is `unsupported`, naming it.
Expected<std::unique_ptr<ByteSource>> open_source(const std::string& url);

}  // namespace vlm

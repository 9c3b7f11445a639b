// Streaming tar: a reader that yields regular-file members one at a time from any ByteSource (never the whole
// shard in memory), and a writer that produces a shard atomically (temp file, then rename).
//
// Reader formats: POSIX ustar (with the 155-byte prefix), GNU (`././@LongLink` long names, base-256 sizes), pax
// extended headers (`path`, `size`), old V7. Only regular files are yielded; directories, links, devices, fifos and
// vendor types are skipped. Members whose name is absolute or has a `..` component are skipped with a warning.
// End of archive: a zero block or a clean EOF at a header boundary (EOF anywhere else, padding included, is a
// truncation error).
// Every malformed input returns a Status naming the shard, the member (when known) and the byte offset; the error
// is sticky (every later call returns it), so a broken shard can never loop.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/io/byte_source.h"

namespace vlm {

struct TarReaderOptions {
  uint64_t max_member_size = 1ull << 30;   // larger regular members are an error (out_of_range)
  uint64_t max_extension_size = 1u << 20;  // GNU long-name and pax header bodies
};

struct TarEntry {
  std::string name;            // path inside the archive, leading "./" removed
  uint64_t size = 0;           // body bytes
  uint64_t header_offset = 0;  // archive offset of the member's first header (incl. long-name / pax headers)
};

struct TarMember {
  std::string name;
  uint64_t header_offset = 0;
  std::vector<uint8_t> data;
};

class TarReader {
 public:
  explicit TarReader(std::unique_ptr<ByteSource> source, TarReaderOptions options = {});
  static Expected<std::unique_ptr<TarReader>> open(const std::string& url, TarReaderOptions options = {});

  // Advances to the next regular-file member and fills `entry`; its body is then read with read_body() or skipped
  // with skip_body() (or skipped automatically by the next call). Returns false at the end of the archive.
  Expected<bool> next_entry(TarEntry& entry);
  // Reads the current member's body into `out` (resized to its size).
  Status read_body(std::vector<uint8_t>& out);
  Status skip_body();
  // next_entry() + read_body().
  Expected<bool> next(TarMember& member);

  const std::string& name() const { return source_->name(); }
  uint64_t offset() const { return offset_; }  // archive bytes consumed so far
  // Members skipped because their names were unsafe (absolute or `..`).
  uint64_t unsafe_names_skipped() const { return unsafe_names_skipped_; }
  // The sticky error, or ok.
  const Status& status() const { return status_; }

 private:
  Expected<size_t> read_bytes(void* dst, size_t n);  // through the buffer; short only at EOF
  Expected<uint64_t> skip_bytes(uint64_t n);
  Status fail(Status s);
  Status error_at(uint64_t offset, const std::string& member, const std::string& what,
                  StatusCode code = StatusCode::parse_error) const;
  Status read_extension(uint64_t size, uint64_t offset, const std::string& what, std::string& out);
  Status consume_padding(uint64_t size, uint64_t offset, const std::string& member);

  std::unique_ptr<ByteSource> source_;
  TarReaderOptions options_;
  std::vector<uint8_t> buf_;
  size_t buf_pos_ = 0, buf_len_ = 0;
  uint64_t offset_ = 0;
  bool source_eof_ = false;
  bool done_ = false;
  Status status_;
  // The member whose body is pending.
  bool body_pending_ = false;
  std::string body_name_;
  uint64_t body_size_ = 0, body_offset_ = 0;
  uint64_t unsafe_names_skipped_ = 0;
};

struct TarWriterOptions {
  uint64_t mtime = 0;  // the same for every member, so equal inputs give byte-identical shards
  uint32_t mode = 0644;
};

// Writes `path` through `path.tmp`: members are appended with add(); close() writes the end-of-archive blocks,
// flushes, fsyncs and renames onto `path`. A writer destroyed without close() removes its temp file, so a shard
// with the final name is always complete.
class TarWriter {
 public:
  static Expected<std::unique_ptr<TarWriter>> create(const std::string& path, TarWriterOptions options = {});
  ~TarWriter();
  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;

  // Appends a regular file. Names longer than 100 bytes get a GNU `././@LongLink` record. Names must be relative
  // and free of `..` (invalid_argument otherwise).
  Status add(const std::string& name, const void* data, size_t size);
  Status add(const std::string& name, const std::vector<uint8_t>& data) { return add(name, data.data(), data.size()); }
  Status add(const std::string& name, std::string_view text) { return add(name, text.data(), text.size()); }
  Status close();

  const std::string& path() const { return path_; }
  uint64_t bytes_written() const { return offset_; }

 private:
  TarWriter(std::FILE* file, std::string path, std::string tmp_path, TarWriterOptions options);
  Status write(const void* data, size_t size);
  Status write_header(const std::string& name, char type, uint64_t size, bool gnu_magic);
  Status pad();

  std::FILE* file_ = nullptr;
  std::string path_, tmp_path_;
  TarWriterOptions options_;
  uint64_t offset_ = 0;
  Status status_;
};

}  // namespace vlm

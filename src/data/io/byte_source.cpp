// File and memory byte sources, and the URL dispatch of open_source() (http(s):// and pipe: live in their own files).
#include "data/io/byte_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cstring>

#include "data/io/http_source.h"
#include "data/io/pipe_source.h"

namespace vlm {

Expected<uint64_t> ByteSource::skip(uint64_t n) {
  char scratch[16384];
  uint64_t done = 0;
  while (done < n) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(n - done, sizeof(scratch)));
    VLM_ASSIGN_OR_RETURN(size_t got, read(scratch, want));
    if (got == 0) break;
    done += got;
  }
  return done;
}

Expected<size_t> read_full(ByteSource& source, void* buf, size_t n) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t done = 0;
  while (done < n) {
    VLM_ASSIGN_OR_RETURN(size_t got, source.read(p + done, n - done));
    if (got == 0) break;
    done += got;
  }
  return done;
}

// ---- FileSource ----

FileSource::FileSource(int fd, std::string path, bool seekable, uint64_t size)
    : fd_(fd), path_(std::move(path)), seekable_(seekable), size_(size) {}

FileSource::~FileSource() {
  if (fd_ >= 0) ::close(fd_);
}

Expected<std::unique_ptr<FileSource>> FileSource::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    std::string msg = str(path, ": cannot open: ", std::strerror(err));
    return err == ENOENT ? not_found(msg) : io_error(msg);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return io_error(str(path, ": fstat: ", std::strerror(err)));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return invalid_argument(str(path, ": is a directory, not a shard"));
  }
  const bool seekable = S_ISREG(st.st_mode);
  if (seekable) ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return std::unique_ptr<FileSource>(new FileSource(fd, path, seekable, static_cast<uint64_t>(st.st_size)));
}

Expected<size_t> FileSource::read(void* buf, size_t n) {
  for (;;) {
    ssize_t got = ::read(fd_, buf, n);
    if (got >= 0) {
      pos_ += static_cast<uint64_t>(got);
      return static_cast<size_t>(got);
    }
    if (errno == EINTR) continue;
    return io_error(str(path_, ": read at offset ", pos_, ": ", std::strerror(errno)));
  }
}

Expected<uint64_t> FileSource::skip(uint64_t n) {
  if (!seekable_) return ByteSource::skip(n);
  // lseek() past the end succeeds silently, so clamp to the size seen at open time.
  uint64_t step = pos_ >= size_ ? 0 : std::min<uint64_t>(n, size_ - pos_);
  if (::lseek(fd_, static_cast<off_t>(pos_ + step), SEEK_SET) < 0)
    return io_error(str(path_, ": seek to offset ", pos_ + step, ": ", std::strerror(errno)));
  pos_ += step;
  return step;
}

// ---- MemorySource ----

MemorySource::MemorySource(std::vector<uint8_t> bytes, std::string name)
    : bytes_(std::move(bytes)), name_(std::move(name)) {}

Expected<size_t> MemorySource::read(void* buf, size_t n) {
  size_t got = std::min(n, bytes_.size() - pos_);
  if (got) std::memcpy(buf, bytes_.data() + pos_, got);
  pos_ += got;
  return got;
}

Expected<uint64_t> MemorySource::skip(uint64_t n) {
  uint64_t step = std::min<uint64_t>(n, bytes_.size() - pos_);
  pos_ += static_cast<size_t>(step);
  return step;
}

// ---- open_source ----

Expected<std::unique_ptr<ByteSource>> open_source(const std::string& url) {
  if (url.empty()) return invalid_argument("empty shard URL");
  if (url.rfind("pipe:", 0) == 0) {
    VLM_ASSIGN_OR_RETURN(auto pipe, PipeSource::open(url.substr(5)));
    return std::unique_ptr<ByteSource>(std::move(pipe));
  }
  std::string path = url;
  size_t colon = url.find("://");
  if (colon != std::string::npos) {
    std::string scheme = url.substr(0, colon);
    std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return std::tolower(c); });
    if (scheme == "http" || scheme == "https") {
      VLM_ASSIGN_OR_RETURN(auto http, HttpSource::open(url));
      return std::unique_ptr<ByteSource>(std::move(http));
    }
    if (scheme != "file") return unsupported(str(url, ": the ", scheme, ":// scheme is not supported"));
    path = url.substr(colon + 3);
  }
  VLM_ASSIGN_OR_RETURN(auto file, FileSource::open(path));
  return std::unique_ptr<ByteSource>(std::move(file));
}

}  // namespace vlm

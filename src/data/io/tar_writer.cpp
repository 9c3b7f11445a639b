// Tar writer (see tar.h): ustar headers, GNU long names, base-256 sizes past 8 GiB, atomic rename on close.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "data/io/tar.h"
#include "data/io/tar_format.h"

namespace vlm {
namespace {

using namespace tar;

// Writes `value` as zero-padded octal filling len-1 digits plus a NUL; false when it does not fit.
bool put_octal(uint8_t* f, size_t len, uint64_t value) {
  const size_t digits = len - 1;
  if (digits < 22 && value >> (3 * digits)) return false;
  for (size_t i = digits; i-- > 0;) {
    f[i] = static_cast<uint8_t>('0' + (value & 7));
    value >>= 3;
  }
  f[digits] = 0;
  return true;
}

void put_base256(uint8_t* f, size_t len, uint64_t value) {
  std::memset(f, 0, len);
  for (size_t i = len; i-- > 1;) {
    f[i] = static_cast<uint8_t>(value & 0xff);
    value >>= 8;
  }
  f[0] = 0x80;
}

std::string check_name(const std::string& name) {
  if (name.empty()) return "empty member name";
  if (name.find('\0') != std::string::npos) return "member name contains NUL";
  if (name[0] == '/') return str("member name '", name, "' is absolute");
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    if (end - start == 2 && name.compare(start, 2, "..") == 0) return str("member name '", name, "' contains '..'");
    start = end + 1;
  }
  return "";
}

}  // namespace

TarWriter::TarWriter(std::FILE* file, std::string path, std::string tmp_path, TarWriterOptions options)
    : file_(file), path_(std::move(path)), tmp_path_(std::move(tmp_path)), options_(options) {}

TarWriter::~TarWriter() {
  if (file_) {
    std::fclose(file_);
    std::remove(tmp_path_.c_str());
  }
}

Expected<std::unique_ptr<TarWriter>> TarWriter::create(const std::string& path, TarWriterOptions options) {
  std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return io_error(str(tmp, ": cannot create: ", std::strerror(errno)));
  std::setvbuf(f, nullptr, _IOFBF, 1 << 20);
  return std::unique_ptr<TarWriter>(new TarWriter(f, path, std::move(tmp), options));
}

Status TarWriter::write(const void* data, size_t size) {
  if (size && std::fwrite(data, 1, size, file_) != size) {
    status_ = io_error(str(tmp_path_, ": write at offset ", offset_, ": ", std::strerror(errno)));
    return status_;
  }
  offset_ += size;
  return Status();
}

Status TarWriter::pad() {
  static const uint8_t kZeros[kBlock] = {};
  const uint64_t rem = offset_ % kBlock;
  return rem ? write(kZeros, static_cast<size_t>(kBlock - rem)) : Status();
}

Status TarWriter::write_header(const std::string& name, char type, uint64_t size, bool gnu_magic) {
  uint8_t h[kBlock] = {};
  std::memcpy(h + kNameOff, name.data(), std::min(name.size(), kNameLen));
  put_octal(h + kModeOff, kIdLen, type == 'L' ? 0 : options_.mode & 07777);
  put_octal(h + kUidOff, kIdLen, 0);
  put_octal(h + kGidOff, kIdLen, 0);
  if (!put_octal(h + kSizeOff, kSizeLen, size)) put_base256(h + kSizeOff, kSizeLen, size);
  if (!put_octal(h + kMtimeOff, kMtimeLen, options_.mtime)) put_base256(h + kMtimeOff, kMtimeLen, options_.mtime);
  h[kTypeOff] = static_cast<uint8_t>(type);
  std::memcpy(h + kMagicOff, gnu_magic ? "ustar  \0" : "ustar\0" "00", 8);
  if (!gnu_magic) {
    put_octal(h + 329, 8, 0);  // devmajor
    put_octal(h + 337, 8, 0);  // devminor
  }
  const int64_t sum = header_checksum(h, false);
  put_octal(h + kChksumOff, 7, static_cast<uint64_t>(sum));  // six digits, NUL, then a space
  h[kChksumOff + 7] = ' ';
  return write(h, kBlock);
}

Status TarWriter::add(const std::string& name, const void* data, size_t size) {
  if (!status_.ok()) return status_;
  if (!file_) return invalid_argument(str(path_, ": add('", name, "') after close()"));
  std::string bad = check_name(name);
  if (!bad.empty()) return invalid_argument(str(path_, ": ", bad));
  const bool long_name = name.size() > kNameLen;
  if (long_name) {
    VLM_RETURN_IF_ERROR(write_header(kGnuLongName, 'L', name.size() + 1, true));
    VLM_RETURN_IF_ERROR(write(name.c_str(), name.size() + 1));
    VLM_RETURN_IF_ERROR(pad());
  }
  VLM_RETURN_IF_ERROR(write_header(name, '0', size, long_name));
  VLM_RETURN_IF_ERROR(write(data, size));
  return pad();
}

Status TarWriter::close() {
  if (!status_.ok()) return status_;
  if (!file_) return Status();
  static const uint8_t kEnd[2 * kBlock] = {};
  VLM_RETURN_IF_ERROR(write(kEnd, sizeof(kEnd)));
  std::FILE* f = file_;
  file_ = nullptr;
  bool ok = std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  int err = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp_path_.c_str());
    status_ = io_error(str(tmp_path_, ": flush/close failed: ", std::strerror(err)));
    return status_;
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    err = errno;
    std::remove(tmp_path_.c_str());
    status_ = io_error(str("rename ", tmp_path_, " -> ", path_, ": ", std::strerror(err)));
    return status_;
  }
  return Status();
}

}  // namespace vlm

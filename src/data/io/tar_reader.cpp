// Streaming tar reader (see tar.h): header parsing, GNU long names, pax records, body reads and skips.
#include <algorithm>
#include <cstring>

#include "core/logging.h"
#include "data/io/tar.h"
#include "data/io/tar_format.h"

namespace vlm {
namespace {

using namespace tar;

constexpr size_t kReadBuffer = 64 * 1024;
constexpr uint64_t kBodyChunk = 16ull << 20;  // bodies grow in chunks, so a lying size field cannot allocate it all

std::string field_string(const uint8_t* f, size_t len) {
  size_t n = 0;
  while (n < len && f[n] != 0) ++n;
  return std::string(reinterpret_cast<const char*>(f), n);
}

// A numeric header field: octal digits with optional leading spaces, ended by NUL, space or the field's end; or
// GNU base-256 (high bit of the first byte set). An all-blank field reads as 0. Returns false when malformed.
bool parse_number(const uint8_t* f, size_t len, uint64_t& out) {
  if (f[0] & 0x80) {
    if (f[0] & 0x40) return false;  // negative base-256
    uint64_t v = f[0] & 0x3f;
    for (size_t i = 1; i < len; ++i) {
      if (v >> 56) return false;
      v = (v << 8) | f[i];
    }
    out = v;
    return true;
  }
  size_t i = 0;
  while (i < len && f[i] == ' ') ++i;
  uint64_t v = 0;
  for (; i < len && f[i] >= '0' && f[i] <= '7'; ++i) {
    if (v >> 60) return false;
    v = v * 8 + static_cast<uint64_t>(f[i] - '0');
  }
  if (i < len && f[i] != ' ' && f[i] != 0) return false;
  out = v;
  return true;
}

bool is_zero_block(const uint8_t* h) {
  for (size_t i = 0; i < kBlock; ++i)
    if (h[i]) return false;
  return true;
}

std::string strip_dot_slash(std::string name) {
  size_t p = 0;
  while (name.compare(p, 2, "./") == 0) {
    p += 2;
    while (p < name.size() && name[p] == '/' && name.compare(p, 2, "./") != 0) ++p;
  }
  return name.substr(p);
}

bool is_unsafe_name(const std::string& name) {
  if (!name.empty() && name[0] == '/') return true;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    if (name.compare(start, end - start, "..") == 0 && end - start == 2) return true;
    start = end + 1;
  }
  return false;
}

struct PaxFields {
  bool has_path = false, has_size = false;
  std::string path;
  uint64_t size = 0;
};

// Records are "<len> <key>=<value>\n" with <len> counting the whole record. Returns an error message or "".
std::string parse_pax(const std::string& data, PaxFields& pax) {
  size_t p = 0;
  const size_t n = data.size();
  while (p < n) {
    if (data[p] == '\0') break;  // NUL padding some writers leave after the last record
    size_t q = p;
    uint64_t len = 0;
    while (q < n && data[q] >= '0' && data[q] <= '9') {
      len = len * 10 + static_cast<uint64_t>(data[q] - '0');
      if (len > n) return str("pax record at byte ", p, " claims ", len, " bytes, past the header's end");
      ++q;
    }
    if (q == p || q >= n || data[q] != ' ') return str("malformed pax record length at byte ", p);
    if (len < q - p + 3 || p + len > n) return str("pax record at byte ", p, " has a bad length ", len);
    if (data[p + len - 1] != '\n') return str("pax record at byte ", p, " does not end with a newline");
    std::string record = data.substr(q + 1, p + len - 1 - (q + 1));
    size_t eq = record.find('=');
    if (eq == std::string::npos || eq == 0) return str("pax record at byte ", p, " has no key=value");
    std::string key = record.substr(0, eq), value = record.substr(eq + 1);
    if (key == "path") {
      pax.has_path = !value.empty();
      pax.path = value;
    } else if (key == "size") {
      if (value.empty()) {
        pax.has_size = false;
      } else {
        uint64_t v = 0;
        for (char c : value) {
          if (c < '0' || c > '9' || v > (UINT64_MAX - 9) / 10) return str("pax size '", value, "' is not a number");
          v = v * 10 + static_cast<uint64_t>(c - '0');
        }
        pax.has_size = true;
        pax.size = v;
      }
    }
    p += len;
  }
  return "";
}

}  // namespace

TarReader::TarReader(std::unique_ptr<ByteSource> source, TarReaderOptions options)
    : source_(std::move(source)), options_(options) {
  VLM_CHECK(source_ != nullptr, "TarReader needs a source");
}

Expected<std::unique_ptr<TarReader>> TarReader::open(const std::string& url, TarReaderOptions options) {
  VLM_ASSIGN_OR_RETURN(auto source, open_source(url));
  return std::make_unique<TarReader>(std::move(source), options);
}

Status TarReader::fail(Status s) {
  status_ = std::move(s);
  body_pending_ = false;
  return status_;
}

Status TarReader::error_at(uint64_t offset, const std::string& member, const std::string& what,
                           StatusCode code) const {
  if (member.empty()) return Status(code, str(name(), ": ", what, " (header at offset ", offset, ")"));
  return Status(code, str(name(), ": ", what, " (member '", member, "', header at offset ", offset, ")"));
}

Expected<size_t> TarReader::read_bytes(void* dst_void, size_t n) {
  auto* dst = static_cast<uint8_t*>(dst_void);
  if (buf_.empty()) buf_.resize(kReadBuffer);
  size_t done = 0;
  while (done < n) {
    if (buf_pos_ < buf_len_) {
      size_t take = std::min(n - done, buf_len_ - buf_pos_);
      std::memcpy(dst + done, buf_.data() + buf_pos_, take);
      buf_pos_ += take;
      done += take;
      continue;
    }
    if (source_eof_) break;
    if (n - done >= buf_.size()) {  // large reads bypass the buffer
      VLM_ASSIGN_OR_RETURN(size_t got, source_->read(dst + done, n - done));
      if (got == 0) source_eof_ = true;
      done += got;
      continue;
    }
    VLM_ASSIGN_OR_RETURN(size_t got, source_->read(buf_.data(), buf_.size()));
    if (got == 0) source_eof_ = true;
    buf_pos_ = 0;
    buf_len_ = got;
  }
  offset_ += done;
  return done;
}

Expected<uint64_t> TarReader::skip_bytes(uint64_t n) {
  uint64_t from_buf = std::min<uint64_t>(n, buf_len_ - buf_pos_);
  buf_pos_ += static_cast<size_t>(from_buf);
  uint64_t done = from_buf;
  if (done < n && !source_eof_) {
    VLM_ASSIGN_OR_RETURN(uint64_t got, source_->skip(n - done));
    if (got < n - done) source_eof_ = true;
    done += got;
  }
  offset_ += done;
  return done;
}

Status TarReader::consume_padding(uint64_t size, uint64_t offset, const std::string& member) {
  // Writers always pad to a block; a missing pad means the file was cut off right after the body.
  const uint64_t pad = padded_size(size) - size;
  auto r = skip_bytes(pad);
  if (!r.ok()) return fail(r.status());
  if (*r < pad) return fail(error_at(offset, member, "truncated padding after the body"));
  return Status();
}

Status TarReader::read_extension(uint64_t size, uint64_t offset, const std::string& what, std::string& out) {
  if (size > options_.max_extension_size)
    return fail(error_at(offset, "", str(what, " of ", size, " bytes exceeds the limit of ",
                                         options_.max_extension_size)));
  out.resize(static_cast<size_t>(size));
  auto got = read_bytes(out.data(), out.size());
  if (!got.ok()) return fail(got.status());
  if (*got < size) return fail(error_at(offset, "", str("truncated ", what, " (", *got, " of ", size, " bytes)")));
  return consume_padding(size, offset, "");
}

Expected<bool> TarReader::next_entry(TarEntry& entry) {
  if (!status_.ok()) return status_;
  if (done_) return false;
  if (body_pending_) VLM_RETURN_IF_ERROR(skip_body());

  PaxFields pax;
  std::string long_name;
  bool has_long_name = false, in_extension = false;
  uint64_t first_header = offset_;
  uint8_t h[kBlock];
  for (;;) {
    const uint64_t hoff = offset_;
    auto got = read_bytes(h, kBlock);
    if (!got.ok()) return fail(got.status());
    if (*got == 0 || (*got == kBlock && is_zero_block(h))) {
      if (in_extension) return fail(error_at(hoff, "", "archive ends right after a long-name or pax header"));
      done_ = true;  // clean EOF or the end-of-archive zero block (its twin, if any, is never needed)
      return false;
    }
    if (*got < kBlock) return fail(error_at(hoff, "", str("truncated header (", *got, " of 512 bytes)")));

    std::string hdr_name = field_string(h + kNameOff, kNameLen);
    uint64_t stored_sum = 0;
    if (!parse_number(h + kChksumOff, kChksumLen, stored_sum))
      return fail(error_at(hoff, hdr_name, "non-octal checksum field (not a tar header?)"));
    const int64_t sum_u = header_checksum(h, false), sum_s = header_checksum(h, true);
    if (static_cast<int64_t>(stored_sum) != sum_u && static_cast<int64_t>(stored_sum) != sum_s)
      return fail(error_at(hoff, hdr_name, str("bad header checksum (stored ", stored_sum, ", computed ", sum_u, ")")));

    const bool posix_magic = std::memcmp(h + kMagicOff, "ustar\0", 6) == 0;
    if (posix_magic && h[kPrefixOff] != 0) hdr_name = field_string(h + kPrefixOff, kPrefixLen) + "/" + hdr_name;
    std::string name = has_long_name ? long_name : (pax.has_path ? pax.path : hdr_name);

    uint64_t size = 0;  // the header's own size: extension bodies use it, members may get pax's instead
    if (!parse_number(h + kSizeOff, kSizeLen, size))
      return fail(error_at(hoff, name, "non-numeric size field"));

    const char type = static_cast<char>(h[kTypeOff]);
    switch (type) {
      case 'L': {  // GNU long name for the next header
        VLM_RETURN_IF_ERROR(read_extension(size, hoff, "GNU long name", long_name));
        long_name = field_string(reinterpret_cast<const uint8_t*>(long_name.data()), long_name.size());
        has_long_name = true;
        in_extension = true;
        continue;
      }
      case 'K': {  // GNU long link target: not needed for regular files
        std::string ignored;
        VLM_RETURN_IF_ERROR(read_extension(size, hoff, "GNU long link name", ignored));
        in_extension = true;
        continue;
      }
      case 'x':
      case 'g': {  // pax extended header (next member) / global header (ignored)
        std::string data;
        VLM_RETURN_IF_ERROR(read_extension(size, hoff, "pax header", data));
        if (type == 'x') {
          std::string err = parse_pax(data, pax);
          if (!err.empty()) return fail(error_at(hoff, "", err));
          in_extension = true;
        } else if (!in_extension) {
          first_header = offset_;
        }
        continue;
      }
      case 'S':
        return fail(error_at(hoff, name, "GNU sparse members are not supported", StatusCode::unsupported));
      case '1': case '2': case '3': case '4': case '5': case '6':
        // Links, devices, directories, fifos: no body follows (as POSIX and Python's tarfile read it).
        pax = PaxFields();
        has_long_name = in_extension = false;
        first_header = offset_;
        continue;
      case '0': case '\0': case '7':
        break;
      default: {  // vendor extensions and other types: skip the body
        auto skipped = skip_bytes(size);
        if (!skipped.ok()) return fail(skipped.status());
        if (*skipped < size)
          return fail(error_at(hoff, name, str("truncated body (", *skipped, " of ", size, " bytes)")));
        VLM_RETURN_IF_ERROR(consume_padding(size, hoff, name));
        pax = PaxFields();
        has_long_name = in_extension = false;
        first_header = offset_;
        continue;
      }
    }

    // A regular file.
    if (pax.has_size) size = pax.size;
    name = strip_dot_slash(name);
    const bool old_style_dir = type == '\0' && !name.empty() && name.back() == '/';
    const bool unsafe = is_unsafe_name(name);
    if (name.empty() || old_style_dir || unsafe) {
      if (unsafe) {
        ++unsafe_names_skipped_;
        VLM_WARN(this->name(), ": skipping member '", name, "' at offset ", first_header,
                 ": unsafe name (absolute or with '..')");
      }
      body_pending_ = true;
      body_name_ = name;
      body_size_ = size;
      body_offset_ = first_header;
      VLM_RETURN_IF_ERROR(skip_body());
      pax = PaxFields();
      has_long_name = in_extension = false;
      first_header = offset_;
      continue;
    }
    if (size > options_.max_member_size)
      return fail(error_at(first_header, name,
                           str("member of ", size, " bytes exceeds the limit of ", options_.max_member_size, " bytes"),
                           StatusCode::out_of_range));
    entry.name = std::move(name);
    entry.size = size;
    entry.header_offset = first_header;
    body_pending_ = true;
    body_name_ = entry.name;
    body_size_ = size;
    body_offset_ = first_header;
    return true;
  }
}

Status TarReader::read_body(std::vector<uint8_t>& out) {
  if (!status_.ok()) return status_;
  VLM_CHECK(body_pending_, "TarReader::read_body without a current member (call next_entry first)");
  out.clear();
  uint64_t done = 0;
  while (done < body_size_) {
    const uint64_t chunk = std::min(body_size_ - done, kBodyChunk);
    out.resize(static_cast<size_t>(done + chunk));
    auto got = read_bytes(out.data() + done, static_cast<size_t>(chunk));
    if (!got.ok()) return fail(got.status());
    done += *got;
    if (*got < chunk) {
      out.clear();
      return fail(error_at(body_offset_, body_name_, str("truncated body (", done, " of ", body_size_, " bytes)")));
    }
  }
  body_pending_ = false;
  return consume_padding(body_size_, body_offset_, body_name_);
}

Status TarReader::skip_body() {
  if (!status_.ok()) return status_;
  if (!body_pending_) return Status();
  auto got = skip_bytes(body_size_);
  if (!got.ok()) return fail(got.status());
  if (*got < body_size_)
    return fail(error_at(body_offset_, body_name_, str("truncated body (", *got, " of ", body_size_, " bytes)")));
  body_pending_ = false;
  return consume_padding(body_size_, body_offset_, body_name_);
}

Expected<bool> TarReader::next(TarMember& member) {
  TarEntry entry;
  VLM_ASSIGN_OR_RETURN(bool more, next_entry(entry));
  if (!more) return false;
  VLM_RETURN_IF_ERROR(read_body(member.data));
  member.name = std::move(entry.name);
  member.header_offset = entry.header_offset;
  return true;
}

}  // namespace vlm

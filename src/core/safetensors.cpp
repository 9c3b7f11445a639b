// safetensors parsing with full validation, and atomic writing.
#include "core/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace vlm {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the reference implementation's limit

struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr && size) munmap(addr, size);
  }
};

Expected<SafetensorsFile> parse_view(const uint8_t* data, size_t size, const std::string& source,
                                     const std::shared_ptr<void>& owner) {
  auto fail = [&](const std::string& why) { return parse_error(source + ": " + why); };
  if (size < 8) return fail("file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  if (header_len > kMaxHeaderBytes) return fail("header length " + std::to_string(header_len) + " is too large");
  if (header_len > size - 8)
    return fail("header length " + std::to_string(header_len) + " runs past the end of the file (" +
                std::to_string(size) + " bytes)");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(data + 8, data + 8 + header_len);
  } catch (const std::exception& e) {
    return fail(std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) return fail("header is not a JSON object");

  const uint8_t* body = data + 8 + header_len;
  const uint64_t body_size = size - 8 - header_len;
  SafetensorsFile out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) return fail("__metadata__ is not an object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string()) return fail("__metadata__." + m.key() + " is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
      return fail(where + " needs dtype, shape and data_offsets");
    if (!entry["dtype"].is_string()) return fail(where + ": dtype is not a string");
    auto dtype = dtype_from_safetensors_name(entry["dtype"].get<std::string>());
    if (!dtype.ok()) return fail(where + ": " + dtype.status().message());
    const auto& jshape = entry["shape"];
    if (!jshape.is_array() || jshape.size() > kMaxDims) return fail(where + ": shape must be a list of <= 6 ints");
    std::vector<int64_t> dims;
    uint64_t numel = 1;
    for (const auto& d : jshape) {
      if (!d.is_number_unsigned()) return fail(where + ": shape entries must be non-negative integers");
      uint64_t v = d.get<uint64_t>();
      if (v > (1ull << 40) || (v && numel > (1ull << 50) / v)) return fail(where + ": shape is too large");
      numel *= v;
      dims.push_back(static_cast<int64_t>(v));
    }
    const auto& off = entry["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      return fail(where + ": data_offsets must be [begin, end]");
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > body_size)
      return fail(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                  ") outside the data section of " + std::to_string(body_size) + " bytes");
    if (end - begin != numel * dtype_size(*dtype))
      return fail(where + ": " + std::to_string(end - begin) + " bytes for shape with " + std::to_string(numel) +
                  " elements of " + dtype_name(*dtype));
    ranges.emplace_back(begin, end);
    out.tensors[name] = Tensor::borrow(const_cast<uint8_t*>(body + begin), Shape(dims), *dtype, Device::cpu(), owner);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) return fail("two tensors' data_offsets overlap");
  return out;
}

}  // namespace

Expected<SafetensorsFile> safetensors_parse(std::shared_ptr<const std::vector<uint8_t>> bytes,
                                            const std::string& source) {
  const uint8_t* p = bytes->data();
  size_t n = bytes->size();
  return parse_view(p, n, source, std::const_pointer_cast<void>(std::static_pointer_cast<const void>(bytes)));
}

Expected<SafetensorsFile> safetensors_load(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return io_error(path + ": " + std::strerror(e));
  }
  auto map = std::make_shared<Mapping>();
  map->size = static_cast<size_t>(st.st_size);
  if (map->size > 0) {
    map->addr = ::mmap(nullptr, map->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map->addr == MAP_FAILED) {
      map->addr = nullptr;
      int e = errno;
      ::close(fd);
      return io_error(path + ": mmap: " + std::strerror(e));
    }
  }
  ::close(fd);
  return parse_view(static_cast<const uint8_t*>(map->addr), map->size, path, map);
}

Expected<std::vector<uint8_t>> read_file_bytes(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(path + ": " + std::strerror(errno));
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      return io_error(path + ": read: " + std::strerror(e));
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  ::close(fd);
  return out;
}

Status write_file_atomic(const std::string& path, const void* data, size_t size) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error(tmp + ": " + std::strerror(errno));
  const char* p = static_cast<const char*>(data);
  size_t left = size;
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return io_error(tmp + ": write: " + std::strerror(e));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return io_error(tmp + ": fsync/close: " + std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return io_error("rename " + tmp + " -> " + path + ": " + std::strerror(e));
  }
  return Status();
}

Status safetensors_save(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> host;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") return invalid_argument(path + ": '__metadata__' is reserved");
    if (header.contains(name)) return invalid_argument(path + ": tensor name '" + name + "' appears twice");
    Tensor h = t.to(Device::cpu());
    header[name] = {{"dtype", dtype_safetensors_name(h.dtype())},
                    {"shape", h.shape().to_vector()},
                    {"data_offsets", {offset, offset + h.nbytes()}}};
    offset += h.nbytes();
    host.push_back(std::move(h));
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(path + ": a tensor name or metadata value is not valid UTF-8 (" + e.what() + ")");
  }
  while ((8 + json.size()) % 8 != 0) json.push_back(' ');  // align the data section to 8 bytes
  std::vector<uint8_t> out(8 + json.size() + offset);
  uint64_t len = json.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(len >> (8 * i));
  std::memcpy(out.data() + 8, json.data(), json.size());
  size_t pos = 8 + json.size();
  for (const auto& h : host) {
    if (h.nbytes()) std::memcpy(out.data() + pos, h.raw_data(), h.nbytes());
    pos += h.nbytes();
  }
  return write_file_atomic(path, out.data(), out.size());
}

}  // namespace vlm

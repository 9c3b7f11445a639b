// TFRecord framing: see tfrecord.h.
#include "track/tfrecord.h"

#include <array>

namespace vlm {

namespace {

// Byte-at-a-time table of the reflected Castagnoli polynomial 0x82f63b78; event files are small, so no slicing.
const std::array<uint32_t, 256>& crc32c_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

void put_le(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_le(std::string_view s, size_t pos, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(s[pos + i])) << (8 * i);
  return v;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  const auto& table = crc32c_table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord_frame(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  put_le(out, payload.size(), 8);
  put_le(out, masked_crc32c(out.data(), 8), 4);
  out.append(payload.data(), payload.size());
  put_le(out, masked_crc32c(payload.data(), payload.size()), 4);
  return out;
}

Expected<std::vector<std::string>> read_tfrecords(std::string_view bytes, const std::string& source) {
  std::vector<std::string> records;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const std::string where =
        source + ": record " + std::to_string(records.size()) + " at byte " + std::to_string(pos) + ": ";
    if (bytes.size() - pos < 12) return parse_error(where + "truncated header");
    const uint64_t length = get_le(bytes, pos, 8);
    if (get_le(bytes, pos + 8, 4) != masked_crc32c(bytes.data() + pos, 8))
      return parse_error(where + "length CRC mismatch");
    pos += 12;
    if (length > bytes.size() - pos || bytes.size() - pos - length < 4)
      return parse_error(where + "truncated payload (length " + std::to_string(length) + ")");
    const std::string_view payload = bytes.substr(pos, length);
    if (get_le(bytes, pos + length, 4) != masked_crc32c(payload.data(), payload.size()))
      return parse_error(where + "data CRC mismatch");
    records.emplace_back(payload);
    pos += length + 4;
  }
  return records;
}

}  // namespace vlm

// Protocol-buffers wire format: see proto_wire.h.
#include "track/proto_wire.h"

#include <cstring>

namespace vlm::proto {

void Writer::raw_varint(uint64_t v) {
  while (v >= 0x80) {
    buf_.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  buf_.push_back(static_cast<char>(v));
}

void Writer::key(int field, WireType type) {
  raw_varint((static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(type));
}

Writer& Writer::varint(int field, uint64_t value) {
  key(field, WireType::varint);
  raw_varint(value);
  return *this;
}

namespace {
void append_le(std::string& buf, uint64_t bits, int n) {
  for (int i = 0; i < n; ++i) buf.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}
}  // namespace

Writer& Writer::double_(int field, double value) {
  key(field, WireType::fixed64);
  uint64_t bits;
  std::memcpy(&bits, &value, 8);
  append_le(buf_, bits, 8);
  return *this;
}

Writer& Writer::float_(int field, float value) {
  key(field, WireType::fixed32);
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  append_le(buf_, bits, 4);
  return *this;
}

Writer& Writer::bytes(int field, std::string_view data) {
  key(field, WireType::length_delimited);
  raw_varint(data.size());
  buf_.append(data.data(), data.size());
  return *this;
}

Writer& Writer::packed_doubles(int field, const std::vector<double>& values) {
  std::string payload;
  for (double v : values) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    append_le(payload, bits, 8);
  }
  return bytes(field, payload);
}

double Field::as_double() const {
  double v;
  std::memcpy(&v, &bits, 8);
  return v;
}

float Field::as_float() const {
  const uint32_t b = static_cast<uint32_t>(bits);
  float v;
  std::memcpy(&v, &b, 4);
  return v;
}

namespace {
// Reads a varint at `pos`; false when truncated or longer than 10 bytes.
bool read_varint(std::string_view s, size_t& pos, uint64_t& out) {
  out = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (pos >= s.size()) return false;
    const uint8_t b = static_cast<uint8_t>(s[pos++]);
    out |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

uint64_t read_le(std::string_view s, size_t pos, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(s[pos + i])) << (8 * i);
  return v;
}
}  // namespace

Expected<std::vector<Field>> decode(std::string_view s, const std::string& what) {
  std::vector<Field> fields;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t at = pos;
    auto bad = [&](const std::string& why) {
      return parse_error(what + ": byte " + std::to_string(at) + ": " + why);
    };
    uint64_t k;
    if (!read_varint(s, pos, k)) return bad("truncated or overlong field key");
    Field f;
    f.number = static_cast<int>(k >> 3);
    if (f.number == 0 || (k >> 3) > 0x1fffffff) return bad("invalid field number " + std::to_string(k >> 3));
    const uint64_t type = k & 7;
    switch (type) {
      case 0:
        f.type = WireType::varint;
        if (!read_varint(s, pos, f.bits)) return bad("truncated or overlong varint");
        break;
      case 1:
        f.type = WireType::fixed64;
        if (s.size() - pos < 8) return bad("truncated fixed64");
        f.bits = read_le(s, pos, 8);
        pos += 8;
        break;
      case 5:
        f.type = WireType::fixed32;
        if (s.size() - pos < 4) return bad("truncated fixed32");
        f.bits = read_le(s, pos, 4);
        pos += 4;
        break;
      case 2: {
        f.type = WireType::length_delimited;
        uint64_t n;
        if (!read_varint(s, pos, n)) return bad("truncated length");
        if (n > s.size() - pos) return bad("length " + std::to_string(n) + " runs past the end");
        f.bytes = s.substr(pos, n);
        pos += n;
        break;
      }
      default:
        return bad("unsupported wire type " + std::to_string(type) + " (field " + std::to_string(f.number) + ")");
    }
    fields.push_back(f);
  }
  return fields;
}

Expected<std::vector<double>> unpack_doubles(std::string_view payload) {
  if (payload.size() % 8 != 0)
    return parse_error("packed doubles: " + std::to_string(payload.size()) + " bytes is not a multiple of 8");
  std::vector<double> out(payload.size() / 8);
  for (size_t i = 0; i < out.size(); ++i) {
    const uint64_t bits = read_le(payload, i * 8, 8);
    std::memcpy(&out[i], &bits, 8);
  }
  return out;
}

}  // namespace vlm::proto

// A minimal protocol-buffers wire-format writer and reader: enough to write TensorBoard's Event records without a
// protobuf dependency (tensorboard.cpp), and to read them back (tests, tools). Fields are written in the order the
// caller adds them; proto3 readers accept any order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace vlm::proto {

enum class WireType : uint8_t { varint = 0, fixed64 = 1, length_delimited = 2, fixed32 = 5 };

class Writer {
 public:
  Writer& varint(int field, uint64_t value);
  Writer& int64(int field, int64_t value) { return varint(field, static_cast<uint64_t>(value)); }
  Writer& boolean(int field, bool value) { return varint(field, value ? 1 : 0); }
  Writer& double_(int field, double value);  // fixed64
  Writer& float_(int field, float value);    // fixed32
  Writer& bytes(int field, std::string_view data);
  Writer& message(int field, const Writer& sub) { return bytes(field, sub.data()); }
  Writer& packed_doubles(int field, const std::vector<double>& values);
  const std::string& data() const { return buf_; }

 private:
  void key(int field, WireType type);
  void raw_varint(uint64_t v);
  std::string buf_;
};

// One decoded field. `bits` holds a varint's value or a fixed32/fixed64's raw bits; `bytes` a length-delimited
// field's payload (a view into the decoded message).
struct Field {
  int number = 0;
  WireType type = WireType::varint;
  uint64_t bits = 0;
  std::string_view bytes;
  double as_double() const;
  float as_float() const;
};

// Splits one message into its fields, in order. Errors (naming `what` and the byte offset): truncated varint or
// payload, a varint over 10 bytes, field number 0, group wire types (3, 4) and unknown wire types.
Expected<std::vector<Field>> decode(std::string_view message, const std::string& what = "message");

// Packed doubles of a length-delimited field; an error when its length is not a multiple of 8.
Expected<std::vector<double>> unpack_doubles(std::string_view payload);

}  // namespace vlm::proto

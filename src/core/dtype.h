// Element types and bf16/f16 <-> f32 conversion (round-to-nearest-even, NaN preserved).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/status.h"

namespace vlm {

enum class DType : uint8_t { f32, bf16, f16, i32, i64, u8, f64 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "f32", "bf16", ...
// safetensors spelling: "F32", "BF16", "F16", "I32", "I64", "U8", "F64".
const char* dtype_safetensors_name(DType dtype);
Expected<DType> dtype_from_safetensors_name(const std::string& name);

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::f32; }
template <>
constexpr DType dtype_of<double>() { return DType::f64; }
template <>
constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <>
constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <>
constexpr DType dtype_of<uint8_t>() { return DType::u8; }

// A bf16 value stored as its 16 raw bits; arithmetic happens in f32.
struct bf16_t {
  uint16_t bits;
};
template <>
constexpr DType dtype_of<bf16_t>() { return DType::bf16; }

inline float bf16_to_f32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace vlm

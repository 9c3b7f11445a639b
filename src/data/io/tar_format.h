// Internal to the tar reader and writer: the 512-byte header layout and its checksum.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vlm::tar {

constexpr size_t kBlock = 512;
// Field offsets and widths of a ustar header.
constexpr size_t kNameOff = 0, kNameLen = 100;
constexpr size_t kModeOff = 100, kUidOff = 108, kGidOff = 116, kIdLen = 8;
constexpr size_t kSizeOff = 124, kSizeLen = 12;
constexpr size_t kMtimeOff = 136, kMtimeLen = 12;
constexpr size_t kChksumOff = 148, kChksumLen = 8;
constexpr size_t kTypeOff = 156;
constexpr size_t kMagicOff = 257;  // "ustar\0" + "00" (POSIX) or "ustar " + " \0" (GNU)
constexpr size_t kPrefixOff = 345, kPrefixLen = 155;
constexpr const char* kGnuLongName = "././@LongLink";

inline uint64_t padded_size(uint64_t size) { return (size + kBlock - 1) / kBlock * kBlock; }

// Sum of the header bytes with the checksum field read as eight spaces; `as_signed` gives the historical
// signed-char variant some old writers used.
inline int64_t header_checksum(const uint8_t* h, bool as_signed) {
  int64_t sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    if (i >= kChksumOff && i < kChksumOff + kChksumLen) {
      sum += ' ';
    } else {
      sum += as_signed ? static_cast<int64_t>(static_cast<int8_t>(h[i])) : static_cast<int64_t>(h[i]);
    }
  }
  return sum;
}

}  // namespace vlm::tar

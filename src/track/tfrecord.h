// TFRecord framing, the container of TensorBoard event files: each record is
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes | data | uint32 masked CRC-32C of data
// where masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (TensorFlow's lib/hash/crc32c.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace vlm {

// CRC-32C (Castagnoli), as iSCSI and TensorFlow use it: crc32c("123456789") == 0xe3069283.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

// One framed record holding `payload`.
std::string tfrecord_frame(std::string_view payload);

// Splits a whole TFRecord file into its payloads, checking every length and both CRCs. Errors name `source`, the
// record's index and byte offset: a truncated header or payload, a length CRC or data CRC mismatch.
Expected<std::vector<std::string>> read_tfrecords(std::string_view bytes, const std::string& source);

}  // namespace vlm

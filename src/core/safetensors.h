// safetensors read/write (https://github.com/huggingface/safetensors): an 8-byte little-endian header length, a
// JSON header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}, then raw bytes.
// Loading maps the file and hands out borrowed CPU tensors that keep the mapping alive. Every malformed input
// (short file, bad JSON, offsets out of range or overlapping, size mismatch, unknown dtype) is a parse_error that
// names the file and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace vlm {

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;  // CPU tensors; borrowed from the mapping when loaded from a file
  std::map<std::string, std::string> metadata;
};

// Parses an in-memory image of a safetensors file. `source` names it in errors. The returned tensors share
// `bytes` (kept alive by them).
Expected<SafetensorsFile> safetensors_parse(std::shared_ptr<const std::vector<uint8_t>> bytes,
                                            const std::string& source);
Expected<SafetensorsFile> safetensors_load(const std::string& path);

// Writes tensors (any device; copied to the CPU) atomically: to `path.tmp`, fsync, then rename over `path`.
Status safetensors_save(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

// Reads a whole file; io_error naming the path on failure.
Expected<std::vector<uint8_t>> read_file_bytes(const std::string& path);
// Writes bytes to `path` atomically (temp file + fsync + rename).
Status write_file_atomic(const std::string& path, const void* data, size_t size);

}  // namespace vlm

// Helpers for the data tests: raw tar blocks (to build malformed archives by hand), a minimal PNG writer for any
// colour type and bit depth (stored deflate blocks, so no zlib), and file helpers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/image/image.h"

namespace vlm::testing {

// One 512-byte ustar header with a valid checksum. `size_field` overrides the octal size text when non-empty.
std::vector<uint8_t> tar_header(const std::string& name, uint64_t size, char type = '0',
                                const std::string& prefix = "", const std::string& size_field = "");
// Recomputes the checksum of a header in place (after editing it).
void tar_fix_checksum(uint8_t* header);
// Header + body + padding.
std::vector<uint8_t> tar_member(const std::string& name, const std::string& body, char type = '0');
std::vector<uint8_t> tar_end();  // two zero blocks
void append(std::vector<uint8_t>& dst, const std::vector<uint8_t>& src);

std::vector<uint8_t> read_bytes(const std::string& path);
void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes);

// The folder of python3-skimage's sample images (skimage/data: real photos, PNGs of many colour types and a
// truncated JPEG): $VLM_SKIMAGE_DATA if set (empty when that is no folder), else the first that exists of /usr/lib/python3/dist-packages/skimage/data
// (python3-skimage installed) and /usr/local/share/vlm/test-images/skimage (scripts/install_deps.sh extracts it
// there without the package's Python dependencies); empty when none exists.
std::string skimage_data_dir();

// A PNG from raw (unfiltered) rows of `row_bytes` bytes each. color_type: 0 gray, 2 RGB, 3 palette, 4 gray+alpha,
// 6 RGBA. `palette` is RGB triples, `trns` the tRNS chunk payload (empty: none).
std::vector<uint8_t> make_png(int width, int height, int bit_depth, int color_type, const std::vector<uint8_t>& rows,
                              const std::vector<uint8_t>& palette = {}, const std::vector<uint8_t>& trns = {});
uint32_t crc32_of(const uint8_t* data, size_t n);

// A smooth, colourful w x h test image.
Image test_image(int width, int height, uint32_t seed = 0);
// Largest per-channel |a - b| (images must have the same size).
int max_abs_diff(const Image& a, const Image& b);
double mean_abs_diff(const Image& a, const Image& b);

}  // namespace vlm::testing

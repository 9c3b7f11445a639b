// 8-bit RGB images and their codecs: JPEG (libjpeg-turbo), PNG (libpng), WebP (libwebp).
// Decoding sniffs the magic bytes (the extension is only a hint for messages: mislabelled files are common in web
// data), reads the header first and rejects images over `max_pixels` before any pixel memory is allocated.
// Every output is 8-bit RGB: gray and palette are expanded, 16-bit is scaled to 8-bit, alpha is composited over
// white, CMYK JPEGs (Adobe, inverted) are converted. Errors name the format and the reason.
// All functions are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace vlm {

// Row-major HWC, 3 channels, 8 bits each: rgb[(y * width + x) * 3 + c].
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;

  Image() = default;
  Image(int w, int h) : width(w), height(h), rgb(static_cast<size_t>(w) * static_cast<size_t>(h) * 3) {}
  uint8_t* pixel(int x, int y) { return rgb.data() + (static_cast<size_t>(y) * width + x) * 3; }
  const uint8_t* pixel(int x, int y) const { return rgb.data() + (static_cast<size_t>(y) * width + x) * 3; }
};

enum class ImageFormat { unknown, jpeg, png, webp };
const char* image_format_name(ImageFormat format);  // "jpeg", "png", "webp", "unknown"
ImageFormat sniff_image_format(const uint8_t* data, size_t size);

struct ImageInfo {
  ImageFormat format = ImageFormat::unknown;
  int width = 0, height = 0;
};

struct ImageDecodeOptions {
  uint64_t max_pixels = 64ull << 20;  // width * height above this is rejected from the header (decompression bombs)
  // A hint: the caller needs at least min_width x min_height pixels (0: no need along that axis; both 0: the full
  // size). A JPEG may then be decoded at 1/2, 1/4 or 1/8 scale in the DCT domain, as Pillow's draft() does: the
  // largest denominator d with width >= d * min_width and height >= d * min_height, so the result, of
  // ceil(width / d) x ceil(height / d) pixels, never falls below the hint. PNG and WebP ignore it.
  int min_width = 0, min_height = 0;
};

// Reads only the header: format and size.
Expected<ImageInfo> read_image_info(const uint8_t* data, size_t size);
Expected<Image> decode_image(const uint8_t* data, size_t size, std::string_view ext_hint = {},
                             const ImageDecodeOptions& options = {});
// The DCT-domain scale denominator decode_image() uses for an image of `info` under `options`: 1, 2, 4 or 8 (the
// decoded image is ceil(width / d) x ceil(height / d); source pixel x maps to x / d). Always 1 for PNG and WebP.
// (1/2, 1/4 and 1/8 only: libjpeg-turbo's other factors, 7/8 .. 3/8, decode slower than the full size.)
int decode_scale_denominator(const ImageInfo& info, const ImageDecodeOptions& options);
inline Expected<Image> decode_image(const std::vector<uint8_t>& bytes, std::string_view ext_hint = {},
                                    const ImageDecodeOptions& options = {}) {
  return decode_image(bytes.data(), bytes.size(), ext_hint, options);
}

// A rectangle of pixels: [x, x + width) x [y, y + height).
struct CropWindow {
  int x = 0, y = 0, width = 0, height = 0;
  bool operator==(const CropWindow&) const = default;
};

// The window `region` of decode_image(data, size, {}, options), pixel for pixel, in the coordinates of that
// (possibly DCT-scaled) result, i.e. inside ceil(width / d) x ceil(height / d). A JPEG runs the inverse DCT,
// upsampling and colour conversion only for the iMCU rows that hold the window and its iMCU columns plus one of
// margin on each side (libjpeg's jpeg_skip_scanlines and jpeg_crop_scanline; the margin keeps the chroma upsampling
// at the window's edges equal to a full decode). Its entropy-coded data is still read to the end, so a truncated or
// corrupt file fails exactly as decode_image() fails. PNG and WebP are decoded whole and cropped.
// Errors: those of decode_image(), and invalid_argument when the region is empty or not inside the decoded image.
Expected<Image> decode_image_region(const uint8_t* data, size_t size, const CropWindow& region,
                                    const ImageDecodeOptions& options = {});

enum class ChromaSubsampling { s444, s422, s420 };
// quality 1..100.
Expected<std::vector<uint8_t>> encode_jpeg(const Image& image, int quality = 90,
                                           ChromaSubsampling subsampling = ChromaSubsampling::s420);
// Lossless 8-bit RGB PNG; compression_level 0..9.
Expected<std::vector<uint8_t>> encode_png(const Image& image, int compression_level = 6);
// quality 0..100 (lossy) or lossless.
Expected<std::vector<uint8_t>> encode_webp(const Image& image, float quality = 90.f, bool lossless = false);

}  // namespace vlm

// Format sniffing and the decode dispatch (see image.h); the codecs live in image_jpeg.cpp, image_png.cpp and
// image_webp.cpp.
#include <cstring>

#include "data/image/image_codecs.h"

namespace vlm {

const char* image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::jpeg: return "jpeg";
    case ImageFormat::png: return "png";
    case ImageFormat::webp: return "webp";
    case ImageFormat::unknown: break;
  }
  return "unknown";
}

ImageFormat sniff_image_format(const uint8_t* d, size_t n) {
  if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return ImageFormat::jpeg;
  if (n >= 8 && std::memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0) return ImageFormat::png;
  if (n >= 12 && std::memcmp(d, "RIFF", 4) == 0 && std::memcmp(d + 8, "WEBP", 4) == 0) return ImageFormat::webp;
  return ImageFormat::unknown;
}

namespace {
Status unknown_format(const uint8_t* d, size_t n, std::string_view ext_hint) {
  static const char* kHex = "0123456789abcdef";
  std::string first;
  for (size_t i = 0; i < n && i < 8; ++i) {
    if (i) first += ' ';
    first += kHex[d[i] >> 4];
    first += kHex[d[i] & 15];
  }
  return parse_error(str("not a JPEG, PNG or WebP image (", n, " bytes",
                         ext_hint.empty() ? "" : str(", named ." , ext_hint), ", starts with [", first, "])"));
}
}  // namespace

Expected<ImageInfo> read_image_info(const uint8_t* data, size_t size) {
  switch (sniff_image_format(data, size)) {
    case ImageFormat::jpeg: return detail::jpeg_info(data, size);
    case ImageFormat::png: return detail::png_info(data, size);
    case ImageFormat::webp: return detail::webp_info(data, size);
    case ImageFormat::unknown: break;
  }
  return unknown_format(data, size, {});
}

Expected<Image> decode_image(const uint8_t* data, size_t size, std::string_view ext_hint,
                             const ImageDecodeOptions& options) {
  switch (sniff_image_format(data, size)) {
    case ImageFormat::jpeg: return detail::jpeg_decode(data, size, options);
    case ImageFormat::png: return detail::png_decode(data, size, options);
    case ImageFormat::webp: return detail::webp_decode(data, size, options);
    case ImageFormat::unknown: break;
  }
  return unknown_format(data, size, ext_hint);
}

Expected<Image> decode_image_region(const uint8_t* data, size_t size, const CropWindow& region,
                                    const ImageDecodeOptions& options) {
  const ImageFormat format = sniff_image_format(data, size);
  if (format == ImageFormat::jpeg) return detail::jpeg_decode_region(data, size, region, options);
  VLM_ASSIGN_OR_RETURN(Image whole, decode_image(data, size, {}, options));
  return detail::crop_region(image_format_name(format), whole, region);
}

namespace detail {

Expected<Image> crop_region(const char* format, const Image& image, const CropWindow& r) {
  if (r.width <= 0 || r.height <= 0 || r.x < 0 || r.y < 0 || r.x > image.width - r.width ||
      r.y > image.height - r.height)
    return invalid_argument(str(format, ": region ", r.width, "x", r.height, "+", r.x, "+", r.y, " is not inside the ",
                                image.width, "x", image.height, " decoded image"));
  Image out(r.width, r.height);
  const size_t row = static_cast<size_t>(r.width) * 3;
  for (int y = 0; y < r.height; ++y) std::memcpy(out.pixel(0, y), image.pixel(r.x, r.y + y), row);
  return out;
}

Status check_pixel_limit(const char* format, int width, int height, const ImageDecodeOptions& options) {
  if (width <= 0 || height <= 0) return parse_error(str(format, ": bad image size ", width, "x", height));
  const uint64_t pixels = static_cast<uint64_t>(width) * static_cast<uint64_t>(height);
  if (pixels > options.max_pixels)
    return invalid_argument(str(format, ": ", width, "x", height, " = ", pixels, " pixels exceeds the limit of ",
                                options.max_pixels, " (possible decompression bomb)"));
  return Status();
}

void composite_over_white(const uint8_t* rgba, size_t n_pixels, uint8_t* rgb) {
  for (size_t i = 0; i < n_pixels; ++i) {
    const uint32_t a = rgba[4 * i + 3];
    for (int c = 0; c < 3; ++c)
      rgb[3 * i + c] = static_cast<uint8_t>((rgba[4 * i + c] * a + 255u * (255u - a) + 127u) / 255u);
  }
}

}  // namespace detail
}  // namespace vlm

// Fuzz target: the image decoders (JPEG via libjpeg-turbo incl. DCT-domain scaling, PNG, WebP) behind
// read_image_info() and decode_image(). The first byte picks the decode options so scaled and full decodes, the
// extension hint and the pixel limit are all exercised. Errors are Statuses; nothing may crash or over-allocate. A
// decoded JPEG's window through decode_image_region (libjpeg's partial decode) must equal the same window.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "data/image/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  ++data;
  --size;
  vlm::ImageDecodeOptions o;
  o.max_pixels = (mode & 1) ? 4096 : (1u << 22);  // a small limit exercises the decompression-bomb guard
  if (mode & 8) o.min_width = o.min_height = 1 + (mode >> 4);  // a small target: DCT-domain scaled JPEG decode
  auto info = vlm::read_image_info(data, size);
  if (info.ok() && (info->width <= 0 || info->height <= 0)) __builtin_trap();  // an info must be a real size
  const char* hints[] = {"", "jpg", "png", "webp"};
  auto img = vlm::decode_image(data, size, hints[(mode >> 1) & 3], o);
  if (img.ok()) {
    // A decoded image is whole: its buffer matches its size, and its size obeys the limit.
    if (img->rgb.size() != static_cast<size_t>(img->width) * img->height * 3) __builtin_trap();
    if (static_cast<uint64_t>(img->width) * img->height > o.max_pixels) __builtin_trap();
    // A JPEG window (from the first byte) through the partial decode equals the same window of the whole decode.
    // (PNG and WebP windows are the whole decode, cropped: nothing new to check, and twice the time.)
    if (vlm::sniff_image_format(data, size) != vlm::ImageFormat::jpeg) return 0;
    const int x = (mode * 7) % img->width, y = (mode * 13) % img->height;
    const vlm::CropWindow c{x, y, 1 + (mode % (img->width - x)), 1 + ((mode >> 2) % (img->height - y))};
    auto region = vlm::decode_image_region(data, size, c, o);
    if (!region.ok() || region->width != c.width || region->height != c.height) __builtin_trap();
    for (int r = 0; r < c.height; ++r)
      if (std::memcmp(region->pixel(0, r), img->pixel(c.x, c.y + r), static_cast<size_t>(c.width) * 3) != 0)
        __builtin_trap();
  }
  return 0;
}

// Fuzz target: the image decoders (JPEG via libjpeg-turbo incl. DCT-domain scaling, PNG, WebP) behind
// read_image_info() and decode_image(). The first byte picks the decode options so scaled and full decodes, the
// extension hint and the pixel limit are all exercised. Errors are Statuses; nothing may crash or over-allocate.
#include <cstddef>
#include <cstdint>

#include "data/image.h"

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
  }
  return 0;
}

// Internal to vlm_data: one decoder/encoder per format behind decode_image() / encode_*() (image.h), plus the
// shared helpers they use.
#pragma once

#include "data/image/image.h"

namespace vlm::detail {

Expected<ImageInfo> jpeg_info(const uint8_t* data, size_t size);
Expected<Image> jpeg_decode(const uint8_t* data, size_t size, const ImageDecodeOptions& options);
// The region of jpeg_decode()'s result through libjpeg's partial decode (image_jpeg_region.cpp).
Expected<Image> jpeg_decode_region(const uint8_t* data, size_t size, const CropWindow& region,
                                   const ImageDecodeOptions& options);
Expected<ImageInfo> png_info(const uint8_t* data, size_t size);
Expected<Image> png_decode(const uint8_t* data, size_t size, const ImageDecodeOptions& options);
Expected<ImageInfo> webp_info(const uint8_t* data, size_t size);
Expected<Image> webp_decode(const uint8_t* data, size_t size, const ImageDecodeOptions& options);

// invalid_argument when width*height is over the limit (or a side is not positive).
Status check_pixel_limit(const char* format, int width, int height, const ImageDecodeOptions& options);
// The region of `image` (invalid_argument, naming `format`, when it is empty or not inside the image).
Expected<Image> crop_region(const char* format, const Image& image, const CropWindow& region);
// RGBA (stride 4*width) over a white background into `out` (3 channels).
void composite_over_white(const uint8_t* rgba, size_t n_pixels, uint8_t* rgb);

}  // namespace vlm::detail

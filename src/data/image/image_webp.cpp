// WebP through libwebp: features (size, alpha, animation) first, then pixels. Animated files are unsupported.
#include <webp/decode.h>
#include <webp/encode.h>

#include "data/image/image_codecs.h"

namespace vlm::detail {
namespace {

const char* vp8_status_name(VP8StatusCode code) {
  switch (code) {
    case VP8_STATUS_OK: return "ok";
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "user abort";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "truncated data";
  }
  return "unknown error";
}

Expected<WebPBitstreamFeatures> features(const uint8_t* data, size_t size) {
  WebPBitstreamFeatures f;
  VP8StatusCode code = WebPGetFeatures(data, size, &f);
  if (code != VP8_STATUS_OK) return parse_error(str("WebP: bad header: ", vp8_status_name(code)));
  return f;
}

}  // namespace

Expected<ImageInfo> webp_info(const uint8_t* data, size_t size) {
  VLM_ASSIGN_OR_RETURN(auto f, features(data, size));
  return ImageInfo{ImageFormat::webp, f.width, f.height};
}

Expected<Image> webp_decode(const uint8_t* data, size_t size, const ImageDecodeOptions& options) {
  VLM_ASSIGN_OR_RETURN(auto f, features(data, size));
  VLM_RETURN_IF_ERROR(check_pixel_limit("WebP", f.width, f.height, options));
  if (f.has_animation) return unsupported("WebP: animated images are not supported");
  Image img(f.width, f.height);
  const size_t n = static_cast<size_t>(f.width) * f.height;
  if (f.has_alpha) {
    std::vector<uint8_t> rgba(n * 4);
    if (!WebPDecodeRGBAInto(data, size, rgba.data(), rgba.size(), f.width * 4))
      return parse_error("WebP: decoding failed (corrupt or truncated data)");
    composite_over_white(rgba.data(), n, img.rgb.data());
  } else if (!WebPDecodeRGBInto(data, size, img.rgb.data(), img.rgb.size(), f.width * 3)) {
    return parse_error("WebP: decoding failed (corrupt or truncated data)");
  }
  return img;
}

}  // namespace vlm::detail

namespace vlm {

Expected<std::vector<uint8_t>> encode_webp(const Image& image, float quality, bool lossless) {
  if (image.width <= 0 || image.height <= 0 ||
      image.rgb.size() != static_cast<size_t>(image.width) * image.height * 3)
    return invalid_argument(str("encode_webp: bad image ", image.width, "x", image.height));
  uint8_t* out = nullptr;
  size_t n = lossless ? WebPEncodeLosslessRGB(image.rgb.data(), image.width, image.height, image.width * 3, &out)
                      : WebPEncodeRGB(image.rgb.data(), image.width, image.height, image.width * 3, quality, &out);
  if (n == 0) {
    if (out) WebPFree(out);
    return internal_error(str("encode_webp: libwebp failed for a ", image.width, "x", image.height, " image"));
  }
  std::vector<uint8_t> bytes(out, out + n);
  WebPFree(out);
  return bytes;
}

}  // namespace vlm

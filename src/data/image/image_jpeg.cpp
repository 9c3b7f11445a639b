// JPEG through the TurboJPEG API of libjpeg-turbo 2.1 (Debian 12 has no tj3 API): the header (size) and encoding,
// with one compressor and one decompressor handle per thread. The pixels are decoded in image_jpeg_decode.cpp
// through the libjpeg API of the same library (whole images and windows, one code path).
// DCT-domain downscaling (ImageDecodeOptions::min_width/min_height) uses libjpeg's scaled inverse DCT at 1/2, 1/4 or
// 1/8, exactly as Pillow's draft() configures libjpeg, so the pixels equal Pillow's drafted decode. The fast integer
// IDCT is not used: measured on 256-512 px photos it saves ~3% of the full-size decode and nothing at the reduced
// sizes (the scaled IDCTs have no fast variant), while it moves pixels away from Pillow's.
#include <turbojpeg.h>

#include <cstring>
#include <string>

#include "core/logging.h"
#include "data/image/image_codecs.h"

namespace vlm::detail {
namespace {

// A per-thread handle. libjpeg-turbo 2.1 can leave a handle in a bad state after an error (a failed
// tjDecompressHeader3 skips jpeg_abort_decompress, and warning flags persist), so any failure drops the handle and
// the next call makes a fresh one.
struct TjHandle {
  bool compress;
  tjhandle h = nullptr;
  tjhandle get() {
    if (!h) h = compress ? tjInitCompress() : tjInitDecompress();
    VLM_CHECK(h != nullptr, compress ? "tjInitCompress failed" : "tjInitDecompress failed");
    return h;
  }
  void reset() {
    if (h) tjDestroy(h);
    h = nullptr;
  }
  ~TjHandle() { reset(); }
};

TjHandle& decompressor() {
  thread_local TjHandle handle{false};
  return handle;
}

TjHandle& compressor() {
  thread_local TjHandle handle{true};
  return handle;
}

struct JpegHeader {
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
};

Expected<JpegHeader> read_header(TjHandle& tj, const uint8_t* data, size_t size) {
  JpegHeader hdr;
  tjhandle h = tj.get();
  if (tjDecompressHeader3(h, data, static_cast<unsigned long>(size), &hdr.width, &hdr.height, &hdr.subsamp,
                          &hdr.colorspace) != 0) {
    Status s = parse_error(str("JPEG: bad header: ", tjGetErrorStr2(h)));
    tj.reset();
    return s;
  }
  if (hdr.width <= 0 || hdr.height <= 0) {
    tj.reset();
    return parse_error(str("JPEG: bad header: image size ", hdr.width, "x", hdr.height));
  }
  return hdr;
}

// The denominator Pillow's draft() picks (min(width // min_width, height // min_height) rounded down to 8, 4, 2
// or 1), reduced further if TurboJPEG, asked for ceil(size / d), would choose another factor (it takes the
// largest factor whose output fits, which for a few tiny sizes is not 1/d).
int scale_denominator(int width, int height, const ImageDecodeOptions& options) {
  if ((options.min_width <= 0 && options.min_height <= 0) || width <= 0 || height <= 0) return 1;
  int n_factors = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&n_factors);
  for (int d = 8; d >= 2; d /= 2) {
    if (options.min_width > 0 && static_cast<int64_t>(width) < static_cast<int64_t>(d) * options.min_width) continue;
    if (options.min_height > 0 && static_cast<int64_t>(height) < static_cast<int64_t>(d) * options.min_height)
      continue;
    const tjscalingfactor want{1, d};
    const int sw = TJSCALED(width, want), sh = TJSCALED(height, want);
    for (int i = 0; factors && i < n_factors; ++i) {
      if (TJSCALED(width, factors[i]) <= sw && TJSCALED(height, factors[i]) <= sh) {
        if (factors[i].num == 1 && factors[i].denom == d) return d;
        break;
      }
    }
  }
  return 1;
}

}  // namespace

Expected<ImageInfo> jpeg_info(const uint8_t* data, size_t size) {
  VLM_ASSIGN_OR_RETURN(JpegHeader hdr, read_header(decompressor(), data, size));
  return ImageInfo{ImageFormat::jpeg, hdr.width, hdr.height};
}

}  // namespace vlm::detail

namespace vlm {

int decode_scale_denominator(const ImageInfo& info, const ImageDecodeOptions& options) {
  if (info.format != ImageFormat::jpeg) return 1;
  return detail::scale_denominator(info.width, info.height, options);
}

Expected<std::vector<uint8_t>> encode_jpeg(const Image& image, int quality, ChromaSubsampling subsampling) {
  if (image.width <= 0 || image.height <= 0 ||
      image.rgb.size() != static_cast<size_t>(image.width) * image.height * 3)
    return invalid_argument(str("encode_jpeg: bad image ", image.width, "x", image.height, " with ",
                                image.rgb.size(), " bytes"));
  if (quality < 1 || quality > 100) return invalid_argument(str("encode_jpeg: quality ", quality, " not in 1..100"));
  const int subsamp = subsampling == ChromaSubsampling::s444   ? TJSAMP_444
                      : subsampling == ChromaSubsampling::s422 ? TJSAMP_422
                                                               : TJSAMP_420;
  detail::TjHandle& tj = detail::compressor();
  tjhandle h = tj.get();
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  if (tjCompress2(h, image.rgb.data(), image.width, 0, image.height, TJPF_RGB, &out, &out_size, subsamp, quality,
                  0) != 0) {
    std::string msg = tjGetErrorStr2(h);
    tj.reset();
    if (out) tjFree(out);
    return internal_error(str("encode_jpeg: ", msg));
  }
  std::vector<uint8_t> bytes(out, out + out_size);
  tjFree(out);
  return bytes;
}

}  // namespace vlm

// JPEG pixels through libjpeg-turbo's libjpeg API: the whole image (decode_image) or a window of it
// (decode_image_region), one code path. TurboJPEG 2.1 (Debian 12) has no cropping; libjpeg has jpeg_crop_scanline
// (columns) and jpeg_skip_scanlines (rows). For a window, its iMCU rows, and its iMCU columns widened by a margin
// on each side (one iMCU; three for progressive files, see run_decode), are decoded; the rest of the file is only
// entropy-decoded (Huffman data must be read in order, which is also what keeps a window's errors the same as the
// whole image's). The column margin matters: libjpeg's fancy h2v1/h2v2 chroma upsampling treats the edges of a
// cropped strip as image edges, which changes its outer pixels.
//
// Settings as TurboJPEG's tjDecompress2 with no flags but TJFLAG_LIMITSCANS: accurate integer IDCT, fancy
// upsampling, 1/2, 1/4 or 1/8 DCT scaling (Pillow's draft()), at most 500 progressive scans. Errors: any libjpeg
// error fails the decode; warnings leave a usable image except a cut-off file (JWRN_JPEG_EOF) or entropy data cut
// short by a marker (JWRN_HIT_MARKER: the rest of the scan would be gray), which are rejected as truncated.
// CMYK / YCCK files (Adobe: inverted CMYK) are converted to RGB as R = C' * K' / 255, as Pillow does.
// longjmp error handling: the function that calls setjmp holds only trivially destructible objects.
#include <cstdio>  // jpeglib.h needs FILE and size_t first

#include <jerror.h>
#include <jpeglib.h>

#include <algorithm>
#include <csetjmp>
#include <cstring>

#include "core/logging.h"
#include "data/image/image_codecs.h"

namespace vlm::detail {
namespace {

constexpr int kMaxScans = 500;  // as TurboJPEG's TJFLAG_LIMITSCANS (a progressive file with absurd scan counts)

struct ErrorManager {
  jpeg_error_mgr pub;  // first member: libjpeg hands back a pointer to it
  jpeg_progress_mgr progress;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];  // the error, else the first warning
  char truncation[JMSG_LENGTH_MAX];  // the first JWRN_JPEG_EOF / JWRN_HIT_MARKER warning, empty if none
};

ErrorManager* manager_of(j_common_ptr c) { return reinterpret_cast<ErrorManager*>(c->err); }

[[noreturn]] void on_error(j_common_ptr c) {
  ErrorManager* e = manager_of(c);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

void on_message(j_common_ptr c, int level) {
  if (level >= 0) return;  // trace output
  ErrorManager* e = manager_of(c);
  const int code = c->err->msg_code;
  if (c->err->num_warnings++ == 0) (*c->err->format_message)(c, e->message);
  if ((code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER) && e->truncation[0] == '\0')
    (*c->err->format_message)(c, e->truncation);
}

void on_progress(j_common_ptr c) {
  if (!c->is_decompressor || reinterpret_cast<j_decompress_ptr>(c)->input_scan_number <= kMaxScans) return;
  ErrorManager* e = manager_of(c);
  std::snprintf(e->message, sizeof(e->message), "Progressive JPEG image has more than %d scans", kMaxScans);
  std::longjmp(e->jump, 1);
}

enum class Outcome { ok, bad_header, failed, too_many_pixels, bad_region };

// Plain data in and out of the setjmp frame.
struct DecodeJob {
  const uint8_t* data = nullptr;
  size_t size = 0;
  const ImageDecodeOptions* options = nullptr;
  bool whole = true;  // the whole image; else `region`
  CropWindow region;
  Image* out = nullptr;                       // sized here (after the pixel limit is checked)
  int width = 0, height = 0;                  // the header's size
  int decoded_width = 0, decoded_height = 0;  // at the DCT scale
  bool cmyk = false;
  bool header_read = false;
};

// Inverted (Adobe) CMYK to RGB: R = C' * K' / 255.
void cmyk_to_rgb(const uint8_t* cmyk, size_t n, uint8_t* rgb) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t k = cmyk[4 * i + 3];
    for (int c = 0; c < 3; ++c) rgb[3 * i + c] = static_cast<uint8_t>((cmyk[4 * i + c] * k + 127) / 255);
  }
}

Outcome run_decode(DecodeJob& job, ErrorManager& err) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error;
  err.pub.emit_message = on_message;
  err.message[0] = err.truncation[0] = '\0';
  err.progress.progress_monitor = on_progress;
  job.header_read = false;  // in memory behind a reference: still valid after a longjmp
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return job.header_read ? Outcome::failed : Outcome::bad_header;
  }
  jpeg_create_decompress(&cinfo);
  cinfo.progress = &err.progress;
  jpeg_mem_src(&cinfo, job.data, static_cast<unsigned long>(job.size));
  jpeg_read_header(&cinfo, TRUE);
  job.header_read = true;
  job.width = static_cast<int>(cinfo.image_width);
  job.height = static_cast<int>(cinfo.image_height);
  if (job.width <= 0 || job.height <= 0 ||
      static_cast<uint64_t>(job.width) * static_cast<uint64_t>(job.height) > job.options->max_pixels) {
    jpeg_destroy_decompress(&cinfo);
    return Outcome::too_many_pixels;
  }
  job.cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = job.cmyk ? JCS_CMYK : JCS_RGB;
  cinfo.scale_num = 1;
  cinfo.scale_denom = static_cast<unsigned int>(
      decode_scale_denominator(ImageInfo{ImageFormat::jpeg, job.width, job.height}, *job.options));
  cinfo.dct_method = JDCT_ISLOW;
  cinfo.do_fancy_upsampling = TRUE;
  jpeg_start_decompress(&cinfo);  // a progressive file is read whole here
  job.decoded_width = static_cast<int>(cinfo.output_width);
  job.decoded_height = static_cast<int>(cinfo.output_height);
  if (job.whole) job.region = CropWindow{0, 0, job.decoded_width, job.decoded_height};
  const CropWindow r = job.region;
  if (r.width <= 0 || r.height <= 0 || r.x < 0 || r.y < 0 || r.x > job.decoded_width - r.width ||
      r.y > job.decoded_height - r.height) {
    jpeg_destroy_decompress(&cinfo);
    return Outcome::bad_region;
  }
  *job.out = Image(r.width, r.height);

  // Columns: the window plus a margin each side, the left edge moved down to an iMCU boundary by libjpeg. One iMCU
  // covers the fancy upsampling's reach. A progressive file whose scans leave coefficients incomplete is block-
  // smoothed: each block's missing AC terms are estimated from the DC values of blocks up to two away, and a
  // cropped strip has no blocks past its edges; two blocks of the coarsest component are at most two iMCUs, so
  // progressive files take three (the fuzzer found a 4:2:0 file whose window's first pixels differed with one).
  const int imcu_w = cinfo.max_h_samp_factor * cinfo.min_DCT_scaled_size;
  const int imcu_h = cinfo.max_v_samp_factor * cinfo.min_DCT_scaled_size;
  const int margin = (cinfo.progressive_mode ? 3 : 1) * imcu_w;
  JDIMENSION x0 = static_cast<JDIMENSION>(std::max(0, r.x - margin));
  JDIMENSION strip_width = static_cast<JDIMENSION>(std::min(job.decoded_width, r.x + r.width + margin)) - x0;
  if (x0 > 0 || strip_width < cinfo.output_width) jpeg_crop_scanline(&cinfo, &x0, &strip_width);
  // Rows: from the iMCU row holding the window's first row (jpeg_skip_scanlines keeps the upsampling's context
  // rows, so no margin is needed there; the tests check this for every subsampling).
  const JDIMENSION y0 = static_cast<JDIMENSION>(r.y / imcu_h * imcu_h);
  if (y0 > 0) jpeg_skip_scanlines(&cinfo, y0);

  // Rows go straight into the output when the strip is the window (RGB); else through a strip buffer.
  const bool direct =
      !job.cmyk && x0 == static_cast<JDIMENSION>(r.x) && strip_width == static_cast<JDIMENSION>(r.width);
  const int channels = job.cmyk ? 4 : 3, batch = std::max(1, cinfo.rec_outbuf_height);
  JSAMPARRAY strip = (*cinfo.mem->alloc_sarray)(reinterpret_cast<j_common_ptr>(&cinfo), JPOOL_IMAGE,
                                                cinfo.output_width * channels, static_cast<JDIMENSION>(batch));
  JSAMPROW rows[4];
  const JDIMENSION y_end = static_cast<JDIMENSION>(r.y + r.height);
  const size_t row_bytes = static_cast<size_t>(r.width) * 3;
  const size_t skip_bytes = static_cast<size_t>(r.x - static_cast<int>(x0)) * channels;
  while (cinfo.output_scanline < y_end) {
    const JDIMENSION y = cinfo.output_scanline;
    const JDIMENSION want = std::min<JDIMENSION>(static_cast<JDIMENSION>(std::min(batch, 4)), y_end - y);
    const bool into_out = direct && y >= static_cast<JDIMENSION>(r.y);
    for (JDIMENSION i = 0; i < want; ++i)
      rows[i] = into_out ? job.out->rgb.data() + (y + i - static_cast<JDIMENSION>(r.y)) * row_bytes : strip[i];
    const JDIMENSION n = jpeg_read_scanlines(&cinfo, rows, want);
    if (n == 0) ERREXIT(&cinfo, JERR_INPUT_EMPTY);  // cannot happen with a memory source
    if (into_out) continue;
    for (JDIMENSION i = 0; i < n; ++i) {
      if (y + i < static_cast<JDIMENSION>(r.y)) continue;
      uint8_t* dst = job.out->rgb.data() + (y + i - static_cast<JDIMENSION>(r.y)) * row_bytes;
      if (job.cmyk) {
        cmyk_to_rgb(rows[i] + skip_bytes, static_cast<size_t>(r.width), dst);
      } else {
        std::memcpy(dst, rows[i] + skip_bytes, row_bytes);
      }
    }
  }
  // Entropy-decode the rest (skipping to the very end would stop reading), then read the trailing markers.
  if (cinfo.output_scanline + 1 < cinfo.output_height)
    jpeg_skip_scanlines(&cinfo, cinfo.output_height - 1 - cinfo.output_scanline);
  while (cinfo.output_scanline < cinfo.output_height) jpeg_read_scanlines(&cinfo, strip, 1);
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return Outcome::ok;
}

Expected<Image> decode(DecodeJob& job) {
  Image out;
  job.out = &out;
  ErrorManager err;
  switch (run_decode(job, err)) {
    case Outcome::ok: break;
    case Outcome::bad_header: return parse_error(str("JPEG: bad header: ", err.message));
    case Outcome::failed: return parse_error(str("JPEG: ", err.message));
    case Outcome::too_many_pixels: return check_pixel_limit("JPEG", job.width, job.height, *job.options);
    case Outcome::bad_region:
      return invalid_argument(str("JPEG: region ", job.region.width, "x", job.region.height, "+", job.region.x, "+",
                                  job.region.y, " is not inside the ", job.decoded_width, "x", job.decoded_height,
                                  " decoded image"));
  }
  if (err.truncation[0] != '\0') return parse_error(str("JPEG: truncated data (", err.truncation, ")"));
  if (err.pub.num_warnings > 0) VLM_DEBUG("JPEG decoded with a warning: ", err.message);
  return out;
}

}  // namespace

Expected<Image> jpeg_decode(const uint8_t* data, size_t size, const ImageDecodeOptions& options) {
  DecodeJob job;
  job.data = data;
  job.size = size;
  job.options = &options;
  return decode(job);
}

Expected<Image> jpeg_decode_region(const uint8_t* data, size_t size, const CropWindow& region,
                                   const ImageDecodeOptions& options) {
  DecodeJob job;
  job.data = data;
  job.size = size;
  job.options = &options;
  job.whole = false;
  job.region = region;
  return decode(job);
}

}  // namespace vlm::detail

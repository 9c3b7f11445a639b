// PNG through libpng, with its setjmp/longjmp error path kept inside two small functions whose state lives on the
// heap (so nothing modified after setjmp is read after a longjmp). Every PNG variant (gray, palette, tRNS, 1..16
// bits, alpha, interlaced) is turned into 8-bit RGB by libpng's transforms; alpha is then composited over white.
#include <png.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "data/image/image_codecs.h"

namespace vlm::detail {
namespace {

struct PngIo {
  const uint8_t* data = nullptr;
  size_t size = 0, pos = 0;
  std::vector<uint8_t>* out = nullptr;  // when writing
  char error[256] = {};
};

void on_error(png_structp png, png_const_charp msg) {
  auto* io = static_cast<PngIo*>(png_get_error_ptr(png));
  std::snprintf(io->error, sizeof(io->error), "%s", msg);
  png_longjmp(png, 1);
}
void on_warning(png_structp, png_const_charp) {}

void read_cb(png_structp png, png_bytep out, png_size_t n) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  if (io->size - io->pos < n) png_error(png, "truncated data");
  std::memcpy(out, io->data + io->pos, n);
  io->pos += n;
}

void write_cb(png_structp png, png_bytep data, png_size_t n) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  io->out->insert(io->out->end(), data, data + n);
}
void flush_cb(png_structp) {}

struct PngDecode {
  PngIo io;
  png_structp png = nullptr;
  png_infop info = nullptr;
  ImageDecodeOptions options;
  Status status;  // set before a normal return (pixel limit)
  int width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;  // rows of `channels` bytes per pixel
  std::vector<png_bytep> rows;
  ~PngDecode() {
    if (png) png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
  }
};

// Returns false when libpng reported an error (message in st.io.error); true otherwise (st.status may hold a
// rejection decided here).
bool png_decode_inner(PngDecode& st) {
  if (setjmp(png_jmpbuf(st.png))) return false;
  png_set_read_fn(st.png, &st.io, read_cb);
  png_read_info(st.png, st.info);
  png_uint_32 w = 0, h = 0;
  int bit_depth = 0, color_type = 0;
  png_get_IHDR(st.png, st.info, &w, &h, &bit_depth, &color_type, nullptr, nullptr, nullptr);
  if (w > 0x7fffffffu || h > 0x7fffffffu) {
    st.status = invalid_argument(str("PNG: image size ", w, "x", h, " is too large"));
    return true;
  }
  st.status = check_pixel_limit("PNG", static_cast<int>(w), static_cast<int>(h), st.options);
  if (!st.status.ok()) return true;  // rejected from the header, before any row buffer exists

  if (bit_depth == 16) png_set_scale_16(st.png);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(st.png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(st.png);
  if (png_get_valid(st.png, st.info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(st.png);
  if (color_type == PNG_COLOR_TYPE_GRAY || color_type == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(st.png);
  png_set_interlace_handling(st.png);
  png_read_update_info(st.png, st.info);

  st.width = static_cast<int>(w);
  st.height = static_cast<int>(h);
  st.channels = png_get_channels(st.png, st.info);
  const size_t rowbytes = png_get_rowbytes(st.png, st.info);
  if ((st.channels != 3 && st.channels != 4) || rowbytes != static_cast<size_t>(st.channels) * w) {
    st.status = internal_error(str("PNG: unexpected layout after transforms (", st.channels, " channels, ",
                                   rowbytes, " bytes per row)"));
    return true;
  }
  st.pixels.resize(rowbytes * h);
  st.rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) st.rows[y] = st.pixels.data() + rowbytes * y;
  png_read_image(st.png, st.rows.data());
  png_read_end(st.png, nullptr);
  return true;
}

struct PngEncode {
  PngIo io;
  png_structp png = nullptr;
  png_infop info = nullptr;
  std::vector<png_bytep> rows;
  ~PngEncode() {
    if (png) png_destroy_write_struct(&png, info ? &info : nullptr);
  }
};

bool png_encode_inner(PngEncode& st, const Image& image, int level) {
  if (setjmp(png_jmpbuf(st.png))) return false;
  png_set_write_fn(st.png, &st.io, write_cb, flush_cb);
  png_set_IHDR(st.png, st.info, static_cast<png_uint_32>(image.width), static_cast<png_uint_32>(image.height), 8,
               PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_set_compression_level(st.png, level);
  png_write_info(st.png, st.info);
  png_write_image(st.png, st.rows.data());
  png_write_end(st.png, nullptr);
  return true;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

Expected<ImageInfo> png_info(const uint8_t* data, size_t size) {
  // Signature (8), then the IHDR chunk: length (4), "IHDR", width (4), height (4).
  if (size < 24 || std::memcmp(data + 12, "IHDR", 4) != 0) return parse_error("PNG: missing IHDR chunk");
  const uint32_t w = be32(data + 16), h = be32(data + 20);
  if (w == 0 || h == 0 || w > 0x7fffffffu || h > 0x7fffffffu)
    return parse_error(str("PNG: bad image size ", w, "x", h));
  return ImageInfo{ImageFormat::png, static_cast<int>(w), static_cast<int>(h)};
}

Expected<Image> png_decode(const uint8_t* data, size_t size, const ImageDecodeOptions& options) {
  auto st = std::make_unique<PngDecode>();
  st->io.data = data;
  st->io.size = size;
  st->options = options;
  st->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &st->io, on_error, on_warning);
  if (!st->png) return internal_error("PNG: png_create_read_struct failed");
  st->info = png_create_info_struct(st->png);
  if (!st->info) return internal_error("PNG: png_create_info_struct failed");
  if (!png_decode_inner(*st)) return parse_error(str("PNG: ", st->io.error));
  if (!st->status.ok()) return st->status;

  Image img(st->width, st->height);
  const size_t n = static_cast<size_t>(st->width) * st->height;
  if (st->channels == 4) {
    composite_over_white(st->pixels.data(), n, img.rgb.data());
  } else {
    img.rgb = std::move(st->pixels);
  }
  return img;
}

}  // namespace vlm::detail

namespace vlm {

Expected<std::vector<uint8_t>> encode_png(const Image& image, int compression_level) {
  if (image.width <= 0 || image.height <= 0 ||
      image.rgb.size() != static_cast<size_t>(image.width) * image.height * 3)
    return invalid_argument(str("encode_png: bad image ", image.width, "x", image.height));
  if (compression_level < 0 || compression_level > 9)
    return invalid_argument(str("encode_png: compression level ", compression_level, " not in 0..9"));
  std::vector<uint8_t> out;
  auto st = std::make_unique<detail::PngEncode>();
  st->io.out = &out;
  st->png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &st->io, detail::on_error, detail::on_warning);
  if (!st->png) return internal_error("encode_png: png_create_write_struct failed");
  st->info = png_create_info_struct(st->png);
  if (!st->info) return internal_error("encode_png: png_create_info_struct failed");
  st->rows.resize(static_cast<size_t>(image.height));
  for (int y = 0; y < image.height; ++y)
    st->rows[static_cast<size_t>(y)] =
        const_cast<png_bytep>(image.rgb.data() + static_cast<size_t>(y) * image.width * 3);
  if (!detail::png_encode_inner(*st, image, compression_level))
    return internal_error(str("encode_png: ", st->io.error));
  return out;
}

}  // namespace vlm

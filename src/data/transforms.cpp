// Resize, crop and normalisation (see transforms.h).
#include "data/transforms.h"

#include <algorithm>
#include <cmath>

namespace vlm {
namespace {

constexpr int kPrecisionBits = 22;  // 32 bits - 8 for the pixel value - 2 headroom for negative bicubic lobes

double bilinear_filter(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Keys cubic with a = -0.5 (Pillow's and PyTorch's bicubic).
double bicubic_filter(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

// Per output position along one axis: the first source index, the tap count and fixed-point weights.
struct AxisCoeffs {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> weights;  // [out_size, ksize]
};

AxisCoeffs axis_coeffs(int in_size, int out_size, ResizeFilter filter) {
  const double support0 = filter == ResizeFilter::bilinear ? 1.0 : 2.0;
  double (*fn)(double) = filter == ResizeFilter::bilinear ? bilinear_filter : bicubic_filter;
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);  // widen the kernel when shrinking: antialiasing
  const double support = support0 * filterscale;
  AxisCoeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(static_cast<size_t>(out_size));
  c.count.resize(static_cast<size_t>(out_size));
  c.weights.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  std::vector<double> w(static_cast<size_t>(c.ksize));
  for (int o = 0; o < out_size; ++o) {
    const double center = (o + 0.5) * scale;
    int lo = static_cast<int>(center - support + 0.5);  // truncation toward zero, then clamped
    int hi = static_cast<int>(center + support + 0.5);
    lo = std::max(lo, 0);
    hi = std::min(hi, in_size);
    const int n = std::min(hi - lo, c.ksize);
    double total = 0.0;
    for (int i = 0; i < n; ++i) {
      w[static_cast<size_t>(i)] = fn((i + lo - center + 0.5) / filterscale);
      total += w[static_cast<size_t>(i)];
    }
    int32_t* k = c.weights.data() + static_cast<size_t>(o) * c.ksize;
    for (int i = 0; i < n; ++i) {
      const double v = total != 0.0 ? w[static_cast<size_t>(i)] / total : w[static_cast<size_t>(i)];
      k[i] = static_cast<int32_t>(v * (1 << kPrecisionBits) + (v < 0 ? -0.5 : 0.5));
    }
    c.first[static_cast<size_t>(o)] = lo;
    c.count[static_cast<size_t>(o)] = n;
  }
  return c;
}

inline uint8_t clip8(int32_t acc) {
  int32_t v = acc >> kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

}  // namespace

Image resize_crop(const Image& src, int resize_width, int resize_height, int x0, int y0, int crop_width,
                  int crop_height, ResizeFilter filter) {
  VLM_CHECK(src.width > 0 && src.height > 0 && src.rgb.size() == static_cast<size_t>(src.width) * src.height * 3,
            "resize: bad source image ", src.width, "x", src.height);
  VLM_CHECK(resize_width > 0 && resize_height > 0, "resize: bad target size ", resize_width, "x", resize_height);
  VLM_CHECK(x0 >= 0 && y0 >= 0 && crop_width > 0 && crop_height > 0 && x0 + crop_width <= resize_width &&
                y0 + crop_height <= resize_height,
            "resize: window ", crop_width, "x", crop_height, "+", x0, "+", y0, " outside ", resize_width, "x",
            resize_height);
  const bool need_h = resize_width != src.width;
  const bool need_v = resize_height != src.height;

  // Source rows the vertical pass reads.
  AxisCoeffs vc;
  int row_first = y0, row_last = y0 + crop_height;
  if (need_v) {
    vc = axis_coeffs(src.height, resize_height, filter);
    row_first = vc.first[static_cast<size_t>(y0)];
    row_last = 0;
    for (int y = y0; y < y0 + crop_height; ++y)
      row_last = std::max(row_last, vc.first[static_cast<size_t>(y)] + vc.count[static_cast<size_t>(y)]);
  }

  // Horizontal pass over those rows, into an 8-bit intermediate of crop_width columns.
  Image mid(crop_width, row_last - row_first);
  if (need_h) {
    const AxisCoeffs hc = axis_coeffs(src.width, resize_width, filter);
    for (int y = row_first; y < row_last; ++y) {
      const uint8_t* in = src.pixel(0, y);
      uint8_t* out = mid.pixel(0, y - row_first);
      for (int x = 0; x < crop_width; ++x) {
        const size_t o = static_cast<size_t>(x + x0);
        const int32_t* k = hc.weights.data() + o * hc.ksize;
        const uint8_t* p = in + static_cast<size_t>(hc.first[o]) * 3;
        int32_t r = 1 << (kPrecisionBits - 1), g = r, b = r;
        for (int i = 0; i < hc.count[o]; ++i, p += 3) {
          r += p[0] * k[i];
          g += p[1] * k[i];
          b += p[2] * k[i];
        }
        out[3 * x] = clip8(r);
        out[3 * x + 1] = clip8(g);
        out[3 * x + 2] = clip8(b);
      }
    }
  } else {
    for (int y = row_first; y < row_last; ++y)
      std::copy_n(src.pixel(x0, y), static_cast<size_t>(crop_width) * 3, mid.pixel(0, y - row_first));
  }
  if (!need_v) return mid;

  Image dst(crop_width, crop_height);
  const size_t row_stride = static_cast<size_t>(crop_width) * 3;
  for (int y = 0; y < crop_height; ++y) {
    const size_t o = static_cast<size_t>(y + y0);
    const int32_t* k = vc.weights.data() + o * vc.ksize;
    const uint8_t* base = mid.pixel(0, vc.first[o] - row_first);
    uint8_t* out = dst.pixel(0, y);
    for (size_t xc = 0; xc < row_stride; ++xc) {
      int32_t acc = 1 << (kPrecisionBits - 1);
      const uint8_t* p = base + xc;
      for (int i = 0; i < vc.count[o]; ++i, p += row_stride) acc += *p * k[i];
      out[xc] = clip8(acc);
    }
  }
  return dst;
}

Image resize_to(const Image& src, int width, int height, ResizeFilter filter) {
  return resize_crop(src, width, height, 0, 0, width, height, filter);
}

Image resize_shorter_then_center_crop(const Image& src, int shorter, int crop_width, int crop_height,
                                      ResizeFilter filter) {
  VLM_CHECK(shorter > 0, "resize_shorter_then_center_crop: shorter side ", shorter);
  int w = shorter, h = shorter;
  if (src.width < src.height) {
    h = static_cast<int>(static_cast<int64_t>(shorter) * src.height / src.width);
  } else if (src.height < src.width) {
    w = static_cast<int>(static_cast<int64_t>(shorter) * src.width / src.height);
  }
  VLM_CHECK(crop_width <= w && crop_height <= h, "resize_shorter_then_center_crop: crop ", crop_width, "x",
            crop_height, " larger than the resized ", w, "x", h);
  const int x0 = static_cast<int>(std::nearbyint((w - crop_width) / 2.0));  // ties to even, like Python's round()
  const int y0 = static_cast<int>(std::nearbyint((h - crop_height) / 2.0));
  return resize_crop(src, w, h, x0, y0, crop_width, crop_height, filter);
}

Image crop(const Image& src, int x0, int y0, int width, int height) {
  VLM_CHECK(x0 >= 0 && y0 >= 0 && width > 0 && height > 0 && x0 + width <= src.width && y0 + height <= src.height,
            "crop: window ", width, "x", height, "+", x0, "+", y0, " outside ", src.width, "x", src.height);
  Image dst(width, height);
  for (int y = 0; y < height; ++y)
    std::copy_n(src.pixel(x0, y0 + y), static_cast<size_t>(width) * 3, dst.pixel(0, y));
  return dst;
}

void to_chw_normalized(const Image& image, const float mean[3], const float std[3], float* out) {
  float lut[3][256];
  for (int c = 0; c < 3; ++c) {
    VLM_CHECK(std[c] != 0.f, "to_chw_normalized: std[", c, "] is 0");
    for (int v = 0; v < 256; ++v) lut[c][v] = (static_cast<float>(v) / 255.f - mean[c]) / std[c];
  }
  const size_t plane = static_cast<size_t>(image.width) * image.height;
  const uint8_t* p = image.rgb.data();
  for (size_t i = 0; i < plane; ++i, p += 3) {
    out[i] = lut[0][p[0]];
    out[plane + i] = lut[1][p[1]];
    out[2 * plane + i] = lut[2][p[2]];
  }
}

}  // namespace vlm

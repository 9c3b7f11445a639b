// Resize, crops, padding, crop geometry and normalisation (see transforms.h).
//
// Resize = Pillow's ImagingResample for 8-bit images: per axis, precompute_coeffs + normalize_coeffs_8bpc (22-bit
// fixed-point weights, rounded half away from zero), a horizontal pass over the source rows the vertical pass needs
// into an 8-bit intermediate, then the vertical pass. Each pass has a plain loop and an AVX2 kernel that performs
// the same int32 multiply-adds (only the order of lanes differs), so both give identical bytes.
#include "data/image/transforms.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define VLM_RESIZE_AVX2 1
#endif

namespace vlm {
namespace {

constexpr int kPrecisionBits = 22;  // 32 bits - 8 for the pixel value - 2 headroom for negative bicubic lobes
constexpr int32_t kRoundHalf = 1 << (kPrecisionBits - 1);

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

// Lanczos with a = 3: sinc(x) sinc(x / 3) on (-3, 3) (Pillow's LANCZOS, what Idefics3 / SmolVLM resize with).
double lanczos_filter(double x) {
  auto sinc = [](double t) {
    if (t == 0.0) return 1.0;
    t *= M_PI;
    return std::sin(t) / t;
  };
  return -3.0 <= x && x < 3.0 ? sinc(x) * sinc(x / 3.0) : 0.0;
}

// Per output position along one axis (of a window of the outputs): the first source index, the tap count and
// fixed-point weights.
struct AxisCoeffs {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> weights;  // [window, ksize], zero past count
};

// Pillow's precompute_coeffs: `out_size` outputs covering [in0, in1) of an axis of `in_size` pixels, computed only
// for the outputs [out_first, out_first + out_count) (index 0 of the result is output out_first), so a crop of a
// huge resize (a 1 x 60000 image's shorter side to 224) costs only what the crop needs.
AxisCoeffs axis_coeffs(int in_size, float in0, float in1, int out_size, ResizeFilter filter, int out_first,
                       int out_count) {
  const double support0 = filter == ResizeFilter::bilinear ? 1.0 : filter == ResizeFilter::bicubic ? 2.0 : 3.0;
  double (*fn)(double) = filter == ResizeFilter::bilinear  ? bilinear_filter
                         : filter == ResizeFilter::bicubic ? bicubic_filter
                                                           : lanczos_filter;
  const double scale = (static_cast<double>(in1) - static_cast<double>(in0)) / out_size;
  const double filterscale = std::max(scale, 1.0);  // widen the kernel when shrinking: antialiasing
  const double support = support0 * filterscale;
  const double ss = 1.0 / filterscale;
  AxisCoeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(static_cast<size_t>(out_count));
  c.count.resize(static_cast<size_t>(out_count));
  c.weights.assign(static_cast<size_t>(out_count) * c.ksize, 0);
  std::vector<double> w(static_cast<size_t>(c.ksize));
  for (int o = 0; o < out_count; ++o) {
    const double center = in0 + (o + out_first + 0.5) * scale;
    int lo = static_cast<int>(center - support + 0.5);  // truncation toward zero, then clamped
    int hi = static_cast<int>(center + support + 0.5);
    lo = std::max(lo, 0);
    hi = std::min(hi, in_size);
    const int n = std::clamp(hi - lo, 0, c.ksize);
    double total = 0.0;
    for (int i = 0; i < n; ++i) {
      w[static_cast<size_t>(i)] = fn((i + lo - center + 0.5) * ss);
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

// ---- plain loops ----

// Output columns [x0, x0 + n) of one source row.
void horizontal_row_plain(const uint8_t* in, const AxisCoeffs& hc, int x0, int n, uint8_t* out) {
  for (int x = 0; x < n; ++x) {
    const size_t o = static_cast<size_t>(x + x0);
    const int32_t* k = hc.weights.data() + o * hc.ksize;
    const uint8_t* p = in + static_cast<size_t>(hc.first[o]) * 3;
    int32_t r = kRoundHalf, g = r, b = r;
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

// One output row from `count` input rows starting at `base` (`stride` bytes apart), `n` bytes wide.
void vertical_row_plain(const uint8_t* base, size_t stride, const int32_t* k, int count, size_t n, uint8_t* out) {
  for (size_t xc = 0; xc < n; ++xc) {
    int32_t acc = kRoundHalf;
    const uint8_t* p = base + xc;
    for (int i = 0; i < count; ++i, p += stride) acc += *p * k[i];
    out[xc] = clip8(acc);
  }
}

// ---- AVX2 kernels ----
#ifdef VLM_RESIZE_AVX2

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}

// Weights of output pairs interleaved per tap: pairs[(p * ksize + i) * 2 + {0, 1}] = weight i of outputs
// x0 + 2p and x0 + 2p + 1 (zero past each one's count).
std::vector<int32_t> pair_weights(const AxisCoeffs& hc, int x0, int n_pairs) {
  std::vector<int32_t> pw(static_cast<size_t>(n_pairs) * hc.ksize * 2);
  for (int p = 0; p < n_pairs; ++p)
    for (int j = 0; j < 2; ++j) {
      const int32_t* k = hc.weights.data() + static_cast<size_t>(x0 + 2 * p + j) * hc.ksize;
      for (int i = 0; i < hc.ksize; ++i) pw[(static_cast<size_t>(p) * hc.ksize + i) * 2 + j] = k[i];
    }
  return pw;
}

__attribute__((target("avx2"))) inline __m256i narrow_shift(__m256i a) {
  return _mm256_srai_epi32(a, kPrecisionBits);
}

// Two outputs per 256-bit vector: lanes 0-3 hold pixel (R, G, B, next byte) under output 2p's tap, lanes 4-7
// output 2p+1's, each multiplied by its weight. Taps past an output's count have weight 0 (the byte read is
// harmless). Reads up to (ksize + 1) * 3 + 1 bytes past the row's last used pixel: the caller guarantees them.
// Writes exactly 3 * n bytes.
__attribute__((target("avx2"))) void horizontal_row_avx2(const uint8_t* in, const AxisCoeffs& hc,
                                                         const int32_t* pw, int x0, int n, uint8_t* out) {
  const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  const int n_pairs = n / 2;
  for (int p = 0; p < n_pairs; ++p) {
    const size_t o0 = static_cast<size_t>(x0 + 2 * p), o1 = o0 + 1;
    const uint8_t* p0 = in + static_cast<size_t>(hc.first[o0]) * 3;
    const uint8_t* p1 = in + static_cast<size_t>(hc.first[o1]) * 3;
    const int taps = std::max(hc.count[o0], hc.count[o1]);
    const int32_t* w = pw + static_cast<size_t>(p) * hc.ksize * 2;
    __m256i acc = _mm256_set1_epi32(kRoundHalf);
    for (int i = 0; i < taps; ++i, p0 += 3, p1 += 3, w += 2) {
      uint32_t a, b;
      std::memcpy(&a, p0, 4);
      std::memcpy(&b, p1, 4);
      const __m128i px = _mm_insert_epi32(_mm_cvtsi32_si128(static_cast<int>(a)), static_cast<int>(b), 1);
      const __m256i wv = _mm256_permutevar8x32_epi32(
          _mm256_castsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w))), spread);
      acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(px), wv));
    }
    const __m256i v = narrow_shift(acc);
    const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    const __m128i b8 = _mm_packus_epi16(w16, w16);  // bytes: R0 G0 B0 X0 R1 G1 B1 X1
    const uint32_t px0 = static_cast<uint32_t>(_mm_cvtsi128_si32(b8));
    const uint32_t px1 = static_cast<uint32_t>(_mm_extract_epi32(b8, 1));
    std::memcpy(out + 6 * p, &px0, 4);      // its 4th byte is overwritten by the next pixel
    std::memcpy(out + 6 * p + 3, &px1, 3);  // exact: never writes past the row
  }
  if (n & 1) horizontal_row_plain(in, hc, x0 + n - 1, 1, out + 3 * (n - 1));
}

__attribute__((target("avx2"))) inline __m256i pack4(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(narrow_shift(a), narrow_shift(b));
  const __m256i cd = _mm256_packs_epi32(narrow_shift(c), narrow_shift(d));
  return _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

__attribute__((target("avx2"))) inline __m256i load8_epi32(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// 32 bytes per step with four accumulators, then 8 bytes, then the plain loop. Reads only inside the rows.
__attribute__((target("avx2"))) void vertical_row_avx2(const uint8_t* base, size_t stride, const int32_t* k,
                                                       int count, size_t n, uint8_t* out) {
  size_t xc = 0;
  for (; xc + 32 <= n; xc += 32) {
    __m256i a0 = _mm256_set1_epi32(kRoundHalf), a1 = a0, a2 = a0, a3 = a0;
    const uint8_t* p = base + xc;
    for (int i = 0; i < count; ++i, p += stride) {
      const __m256i w = _mm256_set1_epi32(k[i]);
      a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(load8_epi32(p), w));
      a1 = _mm256_add_epi32(a1, _mm256_mullo_epi32(load8_epi32(p + 8), w));
      a2 = _mm256_add_epi32(a2, _mm256_mullo_epi32(load8_epi32(p + 16), w));
      a3 = _mm256_add_epi32(a3, _mm256_mullo_epi32(load8_epi32(p + 24), w));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + xc), pack4(a0, a1, a2, a3));
  }
  for (; xc + 8 <= n; xc += 8) {
    __m256i a = _mm256_set1_epi32(kRoundHalf);
    const uint8_t* p = base + xc;
    for (int i = 0; i < count; ++i, p += stride)
      a = _mm256_add_epi32(a, _mm256_mullo_epi32(load8_epi32(p), _mm256_set1_epi32(k[i])));
    const __m256i v = narrow_shift(a);
    const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + xc), _mm_packus_epi16(w16, w16));
  }
  if (xc < n) vertical_row_plain(base + xc, stride, k, count, n - xc, out + xc);
}

#endif  // VLM_RESIZE_AVX2

std::atomic<bool> g_simd_enabled{true};

bool simd_available() {
#ifdef VLM_RESIZE_AVX2
  static const bool has = cpu_has_avx2();
  return has;
#else
  return false;
#endif
}

bool use_simd() { return simd_available() && g_simd_enabled.load(std::memory_order_relaxed); }

// A per-thread scratch buffer for the 8-bit intermediate (grows, never shrinks).
uint8_t* scratch(size_t bytes) {
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf.data();
}

// Horizontal pass over source rows [row_first, row_last) into `dst` (one row per source row, `dst_stride` apart).
void horizontal_pass(const ImageView& src, const AxisCoeffs& hc, int x0, int n, int row_first, int row_last,
                     uint8_t* dst, size_t dst_stride) {
  const bool simd = use_simd() && n >= 2;
#ifdef VLM_RESIZE_AVX2
  if (simd) {
    const std::vector<int32_t> pw = pair_weights(hc, x0, n / 2);
    // The kernel reads at most 3 * (width + ksize) + 4 bytes from a row's start (taps past an output's count read
    // beyond its last pixel); rows too close to the end of the buffer take the plain loop.
    const size_t reach = 3 * (static_cast<size_t>(src.width) + hc.ksize) + 4;
    for (int y = row_first; y < row_last; ++y) {
      const uint8_t* in = src.data + static_cast<size_t>(y) * src.stride;
      uint8_t* out = dst + static_cast<size_t>(y - row_first) * dst_stride;
      if (static_cast<size_t>(src.end - in) >= reach)
        horizontal_row_avx2(in, hc, pw.data(), x0, n, out);
      else
        horizontal_row_plain(in, hc, x0, n, out);
    }
    return;
  }
#endif
  (void)simd;
  for (int y = row_first; y < row_last; ++y)
    horizontal_row_plain(src.data + static_cast<size_t>(y) * src.stride, hc, x0, n,
                         dst + static_cast<size_t>(y - row_first) * dst_stride);
}

void vertical_row(const uint8_t* base, size_t stride, const int32_t* k, int count, size_t n, uint8_t* out) {
#ifdef VLM_RESIZE_AVX2
  if (use_simd()) return vertical_row_avx2(base, stride, k, count, n, out);
#endif
  vertical_row_plain(base, stride, k, count, n, out);
}

}  // namespace

ImageView image_view(const Image& image) { return image_view(image, 0, 0, image.width, image.height); }

ImageView image_view(const Image& image, int x0, int y0, int width, int height) {
  VLM_CHECK(image.width > 0 && image.height > 0 &&
                image.rgb.size() == static_cast<size_t>(image.width) * image.height * 3,
            "image_view: bad image ", image.width, "x", image.height);
  VLM_CHECK(x0 >= 0 && y0 >= 0 && width > 0 && height > 0 && x0 + width <= image.width &&
                y0 + height <= image.height,
            "image_view: window ", width, "x", height, "+", x0, "+", y0, " outside ", image.width, "x", image.height);
  return ImageView{image.pixel(x0, y0), width, height, static_cast<size_t>(image.width) * 3,
                   image.rgb.data() + image.rgb.size()};
}

void resize_into(const ImageView& src, const ResizeBox& box, int resize_width, int resize_height, int x0, int y0,
                 int crop_width, int crop_height, ResizeFilter filter, uint8_t* dst, size_t dst_stride) {
  VLM_CHECK(src.data && src.width > 0 && src.height > 0 && src.stride >= static_cast<size_t>(src.width) * 3 &&
                src.end >= src.data + (static_cast<size_t>(src.height) - 1) * src.stride + src.width * 3,
            "resize: bad source view ", src.width, "x", src.height);
  VLM_CHECK(resize_width > 0 && resize_height > 0, "resize: bad target size ", resize_width, "x", resize_height);
  VLM_CHECK(box.x0 >= 0.f && box.y0 >= 0.f && box.x1 > box.x0 && box.y1 > box.y0 &&
                box.x1 <= static_cast<float>(src.width) && box.y1 <= static_cast<float>(src.height),
            "resize: box (", box.x0, ", ", box.y0, ", ", box.x1, ", ", box.y1, ") outside ", src.width, "x",
            src.height);
  VLM_CHECK(x0 >= 0 && y0 >= 0 && crop_width > 0 && crop_height > 0 && x0 + crop_width <= resize_width &&
                y0 + crop_height <= resize_height,
            "resize: window ", crop_width, "x", crop_height, "+", x0, "+", y0, " outside ", resize_width, "x",
            resize_height);
  VLM_CHECK(dst != nullptr && dst_stride >= static_cast<size_t>(crop_width) * 3, "resize: bad destination");
  // As Pillow: a pass is skipped only when it would copy its axis unchanged.
  const bool need_h = resize_width != src.width || box.x0 != 0.f || box.x1 != static_cast<float>(src.width);
  const bool need_v = resize_height != src.height || box.y0 != 0.f || box.y1 != static_cast<float>(src.height);
  const size_t row_bytes = static_cast<size_t>(crop_width) * 3;

  // Source rows the vertical pass reads.
  AxisCoeffs vc;
  int row_first = y0, row_last = y0 + crop_height;
  if (need_v) {
    vc = axis_coeffs(src.height, box.y0, box.y1, resize_height, filter, y0, crop_height);
    row_first = vc.first[0];
    row_last = 0;
    for (int y = 0; y < crop_height; ++y)
      row_last = std::max(row_last, vc.first[static_cast<size_t>(y)] + vc.count[static_cast<size_t>(y)]);
  }

  // Horizontal pass: straight into dst when there is no vertical pass, else into the intermediate.
  uint8_t* mid = dst;
  size_t mid_stride = dst_stride;
  if (need_v) {
    mid = scratch(static_cast<size_t>(row_last - row_first) * row_bytes);
    mid_stride = row_bytes;
  }
  if (need_h) {
    const AxisCoeffs hc = axis_coeffs(src.width, box.x0, box.x1, resize_width, filter, x0, crop_width);
    horizontal_pass(src, hc, 0, crop_width, row_first, row_last, mid, mid_stride);
  } else {
    for (int y = row_first; y < row_last; ++y)
      std::memcpy(mid + static_cast<size_t>(y - row_first) * mid_stride,
                  src.data + static_cast<size_t>(y) * src.stride + static_cast<size_t>(x0) * 3, row_bytes);
  }
  if (!need_v) return;

  for (int y = 0; y < crop_height; ++y) {
    const size_t o = static_cast<size_t>(y);
    vertical_row(mid + static_cast<size_t>(vc.first[o] - row_first) * mid_stride, mid_stride,
                 vc.weights.data() + o * vc.ksize, vc.count[o], row_bytes, dst + static_cast<size_t>(y) * dst_stride);
  }
}

Image resize_crop(const Image& src, int resize_width, int resize_height, int x0, int y0, int crop_width,
                  int crop_height, ResizeFilter filter) {
  VLM_CHECK(crop_width > 0 && crop_height > 0, "resize: bad window ", crop_width, "x", crop_height);
  Image dst(crop_width, crop_height);
  const ResizeBox full{0.f, 0.f, static_cast<float>(src.width), static_cast<float>(src.height)};
  resize_into(image_view(src), full, resize_width, resize_height, x0, y0, crop_width, crop_height, filter, dst.rgb.data(),
              static_cast<size_t>(crop_width) * 3);
  return dst;
}

Image resize_to(const Image& src, int width, int height, ResizeFilter filter) {
  return resize_crop(src, width, height, 0, 0, width, height, filter);
}

Image resize_box(const ImageView& src, const ResizeBox& box, int width, int height, ResizeFilter filter) {
  VLM_CHECK(width > 0 && height > 0, "resize: bad target size ", width, "x", height);
  Image dst(width, height);
  resize_into(src, box, width, height, 0, 0, width, height, filter, dst.rgb.data(), static_cast<size_t>(width) * 3);
  return dst;
}

CenterCropGeometry center_crop_geometry(int src_width, int src_height, int shorter, int crop_width,
                                        int crop_height) {
  VLM_CHECK(shorter > 0 && src_width > 0 && src_height > 0, "center crop: shorter side ", shorter, " of ",
            src_width, "x", src_height);
  CenterCropGeometry g{shorter, shorter, 0, 0};
  if (src_width < src_height) {
    g.resize_height = static_cast<int>(static_cast<int64_t>(shorter) * src_height / src_width);
  } else if (src_height < src_width) {
    g.resize_width = static_cast<int>(static_cast<int64_t>(shorter) * src_width / src_height);
  }
  VLM_CHECK(crop_width <= g.resize_width && crop_height <= g.resize_height, "center crop: crop ", crop_width, "x",
            crop_height, " larger than the resized ", g.resize_width, "x", g.resize_height);
  g.x0 = static_cast<int>(std::nearbyint((g.resize_width - crop_width) / 2.0));  // ties to even, as Python's round()
  g.y0 = static_cast<int>(std::nearbyint((g.resize_height - crop_height) / 2.0));
  return g;
}

Image resize_shorter_then_center_crop(const Image& src, int shorter, int crop_width, int crop_height,
                                      ResizeFilter filter) {
  const CenterCropGeometry g = center_crop_geometry(src.width, src.height, shorter, crop_width, crop_height);
  return resize_crop(src, g.resize_width, g.resize_height, g.x0, g.y0, crop_width, crop_height, filter);
}

BorderGeometry border_geometry(int src_width, int src_height, int size) {
  VLM_CHECK(size > 0 && src_width > 0 && src_height > 0, "border: size ", size, " of ", src_width, "x", src_height);
  const double scale = static_cast<double>(size) / std::max(src_width, src_height);
  BorderGeometry g;
  g.resize_width = std::clamp(static_cast<int>(std::nearbyint(src_width * scale)), 1, size);
  g.resize_height = std::clamp(static_cast<int>(std::nearbyint(src_height * scale)), 1, size);
  g.left = (size - g.resize_width) / 2;
  g.top = (size - g.resize_height) / 2;
  return g;
}

Image resize_longer_then_pad(const Image& src, int size, const uint8_t pad_rgb[3], ResizeFilter filter) {
  const BorderGeometry g = border_geometry(src.width, src.height, size);
  Image dst(size, size);
  for (size_t i = 0; i < dst.rgb.size(); i += 3) std::memcpy(dst.rgb.data() + i, pad_rgb, 3);
  const ResizeBox full{0.f, 0.f, static_cast<float>(src.width), static_cast<float>(src.height)};
  resize_into(image_view(src), full, g.resize_width, g.resize_height, 0, 0, g.resize_width, g.resize_height, filter,
              dst.pixel(g.left, g.top), static_cast<size_t>(size) * 3);
  return dst;
}

CropWindow random_resized_crop_window(int src_width, int src_height, float scale_lo, float scale_hi, float ratio_lo,
                                      float ratio_hi, Philox& rng) {
  VLM_CHECK(src_width > 0 && src_height > 0, "random resized crop: image ", src_width, "x", src_height);
  VLM_CHECK(0.f < scale_lo && scale_lo <= scale_hi && 0.f < ratio_lo && ratio_lo <= ratio_hi,
            "random resized crop: scale [", scale_lo, ", ", scale_hi, "], ratio [", ratio_lo, ", ", ratio_hi, "]");
  const double area = static_cast<double>(src_width) * src_height;
  const double log_lo = std::log(static_cast<double>(ratio_lo)), log_hi = std::log(static_cast<double>(ratio_hi));
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (scale_lo + (scale_hi - scale_lo) * static_cast<double>(rng.uniform()));
    const double aspect = std::exp(log_lo + (log_hi - log_lo) * static_cast<double>(rng.uniform()));
    const int w = static_cast<int>(std::nearbyint(std::sqrt(target * aspect)));
    const int h = static_cast<int>(std::nearbyint(std::sqrt(target / aspect)));
    if (0 < w && w <= src_width && 0 < h && h <= src_height) {
      const int y = static_cast<int>(rng.uniform_int(static_cast<uint64_t>(src_height - h + 1)));
      const int x = static_cast<int>(rng.uniform_int(static_cast<uint64_t>(src_width - w + 1)));
      return {x, y, w, h};
    }
  }
  // Fallback: the central crop, clamped to the ratio range.
  const double in_ratio = static_cast<double>(src_width) / src_height;
  int w = src_width, h = src_height;
  if (in_ratio < ratio_lo) {
    h = std::clamp(static_cast<int>(std::nearbyint(w / static_cast<double>(ratio_lo))), 1, src_height);
  } else if (in_ratio > ratio_hi) {
    w = std::clamp(static_cast<int>(std::nearbyint(h * static_cast<double>(ratio_hi))), 1, src_width);
  }
  return {(src_width - w) / 2, (src_height - h) / 2, w, h};
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

namespace detail {
bool resize_set_simd(bool enabled) { return g_simd_enabled.exchange(enabled); }
bool resize_simd_available() { return simd_available(); }
}  // namespace detail

}  // namespace vlm

// Data test helpers (see data_test_util.h).
#include "data_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/env.h"
#include "core/status.h"

namespace vlm::testing {

std::vector<uint8_t> tar_header(const std::string& name, uint64_t size, char type, const std::string& prefix,
                                const std::string& size_field) {
  std::vector<uint8_t> h(512, 0);
  std::memcpy(h.data(), name.data(), std::min<size_t>(name.size(), 100));
  std::memcpy(h.data() + 100, "0000644", 7);
  std::memcpy(h.data() + 108, "0000000", 7);
  std::memcpy(h.data() + 116, "0000000", 7);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%011llo", static_cast<unsigned long long>(size));
  const std::string sz = size_field.empty() ? std::string(buf) : size_field;
  std::memcpy(h.data() + 124, sz.data(), std::min<size_t>(sz.size(), 12));
  std::memcpy(h.data() + 136, "00000000000", 11);
  h[156] = static_cast<uint8_t>(type);
  std::memcpy(h.data() + 257, "ustar\0" "00", 8);
  std::memcpy(h.data() + 345, prefix.data(), std::min<size_t>(prefix.size(), 155));
  tar_fix_checksum(h.data());
  return h;
}

void tar_fix_checksum(uint8_t* h) {
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; ++i) sum += h[i];
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%06o", sum);
  std::memcpy(h + 148, buf, 6);
  h[154] = 0;
  h[155] = ' ';
}

std::vector<uint8_t> tar_member(const std::string& name, const std::string& body, char type) {
  std::vector<uint8_t> out = tar_header(name, body.size(), type);
  out.insert(out.end(), body.begin(), body.end());
  out.resize((out.size() + 511) / 512 * 512, 0);
  return out;
}

std::vector<uint8_t> tar_end() { return std::vector<uint8_t>(1024, 0); }

void append(std::vector<uint8_t>& dst, const std::vector<uint8_t>& src) {
  dst.insert(dst.end(), src.begin(), src.end());
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  VLM_CHECK(in.good(), "cannot open ", path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  VLM_CHECK(out.good(), "cannot write ", path);
}

std::string skimage_data_dir() {
  if (const std::string dir = env::text("VLM_SKIMAGE_DATA"); !dir.empty())
    return std::filesystem::is_directory(dir) ? dir : "";
  for (const char* dir : {"/usr/lib/python3/dist-packages/skimage/data", "/usr/local/share/vlm/test-images/skimage"})
    if (std::filesystem::is_directory(dir)) return dir;
  return "";
}

uint32_t crc32_of(const uint8_t* data, size_t n) {
  static uint32_t table[256];
  static bool init = false;
  if (!init) {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    init = true;
  }
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ data[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

namespace {
void put_be32(std::vector<uint8_t>& v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(static_cast<uint8_t>(x >> s));
}
void put_chunk(std::vector<uint8_t>& png, const char* type, const std::vector<uint8_t>& payload) {
  put_be32(png, static_cast<uint32_t>(payload.size()));
  std::vector<uint8_t> body(type, type + 4);
  body.insert(body.end(), payload.begin(), payload.end());
  png.insert(png.end(), body.begin(), body.end());
  put_be32(png, crc32_of(body.data(), body.size()));
}
}  // namespace

std::vector<uint8_t> make_png(int width, int height, int bit_depth, int color_type, const std::vector<uint8_t>& rows,
                              const std::vector<uint8_t>& palette, const std::vector<uint8_t>& trns) {
  static const int kChannels[] = {1, 0, 3, 1, 2, 0, 4};
  const size_t row_bytes = (static_cast<size_t>(width) * kChannels[color_type] * bit_depth + 7) / 8;
  VLM_CHECK(rows.size() == row_bytes * static_cast<size_t>(height), "make_png: ", rows.size(), " bytes of rows");
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  put_be32(ihdr, static_cast<uint32_t>(width));
  put_be32(ihdr, static_cast<uint32_t>(height));
  ihdr.insert(ihdr.end(), {static_cast<uint8_t>(bit_depth), static_cast<uint8_t>(color_type), 0, 0, 0});
  put_chunk(png, "IHDR", ihdr);
  if (!palette.empty()) put_chunk(png, "PLTE", palette);
  if (!trns.empty()) put_chunk(png, "tRNS", trns);
  // zlib stream of stored deflate blocks over the filtered (filter type 0) rows.
  std::vector<uint8_t> raw;
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), rows.begin() + static_cast<std::ptrdiff_t>(row_bytes * y),
               rows.begin() + static_cast<std::ptrdiff_t>(row_bytes * (y + 1)));
  }
  std::vector<uint8_t> z = {0x78, 0x01};
  size_t pos = 0;
  do {
    const size_t n = std::min<size_t>(65535, raw.size() - pos);
    const bool last = pos + n == raw.size();
    z.push_back(last ? 1 : 0);
    z.push_back(static_cast<uint8_t>(n & 0xff));
    z.push_back(static_cast<uint8_t>(n >> 8));
    z.push_back(static_cast<uint8_t>(~n & 0xff));
    z.push_back(static_cast<uint8_t>((~n >> 8) & 0xff));
    z.insert(z.end(), raw.begin() + static_cast<std::ptrdiff_t>(pos),
             raw.begin() + static_cast<std::ptrdiff_t>(pos + n));
    pos += n;
  } while (pos < raw.size());
  uint32_t a = 1, b = 0;
  for (uint8_t c : raw) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  put_be32(z, (b << 16) | a);
  put_chunk(png, "IDAT", z);
  put_chunk(png, "IEND", {});
  return png;
}

Image test_image(int width, int height, uint32_t seed) {
  Image img(width, height);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      uint8_t* p = img.pixel(x, y);
      p[0] = static_cast<uint8_t>(128 + 100 * std::sin(0.15 * x + seed));
      p[1] = static_cast<uint8_t>(128 + 100 * std::cos(0.11 * y + 0.5 * seed));
      p[2] = static_cast<uint8_t>((x * 3 + y * 5 + seed * 17) % 256 / 2 + 64);
    }
  return img;
}

int max_abs_diff(const Image& a, const Image& b) {
  VLM_CHECK(a.width == b.width && a.height == b.height, "size mismatch");
  int m = 0;
  for (size_t i = 0; i < a.rgb.size(); ++i) m = std::max(m, std::abs(int(a.rgb[i]) - int(b.rgb[i])));
  return m;
}

double mean_abs_diff(const Image& a, const Image& b) {
  VLM_CHECK(a.width == b.width && a.height == b.height, "size mismatch");
  double s = 0;
  for (size_t i = 0; i < a.rgb.size(); ++i) s += std::abs(int(a.rgb[i]) - int(b.rgb[i]));
  return a.rgb.empty() ? 0 : s / static_cast<double>(a.rgb.size());
}

}  // namespace vlm::testing

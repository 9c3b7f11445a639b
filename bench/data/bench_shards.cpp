// Benchmark shards for `vlm bench data` (see bench_shards.h).
#include "bench/data/bench_shards.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/philox.h"
#include "data/image/image.h"
#include "data/image/transforms.h"
#include "data/io/tar.h"
#include "data/io/webdataset.h"

namespace vlm::bench {
namespace {

namespace fs = std::filesystem;

// Value noise: one random value per lattice point (cell x cell pixels), smoothstep-interpolated.
class ValueNoise {
 public:
  ValueNoise(int width, int height, int cell, Philox& rng)
      : cell_(cell), gw_(width / cell + 2), values_(static_cast<size_t>(gw_) * (height / cell + 2)) {
    for (float& v : values_) v = rng.uniform() * 2.f - 1.f;
  }
  float at(int x, int y) const {
    const int ix = x / cell_, iy = y / cell_;
    const float fx = smooth(static_cast<float>(x % cell_) / cell_), fy = smooth(static_cast<float>(y % cell_) / cell_);
    const float* r0 = values_.data() + static_cast<size_t>(iy) * gw_ + ix;
    const float* r1 = r0 + gw_;
    const float top = r0[0] + (r0[1] - r0[0]) * fx, bottom = r1[0] + (r1[1] - r1[0]) * fx;
    return top + (bottom - top) * fy;
  }

 private:
  static float smooth(float t) { return t * t * (3.f - 2.f * t); }
  int cell_, gw_;
  std::vector<float> values_;
};

// Sum of octaves with amplitude halving as the cell halves (a 1/f spectrum, as natural images have).
class Fractal {
 public:
  Fractal(int width, int height, int largest_cell, Philox& rng) {
    for (int cell = largest_cell; cell >= 2; cell /= 2) octaves_.emplace_back(width, height, cell, rng);
  }
  float at(int x, int y) const {
    float sum = 0.f, amp = 0.5f;
    for (const ValueNoise& o : octaves_) {
      sum += amp * o.at(x, y);
      amp *= 0.55f;
    }
    return sum;
  }

 private:
  std::vector<ValueNoise> octaves_;
};

float uniform(Philox& rng, float lo, float hi) { return lo + (hi - lo) * rng.uniform(); }

struct Color {
  float r, g, b;
};
Color random_color(Philox& rng, float lo, float hi) {
  return {uniform(rng, lo, hi), uniform(rng, lo, hi), uniform(rng, lo, hi)};
}

// Box blur of radius r along rows then columns, twice (close to a Gaussian).
void blur(std::vector<float>& px, int w, int h, int r) {
  if (r <= 0) return;
  std::vector<float> tmp(px.size());
  for (int pass = 0; pass < 4; ++pass) {
    const bool rows = pass % 2 == 0;
    const int n = rows ? w : h, lines = rows ? h : w;
    for (int l = 0; l < lines; ++l)
      for (int c = 0; c < 3; ++c)
        for (int i = 0; i < n; ++i) {
          float s = 0.f;
          int k = 0;
          for (int j = std::max(0, i - r); j <= std::min(n - 1, i + r); ++j, ++k)
            s += rows ? px[(static_cast<size_t>(l) * w + j) * 3 + c] : px[(static_cast<size_t>(j) * w + l) * 3 + c];
          (rows ? tmp[(static_cast<size_t>(l) * w + i) * 3 + c] : tmp[(static_cast<size_t>(i) * w + l) * 3 + c]) =
              s / k;
        }
    px.swap(tmp);
  }
}

Image render_scene(int w, int h, Philox& rng) {
  std::vector<float> px(static_cast<size_t>(w) * h * 3);
  const Fractal clouds(w, h, 128, rng), ground_tex(w, h, 32, rng), blob_tex(w, h, 16, rng);
  const int horizon = static_cast<int>(h * uniform(rng, 0.25f, 0.7f));
  const Color sky_top = random_color(rng, 40, 140), sky_low = random_color(rng, 150, 240);
  const Color ground = random_color(rng, 30, 160);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      float* p = &px[(static_cast<size_t>(y) * w + x) * 3];
      if (y < horizon) {
        const float t = static_cast<float>(y) / std::max(1, horizon);
        const float cl = std::max(0.f, clouds.at(x, y)) * 160.f;
        p[0] = sky_top.r + (sky_low.r - sky_top.r) * t + cl;
        p[1] = sky_top.g + (sky_low.g - sky_top.g) * t + cl;
        p[2] = sky_top.b + (sky_low.b - sky_top.b) * t + cl;
      } else {
        const float depth = 0.6f + 0.6f * static_cast<float>(y - horizon) / std::max(1, h - horizon);
        const float tex = 1.f + 0.8f * ground_tex.at(x, y);
        p[0] = ground.r * depth * tex;
        p[1] = ground.g * depth * tex;
        p[2] = ground.b * depth * tex;
      }
    }
  // Shaded blobs (objects) with a soft shadow on the ground.
  const int n_blobs = 3 + static_cast<int>(rng.uniform_int(6));
  for (int b = 0; b < n_blobs; ++b) {
    const float cx = uniform(rng, 0.f, static_cast<float>(w)), cy = uniform(rng, horizon * 0.8f, static_cast<float>(h));
    const float rx = uniform(rng, 0.04f, 0.25f) * w, ry = uniform(rng, 0.04f, 0.25f) * h;
    const Color c = random_color(rng, 20, 250);
    const float lx = uniform(rng, -0.7f, 0.7f), ly = -0.6f;
    for (int y = std::max(0, static_cast<int>(cy - ry * 1.4f)); y < std::min(h, static_cast<int>(cy + ry * 1.4f)); ++y)
      for (int x = std::max(0, static_cast<int>(cx - rx * 1.3f)); x < std::min(w, static_cast<int>(cx + rx * 1.3f));
           ++x) {
        float* p = &px[(static_cast<size_t>(y) * w + x) * 3];
        const float dx = (x - cx) / rx, dy = (y - cy) / ry, d2 = dx * dx + dy * dy;
        const float sdx = (x - cx - rx * 0.3f) / (rx * 1.2f), sdy = (y - cy - ry * 0.9f) / (ry * 0.35f);
        if (d2 < 1.f) {
          const float shade = 0.55f + 0.45f * std::max(0.f, -(dx * lx + dy * ly) + std::sqrt(1.f - d2) * 0.6f);
          const float tex = 1.f + 0.5f * blob_tex.at(x, y);
          p[0] = c.r * shade * tex, p[1] = c.g * shade * tex, p[2] = c.b * shade * tex;
        } else if (sdx * sdx + sdy * sdy < 1.f && y > horizon) {
          for (int k = 0; k < 3; ++k) p[k] *= 0.6f;
        }
      }
  }
  blur(px, w, h, static_cast<int>(rng.uniform_int(3)));
  Image img(w, h);
  for (size_t i = 0; i < px.size(); ++i)
    img.rgb[i] = static_cast<uint8_t>(std::clamp(px[i] + (rng.uniform() - 0.5f) * 8.f, 0.f, 255.f));
  return img;
}

Expected<std::vector<Image>> load_photos(const std::string& dir) {
  std::vector<std::string> paths;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    std::string ext = it->path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
    if (ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == ".webp") paths.push_back(it->path().string());
  }
  if (ec) return io_error(str("bench data: cannot list photos in ", dir, ": ", ec.message()));
  std::sort(paths.begin(), paths.end());
  std::vector<Image> photos;
  for (const std::string& p : paths) {
    std::FILE* f = std::fopen(p.c_str(), "rb");
    if (!f) continue;
    std::vector<uint8_t> bytes;
    uint8_t buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.insert(bytes.end(), buf, buf + n);
    std::fclose(f);
    auto img = decode_image(bytes, p);
    if (img.ok() && std::min(img->width, img->height) >= 64) photos.push_back(std::move(*img));
  }
  if (photos.empty()) return not_found(str("bench data: no decodable photo of at least 64 px in ", dir));
  return photos;
}

// A random window of the photo with aspect 3:4 .. 16:9 (log-uniform), at least half its largest fitting size,
// resized to a longer side of `side`.
Image cut_photo(const Image& photo, int side, Philox& rng) {
  const float aspect = std::exp(uniform(rng, std::log(0.75f), std::log(16.f / 9.f)));
  float ww = std::min(static_cast<float>(photo.width), photo.height * aspect), wh = ww / aspect;
  const float f = uniform(rng, 0.5f, 1.f);
  ww *= f, wh *= f;
  const float x0 = uniform(rng, 0.f, photo.width - ww), y0 = uniform(rng, 0.f, photo.height - wh);
  const int ow = aspect >= 1.f ? side : std::max(1, static_cast<int>(std::lround(side * aspect)));
  const int oh = aspect >= 1.f ? std::max(1, static_cast<int>(std::lround(side / aspect))) : side;
  return resize_box(image_view(photo), ResizeBox{x0, y0, x0 + ww, y0 + wh}, ow, oh, ResizeFilter::bicubic);
}

std::string caption(Philox& rng) {
  static const char* kAdj[] = {"red", "old", "small", "bright", "wooden", "quiet", "busy", "green", "snowy", "dark"};
  static const char* kNoun[] = {"bicycle", "house", "dog", "boat", "street", "garden", "bridge", "cat", "market",
                                "mountain"};
  static const char* kPlace[] = {"in the city", "near the river", "at sunset", "on a hill", "in the rain",
                                 "by the sea", "under trees", "in winter"};
  const auto pick = [&](const auto& arr) { return arr[rng.uniform_int(std::size(arr))]; };
  return str("a photo of a ", pick(kAdj), " ", pick(kNoun), " ", pick(kPlace));
}

}  // namespace

Status write_bench_shard(const std::string& path, const BenchShardOptions& o) {
  if (o.n_images <= 0 || o.min_side < 16 || o.max_side < o.min_side || o.quality < 1 || o.quality > 100)
    return invalid_argument(str("bench data: bad shard options (images ", o.n_images, ", sides ", o.min_side, "..",
                                o.max_side, ", quality ", o.quality, ")"));
  std::vector<Image> photos;
  if (!o.photos_dir.empty()) {
    VLM_ASSIGN_OR_RETURN(photos, load_photos(o.photos_dir));
  }
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  VLM_ASSIGN_OR_RETURN(auto writer, TarWriter::create(path));
  for (int i = 0; i < o.n_images; ++i) {
    Philox rng(o.seed, static_cast<uint64_t>(i));
    const int side = o.min_side + static_cast<int>(rng.uniform_int(static_cast<uint64_t>(o.max_side - o.min_side + 1)));
    Image img;
    if (photos.empty()) {
      const float aspect = std::exp(uniform(rng, std::log(0.75f), std::log(16.f / 9.f)));
      const int w = aspect >= 1.f ? side : static_cast<int>(std::lround(side * aspect));
      const int h = aspect >= 1.f ? static_cast<int>(std::lround(side / aspect)) : side;
      img = render_scene(w, h, rng);
    } else {
      img = cut_photo(photos[static_cast<size_t>(i) % photos.size()], side, rng);
    }
    VLM_ASSIGN_OR_RETURN(auto jpeg, encode_jpeg(img, o.quality, ChromaSubsampling::s420));
    const std::string key = str(std::string(9 - std::min<size_t>(9, std::to_string(i).size()), '0'), i);
    const std::string text = caption(rng);
    nlohmann::json meta = {{"key", key},
                           {"caption", text},
                           {"width", img.width},
                           {"height", img.height},
                           {"similarity", 0.25 + 0.15 * rng.uniform()},
                           {"punsafe", 0.2 * rng.uniform()},
                           {"pwatermark", 0.6 * rng.uniform()},
                           {"status", "success"}};
    VLM_RETURN_IF_ERROR(writer->add(key + ".jpg", jpeg));
    VLM_RETURN_IF_ERROR(writer->add(key + ".txt", std::string_view(text)));
    VLM_RETURN_IF_ERROR(writer->add(key + ".json", std::string_view(meta.dump())));
  }
  return writer->close();
}

Expected<std::vector<BenchSample>> load_bench_samples(const std::vector<std::string>& shards) {
  std::vector<BenchSample> out;
  for (const std::string& shard : shards) {
    VLM_ASSIGN_OR_RETURN(auto reader, WebDatasetReader::open(shard));
    WebDatasetSample s;
    for (;;) {
      VLM_ASSIGN_OR_RETURN(bool more, reader->next(s));
      if (!more) break;
      for (const char* field : {"jpg", "jpeg", "png", "webp"}) {
        if (const auto* bytes = s.get(field)) {
          out.push_back({s.key, *bytes, s.text("txt")});
          break;
        }
      }
    }
  }
  if (out.empty()) return not_found("bench data: the shards hold no image samples");
  return out;
}

}  // namespace vlm::bench

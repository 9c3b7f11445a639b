// Procedural images, captions and shards for the dedup tests (see dedup_test_util.h).
#include "dedup_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <unistd.h>

#include "core/status.h"
#include "data/image/transforms.h"
#include "data/io/tar.h"

namespace vlm::testing {

Image photo_like_image(uint64_t seed, int width, int height) {
  Philox rng(seed, 77);
  auto u = [&] { return rng.uniform(); };
  // Background: a tilted two-colour gradient.
  double c0[3], c1[3];
  for (int c = 0; c < 3; ++c) c0[c] = 255 * u(), c1[c] = 255 * u();
  const double angle = 6.2831853 * u();
  const double gx = std::cos(angle), gy = std::sin(angle);
  // 4-7 soft blobs of random colour, size and position.
  struct Blob { double x, y, r, col[3], sharp; };
  std::vector<Blob> blobs(4 + rng.uniform_int(4));
  for (Blob& b : blobs) {
    b.x = width * u(), b.y = height * u(), b.r = (0.08 + 0.25 * u()) * std::min(width, height);
    for (double& c : b.col) c = 255 * u();
    b.sharp = 2 + 8 * u();
  }
  // A texture wave.
  const double fx = 0.2 + 0.5 * u(), fy = 0.2 + 0.5 * u(), amp = 6 + 10 * u();
  Image img(width, height);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      const double t = std::clamp(0.5 + 0.5 * ((x - width / 2.0) * gx + (y - height / 2.0) * gy) /
                                            (0.5 * std::max(width, height)), 0.0, 1.0);
      double p[3];
      for (int c = 0; c < 3; ++c) p[c] = c0[c] * (1 - t) + c1[c] * t;
      for (const Blob& b : blobs) {
        const double d = std::hypot(x - b.x, y - b.y) / b.r;
        const double w = 1.0 / (1.0 + std::exp(b.sharp * (d - 1.0)));
        for (int c = 0; c < 3; ++c) p[c] = p[c] * (1 - w) + b.col[c] * w;
      }
      const double tex = amp * std::sin(fx * x + 1.3 * std::sin(fy * y));
      uint8_t* q = img.pixel(x, y);
      for (int c = 0; c < 3; ++c) q[c] = static_cast<uint8_t>(std::clamp(p[c] + tex, 0.0, 255.0));
    }
  return img;
}

std::vector<uint8_t> jpeg_bytes(const Image& image, int quality) {
  auto bytes = encode_jpeg(image, quality);
  VLM_CHECK(bytes.ok(), bytes.status().to_string());
  return std::move(*bytes);
}

Image crop_fraction(const Image& image, double fraction) {
  const int dx = static_cast<int>(image.width * fraction), dy = static_cast<int>(image.height * fraction);
  Image crop(image.width - 2 * dx, image.height - 2 * dy);
  for (int y = 0; y < crop.height; ++y)
    std::copy_n(image.pixel(dx, y + dy), 3 * crop.width, crop.pixel(0, y));
  return resize_to(crop, image.width, image.height, ResizeFilter::bilinear);
}

Image brightness_shift(const Image& image, int delta) {
  Image out = image;
  for (uint8_t& v : out.rgb) v = static_cast<uint8_t>(std::clamp(int(v) + delta, 0, 255));
  return out;
}

namespace {
const char* const kSyllables[] = {"ka", "lo", "mi", "ten", "ra", "su", "vel", "dor", "pi", "an",
                                  "ek", "tho", "bri", "gan", "ul", "zer", "mo", "nis", "ter", "qua"};
}  // namespace

std::string random_caption(Philox& rng) {
  const int words = 8 + static_cast<int>(rng.uniform_int(7));
  std::string s;
  for (int w = 0; w < words; ++w) {
    if (w) s += ' ';
    const int syl = 1 + static_cast<int>(rng.uniform_int(3));
    for (int k = 0; k < syl; ++k) s += kSyllables[rng.uniform_int(20)];
  }
  s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s + ".";
}

std::string caption_near_duplicate(const std::string& caption, Philox& rng) {
  std::vector<std::string> words;
  size_t start = 0;
  std::string body = caption.substr(0, caption.size() - 1);  // without the period
  while (start <= body.size()) {
    const size_t sp = body.find(' ', start);
    words.push_back(body.substr(start, sp == std::string::npos ? std::string::npos : sp - start));
    if (sp == std::string::npos) break;
    start = sp + 1;
  }
  const size_t i = rng.uniform_int(words.size() - 1);
  std::swap(words[i], words[i + 1]);
  std::string out;
  for (size_t k = 0; k < words.size(); ++k) {
    if (k) out += k == words.size() / 2 ? ", " : " ";
    out += words[k];
  }
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out + "!";
}

void write_plain_shard(const std::string& path, const std::vector<PlainSample>& samples, size_t begin, size_t end) {
  auto writer = TarWriter::create(path);
  VLM_CHECK(writer.ok(), writer.status().to_string());
  for (size_t i = begin; i < end; ++i) {
    const PlainSample& s = samples[i];
    if (!s.jpg.empty()) VLM_CHECK((*writer)->add(s.key + ".jpg", s.jpg).ok(), "add jpg");
    if (!s.caption.empty()) VLM_CHECK((*writer)->add(s.key + ".txt", std::string_view(s.caption)).ok(), "add txt");
    if (!s.json.empty()) VLM_CHECK((*writer)->add(s.key + ".json", std::string_view(s.json)).ok(), "add json");
  }
  VLM_CHECK((*writer)->close().ok(), "close ", path);
}

PlantedDataset write_planted_dataset(const std::string& dir, int shards, int distinct, int per_kind, int corrupt,
                                     uint64_t seed) {
  Philox rng(seed, 5);
  struct Plan { int base; std::string kind; };
  std::vector<Plan> plans;
  for (const char* kind : {"exact", "reencoded", "resized", "cropped", "brighter", "caption"})
    for (int k = 0; k < per_kind; ++k) plans.push_back({static_cast<int>(rng.uniform_int(distinct)), kind});
  for (int k = 0; k < corrupt; ++k) plans.push_back({-1, "corrupt"});
  for (size_t i = plans.size(); i > 1; --i) std::swap(plans[i - 1], plans[rng.uniform_int(i)]);

  std::vector<PlainSample> samples;
  std::vector<std::string> truth;
  std::vector<Image> base_images;
  uint64_t next_image_seed = seed * 1000003 + 1;
  for (int b = 0; b < distinct; ++b) {
    base_images.push_back(photo_like_image(next_image_seed++));
    samples.push_back({"", jpeg_bytes(base_images.back(), 92), random_caption(rng), ""});
    truth.push_back("");
  }
  for (const Plan& p : plans) {
    PlainSample s;
    s.caption = random_caption(rng);
    if (p.kind == "corrupt") {
      s.jpg = {0xff, 0xd8, 0xff, 0xe0, 'n', 'o', 't', ' ', 'a', ' ', 'j', 'p', 'e', 'g'};
      s.jpg.push_back(static_cast<uint8_t>(samples.size()));  // distinct bytes: not exact copies of each other
    } else {
      const Image& img = base_images[static_cast<size_t>(p.base)];
      const PlainSample& base = samples[static_cast<size_t>(p.base)];
      if (p.kind == "exact") s.jpg = base.jpg;
      if (p.kind == "reencoded") s.jpg = jpeg_bytes(img, 60);
      if (p.kind == "resized")
        s.jpg = jpeg_bytes(resize_to(img, img.width * 7 / 10, img.height * 7 / 10, ResizeFilter::bilinear), 85);
      if (p.kind == "cropped") s.jpg = jpeg_bytes(crop_fraction(img, 0.02), 85);
      if (p.kind == "brighter") s.jpg = jpeg_bytes(brightness_shift(img, 20), 85);
      if (p.kind == "caption") {
        s.jpg = jpeg_bytes(photo_like_image(next_image_seed++), 92);
        s.caption = caption_near_duplicate(base.caption, rng);
      }
    }
    samples.push_back(std::move(s));
    truth.push_back(p.kind);
  }
  PlantedDataset d;
  for (size_t i = 0; i < samples.size(); ++i) {
    char key[16];
    std::snprintf(key, sizeof(key), "s%06u", static_cast<unsigned>(i));
    samples[i].key = key;
    d.keys.push_back(samples[i].key);
  }
  d.truth = std::move(truth);
  const size_t per_shard = (samples.size() + static_cast<size_t>(shards) - 1) / static_cast<size_t>(shards);
  for (int sh = 0; sh < shards; ++sh) {
    char name[64];
    std::snprintf(name, sizeof(name), "/planted-%06d.tar", sh);
    d.shards.push_back(dir + name);
    const size_t begin = std::min(samples.size(), sh * per_shard), end = std::min(samples.size(), begin + per_shard);
    write_plain_shard(d.shards.back(), samples, begin, end);
  }
  return d;
}

std::string fresh_temp_dir(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("vlm_dedup_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

}  // namespace vlm::testing

// The arithmetic of transformers' Idefics3 image processor (integer truncation and ceil exactly where Python has
// them) and its prompt string.
#include "data/loader/idefics3_layout.h"

#include <algorithm>
#include <cmath>

namespace vlm {
namespace {

constexpr int kMaxImageSide = 4096;  // transformers' MAX_IMAGE_SIZE

// Longest edge to max_len, aspect ratio kept, the other side truncated and made even.
void rescale_to_max_len(int& height, int& width, int max_len) {
  double aspect = static_cast<double>(width) / height;
  if (width >= height) {
    width = max_len;
    height = static_cast<int>(width / aspect);
    if (height % 2 != 0) ++height;
  } else {
    height = max_len;
    width = static_cast<int>(height * aspect);
    if (width % 2 != 0) ++width;
  }
  height = std::max(height, 1);
  width = std::max(width, 1);
}

void scale_below_upper_bound(int& height, int& width, int max_len) {
  double aspect = static_cast<double>(width) / height;
  if (width >= height && width > max_len) {
    width = max_len;
    height = static_cast<int>(width / aspect);
  } else if (height > width && height > max_len) {
    height = max_len;
    width = static_cast<int>(height * aspect);
  }
  height = std::max(height, 1);
  width = std::max(width, 1);
}

int ceil_to(int v, int m) { return (v + m - 1) / m * m; }

Status read_int(const nlohmann::json& c, const char* key, const char* sub, const std::string& source, int& out) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return Status();
  const nlohmann::json* v = &*it;
  std::string field = key;
  if (sub != nullptr) {
    if (!it->is_object() || !it->contains(sub)) return parse_error(source + ": " + key + ": expected {\"" + sub + "\": N}");
    v = &(*it)[sub];
    field += std::string(".") + sub;
  }
  if (!v->is_number_integer() || v->get<int64_t>() < 1 || v->get<int64_t>() > 65536) {
    return parse_error(source + ": " + field + ": expected an integer in [1, 65536]");
  }
  out = v->get<int>();
  return Status();
}

}  // namespace

Expected<Idefics3Options> Idefics3Options::from_preprocessor_config(const nlohmann::json& c, const std::string& source) {
  if (!c.is_object()) return parse_error(source + ": expected a JSON object");
  Idefics3Options o;
  for (auto [key, dst] : {std::pair{"do_resize", &o.do_resize}, std::pair{"do_image_splitting", &o.do_image_splitting}}) {
    auto it = c.find(key);
    if (it == c.end()) continue;
    if (!it->is_boolean()) return parse_error(source + ": " + key + ": expected true or false");
    *dst = it->get<bool>();
  }
  VLM_RETURN_IF_ERROR(read_int(c, "size", "longest_edge", source, o.longest_edge));
  VLM_RETURN_IF_ERROR(read_int(c, "max_image_size", "longest_edge", source, o.max_image_size));
  VLM_RETURN_IF_ERROR(read_int(c, "image_seq_len", nullptr, source, o.image_seq_len));
  for (auto [key, dst] : {std::pair{"do_rescale", &o.do_rescale}, std::pair{"do_normalize", &o.do_normalize}}) {
    auto it = c.find(key);
    if (it == c.end()) continue;
    if (!it->is_boolean()) return parse_error(source + ": " + key + ": expected true or false");
    *dst = it->get<bool>();
  }
  if (auto it = c.find("resample"); it != c.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > 3)
      return parse_error(source + ": resample: expected 1 (LANCZOS), 2 (BILINEAR) or 3 (BICUBIC)");
    o.resample = it->get<int>();
  }
  if (auto it = c.find("rescale_factor"); it != c.end()) {
    if (!it->is_number() || !(it->get<double>() > 0)) return parse_error(source + ": rescale_factor: expected a number > 0");
    o.rescale_factor = it->get<double>();
  }
  for (auto [key, dst] : {std::pair{"image_mean", o.image_mean}, std::pair{"image_std", o.image_std}}) {
    auto it = c.find(key);
    if (it == c.end()) continue;
    const bool scalar = it->is_number();
    if (!scalar && !(it->is_array() && it->size() == 3))
      return parse_error(source + ": " + key + ": expected a number or 3 numbers (R, G, B)");
    for (int ch = 0; ch < 3; ++ch) {
      const nlohmann::json& v = scalar ? *it : (*it)[static_cast<size_t>(ch)];
      if (!v.is_number()) return parse_error(source + ": " + key + ": expected numbers");
      dst[ch] = v.get<float>();
    }
    if (std::string(key) == "image_std" && (dst[0] == 0.f || dst[1] == 0.f || dst[2] == 0.f))
      return parse_error(source + ": image_std: must not be 0");
  }
  return o;
}

Idefics3Layout idefics3_layout(int height, int width, const Idefics3Options& o) {
  Idefics3Layout l;
  int h = height, w = width;
  if (o.do_resize) {
    rescale_to_max_len(h, w, o.longest_edge);
    scale_below_upper_bound(h, w, kMaxImageSide);
  }
  l.resized_height = h;
  l.resized_width = w;
  if (!o.do_image_splitting) {  // the image becomes the global image alone, max_image_size squared
    l.split_height = l.split_width = o.max_image_size;
    return l;
  }
  // resize_for_vision_encoder: the longer side rounded up to a tile multiple, the other side from the aspect ratio.
  const int m = o.max_image_size;
  double aspect = static_cast<double>(w) / h;
  if (w >= h) {
    w = ceil_to(w, m);
    h = ceil_to(std::max(static_cast<int>(w / aspect), 1), m);
  } else {
    h = ceil_to(h, m);
    w = ceil_to(std::max(static_cast<int>(h * aspect), 1), m);
  }
  l.split_height = h;
  l.split_width = w;
  if (h > m || w > m) {
    l.rows = (h + m - 1) / m;
    l.cols = (w + m - 1) / m;
    int tile_h = (h + l.rows - 1) / l.rows, tile_w = (w + l.cols - 1) / l.cols;
    for (int r = 0; r < l.rows; ++r) {
      for (int c = 0; c < l.cols; ++c) {
        int x = c * tile_w, y = r * tile_h;
        l.tiles.push_back({x, y, std::min(x + tile_w, w) - x, std::min(y + tile_h, h) - y});
      }
    }
  }
  return l;
}

std::string idefics3_image_prompt(int rows, int cols, int image_seq_len, const std::string& image_token,
                                  const std::string& fake_token, const std::string& global_token) {
  std::string tokens;
  for (int i = 0; i < image_seq_len; ++i) tokens += image_token;
  std::string out;
  if (rows > 0 || cols > 0) {
    for (int r = 1; r <= rows; ++r) {
      for (int c = 1; c <= cols; ++c) out += fake_token + str("<row_", r, "_col_", c, ">") + tokens;
      out += "\n";
    }
    out += "\n";
  }
  return out + fake_token + global_token + tokens + fake_token;
}

}  // namespace vlm

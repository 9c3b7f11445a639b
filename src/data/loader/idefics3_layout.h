// Idefics3 / SmolVLM image layout, as transformers' Idefics3ImageProcessor and Idefics3Processor compute it: the
// longest edge resized to `longest_edge` (even sides, at most 4096), then, with image splitting, sides rounded up
// to multiples of `max_image_size` and cut into rows x cols tiles plus a global image of max_image_size squared;
// and the prompt that replaces each <image> (<fake_token_around_image>, <row_r_col_c>, <global-img>, image_seq_len
// image tokens per tile). The pixels themselves are idefics3_pixels.h's.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace vlm {

struct Idefics3Options {
  bool do_resize = true;
  int longest_edge = 2048;    // preprocessor_config.json size.longest_edge (SmolVLM-256M: 2048)
  bool do_image_splitting = true;
  int max_image_size = 512;   // max_image_size.longest_edge: the tile and global image side
  int image_seq_len = 64;     // image tokens per tile (processor_config.json image_seq_len)
  // Pixel values (idefics3_pixels.h): PIL's resample code (1 LANCZOS, 2 BILINEAR, 3 BICUBIC), then
  // x * rescale_factor and (x - image_mean) / image_std per channel.
  int resample = 1;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  float image_mean[3] = {0.5f, 0.5f, 0.5f};
  float image_std[3] = {0.5f, 0.5f, 0.5f};

  // Reads preprocessor_config.json's fields (missing ones keep the defaults above); errors name the field.
  static Expected<Idefics3Options> from_preprocessor_config(const nlohmann::json& config, const std::string& source);
};

struct Idefics3Rect {
  int x, y, width, height;
};

struct Idefics3Layout {
  int resized_height = 0, resized_width = 0;  // after the longest-edge resize
  int split_height = 0, split_width = 0;      // after rounding up to tile multiples (max_image_size squared without splitting)
  int rows = 0, cols = 0;                     // 0 x 0: the image is only the global image
  std::vector<Idefics3Rect> tiles;            // crops of the split_height x split_width image, row-major
};

// The layout of a `height` x `width` image (both > 0).
Idefics3Layout idefics3_layout(int height, int width, const Idefics3Options& o);

// The text that stands for one image: with tiles, per row "<fake_token_around_image><row_r_col_c><image>*n..." and
// a newline, then "\n<fake_token_around_image><global-img><image>*n<fake_token_around_image>"; without tiles only
// the global part.
std::string idefics3_image_prompt(int rows, int cols, int image_seq_len, const std::string& image_token = "<image>",
                                  const std::string& fake_token = "<fake_token_around_image>",
                                  const std::string& global_token = "<global-img>");

}  // namespace vlm

// The "shapes" dataset: the project's embedded demo data. Each sample is a small JPEG of 1-3 coloured shapes on a
// pale background, with a caption and VQA pairs whose answers follow from the drawn objects, written as webdataset
// shards (KEY.jpg, KEY.json, KEY.txt). A tiny VLM learns it on a CPU in minutes.
//
// Every sample is a pure function of (seed, global index) through Philox(seed, index), so any sample can be
// regenerated alone and the layout does not depend on the image size (positions are drawn as fractions).
// Layout rules: objects are distinct (colour, shape) pairs; each is 34-44% of the image side (large enough that a
// ViT with 8 px patches at 64 px tells circles from squares quickly); their bounding boxes
// keep a gap of 4% of the side and stay 3% inside the border; any two centres differ by >= 12% of the side in x, so
// "left of" is never ambiguous.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/philox.h"
#include "data/image/image.h"

namespace vlm {

enum class ShapeKind { circle, square, triangle };
enum class ShapeColor { red, green, blue, yellow, purple };
constexpr int kNumShapeKinds = 3;
constexpr int kNumShapeColors = 5;

const char* shape_kind_name(ShapeKind kind);     // "circle", "square", "triangle"
const char* shape_color_name(ShapeColor color);  // "red", ...
// The colour's RGB: red (220,40,40), green (40,170,60), blue (40,80,220), yellow (230,200,30), purple (150,60,190).
void shape_color_rgb(ShapeColor color, uint8_t rgb[3]);

struct ShapeObject {
  ShapeKind shape = ShapeKind::circle;
  ShapeColor color = ShapeColor::red;
  double x = 0, y = 0;  // centre, pixels
  double size = 0;      // side of the bounding square, pixels (circle diameter, square side, triangle base/height)
};

struct QaPair {
  std::string question, answer;
};

struct SynthShapesSample {
  uint64_t index = 0;
  std::string key;                  // synth_shapes_key(index)
  Image image;                      // image_size x image_size
  std::vector<ShapeObject> objects;  // left to right
  std::string caption;
  std::vector<QaPair> qa;

  // {"caption": ..., "objects": [{"shape","color","x","y","size"}...], "qa": [{"question","answer"}...]}, objects
  // left to right, x/y/size in pixels rounded to 0.01.
  std::string json() const;
};

// "000000042": the global index, zero-padded to 9 digits (img2dataset's key width).
std::string synth_shapes_key(uint64_t index);

// Generates sample `index` of the dataset with this seed.
SynthShapesSample synth_shapes_sample(uint64_t seed, uint64_t index, int image_size = 64);

// "a red circle", "a red circle and a blue square", "a red circle, a blue square and a green triangle" for
// objects given left to right.
std::string synth_shapes_caption(const std::vector<ShapeObject>& objects);

// The VQA pairs for objects given left to right. Draws the random choices (which present/absent pair to ask
// about, which ordered pair for "left of") from `rng`.
std::vector<QaPair> synth_shapes_qa(const std::vector<ShapeObject>& objects, Philox& rng);

struct SynthShapesOptions {
  std::string out_dir;
  uint64_t samples = 10000;
  uint64_t seed = 0;
  uint64_t first_index = 0;  // global index of the first sample (e.g. a held-out range after the training range)
  int image_size = 64;
  uint64_t samples_per_shard = 2000;
  int jpeg_quality = 90;
  std::string prefix = "shapes";  // shards are <out_dir>/<prefix>-000000.tar, -000001.tar, ...

  Status validate() const;  // names the bad field
};

// Writes the shards (each atomically). Samples first_index .. first_index + samples - 1, in order.
Status synth_shapes_write(const SynthShapesOptions& options);

}  // namespace vlm

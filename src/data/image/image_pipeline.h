// The image pipeline: encoded bytes (JPEG, PNG, WebP) -> the normalized float [3, S, S] tensor the vision encoder
// eats, in one call. Steps: read the header -> reject decompression bombs (max_pixels) before any pixel memory ->
// plan the geometry on the source size -> decode, a JPEG at 1/2, 1/4 or 1/8 scale in the DCT domain when the output
// needs at most that many pixels (Pillow's draft()) -> resize only the output window, straight into the output
// canvas -> normalize into `out`.
//
// Modes (geometry always planned on the source size, so a DCT-scaled decode only changes the pixels' prefilter,
// never the crop):
//  - center_crop: torchvision Resize(S) + CenterCrop(S): shorter side to S, the central S x S.
//  - border_pad: img2dataset's "border" mode: longer side to S keeping the aspect, centred on an S x S canvas of
//    pad_rgb (white by default, as img2dataset), left/top padding rounded down.
//  - random_resized_crop: torchvision RandomResizedCrop(S, scale, ratio): the window drawn from `rng`, cropped
//    then resized to S x S. Deterministic for a given Philox stream (pass Philox(seed, sample ordinal)).
// Without DCT scaling (dct_scaling = false, or PNG/WebP, or a source less than twice the needed size) the pixels
// equal decode_image() followed by the transforms of transforms.h (torchvision's order: crop, then resize).
// With it they equal Pillow's draft() + resize(box=...) on the same file.
// Thread-safe; each thread reuses its own scratch buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/philox.h"
#include "core/tensor.h"
#include "data/image/image.h"
#include "data/image/transforms.h"

namespace vlm {

struct WebDatasetSample;

enum class ImageResizeMode { center_crop, border_pad, random_resized_crop };
const char* image_resize_mode_name(ImageResizeMode mode);  // "center_crop", "border_pad", "random_resized_crop"
// Accepts the names above, and "border" (img2dataset's name) and "rrc".
Expected<ImageResizeMode> parse_image_resize_mode(std::string_view name);

struct ImagePipelineOptions {
  int size = 224;  // output S x S
  ImageResizeMode mode = ImageResizeMode::center_crop;
  ResizeFilter filter = ResizeFilter::bicubic;
  float mean[3] = {0.5f, 0.5f, 0.5f};
  float std[3] = {0.5f, 0.5f, 0.5f};
  uint8_t pad_rgb[3] = {255, 255, 255};           // border_pad
  float crop_scale[2] = {0.08f, 1.f};             // random_resized_crop: area fraction range
  float crop_ratio[2] = {3.f / 4.f, 4.f / 3.f};   // random_resized_crop: width / height range
  bool dct_scaling = true;                        // JPEG: decode at 1/2..1/8 when the output allows it
  // random_resized_crop: decode only the window (decode_image_region: a JPEG's inverse DCT, upsampling and colour
  // conversion run for the window's iMCU rows and columns only). The pixels are the same either way; false decodes
  // the whole image (for tests and benchmarks).
  bool region_decode = true;
  uint64_t max_pixels = 64ull << 20;              // source width * height above this is rejected from the header

  // invalid_argument naming the field: size in 1..8192, std != 0, 0 < scale_lo <= scale_hi <= 1,
  // 0 < ratio_lo <= ratio_hi, max_pixels > 0.
  Status validate() const;
};

// What one call did (for tests and metrics).
struct ImagePlan {
  ImageInfo source;            // the header
  int scale_denominator = 1;   // the DCT scale used (decoded = ceil(source / d))
  int decoded_width = 0, decoded_height = 0;
  CropWindow window;           // the source region that fills the output (random_resized_crop: the drawn window;
                               // center_crop: the crop mapped back to source pixels, rounded; border_pad: all)
};

// The 8-bit S x S result before normalization. `rng` is needed (non-null) only by random_resized_crop, which
// draws from it. Errors: the decoder's (parse_error for bad data), invalid_argument for bombs and bad options.
Expected<Image> image_pipeline_pixels(const uint8_t* data, size_t size, const ImagePipelineOptions& options,
                                      Philox* rng = nullptr, ImagePlan* plan = nullptr);

// random_resized_crop with the window already chosen (e.g. one window for several images, or a fixed one): `window`
// is in source pixels and must lie inside the source. Other modes ignore it, as the rng version does.
Expected<Image> image_pipeline_pixels(const uint8_t* data, size_t size, const ImagePipelineOptions& options,
                                      const CropWindow& window, ImagePlan* plan = nullptr);

// The normalized result, written to out[c * S * S + y * S + x] (3 * S * S floats, e.g. one slot of a batch).
Status image_pipeline_run(const uint8_t* data, size_t size, const ImagePipelineOptions& options, Philox* rng,
                          float* out, ImagePlan* plan = nullptr);

// As image_pipeline_run, into a new f32 [3, S, S] CPU tensor.
Expected<Tensor> image_pipeline_tensor(const uint8_t* data, size_t size, const ImagePipelineOptions& options,
                                       Philox* rng = nullptr, ImagePlan* plan = nullptr);

// The sample's first image field among jpg, jpeg, png, webp through image_pipeline_run; errors name the shard, the
// key and the field (not_found when there is no image field).
Status image_pipeline_sample(const WebDatasetSample& sample, const ImagePipelineOptions& options, Philox* rng,
                             float* out, ImagePlan* plan = nullptr);

}  // namespace vlm

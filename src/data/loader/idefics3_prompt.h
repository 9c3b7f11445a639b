// SmolVLM / Idefics3 images as both training and inference feed them: when a model folder's preprocessor_config.json
// names Idefics3's image processor (and the tokenizer has its layout tokens), each image becomes its tiles plus the
// global image (idefics3_pixels.h) and its <image> in the rendered chat becomes the processor's layout, tokenized
// (idefics3_layout.h). The loader (vlm_batch.h) and the inference prompt builder (infer/prompt_builder.h) both build
// their prompts here, so a fine-tuned model sees at inference exactly the layout it was trained on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/image/image.h"
#include "data/loader/idefics3_layout.h"
#include "data/loader/idefics3_pixels.h"
#include "data/tokenizer/tokenizer.h"

namespace vlm {

// The Idefics3 preprocessing of model folder `dir`: nullopt when it has no preprocessor_config.json or that file
// names another image processor. image_seq_len comes from preprocessor_config.json, else processor_config.json,
// else `image_tokens` (the model's tokens per image). Errors: unreadable or malformed JSON and bad fields, naming
// the file.
Expected<std::optional<Idefics3Options>> read_idefics3_preprocessing(const std::string& dir, int image_tokens);

// Whether `tokenizer` has the layout tokens the Idefics3 prompt needs (<fake_token_around_image>, <global-img>).
// Without them a model folder's images are fed untiled, at training and at inference alike.
bool has_idefics3_tokens(const Tokenizer& tokenizer);

// `o` against the model it feeds: image_seq_len equal to `image_tokens` and max_image_size (the tile side) equal to
// the vision tower's `image_size`, and the layout tokens present. Errors name the mismatched setting.
Status check_idefics3_for_model(const Idefics3Options& o, int image_size, int image_tokens,
                                const Tokenizer& tokenizer);

// The prompt tokens that stand for one image of layout `l`: o.image_seq_len `image_token` ids per frame (its
// rows * cols tiles and the global image) inside the processor's layout. `image_token` must be in the tokenizer.
std::vector<int32_t> idefics3_placeholder(const Tokenizer& tokenizer, const Idefics3Layout& l,
                                          const Idefics3Options& o, const std::string& image_token);

// One image ready for the model: its frames (tiles, then the global image) and its placeholder tokens.
struct Idefics3Image {
  Idefics3Pixels pixels;
  std::vector<int32_t> placeholder;
};

// `image` RGB with both sides > 0 (any size: a 1 x 1 or a 4000 x 16 image has a layout too).
Idefics3Image idefics3_image(const Image& image, const Idefics3Options& o, const Tokenizer& tokenizer,
                             const std::string& image_token);

// The frames of a webdataset sample's first image field among jpg, jpeg, png, webp, decoded with `max_pixels` as
// the bomb limit. Errors: the decoder's with the shard, key and field; not_found when there is no image field.
struct WebDatasetSample;
Expected<Idefics3Pixels> idefics3_sample_pixels(const WebDatasetSample& sample, const Idefics3Options& o,
                                                uint64_t max_pixels);

}  // namespace vlm

// From a user's text and image files to an engine Request: the chat template with the generation prompt (the
// image placeholders first, as in training), the tokenizer, and each image decoded and preprocessed exactly as the
// held-out data is (center crop, no augmentation), keyed by its bytes and those settings for the caches. An image
// that cannot be read or decoded, or that exceeds the pixel limit, is an error naming the request and the file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <optional>

#include "data/image/image_pipeline.h"
#include "data/loader/idefics3_layout.h"
#include "data/loader/prompt.h"
#include "data/tokenizer/tokenizer.h"
#include "infer/request.h"
#include "infer/request_spec.h"

namespace vlm::infer {

// One image ready for a request: the inputs it becomes (one, or with Idefics3 its tiles then its global image) and
// the prompt tokens that stand for it (image_tokens placeholders per input, with Idefics3 inside its tile layout).
struct PreparedImage {
  std::vector<ImageInput> inputs;
  std::vector<int32_t> placeholder;
};

class PromptBuilder {
 public:
  // The tokenizer must outlive the builder. Errors: the template's tokens missing from the tokenizer.
  static Expected<PromptBuilder> create(const Tokenizer& tokenizer, const ChatTemplate& chat, int image_tokens,
                                        const ImagePipelineOptions& pipeline);
  Expected<Request> build(const RequestSpec& spec) const;
  // SmolVLM / Idefics3 checkpoints: every image becomes its tiles and global image (data/loader/idefics3_pixels.h)
  // and its placeholder the processor's layout (<fake_token_around_image>, <row_r_col_c>, <global-img>). Errors:
  // the layout's tokens missing from the tokenizer, an image_seq_len other than image_tokens, a tile size other
  // than the pipeline's.
  Status use_idefics3(const Idefics3Options& options);
  bool idefics3() const { return idefics3_.has_value(); }
  // The parts of build() for callers that hold conversations and encoded images rather than files (the server),
  // thread-safe: an encoded image's inputs and placeholder tokens (errors: the decoder's; invalid_argument for the
  // pixel limit), and the chat's tokens with the generation prompt and each image's placeholder in the first user
  // turn, in order.
  Expected<PreparedImage> prepare_image(std::string_view encoded) const;
  Expected<std::vector<int32_t>> tokenize(const std::vector<Turn>& turns,
                                          const std::vector<PreparedImage>& images) const;
  const ImagePipelineOptions& pipeline() const { return pipeline_; }
  int32_t image_token_id() const { return image_id_; }
  int32_t stop_token_id() const { return stop_id_; }  // the template's end of the assistant turn
  // The settings that change the pixels, as one string (part of every image key).
  const std::string& preprocessing() const { return preprocessing_; }

 private:
  PromptBuilder() = default;
  // One encoded image decoded and preprocessed as the held-out data is.
  Expected<ImageInput> image(std::string_view encoded) const;
  const Tokenizer* tokenizer_ = nullptr;
  ChatTemplate chat_;
  int image_tokens_ = 0;
  ImagePipelineOptions pipeline_;
  std::string preprocessing_;
  int32_t image_id_ = -1, stop_id_ = -1;
  std::optional<Idefics3Options> idefics3_;
};

}  // namespace vlm::infer

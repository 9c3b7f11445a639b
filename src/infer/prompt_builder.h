// From a user's text and image files to an engine Request: the chat template with the generation prompt (the
// image placeholders first, as in training), the tokenizer, and each image decoded and preprocessed exactly as the
// held-out data is (center crop, no augmentation), keyed by its bytes and those settings for the caches. An image
// that cannot be read or decoded, or that exceeds the pixel limit, is an error naming the request and the file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/image/image_pipeline.h"
#include "data/loader/prompt.h"
#include "data/tokenizer/tokenizer.h"
#include "infer/request.h"
#include "infer/request_spec.h"

namespace vlm::infer {

class PromptBuilder {
 public:
  // The tokenizer must outlive the builder. Errors: the template's tokens missing from the tokenizer.
  static Expected<PromptBuilder> create(const Tokenizer& tokenizer, const ChatTemplate& chat, int image_tokens,
                                        const ImagePipelineOptions& pipeline);
  Expected<Request> build(const RequestSpec& spec) const;
  // The parts of build() for callers that hold conversations and encoded images rather than files (the server):
  // the chat's tokens with the generation prompt and `n_images` placeholders in the first user turn, and one
  // encoded image decoded and preprocessed (errors: the decoder's, or the pixel limit's). Thread-safe.
  Expected<std::vector<int32_t>> tokenize(const std::vector<Turn>& turns, int n_images) const;
  Expected<ImageInput> image(std::string_view encoded) const;
  const ImagePipelineOptions& pipeline() const { return pipeline_; }
  int32_t image_token_id() const { return image_id_; }
  int32_t stop_token_id() const { return stop_id_; }  // the template's end of the assistant turn
  // The settings that change the pixels, as one string (part of every image key).
  const std::string& preprocessing() const { return preprocessing_; }

 private:
  PromptBuilder() = default;
  const Tokenizer* tokenizer_ = nullptr;
  ChatTemplate chat_;
  int image_tokens_ = 0;
  ImagePipelineOptions pipeline_;
  std::string preprocessing_;
  int32_t image_id_ = -1, stop_id_ = -1;
};

}  // namespace vlm::infer

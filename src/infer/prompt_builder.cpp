// PromptBuilder: chat template + tokenizer + image pipeline -> Request.
#include "infer/prompt_builder.h"

#include <filesystem>
#include <sstream>

#include "core/safetensors.h"
#include "infer/prefix_hash.h"

namespace vlm::infer {

namespace {
// Encoded images larger than this are refused before reading (the pixel limit is checked from the header after).
constexpr uintmax_t kMaxImageFileBytes = uintmax_t{256} << 20;
}  // namespace

Expected<PromptBuilder> PromptBuilder::create(const Tokenizer& tokenizer, const ChatTemplate& chat, int image_tokens,
                                              const ImagePipelineOptions& pipeline) {
  VLM_RETURN_IF_ERROR(pipeline.validate());
  auto image = tokenizer.token_to_id(chat.image_token);
  auto stop = tokenizer.token_to_id(chat.assistant_suffix);
  if (!image || !stop)
    return invalid_argument("the tokenizer lacks the chat template's '" + chat.image_token + "' or '" +
                            chat.assistant_suffix + "'");
  PromptBuilder b;
  b.tokenizer_ = &tokenizer;
  b.chat_ = chat;
  b.image_tokens_ = image_tokens;
  b.pipeline_ = pipeline;
  b.image_id_ = *image;
  b.stop_id_ = *stop;
  std::ostringstream p;
  p << "size=" << pipeline.size << " mode=" << image_resize_mode_name(pipeline.mode)
    << " filter=" << (pipeline.filter == ResizeFilter::bicubic ? "bicubic" : "bilinear")
    << " dct=" << pipeline.dct_scaling;
  for (int c = 0; c < 3; ++c)
    p << " c" << c << "=" << pipeline.mean[c] << "/" << pipeline.std[c] << "/" << int{pipeline.pad_rgb[c]};
  b.preprocessing_ = p.str();
  return b;
}

Expected<std::vector<int32_t>> PromptBuilder::tokenize(const std::vector<Turn>& turns, int n_images) const {
  VLM_ASSIGN_OR_RETURN(TokenizedChat chat,
                       tokenize_chat(*tokenizer_, chat_, turns, n_images, image_tokens_, /*generation_prompt=*/true));
  return std::move(chat.tokens);
}

Expected<ImageInput> PromptBuilder::image(std::string_view encoded) const {
  const int64_t S = pipeline_.size;
  Tensor pixels = Tensor::empty({3, S, S}, DType::f32);
  Philox unused(0);
  VLM_RETURN_IF_ERROR(image_pipeline_run(reinterpret_cast<const uint8_t*>(encoded.data()), encoded.size(), pipeline_,
                                         &unused, pixels.data<float>()));
  return ImageInput{pixels, image_key(encoded, preprocessing_)};
}

Expected<Request> PromptBuilder::build(const RequestSpec& spec) const {
  Request r;
  r.id = spec.id;
  r.sampling = spec.sampling;
  r.sampling.stop_ids.push_back(stop_id_);
  const std::string who = "request '" + spec.id + "': ";
  VLM_ASSIGN_OR_RETURN(r.prompt, tokenize({{spec.prompt, ""}}, static_cast<int>(spec.images.size())));
  for (const std::string& path : spec.images) {
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(path, ec);
    if (!ec && size > kMaxImageFileBytes)
      return invalid_argument(who + "image " + path + " is " + std::to_string(size) + " bytes, over the limit of " +
                              std::to_string(kMaxImageFileBytes));
    auto bytes = read_file_bytes(path);
    if (!bytes.ok()) return io_error(who + "image " + path + ": " + bytes.status().message());
    auto im = image(std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()));
    if (!im.ok()) return invalid_argument(who + "image " + path + ": " + im.status().message());
    r.images.push_back(std::move(*im));
  }
  return r;
}

}  // namespace vlm::infer

// PromptBuilder: chat template + tokenizer + image pipeline -> Request.
#include "infer/prompt_builder.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "core/safetensors.h"
#include "data/image/image.h"
#include "data/loader/idefics3_prompt.h"
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

Expected<ImageInput> PromptBuilder::image(std::string_view encoded) const {
  const int64_t S = pipeline_.size;
  Tensor pixels = Tensor::empty({3, S, S}, DType::f32);
  Philox unused(0);
  VLM_RETURN_IF_ERROR(image_pipeline_run(reinterpret_cast<const uint8_t*>(encoded.data()), encoded.size(), pipeline_,
                                         &unused, pixels.data<float>()));
  return ImageInput{pixels, image_key(encoded, preprocessing_)};
}

Status PromptBuilder::use_idefics3(const Idefics3Options& o) {
  VLM_RETURN_IF_ERROR(check_idefics3_for_model(o, pipeline_.size, image_tokens_, *tokenizer_));
  idefics3_ = o;
  std::ostringstream p;
  p << " idefics3 longest=" << o.longest_edge << " resize=" << o.do_resize << " split=" << o.do_image_splitting
    << " tile=" << o.max_image_size << " resample=" << o.resample << " rescale=" << o.do_rescale << "/"
    << o.rescale_factor << " normalize=" << o.do_normalize;
  for (int c = 0; c < 3; ++c) p << " c" << c << "=" << o.image_mean[c] << "/" << o.image_std[c];
  preprocessing_ += p.str();
  return Status();
}

Expected<PreparedImage> PromptBuilder::prepare_image(std::string_view encoded) const {
  PreparedImage out;
  if (!idefics3_) {
    VLM_ASSIGN_OR_RETURN(ImageInput im, image(encoded));
    out.inputs.push_back(std::move(im));
    out.placeholder.assign(static_cast<size_t>(image_tokens_), image_id_);
    return out;
  }
  ImageDecodeOptions decode;
  decode.max_pixels = pipeline_.max_pixels;
  VLM_ASSIGN_OR_RETURN(Image img,
                       decode_image(reinterpret_cast<const uint8_t*>(encoded.data()), encoded.size(), {}, decode));
  Idefics3Image tiled = idefics3_image(img, *idefics3_, *tokenizer_, chat_.image_token);
  const int64_t S = idefics3_->max_image_size, per_frame = 3 * S * S;
  const Tensor& frames = tiled.pixels.frames;
  for (int64_t f = 0; f < frames.dim(0); ++f) {
    Tensor frame = Tensor::empty({3, S, S}, DType::f32);
    std::copy_n(frames.data<float>() + f * per_frame, per_frame, frame.data<float>());
    out.inputs.push_back({std::move(frame), image_key(encoded, preprocessing_ + " frame=" + std::to_string(f))});
  }
  out.placeholder = std::move(tiled.placeholder);
  return out;
}

Expected<std::vector<int32_t>> PromptBuilder::tokenize(const std::vector<Turn>& turns,
                                                       const std::vector<PreparedImage>& images) const {
  std::vector<std::vector<int32_t>> placeholders;
  for (const PreparedImage& im : images) placeholders.push_back(im.placeholder);
  VLM_ASSIGN_OR_RETURN(TokenizedChat chat,
                       tokenize_chat_with_images(*tokenizer_, chat_, turns, placeholders, /*generation_prompt=*/true));
  return std::move(chat.tokens);
}

Expected<Request> PromptBuilder::build(const RequestSpec& spec) const {
  Request r;
  r.id = spec.id;
  r.sampling = spec.sampling;
  r.sampling.stop_ids.push_back(stop_id_);
  const std::string who = "request '" + spec.id + "': ";
  std::vector<PreparedImage> images;
  for (const std::string& path : spec.images) {
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(path, ec);
    if (!ec && size > kMaxImageFileBytes)
      return invalid_argument(who + "image " + path + " is " + std::to_string(size) + " bytes, over the limit of " +
                              std::to_string(kMaxImageFileBytes));
    auto bytes = read_file_bytes(path);
    if (!bytes.ok()) return io_error(who + "image " + path + ": " + bytes.status().message());
    auto im = prepare_image(std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()));
    if (!im.ok()) return invalid_argument(who + "image " + path + ": " + im.status().message());
    images.push_back(std::move(*im));
  }
  VLM_ASSIGN_OR_RETURN(r.prompt, tokenize({{spec.prompt, ""}}, images));
  for (PreparedImage& im : images)
    for (ImageInput& in : im.inputs) r.images.push_back(std::move(in));
  return r;
}

}  // namespace vlm::infer

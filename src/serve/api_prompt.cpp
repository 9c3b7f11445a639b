// Chat messages and completion prompts to engine requests.
#include "serve/api_prompt.h"

namespace vlm::serve {

namespace {

// user/assistant messages as turns; system text is prefixed to the next user message.
std::vector<Turn> chat_turns(const std::vector<ApiMessage>& messages) {
  std::vector<Turn> turns;
  std::string system;
  bool open_turn = false;  // the last turn has its user text and no answer yet
  for (const ApiMessage& m : messages) {
    if (m.role == "system") {
      system += (system.empty() ? "" : "\n") + m.text;
    } else if (m.role == "user") {
      std::string text = system.empty() ? m.text : system + "\n\n" + m.text;
      system.clear();
      if (open_turn) {
        turns.back().user += "\n" + text;
      } else {
        turns.push_back(Turn{text, "", false});
        open_turn = true;
      }
    } else {  // assistant
      if (!open_turn) turns.push_back(Turn{"", "", false});
      turns.back().assistant = m.text;
      open_turn = false;
    }
  }
  return turns;
}

}  // namespace

ApiError ApiPromptBuilder::build(const ApiRequest& api, const std::string& id, infer::Request* out) const {
  infer::Request r;
  r.id = id;
  r.sampling = api.sampling;
  if (!api.ignore_eos) r.sampling.stop_ids.push_back(builder_.stop_token_id());
  std::vector<infer::PreparedImage> images;
  for (const ApiImage& image : api.images) {
    auto im = builder_.prepare_image(image.bytes);
    if (!im.ok()) {
      const bool bomb = im.status().code() == StatusCode::invalid_argument;
      return unprocessable(
          image.param,
          std::string(bomb ? "the image is too large: " : "the image does not decode: ") + im.status().message(),
          bomb ? "image_too_large" : "invalid_image");
    }
    images.push_back(std::move(*im));
  }
  if (api.endpoint == Endpoint::chat) {
    auto tokens = builder_.tokenize(chat_turns(api.messages), images);
    if (!tokens.ok()) return bad_request("messages", tokens.status().message());
    r.prompt = std::move(*tokens);
  } else {
    r.prompt = tokenizer_.encode(api.prompt);
    if (r.prompt.empty()) return bad_request("prompt", "the prompt has no tokens");
  }
  const int64_t len = static_cast<int64_t>(r.prompt.size());
  if (len >= max_context_)
    return bad_request(api.endpoint == Endpoint::chat ? "messages" : "prompt",
                       "the prompt is " + std::to_string(len) + " tokens; this model's context holds " +
                           std::to_string(max_context_) + " tokens (prompt and output)",
                       "context_length_exceeded");
  for (infer::PreparedImage& im : images)
    for (infer::ImageInput& in : im.inputs) r.images.push_back(std::move(in));
  *out = std::move(r);
  return {};
}

}  // namespace vlm::serve

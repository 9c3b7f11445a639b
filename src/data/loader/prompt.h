// Turning samples into token sequences: chat templates, `<image>` expansion and the loss mask.
// A sequence is the tokens of all turns; `is_target[t]` marks tokens the model is trained to produce (assistant
// answers and their end-of-turn token). The image placeholder appears once per image in the first user turn and
// is expanded into `image_tokens` copies of the placeholder id, whose embeddings the model replaces.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/tokenizer/tokenizer.h"

namespace vlm {

struct ChatTemplate {
  std::string name = "chat";
  std::string user_prefix = "<|im_start|>user\n";
  std::string user_suffix = "<|im_end|>\n";
  std::string assistant_prefix = "<|im_start|>assistant\n";
  std::string assistant_suffix = "<|im_end|>";  // trained: the model learns to stop
  std::string turn_separator = "\n";            // after assistant_suffix, not trained
  std::string image_token = "<image>";
};

// "chat" (SmolLM2 / ChatML markers) or "plain" ("<image>question answer<|im_end|>" with minimal markup).
Expected<ChatTemplate> chat_template_by_name(const std::string& name);

struct Turn {
  std::string user;
  std::string assistant;
  bool caption = false;  // the assistant text is a caption: a prefix of it is still a valid target (truncation)
};

struct TokenizedChat {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> is_target;  // 1 where the token is an assistant answer token
  int n_images = 0;
};

// Tokenizes `turns`; the first user turn is prefixed with `n_images` image placeholders. With
// `generation_prompt`, the last turn's assistant text is ignored and the sequence ends after assistant_prefix
// (what generation continues from). Errors: the template's special tokens missing from the tokenizer.
Expected<TokenizedChat> tokenize_chat(const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                                      const std::vector<Turn>& turns, int n_images, int image_tokens,
                                      bool generation_prompt);

// Answer normalization for exact-match scoring: lower case, trimmed, inner whitespace collapsed, trailing
// '.', '!', '?' removed.
std::string normalize_answer(const std::string& text);

}  // namespace vlm

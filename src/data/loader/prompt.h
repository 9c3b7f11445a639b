// Turning samples into token sequences: chat templates, `<image>` expansion and the loss mask.
// A sequence is the tokens of all turns; `is_target[t]` marks tokens the model is trained to produce (assistant
// answers and their end-of-turn token). The image placeholder appears once per image in the first user turn and
// is expanded into `image_tokens` copies of the placeholder id, whose embeddings the model replaces.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/template/chat_template.h"
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
  // A model's own Jinja chat template (data.chat_template = "hf" or a path). When set, turns are rendered with it
  // (images as {"type": "image"} parts of the first user message, which the template spells as image_token) and
  // the markup fields above are unused, except assistant_suffix: the end-of-turn token generation stops at (the
  // config's eos_token).
  std::shared_ptr<const ChatTemplateRenderer> hf;
  // The Jinja template reads message contents as lists of {"type": ...} parts (SmolVLM's, Qwen2-VL's); else
  // contents are strings and images cannot be placed.
  bool hf_content_parts = false;
};

// "chat" (SmolLM2 / ChatML markers) or "plain" ("<image>question answer<|im_end|>" with minimal markup).
Expected<ChatTemplate> chat_template_by_name(const std::string& name);
// chat_template_by_name's names, plus "hf" (the Jinja template of the model directory holding `tokenizer_path`:
// chat_template.jinja, tokenizer_config.json or chat_template.json) or a path to such a file or directory.
Expected<ChatTemplate> chat_template_for(const std::string& spec, const std::string& tokenizer_path);

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
// With a Jinja template (tmpl.hf), the assistant spans are found by rendering the conversation up to each answer
// with and without it (the answer and its end-of-turn token are the targets); a template that does not render
// conversations as growing prefixes of each other (e.g. one that moves the system prompt into the last user turn)
// is an error naming it, and so is an image placeholder count that differs from n_images.
Expected<TokenizedChat> tokenize_chat(const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                                      const std::vector<Turn>& turns, int n_images, int image_tokens,
                                      bool generation_prompt);

// tokenize_chat with each image's placeholder tokens given: image k's `<image>` in the first user turn becomes
// placeholders[k] (never trained), e.g. Idefics3's tile layout (idefics3_prompt.h). With every placeholder
// image_tokens copies of the image id this is tokenize_chat(..., placeholders.size(), image_tokens, ...).
Expected<TokenizedChat> tokenize_chat_with_images(const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                                                  const std::vector<Turn>& turns,
                                                  const std::vector<std::vector<int32_t>>& placeholders,
                                                  bool generation_prompt);

// Answer normalization for exact-match scoring: lower case, trimmed, inner whitespace collapsed, trailing
// '.', '!', '?' removed.
std::string normalize_answer(const std::string& text);

}  // namespace vlm

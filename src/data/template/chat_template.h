// Hugging Face chat templates: the Jinja "chat_template" of a model (tokenizer_config.json, or chat_template.jinja /
// chat_template.json beside it), rendered as transformers' apply_chat_template(tokenize=False) renders it:
// variables messages, tools, documents, add_generation_prompt and the tokenizer's special tokens (bos_token,
// eos_token, unk_token, pad_token, additional_special_tokens).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "data/template/jinja.h"

namespace vlm {

class ChatTemplateRenderer {
 public:
  ChatTemplateRenderer() = default;

  // `path`: a model directory, a tokenizer_config.json, a chat_template.json or a .jinja file. In a directory,
  // chat_template.jinja wins over tokenizer_config.json's template, which wins over chat_template.json (the
  // processor's); special tokens come from tokenizer_config.json when there is one. `which` picks a named
  // template when the config holds a list of them ("default" otherwise). Errors name the file and field.
  static Expected<ChatTemplateRenderer> load(const std::string& path, const std::string& which = "default");
  // From a parsed tokenizer_config.json-like object ("chat_template" plus the special tokens).
  static Expected<ChatTemplateRenderer> from_config(const nlohmann::ordered_json& config, const std::string& source,
                                                    const std::string& which = "default");

  // `messages`: [{"role": ..., "content": string or [{"type": "text", "text": ...}, {"type": "image"}]}, ...].
  // `tools`: a list of tool schemas or null (the template sees None). `extra`: more variables (an object).
  Expected<std::string> apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                              const nlohmann::ordered_json& tools = nullptr,
                              const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  const std::string& source() const { return source_; }
  const std::string& template_text() const { return text_; }
  // The special tokens passed to the template (strings; absent ones are not set).
  const nlohmann::ordered_json& special_tokens() const { return special_; }

 private:
  std::string source_, text_;
  JinjaTemplate template_;
  nlohmann::ordered_json special_ = nlohmann::ordered_json::object();
};

}  // namespace vlm

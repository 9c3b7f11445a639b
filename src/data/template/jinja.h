// A Jinja template interpreter for the subset real chat templates use (Hugging Face tokenizer_config.json
// "chat_template": Llama-3, Qwen2/ChatML, SmolVLM, Mistral, ...): text with {{ }} / {% %} / {# #} and whitespace
// control; if/elif/else, for (loop variables, else, loop filters, tuple unpacking, break/continue), set (plain,
// tuple, namespace attribute, block), macros, filter blocks; Python-semantics expressions with the filters, tests
// and methods of jinja_builtins.h. Rendering follows transformers: trim_blocks and lstrip_blocks on, tojson as
// json.dumps, raise_exception and strftime_now available. Anything outside the subset is an error naming the
// construct and its line and column, at parse time where possible.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace vlm {

namespace jinja {
struct Node;
}

class JinjaTemplate {
 public:
  JinjaTemplate() = default;
  // Errors: parse_error (syntax) or unsupported (a construct outside the subset), the message starting with
  // "<name>: line L, column C:".
  static Expected<JinjaTemplate> parse(const std::string& source, const std::string& name);

  // Renders with `variables` (a JSON object: its members become template variables, dict key order kept). Errors
  // (invalid_argument) carry the message of the failing operation or of raise_exception(), with its position.
  Expected<std::string> render(const nlohmann::ordered_json& variables) const;

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<const std::vector<std::unique_ptr<jinja::Node>>> body_;
};

}  // namespace vlm

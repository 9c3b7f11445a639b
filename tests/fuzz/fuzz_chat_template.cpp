// Fuzz target: the Jinja chat-template parser and interpreter. The input is a template; when it parses, it is
// rendered over a conversation with every message shape real templates see (system, multi-turn, content lists with
// images, tool calls, a tool result) and a tool list. Syntax errors, unsupported constructs and render errors must
// come back as a Status; only crashes, hangs and runaway memory are findings (output, loops and recursion are
// bounded by the interpreter).
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/template/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]},
    {"role": "assistant", "content": "A cat.", "tool_calls": [{"id": "abc123XYZ", "type": "function",
      "function": {"name": "look", "arguments": {"zoom": 2}}}]},
    {"role": "tool", "tool_call_id": "abc123XYZ", "content": "{\"ok\": true}"},
    {"role": "user", "content": "  thanks \u00e9 \ud83e\udd17 "}
  ])");
  static const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}}])");
  nlohmann::ordered_json config = {{"chat_template", std::string(reinterpret_cast<const char*>(data), size)},
                                   {"bos_token", "<s>"},
                                   {"eos_token", "</s>"}};
  auto renderer = vlm::ChatTemplateRenderer::from_config(config, "fuzz.jinja");
  if (renderer.ok()) {
    (void)renderer->apply(messages, true, tools);
    (void)renderer->apply(messages, false);
  }
  return 0;
}

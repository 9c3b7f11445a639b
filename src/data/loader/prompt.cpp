// Chat templates and tokenization with the loss mask.
#include "data/loader/prompt.h"

#include <cctype>

namespace vlm {

Expected<ChatTemplate> chat_template_by_name(const std::string& name) {
  ChatTemplate t;
  if (name == "chat") return t;
  if (name == "plain") {
    t.name = "plain";
    t.user_prefix = "";
    t.user_suffix = "";
    t.assistant_prefix = " ";
    t.assistant_suffix = "<|im_end|>";
    t.turn_separator = "\n";
    return t;
  }
  return invalid_argument("unknown chat template '" + name + "' (chat, plain)");
}

Expected<TokenizedChat> tokenize_chat(const Tokenizer& tok, const ChatTemplate& tmpl, const std::vector<Turn>& turns,
                                      int n_images, int image_tokens, bool generation_prompt) {
  auto image_id = tok.token_to_id(tmpl.image_token);
  if (n_images > 0 && !image_id)
    return invalid_argument("tokenizer has no '" + tmpl.image_token + "' token for image placeholders");
  TokenizedChat out;
  out.n_images = n_images;
  auto append = [&](const std::string& text, bool target) {
    if (text.empty()) return;
    for (int32_t id : tok.encode(text)) {
      out.tokens.push_back(id);
      out.is_target.push_back(target ? 1 : 0);
    }
  };
  for (size_t i = 0; i < turns.size(); ++i) {
    append(tmpl.user_prefix, false);
    if (i == 0) {
      for (int k = 0; k < n_images * image_tokens; ++k) {
        out.tokens.push_back(*image_id);
        out.is_target.push_back(0);
      }
    }
    append(turns[i].user, false);
    append(tmpl.user_suffix, false);
    append(tmpl.assistant_prefix, false);
    if (generation_prompt && i + 1 == turns.size()) break;
    append(turns[i].assistant, true);
    append(tmpl.assistant_suffix, true);
    if (i + 1 < turns.size()) append(tmpl.turn_separator, false);
  }
  return out;
}

std::string normalize_answer(const std::string& text) {
  std::string out;
  bool space = false;
  for (unsigned char c : text) {
    if (std::isspace(c)) {
      space = !out.empty();
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(static_cast<char>(std::tolower(c)));
  }
  while (!out.empty() && (out.back() == '.' || out.back() == '!' || out.back() == '?')) out.pop_back();
  return out;
}

}  // namespace vlm

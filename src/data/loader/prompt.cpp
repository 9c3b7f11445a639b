// Chat templates and tokenization with the loss mask.
#include "data/loader/prompt.h"

#include <cctype>
#include <filesystem>
#include <optional>

namespace vlm {
namespace {

using ojson = nlohmann::ordered_json;

// Renders with the Jinja template; errors name the template.
Expected<std::string> render(const ChatTemplateRenderer& r, const ojson& messages, bool generation_prompt) {
  return r.apply(messages, generation_prompt);
}

Expected<TokenizedChat> tokenize_chat_hf(const Tokenizer& tok, const ChatTemplate& tmpl, const std::vector<Turn>& turns,
                                         int n_images, int image_tokens, bool generation_prompt) {
  const ChatTemplateRenderer& r = *tmpl.hf;
  TokenizedChat out;
  out.n_images = n_images;
  std::optional<int32_t> image_id = tok.token_to_id(tmpl.image_token);
  if (n_images > 0 && !image_id) {
    return invalid_argument("tokenizer has no '" + tmpl.image_token + "' token for image placeholders");
  }
  if (n_images > 0 && !tmpl.hf_content_parts) {
    return invalid_argument(r.source() + ": the chat template takes text contents only, so it cannot place images "
                            "(use a VLM's template, or data.chat_template = chat)");
  }
  // Text pieces of the rendered conversation, each with whether it is trained.
  std::vector<std::pair<std::string, bool>> pieces;
  std::string done;  // the rendering so far
  auto extend = [&](const std::string& next, bool target, const char* what) -> Status {
    if (next.compare(0, done.size(), done) != 0) {
      return invalid_argument(r.source() + ": the chat template does not render the conversation as growing "
                              "prefixes (at " + what + "), so the assistant answers cannot be located");
    }
    std::string added = next.substr(done.size());
    if (target && !tmpl.assistant_suffix.empty()) {
      // The answer ends with its end-of-turn token; what follows it (a newline) is markup, not trained.
      size_t eot = added.rfind(tmpl.assistant_suffix);
      if (eot != std::string::npos) {
        size_t cut = eot + tmpl.assistant_suffix.size();
        pieces.emplace_back(added.substr(0, cut), true);
        pieces.emplace_back(added.substr(cut), false);
        done = next;
        return Status();
      }
    }
    pieces.emplace_back(std::move(added), target);
    done = next;
    return Status();
  };
  ojson messages = ojson::array();
  for (size_t i = 0; i < turns.size(); ++i) {
    ojson user = {{"role", "user"}};
    if (tmpl.hf_content_parts) {
      ojson parts = ojson::array();
      for (int k = 0; i == 0 && k < n_images; ++k) parts.push_back({{"type", "image"}});
      parts.push_back({{"type", "text"}, {"text", turns[i].user}});
      user["content"] = std::move(parts);
    } else {
      user["content"] = turns[i].user;
    }
    messages.push_back(std::move(user));
    VLM_ASSIGN_OR_RETURN(std::string prompt, render(r, messages, true));
    VLM_RETURN_IF_ERROR(extend(prompt, false, "a user turn"));
    if (generation_prompt && i + 1 == turns.size()) break;
    ojson answer = turns[i].assistant;
    if (tmpl.hf_content_parts) answer = ojson::array({{{"type", "text"}, {"text", turns[i].assistant}}});
    messages.push_back({{"role", "assistant"}, {"content", std::move(answer)}});
    VLM_ASSIGN_OR_RETURN(std::string full, render(r, messages, false));
    VLM_RETURN_IF_ERROR(extend(full, true, "an assistant turn"));
  }
  for (const auto& [text, target] : pieces) {
    if (text.empty()) continue;
    for (int32_t id : tok.encode(text)) {
      if (image_id && id == *image_id) {
        for (int k = 0; k < image_tokens; ++k) {
          out.tokens.push_back(id);
          out.is_target.push_back(0);
        }
        continue;
      }
      out.tokens.push_back(id);
      out.is_target.push_back(target ? 1 : 0);
    }
  }
  if (image_id) {
    int64_t found = 0;
    for (int32_t id : out.tokens) found += id == *image_id;
    if (found != static_cast<int64_t>(n_images) * image_tokens) {
      return invalid_argument(r.source() + ": the chat template rendered " + std::to_string(found / std::max(image_tokens, 1)) +
                              " '" + tmpl.image_token + "' placeholders for " + std::to_string(n_images) + " images");
    }
  }
  return out;
}

}  // namespace

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
  return invalid_argument("unknown chat template '" + name + "' (chat, plain, hf, or a path to a model's template)");
}

Expected<ChatTemplate> chat_template_for(const std::string& spec, const std::string& tokenizer_path) {
  if (spec == "chat" || spec == "plain") return chat_template_by_name(spec);
  namespace fs = std::filesystem;
  std::string where = spec;
  if (spec == "hf") {
    if (tokenizer_path.empty()) return invalid_argument("data.chat_template = \"hf\" needs data.tokenizer (its directory holds the template)");
    std::error_code ec;
    where = fs::is_directory(tokenizer_path, ec) ? tokenizer_path : fs::path(tokenizer_path).parent_path().string();
    if (where.empty()) where = ".";
  } else {
    std::error_code ec;
    if (!fs::exists(spec, ec)) return chat_template_by_name(spec);  // names the choices
  }
  VLM_ASSIGN_OR_RETURN(ChatTemplateRenderer renderer, ChatTemplateRenderer::load(where));
  ChatTemplate t;
  t.name = spec;
  t.user_prefix = t.user_suffix = t.assistant_prefix = t.turn_separator = "";
  const ojson& special = renderer.special_tokens();
  t.assistant_suffix = special.contains("eos_token") ? special["eos_token"].get<std::string>() : "";
  // Does the template read contents as lists of parts? Render a probe both ways: a template that does shows the
  // text of a part; one that does not prints the list (or fails).
  ojson probe = ojson::array({{{"role", "user"}, {"content", ojson::array({{{"type", "text"}, {"text", "PROBE"}}})}}});
  Expected<std::string> shown = renderer.apply(probe, false);
  t.hf_content_parts = shown.ok() && shown->find("PROBE") != std::string::npos && shown->find("'type'") == std::string::npos;
  t.hf = std::make_shared<const ChatTemplateRenderer>(std::move(renderer));
  return t;
}

Expected<TokenizedChat> tokenize_chat(const Tokenizer& tok, const ChatTemplate& tmpl, const std::vector<Turn>& turns,
                                      int n_images, int image_tokens, bool generation_prompt) {
  if (tmpl.hf) return tokenize_chat_hf(tok, tmpl, turns, n_images, image_tokens, generation_prompt);
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

Expected<TokenizedChat> tokenize_chat_with_images(const Tokenizer& tok, const ChatTemplate& tmpl,
                                                  const std::vector<Turn>& turns,
                                                  const std::vector<std::vector<int32_t>>& placeholders,
                                                  bool generation_prompt) {
  const int n = static_cast<int>(placeholders.size());
  VLM_ASSIGN_OR_RETURN(TokenizedChat chat, tokenize_chat(tok, tmpl, turns, n, /*image_tokens=*/1, generation_prompt));
  if (n == 0) return chat;
  const int32_t image_id = *tok.token_to_id(tmpl.image_token);  // tokenize_chat checked it
  TokenizedChat out;
  out.n_images = n;
  size_t k = 0;
  for (size_t t = 0; t < chat.tokens.size(); ++t) {
    if (chat.tokens[t] == image_id && k < placeholders.size()) {
      out.tokens.insert(out.tokens.end(), placeholders[k].begin(), placeholders[k].end());
      out.is_target.insert(out.is_target.end(), placeholders[k].size(), 0);
      ++k;
      continue;
    }
    out.tokens.push_back(chat.tokens[t]);
    out.is_target.push_back(chat.is_target[t]);
  }
  if (k != placeholders.size())
    return invalid_argument("the chat template placed " + std::to_string(k) + " image placeholders for " +
                            std::to_string(n) + " images");
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

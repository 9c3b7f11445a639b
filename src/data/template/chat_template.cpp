// Locating and reading a model's chat template and special tokens; rendering with transformers' variables.
#include "data/template/chat_template.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace vlm {
namespace {

using ojson = nlohmann::ordered_json;

Expected<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path + ": cannot open");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return io_error(path + ": read failed");
  return buf.str();
}

Expected<ojson> read_json(const std::string& path) {
  VLM_ASSIGN_OR_RETURN(std::string text, read_text(path));
  try {
    return ojson::parse(text);
  } catch (const ojson::exception& e) {
    return parse_error(path + ": not valid JSON: " + e.what());
  }
}

// tokenizer_config.json spells a special token as a string or as a serialized AddedToken {"content": ...}.
Expected<std::optional<std::string>> token_content(const ojson& v, const std::string& field) {
  if (v.is_null()) return std::optional<std::string>();
  if (v.is_string()) return std::optional<std::string>(v.get<std::string>());
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return std::optional<std::string>(v["content"].get<std::string>());
  }
  return parse_error(field + ": expected a string, null or {\"content\": ...}");
}

// The template text of a "chat_template" value: a string, or a list of {"name", "template"}.
Expected<std::string> pick_template(const ojson& v, const std::string& source, const std::string& which) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string names;
    for (const ojson& e : v) {
      if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("template") ||
          !e["template"].is_string()) {
        return parse_error(source + ": chat_template: expected a list of {\"name\": ..., \"template\": ...}");
      }
      if (e["name"] == which) return e["template"].get<std::string>();
      names += (names.empty() ? "" : ", ") + e["name"].get<std::string>();
    }
    return not_found(source + ": chat_template: no template named '" + which + "' (have: " + names + ")");
  }
  return parse_error(source + ": chat_template: expected a string or a list of named templates");
}

}  // namespace

Expected<ChatTemplateRenderer> ChatTemplateRenderer::from_config(const ojson& config, const std::string& source,
                                                                 const std::string& which) {
  if (!config.is_object()) return parse_error(source + ": expected a JSON object");
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return not_found(source + ": no chat_template");
  ChatTemplateRenderer r;
  r.source_ = source;
  VLM_ASSIGN_OR_RETURN(r.text_, pick_template(*it, source, which));
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    auto t = config.find(key);
    if (t == config.end()) continue;
    VLM_ASSIGN_OR_RETURN(std::optional<std::string> content, token_content(*t, source + ": " + key));
    if (content) r.special_[key] = *content;
  }
  if (auto extra = config.find("additional_special_tokens"); extra != config.end() && extra->is_array()) {
    ojson list = ojson::array();
    for (size_t i = 0; i < extra->size(); ++i) {
      VLM_ASSIGN_OR_RETURN(std::optional<std::string> content,
                           token_content((*extra)[i], str(source, ": additional_special_tokens[", i, "]")));
      if (content) list.push_back(*content);
    }
    r.special_["additional_special_tokens"] = std::move(list);
  }
  VLM_ASSIGN_OR_RETURN(r.template_, JinjaTemplate::parse(r.text_, source + " chat_template"));
  return r;
}

Expected<ChatTemplateRenderer> ChatTemplateRenderer::load(const std::string& path, const std::string& which) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::string config_path = path + "/tokenizer_config.json";
    ojson config = ojson::object();
    bool have_config = fs::exists(config_path, ec);
    if (have_config) {
      VLM_ASSIGN_OR_RETURN(config, read_json(config_path));
    }
    if (!config.is_object()) return parse_error(config_path + ": expected a JSON object");
    std::string source = config_path;
    if (fs::exists(path + "/chat_template.jinja", ec)) {
      VLM_ASSIGN_OR_RETURN(std::string text, read_text(path + "/chat_template.jinja"));
      config["chat_template"] = text;
      source = path + "/chat_template.jinja";
    } else if (!config.contains("chat_template") && fs::exists(path + "/chat_template.json", ec)) {
      source = path + "/chat_template.json";
      VLM_ASSIGN_OR_RETURN(ojson processor, read_json(source));
      if (!processor.is_object() || !processor.contains("chat_template")) {
        return parse_error(source + ": expected an object with \"chat_template\"");
      }
      config["chat_template"] = processor["chat_template"];
    }
    if (!config.contains("chat_template")) {
      return not_found(path + ": no chat template (looked for chat_template.jinja, tokenizer_config.json's "
                              "\"chat_template\" and chat_template.json)");
    }
    return from_config(config, source, which);
  }
  if (path.size() > 6 && path.compare(path.size() - 6, 6, ".jinja") == 0) {
    VLM_ASSIGN_OR_RETURN(std::string text, read_text(path));
    ojson config = {{"chat_template", text}};
    return from_config(config, path, which);
  }
  VLM_ASSIGN_OR_RETURN(ojson config, read_json(path));
  return from_config(config, path, which);
}

Expected<std::string> ChatTemplateRenderer::apply(const ojson& messages, bool add_generation_prompt, const ojson& tools,
                                                  const ojson& extra) const {
  if (!messages.is_array()) return invalid_argument(source_ + ": messages must be a JSON array");
  if (!extra.is_object()) return invalid_argument(source_ + ": extra template variables must be a JSON object");
  ojson vars = special_;
  for (auto it = extra.begin(); it != extra.end(); ++it) vars[it.key()] = it.value();
  vars["messages"] = messages;
  vars["tools"] = tools;
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = add_generation_prompt;
  return template_.render(vars);
}

}  // namespace vlm

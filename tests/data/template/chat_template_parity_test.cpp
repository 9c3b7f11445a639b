// Chat-template parity: every template of fixtures/hf (the tokenizer_config.json of each family and
// templates/*.json) applied to every conversation of conversations.json, with add_generation_prompt off and on,
// gives exactly the string transformers' apply_chat_template gives (fixtures/hf/expected/chat_templates.json), or
// fails where it fails (a template's raise_exception, a type error on content lists, ...).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "data/template/chat_template.h"

namespace vlm {
namespace {

using ojson = nlohmann::ordered_json;

ojson fixture(const std::string& relative) {
  std::string path = std::string(VLM_HF_FIXTURES) + "/" + relative;
  std::ifstream in(path);
  VLM_CHECK(in.good(), "missing fixture ", path);
  std::stringstream buf;
  buf << in.rdbuf();
  return ojson::parse(buf.str());
}

// The config transformers was given for template `name`: its chat template, and the special tokens of the
// template file or else of its tokenizer family (as dev/fixtures/make_tokenizer_fixtures.py builds it).
ojson template_config(const std::string& name) {
  std::ifstream family_file(std::string(VLM_HF_FIXTURES) + "/" + name + "/tokenizer_config.json");
  ojson cfg = family_file.good() ? fixture(name + "/tokenizer_config.json") : fixture("templates/" + name + ".json");
  std::string family = cfg.contains("tokenizer") ? cfg["tokenizer"].get<std::string>() : name;
  ojson family_cfg = fixture(family + "/tokenizer_config.json");
  ojson out = {{"chat_template", cfg["chat_template"]}};
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    if (cfg.contains(key)) out[key] = cfg[key];
    else if (family_cfg.contains(key)) out[key] = family_cfg[key];
  }
  return out;
}

TEST(ChatTemplateParity, EqualsTransformersApplyChatTemplate) {
  ojson expected = fixture("expected/chat_templates.json");
  std::map<std::string, ojson> conversations;
  ojson all_conversations = fixture("conversations.json");
  for (const ojson& c : all_conversations["conversations"]) conversations[c["name"].get<std::string>()] = c;
  std::map<std::string, ChatTemplateRenderer> renderers;
  size_t strings = 0, errors = 0;
  for (const ojson& c : expected["cases"]) {
    std::string name = c["template"], conv_name = c["conversation"];
    bool gen = c["add_generation_prompt"];
    if (!renderers.count(name)) {
      Expected<ChatTemplateRenderer> r = ChatTemplateRenderer::from_config(template_config(name), name);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      renderers.emplace(name, std::move(r).value());
    }
    const ojson& conv = conversations.at(conv_name);
    ojson tools = conv.contains("tools") ? conv["tools"] : ojson(nullptr);
    Expected<std::string> got = renderers.at(name).apply(conv["messages"], gen, tools);
    std::string label = name + " / " + conv_name + (gen ? " / generation prompt" : "");
    if (c.contains("text")) {
      ASSERT_TRUE(got.ok()) << label << ": " << got.status().to_string();
      EXPECT_EQ(*got, c["text"].get<std::string>()) << label;
      ++strings;
    } else {
      std::string want = c["error"];
      EXPECT_FALSE(got.ok()) << label << ": rendered although transformers raised " << want;
      const std::string prefix = "TemplateError: ";  // raise_exception(): the template's own message
      if (!got.ok() && want.rfind(prefix, 0) == 0) {
        EXPECT_NE(got.status().message().find(want.substr(prefix.size())), std::string::npos)
            << label << ": " << got.status().to_string();
      }
      ++errors;
    }
  }
  EXPECT_GE(strings, 80u);
  EXPECT_GE(errors, 8u);
}

TEST(ChatTemplateParity, LoadsModelDirectories) {
  // SmolVLM's directory: tokenizer_config.json holds the template and the special tokens.
  Expected<ChatTemplateRenderer> r = ChatTemplateRenderer::load(std::string(VLM_HF_FIXTURES) + "/smolvlm");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->special_tokens()["eos_token"], "<end_of_utterance>");
  ojson messages = ojson::parse(R"([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi"}]}])");
  Expected<std::string> s = r->apply(messages, true);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(*s, "<|im_start|>User:<image>Hi<end_of_utterance>\nAssistant:");
  // A file that does not exist, a directory without any template.
  EXPECT_EQ(ChatTemplateRenderer::load("/nonexistent/tokenizer_config.json").status().code(), StatusCode::not_found);
  Expected<ChatTemplateRenderer> none = ChatTemplateRenderer::load(std::string(VLM_HF_FIXTURES) + "/templates");
  EXPECT_EQ(none.status().code(), StatusCode::not_found);
  EXPECT_NE(none.status().message().find("no chat template"), std::string::npos);
}

}  // namespace
}  // namespace vlm

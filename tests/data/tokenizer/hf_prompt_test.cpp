// Training sequences from a model's own chat template (data.chat_template = "hf" / a path): SmolVLM's template with
// its real tokenizer places the image placeholders and trains exactly the answers and their end-of-turn tokens;
// Llama-3's text-only template works for text and refuses images with a clear error.
#include <gtest/gtest.h>

#include "data/loader/prompt.h"
#include "data/tokenizer/hf_fixtures.h"

namespace vlm {
namespace {

Tokenizer family_tokenizer(const std::string& family) {
  Expected<Tokenizer> t = Tokenizer::from_json_text(vlm::testing::hf_tokenizer_json(family), family);
  VLM_CHECK(t.ok(), t.status().to_string());
  return std::move(t).value();
}

std::string decode_where(const Tokenizer& tok, const TokenizedChat& c, uint8_t target) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < c.tokens.size(); ++i) {
    if (c.is_target[i] == target) ids.push_back(c.tokens[i]);
  }
  return tok.decode(ids);
}

TEST(HfChatPrompt, SmolVlmTemplateMasksTheAnswers) {
  Tokenizer tok = family_tokenizer("smolvlm");
  Expected<ChatTemplate> tmpl = chat_template_for(vlm::testing::hf_fixture_path("smolvlm"), "");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  EXPECT_TRUE(tmpl->hf_content_parts);
  EXPECT_EQ(tmpl->assistant_suffix, "<end_of_utterance>");
  std::vector<Turn> turns = {{"What is this?", "A cat."}, {"Color?", "Black."}};
  Expected<TokenizedChat> c = tokenize_chat(tok, *tmpl, turns, 1, 4, false);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(tok.decode(c->tokens),
            "<|im_start|>User:<image><image><image><image>What is this?<end_of_utterance>\nAssistant: A cat."
            "<end_of_utterance>\nUser: Color?<end_of_utterance>\nAssistant: Black.<end_of_utterance>\n");
  EXPECT_EQ(decode_where(tok, *c, 1), " A cat.<end_of_utterance> Black.<end_of_utterance>");
  // The generation prompt ends where the model continues.
  Expected<TokenizedChat> g = tokenize_chat(tok, *tmpl, {{"What is this?", ""}}, 1, 2, true);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(tok.decode(g->tokens), "<|im_start|>User:<image><image>What is this?<end_of_utterance>\nAssistant:");
  EXPECT_EQ(decode_where(tok, *g, 1), "");
}

TEST(HfChatPrompt, TextOnlyTemplate) {
  Tokenizer tok = family_tokenizer("llama3");
  Expected<ChatTemplate> tmpl = chat_template_for(vlm::testing::hf_fixture_path("llama3/tokenizer_config.json"), "");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  EXPECT_FALSE(tmpl->hf_content_parts);
  Expected<TokenizedChat> c = tokenize_chat(tok, *tmpl, {{"Hi", " Hello! "}}, 0, 0, false);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(tok.decode(c->tokens),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant"
            "<|end_header_id|>\n\nHello!<|eot_id|>");
  EXPECT_EQ(decode_where(tok, *c, 1), "Hello!<|eot_id|>");
  Expected<TokenizedChat> img = tokenize_chat(tok, *tmpl, {{"Hi", "x"}}, 1, 4, false);
  ASSERT_FALSE(img.ok());  // llama3's vocabulary has no <image>, and the template cannot place one
}

TEST(HfChatPrompt, SpecErrors) {
  EXPECT_FALSE(chat_template_for("fancy", "").ok());
  Expected<ChatTemplate> hf = chat_template_for("hf", "");
  ASSERT_FALSE(hf.ok());
  EXPECT_NE(hf.status().message().find("data.tokenizer"), std::string::npos);
  Expected<ChatTemplate> none = chat_template_for("hf", vlm::testing::hf_fixture_path("mistral/tokenizer.json"));
  ASSERT_FALSE(none.ok());  // Mistral's v0.1 tokenizer_config.json has no chat_template
  EXPECT_NE(none.status().message().find("no chat template"), std::string::npos) << none.status().to_string();
  EXPECT_TRUE(chat_template_for("plain", "").ok());
}

}  // namespace
}  // namespace vlm

// PromptBuilder in SmolVLM's Idefics3 mode, with SmolVLM's real tokenizer and chat template: an image becomes its
// tiles and global image, each frame's pixels those of idefics3_pixel_values, and its placeholder the processor's
// layout tokenized; the chat around it is the template's. Without the mode an image stays one input of image_tokens
// placeholders, as tokenize_chat gives them. Mismatched settings are errors naming them. With the fixture made by
// transformers, the token ids equal its Idefics3Processor's.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "core/safetensors.h"
#include "data/image/image.h"
#include "data/loader/idefics3_pixels.h"
#include "data/tokenizer/hf_fixtures.h"
#include "infer/prompt_builder.h"

namespace vlm {
namespace {

struct SmolVlm {
  Tokenizer tok;
  ChatTemplate chat;
  ImagePipelineOptions pipeline;
};

SmolVlm smolvlm(int size) {
  Expected<Tokenizer> t = Tokenizer::from_json_text(vlm::testing::hf_tokenizer_json("smolvlm"), "smolvlm");
  VLM_CHECK(t.ok(), t.status().to_string());
  Expected<ChatTemplate> c = chat_template_for(vlm::testing::hf_fixture_path("smolvlm"), "");
  VLM_CHECK(c.ok(), c.status().to_string());
  SmolVlm s{std::move(*t), std::move(*c), {}};
  s.pipeline.size = size;
  return s;
}

Idefics3Options small_idefics3() {
  Idefics3Options o;
  o.longest_edge = 96;
  o.max_image_size = 32;
  o.image_seq_len = 2;
  return o;
}

std::string png_of(const Image& img) {
  auto bytes = encode_png(img);
  VLM_CHECK(bytes.ok(), bytes.status().to_string());
  return std::string(bytes->begin(), bytes->end());
}

TEST(Idefics3Prompt, AnImageIsItsTilesAndGlobalImageInTheProcessorsLayout) {
  SmolVlm s = smolvlm(32);
  auto b = infer::PromptBuilder::create(s.tok, s.chat, 2, s.pipeline);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  ASSERT_TRUE(b->use_idefics3(small_idefics3()).ok());
  Image img(400, 300);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<uint8_t>((i * 13) % 256);
  auto prepared = b->prepare_image(png_of(img));
  ASSERT_TRUE(prepared.ok()) << prepared.status().to_string();
  const Idefics3Pixels want = idefics3_pixel_values(img, small_idefics3());
  ASSERT_EQ(prepared->inputs.size(), 10u);  // 3 x 3 tiles and the global image
  for (size_t f = 0; f < prepared->inputs.size(); ++f) {
    const Tensor& got = prepared->inputs[f].pixels;
    ASSERT_EQ(got.shape(), (Shape{3, 32, 32}));
    EXPECT_TRUE(std::equal(got.data<float>(), got.data<float>() + got.numel(),
                           want.frames.data<float>() + static_cast<int64_t>(f) * got.numel()))
        << "frame " << f;
    if (f > 0) {
      EXPECT_FALSE(prepared->inputs[f].key == prepared->inputs[f - 1].key);
    }
  }
  EXPECT_EQ(s.tok.decode(prepared->placeholder), idefics3_image_prompt(3, 3, 2));
  auto tokens = b->tokenize({{"What is this?", ""}}, {*prepared});
  ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
  EXPECT_EQ(s.tok.decode(*tokens),
            "<|im_start|>User:" + idefics3_image_prompt(3, 3, 2) + "What is this?<end_of_utterance>\nAssistant:");
  const int32_t image_id = b->image_token_id();
  EXPECT_EQ(std::count(tokens->begin(), tokens->end(), image_id), 10 * 2);
}

TEST(Idefics3Prompt, WithoutTheModeAnImageIsOneInputAsBefore) {
  SmolVlm s = smolvlm(32);
  auto b = infer::PromptBuilder::create(s.tok, s.chat, 3, s.pipeline);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto prepared = b->prepare_image(png_of(Image(50, 40)));
  ASSERT_TRUE(prepared.ok()) << prepared.status().to_string();
  EXPECT_EQ(prepared->inputs.size(), 1u);
  EXPECT_EQ(prepared->placeholder, std::vector<int32_t>(3, b->image_token_id()));
  auto two = b->tokenize({{"Compare.", ""}}, {*prepared, *prepared});
  auto before = tokenize_chat(s.tok, s.chat, {{"Compare.", ""}}, 2, 3, /*generation_prompt=*/true);
  ASSERT_TRUE(two.ok() && before.ok());
  EXPECT_EQ(*two, before->tokens);
}

TEST(Idefics3Prompt, MismatchedSettingsAreErrorsNamingThem) {
  SmolVlm s = smolvlm(32);
  auto b = infer::PromptBuilder::create(s.tok, s.chat, 2, s.pipeline);
  ASSERT_TRUE(b.ok());
  Idefics3Options o = small_idefics3();
  o.image_seq_len = 64;
  Status st = b->use_idefics3(o);
  EXPECT_NE(st.message().find("image_seq_len 64"), std::string::npos) << st.message();
  o = small_idefics3();
  o.max_image_size = 512;
  st = b->use_idefics3(o);
  EXPECT_NE(st.message().find("max_image_size 512"), std::string::npos) << st.message();
  EXPECT_FALSE(b->idefics3());
  auto bad = b->prepare_image("not an image");
  EXPECT_FALSE(bad.ok());
}

// transformers' Idefics3Processor (dev/fixtures/make_tokenizer_fixtures.py, idefics3_prompt_ids.json) on the images
// of idefics3_pixels.safetensors: the same input_ids, token for token.
TEST(Idefics3Prompt, MatchesTransformersProcessorIds) {
  const std::string ids_path = vlm::testing::hf_fixture_path("expected/idefics3_prompt_ids.json");
  if (!std::filesystem::exists(ids_path)) GTEST_SKIP() << ids_path << " is absent: make_tokenizer_fixtures.py makes it";
  const nlohmann::ordered_json expected = vlm::testing::hf_json("expected/idefics3_prompt_ids.json");
  auto pixels = safetensors_load(vlm::testing::hf_fixture_path("expected/idefics3_pixels.safetensors"));
  ASSERT_TRUE(pixels.ok()) << pixels.status().to_string();
  const nlohmann::json meta = nlohmann::json::parse(pixels->metadata.at("info"));
  nlohmann::json config = meta["config"];
  config["image_seq_len"] = expected["image_seq_len"];
  auto o = Idefics3Options::from_preprocessor_config(config, "idefics3_pixels.safetensors");
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  SmolVlm s = smolvlm(o->max_image_size);
  auto b = infer::PromptBuilder::create(s.tok, s.chat, o->image_seq_len, s.pipeline);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  ASSERT_TRUE(b->use_idefics3(*o).ok());
  ASSERT_FALSE(expected["cases"].empty());
  for (const auto& c : expected["cases"]) {
    SCOPED_TRACE(c["question"].get<std::string>());
    const Tensor& u8 = pixels->tensors.at("image_" + std::to_string(c["image"].get<int>()));
    Image img(static_cast<int>(u8.dim(1)), static_cast<int>(u8.dim(0)));
    std::copy_n(u8.data<uint8_t>(), img.rgb.size(), img.rgb.begin());
    auto prepared = b->prepare_image(png_of(img));
    ASSERT_TRUE(prepared.ok()) << prepared.status().to_string();
    auto tokens = b->tokenize({{c["question"].get<std::string>(), ""}}, {*prepared});
    ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
    EXPECT_EQ(*tokens, c["input_ids"].get<std::vector<int32_t>>()) << s.tok.decode(*tokens);
  }
}

}  // namespace
}  // namespace vlm

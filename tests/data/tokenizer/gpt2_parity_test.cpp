// Parity with the real GPT-2 tokenizer: fixtures/gpt2_tokenizer.json.gz is GPT-2's vocabulary and merges in
// tokenizer.json form, fixtures/gpt2_reference.json holds ids from two independent reference encoders that agree
// (dev/fixtures/gen_tokenizer_fixtures.js). Also round trips of arbitrary bytes and save/load of a full-size file.
#include <gtest/gtest.h>

#include <chrono>

#include "core/philox.h"
#include "data/tokenizer/fixtures.h"
#include "data/tokenizer/tokenizer.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

using Ids = std::vector<int32_t>;

const Tokenizer& gpt2() {
  static const Tokenizer tok = [] {
    std::string path = vlm::testing::tokenizer_fixture_path("gpt2_tokenizer.json.gz");
    Expected<Tokenizer> t = Tokenizer::from_json_text(vlm::testing::read_gzip_or_die(path), path);
    VLM_CHECK(t.ok(), t.status().to_string());
    return std::move(t).value();
  }();
  return tok;
}

TEST(Gpt2Parity, LoadsTheRealVocabulary) {
  const Tokenizer& t = gpt2();
  EXPECT_EQ(t.vocab_size(), 50257);
  EXPECT_EQ(t.token_to_id("<|endoftext|>"), 50256);
  EXPECT_TRUE(t.is_special(50256));
  EXPECT_EQ(t.token_to_id("\xC4\xA0the"), 262);  // "Ġthe"
  EXPECT_EQ(t.eos_id(), 50256);
  EXPECT_EQ(t.bos_id(), 50256);
}

TEST(Gpt2Parity, MatchesReferenceEncoderExactly) {
  const Tokenizer& t = gpt2();
  nlohmann::json cases = nlohmann::json::parse(
      vlm::testing::read_file_or_die(vlm::testing::tokenizer_fixture_path("gpt2_reference.json")));
  ASSERT_GE(cases.size(), 200u);
  size_t total_ids = 0;
  for (const auto& c : cases) {
    std::string text = c["text"];
    Ids want = c["ids"].get<Ids>();
    total_ids += want.size();
    EXPECT_EQ(t.encode(text), want) << "text: " << text;
    EXPECT_EQ(t.decode(want), text);
  }
  EXPECT_GT(total_ids, 2000u);
}

TEST(Gpt2Parity, SpecialTokenInText) {
  const Tokenizer& t = gpt2();
  EXPECT_EQ(t.encode("Hello<|endoftext|> world"), (Ids{15496, 50256, 995}));
  EXPECT_EQ(t.decode({15496, 50256, 995}), "Hello<|endoftext|> world");
  EXPECT_EQ(t.decode({15496, 50256, 995}, /*skip_special_tokens=*/true), "Hello world");
  // A partial special token is ordinary text.
  EXPECT_EQ(t.decode(t.encode("<|endoftext")), "<|endoftext");
  EXPECT_EQ(t.encode("<|endoftext"), t.encode(std::string("<|endoftext")));
  EXPECT_NE(t.encode("<|endoftext").size(), 1u);
}

TEST(Gpt2Parity, RoundTripsArbitraryBytes) {
  const Tokenizer& t = gpt2();
  std::vector<std::string> texts = {
      "\xFF\xFE\xFD", "caf\xC3", "\xC0\xAF overlong", "\xED\xA0\x80 surrogate", "\xF4\x90\x80\x80 too big",
      std::string("nul\0byte", 8), "mixed \xE4\xB8 truncated \xE4\xB8\xAD ok", "\x80\x80\x80", "\r\n\r\n\t\v\f",
      "      many spaces      ", "\n\n\n\n", "0123456789 0 00 000", "a\u0301\u0302\u0303 stacked marks",
      "\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB zwj", "العربية مع تشكيل: مُحَمَّد"};
  Philox rng(99);
  for (int i = 0; i < 300; ++i) {
    std::string s;
    int n = static_cast<int>(rng.uniform_int(64));
    for (int k = 0; k < n; ++k) s.push_back(static_cast<char>(rng.next_u32() & 0xFF));
    texts.push_back(s);
  }
  for (const std::string& s : texts) {
    Ids ids = t.encode(s);
    EXPECT_EQ(t.decode(ids), s);
    std::string streamed;
    for (int32_t id : ids) streamed += t.token_bytes(id);
    EXPECT_EQ(streamed, s);
  }
}

TEST(Gpt2Parity, SaveLoadKeepsEncodings) {
  const Tokenizer& t = gpt2();
  std::string path = vlm::testing::scratch_dir("gpt2_save") + "/tokenizer.json";
  ASSERT_TRUE(t.save(path).ok());
  Expected<Tokenizer> back = Tokenizer::load(path);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->vocab_size(), t.vocab_size());
  nlohmann::json cases = nlohmann::json::parse(
      vlm::testing::read_file_or_die(vlm::testing::tokenizer_fixture_path("gpt2_reference.json")));
  for (const auto& c : cases) EXPECT_EQ(back->encode(c["text"].get<std::string>()), c["ids"].get<Ids>());
  EXPECT_EQ(back->to_json_text(), t.to_json_text());
}

// The GPT-2 vocabulary under SmolLM2-, Llama-3- and Qwen2-style pipelines (and add_prefix_space), with ids from
// Hugging Face's tokenizers.js (fixtures/gpt2_variants_reference.json carries both the configs and the ids).
TEST(Gpt2Parity, PipelineVariantsMatchTokenizersJs) {
  nlohmann::json fixture = nlohmann::json::parse(
      vlm::testing::read_file_or_die(vlm::testing::tokenizer_fixture_path("gpt2_variants_reference.json")));
  nlohmann::json base = nlohmann::json::parse(
      vlm::testing::read_gzip_or_die(vlm::testing::tokenizer_fixture_path("gpt2_tokenizer.json.gz")));
  ASSERT_EQ(fixture["variants"].size(), 4u);
  for (const auto& [name, patch] : fixture["variants"].items()) {
    nlohmann::json j = base;
    for (const char* key : {"normalizer", "pre_tokenizer", "post_processor"}) {
      if (patch.contains(key)) j[key] = patch[key];
    }
    if (patch.contains("ignore_merges")) j["model"]["ignore_merges"] = patch["ignore_merges"];
    Expected<Tokenizer> t = Tokenizer::from_json_text(j.dump(), "gpt2_" + name);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    int checked = 0;
    for (const auto& c : fixture["cases"]) {
      if (!c["ids"].contains(name)) continue;
      std::string text = c["text"];
      EXPECT_EQ(t->encode(text), c["ids"][name].get<Ids>()) << name << " on: " << text;
      if (name == "llama3") {
        EXPECT_EQ(t->encode(text, true), c["llama3_with_special"].get<Ids>()) << text;
      }
      ++checked;
    }
    EXPECT_GT(checked, 150) << name;
  }
}

TEST(Gpt2Parity, EncodeThroughput) {
  const Tokenizer& t = gpt2();
  std::string text;
  nlohmann::json cases = nlohmann::json::parse(
      vlm::testing::read_file_or_die(vlm::testing::tokenizer_fixture_path("gpt2_reference.json")));
  for (const auto& c : cases) text += c["text"].get<std::string>() + "\n";
  size_t n_ids = 0;
  auto start = std::chrono::steady_clock::now();
  int reps = 0;
  for (; reps < 20; ++reps) n_ids += t.encode(text).size();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ info ] GPT-2 encode: %.1f MB/s, %.0f tokens/s (warm cache, one thread)\n",
              text.size() * reps / s / 1e6, n_ids / s);
  EXPECT_GT(n_ids, 0u);
}

}  // namespace
}  // namespace vlm

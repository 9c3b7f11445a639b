// Pre-tokenizers: the hand-written GPT-2 / Llama-3 / Qwen2 pattern matchers against splits computed by
// JavaScript's regex engine (fixtures/split_reference.json), plus Digits, Split behaviors and ByteLevel options.
#include <gtest/gtest.h>

#include "data/tokenizer/fixtures.h"
#include "data/tokenizer/pre_tokenizer.h"

namespace vlm::tok {
namespace {

std::vector<std::string> pieces_of(std::string_view text, const std::vector<Span>& spans) {
  std::vector<std::string> out;
  for (const Span& s : spans) out.emplace_back(text.substr(s.begin, s.end - s.begin));
  return out;
}

std::vector<std::string> gpt2(std::string_view text) {
  std::vector<Span> spans;
  split_gpt2(text, spans);
  return pieces_of(text, spans);
}

std::vector<std::string> llama3(std::string_view text, int digits = 3) {
  std::vector<Span> spans;
  split_llama3(text, digits, spans);
  return pieces_of(text, spans);
}

using V = std::vector<std::string>;

TEST(SplitGpt2, HandCases) {
  EXPECT_EQ(gpt2("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(gpt2("Hello there       dear"), (V{"Hello", " there", "      ", " dear"}));
  EXPECT_EQ(gpt2("I'm don't 'RE"), (V{"I", "'m", " don", "'t", " '", "RE"}));
  EXPECT_EQ(gpt2("abc123 ?!x"), (V{"abc", "123", " ?!", "x"}));
  EXPECT_EQ(gpt2("a\n\nb  "), (V{"a", "\n", "\n", "b", "  "}));
  EXPECT_EQ(gpt2(""), V{});
}

TEST(SplitLlama3, HandCases) {
  EXPECT_EQ(llama3("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(llama3("I'M 12345 (hi)"), (V{"I", "'M", " ", "123", "45", " (", "hi", ")"}));
  EXPECT_EQ(llama3("x\n\n  y"), (V{"x", "\n\n", " ", " y"}));
  EXPECT_EQ(llama3("a.\n\nb"), (V{"a", ".\n\n", "b"}));
  EXPECT_EQ(llama3("12345", 1), (V{"1", "2", "3", "4", "5"}));
}

TEST(SplitPatterns, MatchJavaScriptRegexOnFixture) {
  nlohmann::json cases = nlohmann::json::parse(
      vlm::testing::read_file_or_die(vlm::testing::tokenizer_fixture_path("split_reference.json")));
  ASSERT_GE(cases.size(), 300u);
  for (const auto& c : cases) {
    std::string text = c["text"];
    EXPECT_EQ(gpt2(text), c["gpt2"].get<V>()) << "gpt2 split of: " << text;
    EXPECT_EQ(llama3(text, 3), c["llama3"].get<V>()) << "llama3 split of: " << text;
    EXPECT_EQ(llama3(text, 1), c["qwen2"].get<V>()) << "qwen2 split of: " << text;
  }
}

TEST(SplitPatterns, RecognisesKnownPatternsOnly) {
  SplitRegex r;
  EXPECT_TRUE(split_regex_from_pattern(kGpt2Pattern, r));
  EXPECT_EQ(r, SplitRegex::gpt2);
  EXPECT_TRUE(split_regex_from_pattern(kLlama3Pattern, r));
  EXPECT_EQ(r, SplitRegex::llama3);
  EXPECT_TRUE(split_regex_from_pattern(kGpt4Pattern, r));
  EXPECT_EQ(r, SplitRegex::llama3);
  EXPECT_TRUE(split_regex_from_pattern(kQwen2Pattern, r));
  EXPECT_EQ(r, SplitRegex::qwen2);
  EXPECT_FALSE(split_regex_from_pattern("\\w+|[^\\w\\s]+", r));
}

V run(const std::vector<PreTokenizerStep>& steps, std::string_view text) {
  V out;
  pre_tokenize(steps, text, /*at_start=*/true, out);
  return out;
}

TEST(PreTokenize, SmolLm2DigitsThenByteLevel) {
  PreTokenizerStep digits;
  digits.kind = PreTokenizerKind::digits;
  digits.individual_digits = true;
  PreTokenizerStep bl;
  bl.kind = PreTokenizerKind::byte_level;
  bl.add_prefix_space = false;
  EXPECT_EQ(run({digits, bl}, "In 2024 we"), (V{"In", " ", "2", "0", "2", "4", " we"}));
  digits.individual_digits = false;
  EXPECT_EQ(run({digits, bl}, "In 2024 we"), (V{"In", " ", "2024", " we"}));
}

TEST(PreTokenize, ByteLevelPrefixSpaceAndNoRegex) {
  PreTokenizerStep bl;
  bl.kind = PreTokenizerKind::byte_level;
  bl.add_prefix_space = true;
  EXPECT_EQ(run({bl}, "Hello world"), (V{" Hello", " world"}));
  EXPECT_EQ(run({bl}, " Hello"), (V{" Hello"}));
  EXPECT_EQ(run({bl}, ""), V{});
  bl.use_regex = false;
  EXPECT_EQ(run({bl}, "Hello world"), (V{" Hello world"}));
}

TEST(PreTokenize, SplitBehaviorsOnLiteral) {
  PreTokenizerStep s;
  s.kind = PreTokenizerKind::split;
  s.regex = SplitRegex::literal;
  s.pattern = "-";
  const char* text = "the-final--countdown";
  s.behavior = SplitBehavior::removed;
  EXPECT_EQ(run({s}, text), (V{"the", "final", "countdown"}));
  s.behavior = SplitBehavior::isolated;
  EXPECT_EQ(run({s}, text), (V{"the", "-", "final", "-", "-", "countdown"}));
  s.behavior = SplitBehavior::merged_with_previous;
  EXPECT_EQ(run({s}, text), (V{"the-", "final-", "-", "countdown"}));
  s.behavior = SplitBehavior::merged_with_next;
  EXPECT_EQ(run({s}, text), (V{"the", "-final", "-", "-countdown"}));
  s.behavior = SplitBehavior::contiguous;
  EXPECT_EQ(run({s}, text), (V{"the", "-", "final", "--", "countdown"}));
  s.behavior = SplitBehavior::removed;
  s.invert = true;
  EXPECT_EQ(run({s}, text), (V{"-", "-", "-"}));
}

TEST(PreTokenize, SplitWithLlama3RegexThenByteLevelWithoutRegex) {
  PreTokenizerStep split;
  split.kind = PreTokenizerKind::split;
  split.regex = SplitRegex::llama3;
  split.pattern = kLlama3Pattern;
  PreTokenizerStep bl;
  bl.kind = PreTokenizerKind::byte_level;
  bl.add_prefix_space = false;
  bl.use_regex = false;
  EXPECT_EQ(run({split, bl}, "It's 2024!\n"), (V{"It", "'s", " ", "202", "4", "!\n"}));
}

TEST(PreTokenize, InvalidUtf8BytesAreOtherCharacters) {
  EXPECT_EQ(gpt2("ab\xFF\xFEgh \xC3"), (V{"ab", "\xFF\xFE", "gh", " \xC3"}));
  EXPECT_EQ(llama3("ab\xFFgh"), (V{"ab", "\xFFgh"}));
}

}  // namespace
}  // namespace vlm::tok

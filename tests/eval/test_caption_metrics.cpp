// Caption metrics against coco-caption's own scorers (goldens: dev/fixtures/make_caption_metric_goldens.py), the
// tokenizer against its rules and against the generator's separate Python port of them, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "eval/caption_metrics.h"
#include "eval/caption_tokenizer.h"

namespace vlm {
namespace {

constexpr double kTol = 1e-4;

nlohmann::json goldens() {
  std::ifstream in("tests/eval/fixtures/caption_metric_goldens.json");
  EXPECT_TRUE(in.good()) << "run the tests from the repository root";
  return nlohmann::json::parse(in);
}

CaptionTokens split(const std::string& s) {
  CaptionTokens t;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(' ', i);
    if (j == std::string::npos) j = s.size();
    if (j > i) t.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return t;
}

::testing::AssertionResult near(double actual, double expected, const std::string& what) {
  if (!(std::fabs(actual - expected) <= kTol))
    return ::testing::AssertionFailure() << what << ": " << actual << " vs coco-caption " << expected;
  return ::testing::AssertionSuccess();
}

TEST(CaptionTokenizer, FollowsThePtbRulesAndCocoCaptionsRemovalList) {
  EXPECT_EQ(coco_caption_tokenize("A man riding a horse."), "a man riding a horse");
  EXPECT_EQ(coco_caption_tokenize("The dog's ball, the dogs' bowls"), "the dog 's ball the dogs bowls");
  EXPECT_EQ(coco_caption_tokenize("It can't be; they won't!"), "it ca n't be they wo n't");
  EXPECT_EQ(coco_caption_tokenize("\"Hi\" she said -- `twice'"), "hi she said twice");
  // Brackets are escaped before lower-casing, so coco-caption's upper-case list misses them.
  EXPECT_EQ(coco_caption_tokenize("a cat (black)"), "a cat -lrb- black -rrb-");
  EXPECT_EQ(coco_caption_tokenize("1,000 people at 10:30, U.S. style..."), "1,000 people at 10:30 u.s. style");
  EXPECT_EQ(coco_caption_tokenize("red,white;blue!"), "red white blue");
  EXPECT_EQ(coco_caption_tokenize("$5 or 50%"), "$ 5 or 50 %");
  EXPECT_EQ(coco_caption_tokenize("I'm gonna go, we've cannot"), "i 'm gon na go we 've can not");
  EXPECT_EQ(coco_caption_tokenize("well-known - a"), "well-known a");
  EXPECT_EQ(coco_caption_tokenize("\xE2\x80\x9C" "curly" "\xE2\x80\x9D" " don" "\xE2\x80\x99" "t" "\xE2\x80\xA6"),
            "curly do n't");
  EXPECT_EQ(coco_caption_tokenize("line\none\ttab\x01x"), "line one tab x");
  EXPECT_EQ(coco_caption_tokenize(""), "");
  EXPECT_EQ(coco_caption_tokenize(" . , ! "), "");
  EXPECT_TRUE(coco_caption_tokens("...").empty());
}

TEST(CaptionTokenizer, AgreesWithTheGeneratorsPort) {
  for (const auto& c : goldens()["tokenizer"])
    EXPECT_EQ(coco_caption_tokenize(c["caption"].get<std::string>()), c["tokens"].get<std::string>())
        << c["caption"];
}

TEST(CaptionMetrics, EqualCocoCaptionsScorersOnTheGoldens) {
  const auto g = goldens();
  ASSERT_GE(g["sets"].size(), 3u);
  for (const auto& set : g["sets"]) {
    const std::string name = set["name"];
    std::vector<CaptionTokens> cands;
    std::vector<std::vector<CaptionTokens>> refs;
    for (const auto& im : set["images"]) {
      // The C++ tokenizer gives the tokens the reference scorers were run on.
      ASSERT_EQ(coco_caption_tokenize(im["candidate"].get<std::string>()), im["candidate_tokens"].get<std::string>());
      cands.push_back(coco_caption_tokens(im["candidate"].get<std::string>()));
      refs.emplace_back();
      for (size_t r = 0; r < im["references"].size(); ++r) {
        refs.back().push_back(coco_caption_tokens(im["references"][r].get<std::string>()));
        ASSERT_EQ(refs.back().back(), split(im["reference_tokens"][r].get<std::string>()));
      }
    }
    auto s = score_captions(cands, refs);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    for (int n = 0; n < 4; ++n) EXPECT_TRUE(near(s->bleu[n], set["bleu"][n], name + " BLEU-" + std::to_string(n + 1)));
    EXPECT_TRUE(near(s->rouge_l, set["rouge_l"], name + " ROUGE-L"));
    EXPECT_TRUE(near(s->cider_d, set["cider_d"], name + " CIDEr-D"));
    ASSERT_EQ(s->cider_d_per_image.size(), cands.size());
    for (size_t i = 0; i < cands.size(); ++i) {
      EXPECT_TRUE(near(s->cider_d_per_image[i], set["cider_d_per_image"][i], name + " CIDEr-D of image " + std::to_string(i)));
      EXPECT_TRUE(near(s->rouge_l_per_image[i], set["rouge_l_per_image"][i], name + " ROUGE-L of image " + std::to_string(i)));
    }
  }
}

TEST(CaptionMetrics, PerfectCaptionsScoreHighAndWrongOnesLow) {
  std::vector<CaptionTokens> good = {split("a red bus on a road"), split("two dogs in the snow"), split("a cat on a bed")};
  std::vector<std::vector<CaptionTokens>> refs = {{good[0]}, {good[1]}, {good[2]}};
  auto s = score_captions(good, refs);
  ASSERT_TRUE(s.ok());
  EXPECT_NEAR(s->bleu[3], 1.0, 1e-6);
  EXPECT_NEAR(s->rouge_l, 1.0, 1e-12);
  EXPECT_GT(s->cider_d, 5.0);
  auto bad = score_captions({split("zebra"), split("zebra"), split("zebra")}, refs);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->rouge_l, 0.0);
  EXPECT_EQ(bad->cider_d, 0.0);
  EXPECT_LT(bad->bleu[0], 1e-6);
}

TEST(CaptionMetrics, RejectsMismatchedOrEmptyInput) {
  EXPECT_FALSE(score_captions({}, {}).ok());
  EXPECT_FALSE(score_captions({split("a")}, {}).ok());
  auto no_ref = score_captions({split("a")}, {{}});
  ASSERT_FALSE(no_ref.ok());
  EXPECT_NE(no_ref.status().message().find("image 0"), std::string::npos);
}

}  // namespace
}  // namespace vlm

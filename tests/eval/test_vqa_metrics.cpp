// VQA normalization and accuracy against the official evaluation code (goldens:
// dev/fixtures/make_vqa_metric_goldens.py), and the properties the eval relies on.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "eval/vqa_metrics.h"

namespace vlm {
namespace {

nlohmann::json goldens() {
  std::ifstream in("tests/eval/fixtures/vqa_metric_goldens.json");
  EXPECT_TRUE(in.good()) << "run the tests from the repository root";
  return nlohmann::json::parse(in);
}

TEST(VqaMetrics, NormalizationEqualsTheOfficialCode) {
  const auto g = goldens();
  ASSERT_GE(g["normalize"].size(), 40u);
  for (const auto& c : g["normalize"]) {
    const std::string text = c["text"];
    EXPECT_EQ(vqa_process_punctuation(text), c["punctuation"].get<std::string>()) << text;
    EXPECT_EQ(vqa_process_digit_article(text), c["digit_article"].get<std::string>()) << text;
    EXPECT_EQ(vqa_process_digit_article(vqa_process_punctuation(text)), c["both"].get<std::string>()) << text;
  }
}

TEST(VqaMetrics, AccuracyEqualsTheOfficialCode) {
  const auto g = goldens();
  ASSERT_GE(g["accuracy"].size(), 20u);
  for (const auto& c : g["accuracy"]) {
    const double acc = vqa_accuracy(c["prediction"], c["answers"].get<std::vector<std::string>>());
    EXPECT_NEAR(acc, c["accuracy"].get<double>(), 1e-9) << c["prediction"] << " vs " << c["answers"];
  }
}

TEST(VqaMetrics, SoftAccuracyCountsMatchingHumans) {
  std::vector<std::string> ten(10, "cat");
  EXPECT_DOUBLE_EQ(vqa_accuracy("cat", ten), 1.0);
  for (int i = 0; i < 8; ++i) ten[static_cast<size_t>(i)] = "dog";  // two humans said "cat"
  // Leave-one-out: 8 subsets keep both "cat" answers (2/3), 2 keep one (1/3).
  EXPECT_NEAR(vqa_accuracy("cat", ten), (8 * 2.0 / 3 + 2 * 1.0 / 3) / 10, 1e-12);
  EXPECT_NEAR(vqa_accuracy("dog", ten), 1.0, 1e-12);
  EXPECT_EQ(vqa_accuracy("cat", {}), 0.0);
  EXPECT_EQ(vqa_accuracy("cat", {"cat"}), 0.0);  // one answer: no other human agrees (official formula)
}

TEST(VqaMetrics, NormalizeAnswerIsTheProcessorsComposition) {
  EXPECT_EQ(vqa_normalize_answer("  Two Dogs.\n"), "2 dogs");
  EXPECT_EQ(vqa_normalize_answer("The T-shirt!"), "t shirt");
  EXPECT_EQ(vqa_normalize_answer("dont"), "don't");
  EXPECT_EQ(vqa_normalize_answer(""), "");
  // Bytes that are not ASCII pass through unchanged (no crash, no loss).
  EXPECT_EQ(vqa_normalize_answer("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(vqa_normalize_answer(std::string("a\0b", 3)), std::string("a\0b", 3));
}

}  // namespace
}  // namespace vlm

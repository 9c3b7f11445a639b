// EvalResult as metric scalars, JSON (eval/*.json) and console lines.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "eval/eval_runner.h"

namespace vlm {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// {"group": {"count": n, <score_name>: mean, <exact_name>: mean}}
nlohmann::json breakdown_json(const std::map<std::string, Breakdown>& m, const char* score_name,
                              const char* exact_name) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [group, b] : m)
    j[group] = {{"count", b.count}, {score_name, b.count ? b.score / b.count : 0.0},
                {exact_name, b.count ? b.exact / b.count : 0.0}};
  return j;
}

std::string breakdown_line(const char* title, const std::map<std::string, Breakdown>& m, bool percent) {
  if (m.empty()) return "";
  std::string s = std::string("  ") + title + ":";
  for (const auto& [group, b] : m) {
    const double mean = b.count ? b.score / b.count : 0.0;
    s += " " + group + " " + (percent ? fmt("%.1f%%", 100 * mean) : fmt("%.3f", mean)) + " (" +
         std::to_string(b.count) + ")";
  }
  return s + "\n";
}

const char* kRecallNames[] = {"r1", "r5", "r10"};

}  // namespace

std::vector<std::pair<std::string, double>> EvalResult::scalars() const {
  std::vector<std::pair<std::string, double>> s;
  if (vqa) {
    s.emplace_back("eval/vqa/accuracy", vqa->accuracy);
    s.emplace_back("eval/vqa/exact_match", vqa->exact_match);
    s.emplace_back("eval/vqa/questions", vqa->questions);
  }
  if (caption) {
    s.emplace_back("eval/caption/cider_d", caption->scores.cider_d);
    for (int n = 0; n < 4; ++n) s.emplace_back("eval/caption/bleu_" + std::to_string(n + 1), caption->scores.bleu[n]);
    s.emplace_back("eval/caption/rouge_l", caption->scores.rouge_l);
    s.emplace_back("eval/caption/exact_match", caption->exact_match);
    s.emplace_back("eval/caption/captions", caption->captions);
  }
  if (retrieval) {
    for (size_t k = 0; k < kRecallAt.size(); ++k) {
      s.emplace_back(std::string("eval/retrieval/i2t_") + kRecallNames[k], retrieval->recall.image_to_text[k]);
      s.emplace_back(std::string("eval/retrieval/t2i_") + kRecallNames[k], retrieval->recall.text_to_image[k]);
    }
    s.emplace_back("eval/retrieval/images", retrieval->images);
  }
  return s;
}

std::string EvalResult::to_json() const {
  nlohmann::json j;
  j["images"] = images;
  j["skipped"] = skipped;
  j["tasks"] = tasks;
  if (vqa) {
    j["vqa"] = {{"questions", vqa->questions},
                {"correct", vqa->exact_correct},
                {"accuracy", vqa->accuracy},
                {"exact_match", vqa->exact_match},
                {"by_type", breakdown_json(vqa->by_type, "accuracy", "exact_match")}};
    if (!vqa->by_answer_type.empty())
      j["vqa"]["by_answer_type"] = breakdown_json(vqa->by_answer_type, "accuracy", "exact_match");
    if (!vqa->by_class.empty()) j["vqa"]["by_class"] = breakdown_json(vqa->by_class, "accuracy", "exact_match");
  }
  if (caption) {
    const CaptionScores& c = caption->scores;
    j["caption"] = {{"captions", caption->captions}, {"correct", caption->exact_correct},
                    {"exact_match", caption->exact_match}, {"cider_d", c.cider_d}, {"bleu_1", c.bleu[0]},
                    {"bleu_2", c.bleu[1]}, {"bleu_3", c.bleu[2]}, {"bleu_4", c.bleu[3]}, {"rouge_l", c.rouge_l}};
    if (!caption->by_class.empty()) j["caption"]["by_class"] = breakdown_json(caption->by_class, "cider_d", "rouge_l");
  }
  if (retrieval) {
    nlohmann::json i2t, t2i;
    for (size_t k = 0; k < kRecallAt.size(); ++k) {
      i2t[kRecallNames[k]] = retrieval->recall.image_to_text[k];
      t2i[kRecallNames[k]] = retrieval->recall.text_to_image[k];
    }
    j["retrieval"] = {{"images", retrieval->images}, {"image_to_text", i2t}, {"text_to_image", t2i}};
  }
  nlohmann::json ex = nlohmann::json::array();
  for (const auto& e : examples)
    ex.push_back({{"task", e.task}, {"key", e.key}, {"question", e.question}, {"answer", e.answer},
                  {"prediction", e.prediction}});
  j["examples"] = ex;
  // Predictions are raw model output and may cut a UTF-8 sequence: replace bad bytes instead of throwing.
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string EvalResult::summary() const {
  std::string s = "held-out images: " + std::to_string(images);
  if (skipped) s += " (" + std::to_string(skipped) + " unreadable samples skipped)";
  s += "\n";
  if (vqa) {
    s += "vqa: accuracy " + fmt("%.2f%%", 100 * vqa->accuracy) + ", exact match " +
         fmt("%.2f%%", 100 * vqa->exact_match) + " (" + std::to_string(vqa->exact_correct) + "/" +
         std::to_string(vqa->questions) + " questions)\n";
    s += breakdown_line("by question type", vqa->by_type, true);
    s += breakdown_line("by answer type", vqa->by_answer_type, true);
    s += breakdown_line("by class", vqa->by_class, true);
  }
  if (caption) {
    const CaptionScores& c = caption->scores;
    s += "caption: CIDEr-D " + fmt("%.3f", c.cider_d) + ", BLEU-1..4 " + fmt("%.3f", c.bleu[0]) + " " +
         fmt("%.3f", c.bleu[1]) + " " + fmt("%.3f", c.bleu[2]) + " " + fmt("%.3f", c.bleu[3]) + ", ROUGE-L " +
         fmt("%.3f", c.rouge_l) + ", exact match " + fmt("%.2f%%", 100 * caption->exact_match) + " (" +
         std::to_string(caption->exact_correct) + "/" + std::to_string(caption->captions) + " captions)\n";
    s += breakdown_line("CIDEr-D by class", caption->by_class, false);
  }
  if (retrieval) {
    const RetrievalRecall& r = retrieval->recall;
    s += "retrieval (" + std::to_string(retrieval->images) + " images): image->text R@1/5/10 " +
         fmt("%.3f", r.image_to_text[0]) + " " + fmt("%.3f", r.image_to_text[1]) + " " +
         fmt("%.3f", r.image_to_text[2]) + ", text->image R@1/5/10 " + fmt("%.3f", r.text_to_image[0]) + " " +
         fmt("%.3f", r.text_to_image[1]) + " " + fmt("%.3f", r.text_to_image[2]) + "\n";
  }
  return s;
}

}  // namespace vlm

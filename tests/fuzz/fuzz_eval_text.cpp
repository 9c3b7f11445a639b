// Fuzz target: the evaluation text a held-out shard supplies and a model generates: a sample's KEY.json through
// parse_eval_sample, and the same bytes as a caption (coco-caption tokenization, caption metrics) and as an answer
// (VQA normalization and accuracy). Malformed input must come back as a Status, never a crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/io/webdataset.h"
#include "eval/caption_metrics.h"
#include "eval/caption_tokenizer.h"
#include "eval/eval_sample.h"
#include "eval/vqa_metrics.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  vlm::WebDatasetSample s{std::string("fuzz.tar"), std::string("k"), 0, {}};
  s.fields["json"] = std::vector<uint8_t>(data, data + size);
  s.fields["txt"] = std::vector<uint8_t>(data, data + size);
  auto parsed = vlm::parse_eval_sample(s);
  if (parsed.ok())
    for (const auto& q : parsed->questions) (void)vlm::vqa_accuracy(text, q.answers);
  const vlm::CaptionTokens tokens = vlm::coco_caption_tokens(text);
  auto scores = vlm::score_captions({tokens, {"a"}}, {{tokens}, {tokens, {}}});
  (void)scores;
  (void)vlm::vqa_accuracy(text, {text, vlm::vqa_normalize_answer(text), "yes"});
  return 0;
}

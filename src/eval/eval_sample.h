// What evaluation reads from a held-out webdataset sample besides its image: the questions with every accepted
// answer, the reference captions and the sample's class, from KEY.json (and KEY.txt):
//   {"qa": [{"question": "...", "answer": "...",            one answer, or
//            "answers": ["...", ...] | [{"answer": "..."}],  the human answers (VQA: ten), or both
//            "type" | "question_type": "...", "answer_type": "..."}],   optional, for breakdowns
//    "caption": "...", "captions": ["...", ...],            references (with KEY.txt), optional
//    "class": "..."}                                        optional, for breakdowns
// A question's `answer` is its "answer", else the most frequent of its "answers" (the first on a tie).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "data/io/webdataset.h"

namespace vlm {

struct EvalQuestion {
  std::string question;
  std::string answer;                // the one answer (exact match, examples)
  std::vector<std::string> answers;  // every human answer ("answers"; empty when the entry has only "answer")
  std::string type;                  // "" when the entry has none
  std::string answer_type;
};

struct EvalSampleText {
  std::string key;
  std::string label;                  // "class", "" when absent
  std::vector<EvalQuestion> questions;
  std::vector<std::string> captions;  // KEY.txt first, then "caption", then "captions"; duplicates dropped
};

// parse_error naming "<shard>: <key>.json" and the field for malformed JSON; a sample without qa or captions is
// not an error (the tasks that need them skip it).
Expected<EvalSampleText> parse_eval_sample(const WebDatasetSample& sample);

}  // namespace vlm

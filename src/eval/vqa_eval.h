// Held-out evaluation by generation: every question of the first N held-out images is asked alone (one turn,
// greedy decoding) and scored by normalized exact match; the caption prompt is scored the same way against the
// sample's caption. Accuracy per question type shows what the model has and has not learned.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "data/loader/vlm_batch.h"
#include "model/vlm.h"

namespace vlm {

struct EvalOptions {
  int samples = 200;         // images
  int max_new_tokens = 12;
  int batch_size = 64;       // prompts generated together
  bool captions = true;      // also score the caption prompt
  int examples_kept = 20;    // question/prediction/answer triples kept for the report
  std::function<void(int images_done)> progress;  // called after every generated batch (a progress line)
};

struct EvalExample {
  std::string key, question, answer, prediction;
};

struct EvalResult {
  int images = 0;
  int questions = 0;
  int correct = 0;
  double vqa_accuracy = 0;
  int captions = 0;
  int captions_correct = 0;
  double caption_exact_match = 0;
  std::map<std::string, std::pair<int, int>> by_type;  // type -> (correct, total)
  std::vector<EvalExample> examples;                    // first few, right or wrong
  std::string to_json() const;
};

// "count", "color", "shape", "exists", "left_of", "leftmost" or "other".
std::string question_type(const std::string& question);

// `data` describes the held-out shards (epochs = 1, no shuffle are forced).
Expected<EvalResult> evaluate_vqa(VlmModel& model, const Tokenizer& tokenizer, const VlmDataOptions& data,
                                  const EvalOptions& options);

}  // namespace vlm

// Held-out evaluation: the task runners behind `vlm eval --task ...` and the trainer's periodic eval (eval.tasks).
//   vqa        every question of each image asked alone (one turn, greedy decoding); VQA accuracy (the official
//              soft accuracy over the human answers where a question has several, vqa_metrics.h; exact match under
//              VQA normalization where it has one) and normalized exact match against the answer, per question
//              type, answer type and class where the shards carry them;
//   caption    the caption prompt answered by greedy decoding; CIDEr-D, BLEU-1..4, ROUGE-L against every reference
//              caption (coco-caption's tokenization and scorers, caption_metrics.h), exact match, CIDEr-D and
//              ROUGE-L per class;
//   retrieval  image -> text and text -> image recall@1/5/10 over the first eval.retrieval_samples captioned
//              images, every (image, caption) pair scored by the model (retrieval.h).
// Images are read once and shared by the tasks. Results: EvalResult::to_json() (eval/*.json) and scalars()
// ("eval/<task>/<metric>", the trainer's metric record).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "data/loader/vlm_batch.h"
#include "eval/caption_metrics.h"
#include "eval/retrieval.h"
#include "model/vlm.h"

namespace vlm {

// "vqa", "caption", "retrieval".
const std::vector<std::string>& eval_task_names();
// The tasks to run: `tasks` checked (invalid_argument naming the unknown one and listing the known), or, when
// empty, what data.task trains: vqa -> [vqa], caption -> [caption], mixed -> [vqa, caption].
Expected<std::vector<std::string>> resolve_eval_tasks(const std::vector<std::string>& tasks,
                                                      const std::string& data_task);

struct EvalOptions {
  std::vector<std::string> tasks = {"vqa", "caption"};
  int samples = 200;             // images read
  int max_new_tokens = 12;       // longest answer (vqa)
  int caption_max_new_tokens = 32;
  int batch_size = 64;           // prompts generated (pairs scored) together
  int examples_kept = 20;        // per task
  int retrieval_samples = 32;    // images ranked against each other (n^2 pairs scored)
  // Called after each image read (images so far, of `samples` at most): the one place per-sample progress goes.
  std::function<void(int images, int total)> on_image;
};

struct EvalExample {
  std::string task, key, question, answer, prediction;
};

// Sums per group (question type, class...): `count` items, `score` the summed accuracy / CIDEr-D.
struct Breakdown {
  int count = 0;
  double score = 0, exact = 0;
};

struct VqaTaskResult {
  int questions = 0;
  int exact_correct = 0;
  double accuracy = 0;     // mean VQA accuracy
  double exact_match = 0;  // mean normalized exact match
  std::map<std::string, Breakdown> by_type, by_answer_type, by_class;
};

struct CaptionTaskResult {
  int captions = 0;
  int exact_correct = 0;
  double exact_match = 0;
  CaptionScores scores;
  std::map<std::string, Breakdown> by_class;  // score: CIDEr-D; exact: ROUGE-L
};

struct RetrievalTaskResult {
  int images = 0;
  RetrievalRecall recall;
};

struct EvalResult {
  int images = 0;
  int skipped = 0;  // samples that could not be read (warned with shard and key)
  std::vector<std::string> tasks;
  std::optional<VqaTaskResult> vqa;
  std::optional<CaptionTaskResult> caption;
  std::optional<RetrievalTaskResult> retrieval;
  std::vector<EvalExample> examples;

  // ("eval/vqa/accuracy", 0.61), ... for the tasks that ran.
  std::vector<std::pair<std::string, double>> scalars() const;
  std::string to_json() const;
  // Human-readable lines, only the tasks that ran.
  std::string summary() const;
};

// "count", "color", "shape", "exists", "left_of", "leftmost" or "other": the shapes dataset's question kinds, the
// type of a question whose json gives none.
std::string question_type(const std::string& question);

// `data` describes the held-out shards (one pass in order is forced).
Expected<EvalResult> evaluate(VlmModel& model, const Tokenizer& tokenizer, const VlmDataOptions& data,
                              const EvalOptions& options);

}  // namespace vlm

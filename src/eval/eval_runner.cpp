// The evaluation loop: held-out samples read once, prompts generated in batches, each task scored.
#include "eval/eval_runner.h"

#include <algorithm>
#include <optional>

#include "core/logging.h"
#include "data/image/image_pipeline.h"
#include "data/loader/idefics3_prompt.h"
#include "data/loader/sample_stream.h"
#include "eval/caption_tokenizer.h"
#include "eval/eval_sample.h"
#include "eval/vqa_metrics.h"
#include "model/generate.h"

namespace vlm {

const std::vector<std::string>& eval_task_names() {
  static const std::vector<std::string> names = {"vqa", "caption", "retrieval"};
  return names;
}

Expected<std::vector<std::string>> resolve_eval_tasks(const std::vector<std::string>& tasks,
                                                      const std::string& data_task) {
  if (tasks.empty()) {
    if (data_task == "caption") return std::vector<std::string>{"caption"};
    if (data_task == "vqa") return std::vector<std::string>{"vqa"};
    return std::vector<std::string>{"vqa", "caption"};
  }
  std::vector<std::string> out;
  for (const std::string& t : tasks) {
    const auto& known = eval_task_names();
    if (std::find(known.begin(), known.end(), t) == known.end())
      return invalid_argument("eval task '" + t + "' (expected vqa, caption or retrieval)");
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  return out;
}

std::string question_type(const std::string& q) {
  auto starts = [&](const char* p) { return q.rfind(p, 0) == 0; };
  if (starts("how many")) return "count";
  if (starts("what color")) return "color";
  if (starts("what shape")) return "shape";
  if (starts("is there")) return "exists";
  if (starts("what is the leftmost")) return "leftmost";
  if (starts("is the") && q.find(" left of ") != std::string::npos) return "left_of";
  return "other";
}

namespace {

bool has(const std::vector<std::string>& v, const char* x) { return std::find(v.begin(), v.end(), x) != v.end(); }

void add(std::map<std::string, Breakdown>& m, const std::string& group, double score, double exact) {
  if (group.empty()) return;
  Breakdown& b = m[group];
  ++b.count;
  b.score += score;
  b.exact += exact;
}

// One image's prompts waiting for generation.
struct PendingImage {
  EvalSampleText text;
  bool ask_questions = false, ask_caption = false;
  int frames = 1;                    // model inputs: 1, or with Idefics3 tiling its tiles and global image
  std::vector<int32_t> placeholder;  // tiling: its layout's tokens (else image_tokens image ids)
};

// What the caption task collects before the corpus-level scores.
struct CaptionCorpus {
  std::vector<CaptionTokens> candidates;
  std::vector<std::vector<CaptionTokens>> references;
  std::vector<std::string> labels;
};

class EvalRun {
 public:
  EvalRun(VlmModel& model, const Tokenizer& tokenizer, const VlmDataOptions& data, const EvalOptions& o,
          std::vector<std::string> tasks, int32_t image_id, int32_t stop_id, std::optional<Idefics3Options> tiling)
      : model_(model), tok_(tokenizer), data_(data), o_(o), image_id_(image_id), stop_id_(stop_id),
        tiling_(std::move(tiling)) {
    r_.tasks = std::move(tasks);
    if (has(r_.tasks, "vqa")) r_.vqa.emplace();
    if (has(r_.tasks, "caption")) r_.caption.emplace();
  }

  Expected<EvalResult> run();

 private:
  Status flush();
  // The decoded answer without its stop token and surrounding whitespace.
  std::string generated_text(std::vector<int32_t> ids) const {
    if (!ids.empty() && ids.back() == stop_id_) ids.pop_back();
    std::string text = tok_.decode(ids);
    const size_t b = text.find_first_not_of(" \t\n\r");
    if (b == std::string::npos) return "";
    return text.substr(b, text.find_last_not_of(" \t\n\r") - b + 1);
  }
  void keep_example(const char* task, const std::string& key, const std::string& question, const std::string& answer,
                    const std::string& prediction) {
    int& kept = examples_per_task_[task];
    if (kept >= o_.examples_kept) return;
    ++kept;
    r_.examples.push_back({task, key, question, answer, prediction});
  }
  void score_question(const EvalQuestion& q, const std::string& key, const std::string& label, const std::string& raw);
  Status finish_caption();
  Status finish_retrieval();

  VlmModel& model_;
  const Tokenizer& tok_;
  const VlmDataOptions& data_;
  const EvalOptions& o_;
  int32_t image_id_, stop_id_;
  std::optional<Idefics3Options> tiling_;  // vqa and caption prompts tiled as training tiles them
  EvalResult r_;
  std::map<std::string, int> examples_per_task_;
  std::vector<std::vector<float>> pixels_;
  std::vector<PendingImage> pending_;
  int pending_prompts_ = 0;
  CaptionCorpus corpus_;
  std::vector<std::vector<float>> retrieval_pixels_;
  std::vector<std::string> retrieval_captions_;
};

void EvalRun::score_question(const EvalQuestion& q, const std::string& key, const std::string& label,
                             const std::string& raw) {
  VqaTaskResult& v = *r_.vqa;
  const std::string pred = normalize_answer(raw);
  const bool exact = pred == normalize_answer(q.answer);
  const std::string vqa_pred = vqa_normalize_answer(raw);
  // The official formula needs several human answers; with one, accuracy is exact match under VQA normalization.
  const double acc = q.answers.size() >= 2 ? vqa_accuracy(vqa_pred, q.answers)
                                           : (vqa_pred == vqa_normalize_answer(q.answer) ? 1.0 : 0.0);
  ++v.questions;
  v.exact_correct += exact;
  v.accuracy += acc;
  add(v.by_type, q.type.empty() ? question_type(q.question) : q.type, acc, exact);
  add(v.by_answer_type, q.answer_type, acc, exact);
  add(v.by_class, label, acc, exact);
  keep_example("vqa", key, q.question, q.answer, raw);
}

Status EvalRun::flush() {
  if (pending_.empty()) return Status();
  const int64_t S = data_.image_size;
  int64_t frames = 0;
  std::vector<int> first_frame;  // per pending image
  for (const PendingImage& p : pending_) {
    first_frame.push_back(static_cast<int>(frames));
    frames += p.frames;
  }
  Tensor images = Tensor::empty({frames, 3, S, S}, DType::f32);
  float* dst = images.data<float>();
  for (const std::vector<float>& px : pixels_) dst = std::copy(px.begin(), px.end(), dst);
  std::vector<GenerationPrompt> questions, captions;
  auto prompt = [&](const std::string& user, size_t i) -> Expected<GenerationPrompt> {
    const PendingImage& p = pending_[i];
    GenerationPrompt g;
    for (int f = 0; f < p.frames; ++f) g.images.push_back(first_frame[i] + f);
    if (p.placeholder.empty()) {
      VLM_ASSIGN_OR_RETURN(TokenizedChat chat, tokenize_chat(tok_, data_.chat, {{user, ""}}, 1, data_.image_tokens,
                                                             /*generation_prompt=*/true));
      g.tokens = std::move(chat.tokens);
    } else {
      VLM_ASSIGN_OR_RETURN(TokenizedChat chat, tokenize_chat_with_images(tok_, data_.chat, {{user, ""}},
                                                                         {p.placeholder}, /*generation_prompt=*/true));
      g.tokens = std::move(chat.tokens);
    }
    return g;
  };
  for (size_t i = 0; i < pending_.size(); ++i) {
    const size_t image = i;
    if (pending_[i].ask_questions)
      for (const EvalQuestion& q : pending_[i].text.questions) {
        VLM_ASSIGN_OR_RETURN(GenerationPrompt p, prompt(q.question, image));
        questions.push_back(std::move(p));
      }
    if (pending_[i].ask_caption) {
      VLM_ASSIGN_OR_RETURN(GenerationPrompt p, prompt(data_.caption_prompt, image));
      captions.push_back(std::move(p));
    }
  }
  GenerateOptions go;
  go.stop_ids = {stop_id_};
  go.max_new_tokens = o_.max_new_tokens;
  const auto answers = generate_greedy(model_, images, questions, image_id_, go);
  go.max_new_tokens = o_.caption_max_new_tokens;
  const auto described = generate_greedy(model_, images, captions, image_id_, go);
  size_t qi = 0, ci = 0;
  for (const PendingImage& p : pending_) {
    if (p.ask_questions)
      for (const EvalQuestion& q : p.text.questions)
        score_question(q, p.text.key, p.text.label, generated_text(answers[qi++]));
    if (p.ask_caption) {
      const std::string pred = generated_text(described[ci++]);
      CaptionTaskResult& c = *r_.caption;
      ++c.captions;
      bool exact = false;
      std::vector<CaptionTokens> refs;
      for (const std::string& ref : p.text.captions) {
        exact = exact || normalize_answer(pred) == normalize_answer(ref);
        refs.push_back(coco_caption_tokens(ref));
      }
      c.exact_correct += exact;
      corpus_.candidates.push_back(coco_caption_tokens(pred));
      corpus_.references.push_back(std::move(refs));
      corpus_.labels.push_back(p.text.label);
      keep_example("caption", p.text.key, data_.caption_prompt, p.text.captions.front(), pred);
    }
  }
  pixels_.clear();
  pending_.clear();
  pending_prompts_ = 0;
  return Status();
}

Status EvalRun::finish_caption() {
  CaptionTaskResult& c = *r_.caption;
  if (c.captions == 0)
    return not_found("eval task caption: none of the " + std::to_string(r_.images) +
                     " held-out images has a caption (KEY.txt, or \"caption\" / \"captions\" in KEY.json)");
  VLM_ASSIGN_OR_RETURN(c.scores, score_captions(corpus_.candidates, corpus_.references));
  c.exact_match = static_cast<double>(c.exact_correct) / c.captions;
  for (size_t i = 0; i < corpus_.labels.size(); ++i)
    add(c.by_class, corpus_.labels[i], c.scores.cider_d_per_image[i], c.scores.rouge_l_per_image[i]);
  return Status();
}

Status EvalRun::finish_retrieval() {
  const int n = static_cast<int>(retrieval_captions_.size());
  if (n < 2)
    return not_found("eval task retrieval: needs at least 2 captioned held-out images, found " + std::to_string(n));
  const int64_t S = data_.image_size;
  Tensor images = Tensor::empty({n, 3, S, S}, DType::f32);
  for (int i = 0; i < n; ++i)
    std::copy(retrieval_pixels_[static_cast<size_t>(i)].begin(), retrieval_pixels_[static_cast<size_t>(i)].end(),
              images.data<float>() + static_cast<int64_t>(i) * 3 * S * S);
  PairScoring ps;
  ps.chat = data_.chat;
  ps.caption_prompt = data_.caption_prompt;
  ps.image_tokens = data_.image_tokens;
  ps.batch_pairs = o_.batch_size;
  VLM_ASSIGN_OR_RETURN(std::vector<double> scores,
                       score_image_caption_pairs(model_, tok_, images, retrieval_captions_, ps));
  r_.retrieval.emplace();
  r_.retrieval->images = n;
  r_.retrieval->recall = retrieval_recall(scores, n);
  return Status();
}

Expected<EvalResult> EvalRun::run() {
  ShardStreamOptions so;
  so.epochs = 1;
  so.shuffle_shards = false;
  VLM_ASSIGN_OR_RETURN(auto stream, ShardSampleStream::create(data_.shards, so));
  VLM_ASSIGN_OR_RETURN(ImagePipelineOptions pipe, image_pipeline_options(data_));
  const bool vqa = r_.vqa.has_value(), caption = r_.caption.has_value(), retrieval = has(r_.tasks, "retrieval");
  const size_t pixel_count = static_cast<size_t>(3) * data_.image_size * data_.image_size;
  WebDatasetSample sample;
  int unusable = 0;
  while (r_.images < o_.samples) {
    VLM_ASSIGN_OR_RETURN(bool more, stream->next(sample));
    if (!more) break;
    auto text = parse_eval_sample(sample);
    if (!text.ok()) {
      VLM_WARN("eval: skipping sample: ", text.status().message());
      ++r_.skipped;
      continue;
    }
    PendingImage p;
    p.ask_questions = vqa && !text->questions.empty();
    p.ask_caption = caption && !text->captions.empty();
    const bool for_retrieval = retrieval && !text->captions.empty() &&
                               static_cast<int>(retrieval_captions_.size()) < o_.retrieval_samples;
    if (!p.ask_questions && !p.ask_caption && !for_retrieval) {
      ++unusable;
      continue;
    }
    std::vector<float> pixels(pixel_count);  // the model's input size: retrieval, and prompts without tiling
    if (Status s = image_pipeline_sample(sample, pipe, nullptr, pixels.data()); !s.ok()) {
      VLM_WARN("eval: skipping sample: ", s.message());
      ++r_.skipped;
      continue;
    }
    std::vector<float> frames;
    if (tiling_ && (p.ask_questions || p.ask_caption)) {
      Expected<Idefics3Pixels> t = idefics3_sample_pixels(sample, *tiling_, data_.max_pixels);
      if (!t.ok()) {
        VLM_WARN("eval: skipping sample: ", t.status().message());
        ++r_.skipped;
        continue;
      }
      frames.assign(t->frames.data<float>(), t->frames.data<float>() + t->frames.numel());
      p.frames = static_cast<int>(t->frames.dim(0));
      p.placeholder = idefics3_placeholder(tok_, t->layout, *tiling_, data_.chat.image_token);
    }
    ++r_.images;
    if (o_.on_image) o_.on_image(r_.images, o_.samples);
    if (for_retrieval) {
      retrieval_pixels_.push_back(pixels);
      retrieval_captions_.push_back(text->captions.front());
    }
    p.text = std::move(*text);
    pending_prompts_ += (p.ask_questions ? static_cast<int>(p.text.questions.size()) : 0) + (p.ask_caption ? 1 : 0);
    if (p.ask_questions || p.ask_caption) {
      pixels_.push_back(tiling_ ? std::move(frames) : std::move(pixels));
      pending_.push_back(std::move(p));
    }
    if (pending_prompts_ >= o_.batch_size) VLM_RETURN_IF_ERROR(flush());
  }
  VLM_RETURN_IF_ERROR(flush());
  std::string task_list;
  for (const std::string& t : r_.tasks) task_list += (task_list.empty() ? "" : ", ") + t;
  const std::string needs = "vqa needs \"qa\" in KEY.json; caption and retrieval need KEY.txt or \"caption\" / "
                            "\"captions\" in KEY.json";
  if (r_.images == 0)
    return not_found(str("eval: no usable sample in the held-out shards for ", task_list, " (", r_.skipped,
                         " unreadable, ", unusable, " without the fields the tasks need: ", needs, ")"));
  if (unusable > 0)
    VLM_WARN("eval: ", unusable, " held-out samples carry nothing ", task_list, " can score (", needs, ")");
  if (vqa) {
    VqaTaskResult& v = *r_.vqa;
    if (v.questions == 0)
      return not_found("eval task vqa: none of the " + std::to_string(r_.images) +
                       " held-out images has questions (\"qa\" in KEY.json)");
    v.accuracy /= v.questions;
    v.exact_match = static_cast<double>(v.exact_correct) / v.questions;
  }
  if (caption) VLM_RETURN_IF_ERROR(finish_caption());
  if (retrieval) VLM_RETURN_IF_ERROR(finish_retrieval());
  return r_;
}

}  // namespace

Expected<EvalResult> evaluate(VlmModel& model, const Tokenizer& tokenizer, const VlmDataOptions& data,
                              const EvalOptions& options) {
  VLM_ASSIGN_OR_RETURN(std::vector<std::string> tasks, resolve_eval_tasks(options.tasks, data.task));
  auto image_id = tokenizer.token_to_id(data.chat.image_token);
  auto stop_id = tokenizer.token_to_id(data.chat.assistant_suffix);
  if (!image_id || !stop_id)
    return invalid_argument("the tokenizer lacks '" + data.chat.image_token + "' or '" + data.chat.assistant_suffix +
                            "'");
  // SmolVLM / Idefics3 models prompt with the tiles training fed (the same trigger as the loader's).
  std::optional<Idefics3Options> tiling;
  if (data.idefics3 && has_idefics3_tokens(tokenizer)) {
    VLM_RETURN_IF_ERROR(check_idefics3_for_model(*data.idefics3, data.image_size, data.image_tokens, tokenizer));
    tiling = data.idefics3;
  }
  EvalRun run(model, tokenizer, data, options, std::move(tasks), *image_id, *stop_id, std::move(tiling));
  return run.run();
}

}  // namespace vlm

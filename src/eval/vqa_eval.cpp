// Held-out VQA / caption evaluation by greedy generation.
#include "eval/vqa_eval.h"

#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "data/loader/sample_stream.h"
#include "model/generate.h"

namespace vlm {

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

std::string EvalResult::to_json() const {
  nlohmann::json j;
  j["images"] = images;
  j["questions"] = questions;
  j["correct"] = correct;
  j["vqa_accuracy"] = vqa_accuracy;
  j["captions"] = captions;
  j["captions_correct"] = captions_correct;
  j["caption_exact_match"] = caption_exact_match;
  nlohmann::json types = nlohmann::json::object();
  for (const auto& [type, ct] : by_type)
    types[type] = {{"correct", ct.first}, {"total", ct.second},
                   {"accuracy", ct.second ? static_cast<double>(ct.first) / ct.second : 0.0}};
  j["by_type"] = types;
  nlohmann::json ex = nlohmann::json::array();
  for (const auto& e : examples)
    ex.push_back({{"key", e.key}, {"question", e.question}, {"answer", e.answer}, {"prediction", e.prediction}});
  j["examples"] = ex;
  // Predictions are raw model output and may cut a UTF-8 sequence: replace bad bytes instead of throwing.
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

namespace {

struct Question {
  int image;  // index into the pending images
  std::string key, question, answer;
  bool caption;
};

}  // namespace

Expected<EvalResult> evaluate_vqa(VlmModel& model, const Tokenizer& tokenizer, const VlmDataOptions& data_in,
                                  const EvalOptions& o) {
  VlmDataOptions data = data_in;
  data.task = data_in.task == "caption" ? "caption" : (o.captions ? "mixed" : "vqa");
  data.max_turns = 1 << 20;
  ShardStreamOptions so;
  so.epochs = 1;
  so.shuffle_shards = false;
  VLM_ASSIGN_OR_RETURN(auto stream, ShardSampleStream::create(data.shards, so));
  auto image_id = tokenizer.token_to_id(data.chat.image_token);
  auto stop_id = tokenizer.token_to_id(data.chat.assistant_suffix);
  if (!image_id || !stop_id)
    return invalid_argument("the tokenizer lacks '" + data.chat.image_token + "' or '" + data.chat.assistant_suffix + "'");
  GenerateOptions go;
  go.max_new_tokens = o.max_new_tokens;
  go.stop_ids = {*stop_id};

  EvalResult r;
  const int64_t S = data.image_size;
  std::vector<std::vector<float>> pixels;
  std::vector<Question> questions;

  // Generates answers for the queued questions and scores them.
  auto flush = [&]() -> Status {
    if (questions.empty()) return Status();
    Tensor images = Tensor::empty({static_cast<int64_t>(pixels.size()), 3, S, S}, DType::f32);
    for (size_t i = 0; i < pixels.size(); ++i)
      std::copy(pixels[i].begin(), pixels[i].end(), images.data<float>() + static_cast<int64_t>(i) * 3 * S * S);
    std::vector<GenerationPrompt> prompts;
    for (const auto& q : questions) {
      VLM_ASSIGN_OR_RETURN(TokenizedChat chat, tokenize_chat(tokenizer, data.chat, {{q.question, ""}}, 1,
                                                             data.image_tokens, /*generation_prompt=*/true));
      prompts.push_back({chat.tokens, {q.image}});
    }
    auto outputs = generate_greedy(model, images, prompts, *image_id, go);
    for (size_t i = 0; i < questions.size(); ++i) {
      std::vector<int32_t> ids = outputs[i];
      if (!ids.empty() && ids.back() == *stop_id) ids.pop_back();
      const std::string pred = normalize_answer(tokenizer.decode(ids));
      const Question& q = questions[i];
      const bool ok = pred == normalize_answer(q.answer);
      if (q.caption) {
        ++r.captions;
        r.captions_correct += ok;
      } else {
        ++r.questions;
        r.correct += ok;
        auto& t = r.by_type[question_type(q.question)];
        t.first += ok;
        ++t.second;
      }
      if (static_cast<int>(r.examples.size()) < o.examples_kept) r.examples.push_back({q.key, q.question, q.answer, pred});
    }
    pixels.clear();
    questions.clear();
    if (o.progress) o.progress(r.images);
    return Status();
  };

  WebDatasetSample sample;
  uint64_t ordinal = 0;
  while (r.images < o.samples) {
    VLM_ASSIGN_OR_RETURN(bool more, stream->next(sample));
    if (!more) break;
    auto prepared = prepare_sample(sample, data, ordinal++);
    if (!prepared.ok()) {
      VLM_WARN("eval: skipping sample: ", prepared.status().message());
      continue;
    }
    ++r.images;
    const int image = static_cast<int>(pixels.size());
    pixels.push_back(std::move(prepared->pixels));
    for (const auto& t : prepared->turns)
      questions.push_back({image, prepared->key, t.user, t.assistant, t.user == data.caption_prompt});
    if (static_cast<int>(questions.size()) >= o.batch_size) VLM_RETURN_IF_ERROR(flush());
  }
  VLM_RETURN_IF_ERROR(flush());
  if (r.images == 0) return not_found("eval: no usable sample in the held-out shards");
  r.vqa_accuracy = r.questions ? static_cast<double>(r.correct) / r.questions : 0.0;
  r.caption_exact_match = r.captions ? static_cast<double>(r.captions_correct) / r.captions : 0.0;
  return r;
}

}  // namespace vlm

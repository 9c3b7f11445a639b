// The task runners on a tiny random model: only the requested tasks are scored and reported, breakdowns by the
// shards' type / answer type / class fields, the examples setting, retrieval scoring that does not depend on the
// batching, recall@K on known rankings, task names, and malformed evaluation fields in a sample's json.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/image/image.h"
#include "data/io/tar.h"
#include "data/io/webdataset.h"
#include "data/tokenizer/tokenizer.h"
#include "data/tools/synth_shapes.h"
#include "eval/eval_runner.h"
#include "eval/eval_sample.h"
#include "testing/test_util.h"
#include "train/trainer.h"
#include "train/train_fixture.h"

namespace vlm {
namespace {

constexpr int kImages = 8;

// Held-out shard: shapes images whose json carries ten human answers, a type, an answer type, several captions and
// a class; plus one sample with a malformed qa entry and one with an undecodable image (both skipped).
struct EvalSetup {
  RunConfig config;
  std::string shard;
  EvalSetup() {
    const std::string dir = testing::scratch_dir("eval_runner");
    config = testing::tiny_run_config(testing::scratch_dir("eval_runner_fixture"));
    shard = dir + "/val-000000.tar";
    auto w = TarWriter::create(shard);
    EXPECT_TRUE(w.ok());
    for (int i = 0; i < kImages + 2; ++i) {
      SynthShapesSample s = synth_shapes_sample(7, static_cast<uint64_t>(i), 16);
      const std::string key = str("s", i);
      auto png = encode_png(s.image);
      EXPECT_TRUE(png.ok());
      nlohmann::json j;
      std::vector<std::string> answers(4, s.qa[0].answer);
      answers.resize(10, "zebra");
      j["qa"] = {{{"question", s.qa[0].question}, {"answers", answers}, {"type", "count"}, {"answer_type", "number"}},
                 {{"question", s.qa[1].question}, {"answer", s.qa[1].answer}}};
      j["captions"] = {s.caption, "some shapes"};
      j["class"] = s.objects.size() == 1 ? "one" : "several";
      if (i == 3) j["qa"][0].erase("answers");  // neither answer nor answers: skipped
      EXPECT_TRUE((*w)->add(key + ".json", j.dump()).ok());
      EXPECT_TRUE((*w)->add(key + ".txt", std::string_view(s.caption)).ok());
      if (i == 5) EXPECT_TRUE((*w)->add(key + ".png", std::string_view("not a png")).ok());
      else EXPECT_TRUE((*w)->add(key + ".png", *png).ok());
    }
    EXPECT_TRUE((*w)->close().ok());
    config.data.val_shards = shard;
  }
};

const EvalSetup& setup() {
  static EvalSetup s;
  return s;
}

Expected<EvalResult> run_eval(const std::vector<std::string>& tasks, int examples = 20) {
  const RunConfig& c = setup().config;
  auto tokenizer = Tokenizer::load(c.data.tokenizer);
  if (!tokenizer.ok()) return tokenizer.status();
  VlmModel model(c.model, Device::cpu());
  model.init_weights(11);
  auto data = make_data_options(c, c.data.val_shards, true);
  if (!data.ok()) return data.status();
  EvalOptions o;
  o.tasks = tasks;
  o.samples = 100;
  o.max_new_tokens = 3;
  o.caption_max_new_tokens = 5;
  o.batch_size = 5;
  o.examples_kept = examples;
  o.retrieval_samples = 5;
  int seen = 0;
  o.on_image = [&](int images, int total) {
    EXPECT_EQ(images, seen + 1);
    EXPECT_EQ(total, 100);
    seen = images;
  };
  auto r = evaluate(model, *tokenizer, *data, o);
  if (r.ok()) {
    EXPECT_EQ(seen, r->images);
  }
  return r;
}

TEST(EvalRunner, CaptionTaskReportsOnlyCaptionMetrics) {
  auto r = run_eval({"caption"});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->images, kImages);
  EXPECT_EQ(r->skipped, 2);
  EXPECT_FALSE(r->vqa.has_value());
  EXPECT_FALSE(r->retrieval.has_value());
  ASSERT_TRUE(r->caption.has_value());
  EXPECT_EQ(r->caption->captions, kImages);
  for (const auto& [name, v] : r->scalars()) {
    EXPECT_EQ(name.rfind("eval/caption/", 0), 0u) << name;
    EXPECT_TRUE(std::isfinite(v)) << name;
  }
  EXPECT_EQ(r->summary().find("vqa"), std::string::npos) << r->summary();
  EXPECT_NE(r->summary().find("CIDEr-D"), std::string::npos);
  const auto j = nlohmann::json::parse(r->to_json());
  EXPECT_FALSE(j.contains("vqa"));
  EXPECT_EQ(j["caption"]["captions"], kImages);
  int classes = 0;
  for (const auto& [name, b] : j["caption"]["by_class"].items()) classes += b["count"].get<int>();
  EXPECT_EQ(classes, kImages);
  for (const auto& e : j["examples"]) EXPECT_EQ(e["task"], "caption");
}

TEST(EvalRunner, VqaTaskBreaksDownByTypeAnswerTypeAndClassAndKeepsTheExamplesAsked) {
  auto r = run_eval({"vqa"}, 3);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(r->vqa.has_value());
  EXPECT_FALSE(r->caption.has_value());
  EXPECT_EQ(r->vqa->questions, 2 * kImages);
  EXPECT_GE(r->vqa->accuracy, 0.0);
  EXPECT_LE(r->vqa->accuracy, 1.0);
  ASSERT_TRUE(r->vqa->by_type.count("count"));  // the json's type
  EXPECT_EQ(r->vqa->by_type.at("count").count, kImages);
  ASSERT_TRUE(r->vqa->by_answer_type.count("number"));
  EXPECT_EQ(r->vqa->by_answer_type.at("number").count, kImages);
  int by_class = 0;
  for (const auto& [name, b] : r->vqa->by_class) by_class += b.count;
  EXPECT_EQ(by_class, 2 * kImages);
  EXPECT_EQ(r->examples.size(), 3u);
  EXPECT_EQ(r->summary().find("caption"), std::string::npos) << r->summary();
  auto none = run_eval({"vqa"}, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->examples.empty());
}

TEST(EvalRunner, AllThreeTasksTogether) {
  auto r = run_eval({"vqa", "caption", "retrieval"}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(r->vqa && r->caption && r->retrieval);
  EXPECT_EQ(r->retrieval->images, 5);
  const RetrievalRecall& rec = r->retrieval->recall;
  for (const auto* v : {&rec.image_to_text, &rec.text_to_image}) {
    EXPECT_LE((*v)[0], (*v)[1]);
    EXPECT_EQ((*v)[1], 1.0);  // 5 candidates: the partner always ranks within 5
    EXPECT_EQ((*v)[2], 1.0);
  }
  EXPECT_EQ(r->examples.size(), 4u);  // 2 per generating task
  const auto j = nlohmann::json::parse(r->to_json());
  EXPECT_TRUE(j.contains("vqa") && j.contains("caption") && j.contains("retrieval"));
}

TEST(EvalRunner, PairScoresDoNotDependOnTheBatching) {
  const RunConfig& c = setup().config;
  auto tokenizer = Tokenizer::load(c.data.tokenizer);
  ASSERT_TRUE(tokenizer.ok());
  VlmModel model(c.model, Device::cpu());
  model.init_weights(5);
  auto data = make_data_options(c, c.data.val_shards, true);
  ASSERT_TRUE(data.ok());
  Tensor images = testing::random_normal({3, 3, 16, 16}, 9);
  const std::vector<std::string> captions = {"a red circle", "two blue squares and a green triangle", "shapes"};
  PairScoring ps;
  ps.chat = data->chat;
  ps.caption_prompt = data->caption_prompt;
  ps.image_tokens = data->image_tokens;
  ps.batch_pairs = 1;
  auto one = score_image_caption_pairs(model, *tokenizer, images, captions, ps);
  ps.batch_pairs = 7;
  auto many = score_image_caption_pairs(model, *tokenizer, images, captions, ps);
  ASSERT_TRUE(one.ok() && many.ok());
  ASSERT_EQ(one->size(), 9u);
  for (size_t i = 0; i < 9; ++i) {
    EXPECT_TRUE(std::isfinite((*one)[i]));
    EXPECT_LT((*one)[i], 0.0);  // a mean log-probability
    EXPECT_NEAR((*one)[i], (*many)[i], 1e-4 * std::fabs((*one)[i])) << i;
  }
  // Another image changes the score of the same caption (the image is attended to).
  EXPECT_NE((*one)[0], (*one)[3]);
}

TEST(Retrieval, RecallCountsTheRankOfThePartner) {
  // 3 x 3: image 0 ranks its caption first, image 1 second, image 2 third.
  std::vector<double> s = {5, 1, 0,   //
                           3, 2, 1,   //
                           9, 8, 1};
  RetrievalRecall r = retrieval_recall(s, 3);
  EXPECT_NEAR(r.image_to_text[0], 1.0 / 3, 1e-12);
  EXPECT_EQ(r.image_to_text[1], 1.0);
  // Captions: caption 0 ranks images (5, 3, 9) -> image 0 second; caption 1 (1, 2, 8) -> second; caption 2
  // (0, 1, 1): a tie with image 1 counts against it -> second.
  EXPECT_EQ(r.text_to_image[0], 0.0);
  EXPECT_EQ(r.text_to_image[1], 1.0);
  // Everything equal: the partner ties with all, recall@1 is 0, not 1.
  RetrievalRecall flat = retrieval_recall(std::vector<double>(36, 0.5), 6);
  EXPECT_EQ(flat.image_to_text[0], 0.0);
  EXPECT_EQ(flat.image_to_text[1], 0.0);
  EXPECT_EQ(flat.image_to_text[2], 1.0);
}

TEST(EvalTasks, ResolveFromDataTaskOrCheckNames) {
  EXPECT_EQ(*resolve_eval_tasks({}, "mixed"), (std::vector<std::string>{"vqa", "caption"}));
  EXPECT_EQ(*resolve_eval_tasks({}, "caption"), (std::vector<std::string>{"caption"}));
  EXPECT_EQ(*resolve_eval_tasks({"retrieval", "vqa", "vqa"}, "caption"),
            (std::vector<std::string>{"retrieval", "vqa"}));
  auto bad = resolve_eval_tasks({"vqa", "captioning"}, "mixed");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'captioning'"), std::string::npos);
}

TEST(EvalTasks, AMissingFieldForARequestedTaskIsAnErrorNamingIt) {
  // Shapes shards carry no "class" and one caption: fine; but a vqa-only eval of caption-only shards fails loudly.
  const std::string dir = testing::scratch_dir("eval_caption_only");
  auto w = TarWriter::create(dir + "/c.tar");
  ASSERT_TRUE(w.ok());
  SynthShapesSample s = synth_shapes_sample(3, 0, 16);
  ASSERT_TRUE((*w)->add("a.png", *encode_png(s.image)).ok());
  ASSERT_TRUE((*w)->add("a.txt", std::string_view(s.caption)).ok());
  ASSERT_TRUE((*w)->close().ok());
  RunConfig c = setup().config;
  auto tokenizer = Tokenizer::load(c.data.tokenizer);
  ASSERT_TRUE(tokenizer.ok());
  VlmModel model(c.model, Device::cpu());
  model.init_weights(1);
  auto data = make_data_options(c, dir + "/c.tar", true);
  ASSERT_TRUE(data.ok());
  EvalOptions o;
  o.tasks = {"vqa"};
  auto r = evaluate(model, *tokenizer, *data, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no usable sample"), std::string::npos) << r.status().message();
  o.tasks = {"retrieval"};
  r = evaluate(model, *tokenizer, *data, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("retrieval"), std::string::npos) << r.status().message();
}

WebDatasetSample sample_with_json(const std::string& json, const std::string& txt = "") {
  WebDatasetSample s;
  s.shard = "shard.tar";
  s.key = "k1";
  s.fields["json"] = std::vector<uint8_t>(json.begin(), json.end());
  if (!txt.empty()) s.fields["txt"] = std::vector<uint8_t>(txt.begin(), txt.end());
  return s;
}

TEST(EvalSample, ParsesAnswersCaptionsAndClass) {
  auto t = parse_eval_sample(sample_with_json(
      R"({"qa": [{"question": "q?", "answers": [{"answer": "b"}, "a", "b"], "question_type": "what", "answer_type": "other"},
                 {"question": "r?", "answer": "x", "type": "t"}],
          "caption": "A cat.", "captions": ["a dog", "A cat."], "class": 3})",
      "A cat.\n"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->questions.size(), 2u);
  EXPECT_EQ(t->questions[0].answer, "b");  // the most frequent
  EXPECT_EQ(t->questions[0].answers, (std::vector<std::string>{"b", "a", "b"}));
  EXPECT_EQ(t->questions[0].type, "what");
  EXPECT_EQ(t->questions[0].answer_type, "other");
  EXPECT_EQ(t->questions[1].answer, "x");
  EXPECT_TRUE(t->questions[1].answers.empty());
  EXPECT_EQ(t->captions, (std::vector<std::string>{"A cat.", "a dog"}));
  EXPECT_EQ(t->label, "3");
  auto empty = parse_eval_sample(sample_with_json("{}"));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->questions.empty() && empty->captions.empty());
}

TEST(EvalSample, MalformedFieldsAreErrorsNamingSampleAndField) {
  const std::pair<const char*, const char*> cases[] = {
      {"[1, 2]", "not a JSON object"},
      {"{\"qa\": ", "not a JSON object"},
      {R"({"qa": {"question": "q"}})", "\"qa\" is not a list"},
      {R"({"qa": [3]})", "qa[0]: not an object"},
      {R"({"qa": [{"answer": "a"}]})", "qa[0]: no string \"question\""},
      {R"({"qa": [{"question": "q"}]})", "no \"answer\" or \"answers\""},
      {R"({"qa": [{"question": "q", "answers": []}]})", "answers: not a non-empty list"},
      {R"({"qa": [{"question": "q", "answers": "a"}]})", "answers: not a non-empty list"},
      {R"({"qa": [{"question": "q", "answers": ["a", 4]}]})", "answers[1]"},
      {R"({"qa": [{"question": "q", "answers": [{"text": "a"}]}]})", "answers[0]"},
      {R"({"qa": [{"question": "q", "answer": 1}]})", "answer: not a string"},
      {R"({"qa": [{"question": "q", "answer": "a", "type": 2}]})", "type: not a string"},
      {R"({"caption": ["a"]})", "\"caption\" is not a string"},
      {R"({"captions": "a"})", "\"captions\" is not a list"},
      {R"({"captions": ["a", null]})", "captions[1] is not a string"},
      {R"({"class": 1.5})", "\"class\" is neither"},
  };
  for (const auto& [json, expect] : cases) {
    auto t = parse_eval_sample(sample_with_json(json));
    ASSERT_FALSE(t.ok()) << json;
    EXPECT_NE(t.status().message().find("shard.tar: k1.json"), std::string::npos) << t.status().message();
    EXPECT_NE(t.status().message().find(expect), std::string::npos) << json << " -> " << t.status().message();
  }
}

}  // namespace
}  // namespace vlm

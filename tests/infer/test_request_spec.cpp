// `vlm generate`'s request lines: every key read with its type checked, defaults filled in, and malformed lines
// (not JSON, not an object, wrong types, unknown keys, values out of range) rejected naming the line and the key;
// answer lines round-trip through a JSON parser.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "infer/request_spec.h"

namespace vlm::infer {
namespace {

Expected<RequestSpec> parse(const std::string& line) {
  SamplingParams d;
  d.max_tokens = 9;
  d.temperature = 0.25f;
  return parse_request_line(line, d, "fallback", "in.jsonl:4");
}

TEST(RequestSpec, ReadsEveryKeyAndFillsDefaults) {
  auto r = parse(R"({"id": "q1", "prompt": "hi", "images": ["a.jpg", "b.png"], "max_tokens": 32, "top_k": 40,
    "top_p": 0.9, "min_p": 0.05, "repetition_penalty": 1.1, "frequency_penalty": 0.2, "presence_penalty": 0.1,
    "seed": 7, "n": 2, "stop": ["\n", "END"], "stop_token_ids": [2, 3], "logprobs": 3, "beam_width": 4, "length_penalty": 0.5})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->id, "q1");
  EXPECT_EQ(r->prompt, "hi");
  EXPECT_EQ(r->images, (std::vector<std::string>{"a.jpg", "b.png"}));
  EXPECT_EQ(r->sampling.max_tokens, 32);
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.25f);  // the default
  EXPECT_EQ(r->sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 0.9f);
  EXPECT_FLOAT_EQ(r->sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r->sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(*r->sampling.seed, 7u);
  EXPECT_EQ(r->sampling.n, 2);
  EXPECT_EQ(r->sampling.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(r->sampling.stop_ids, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(r->sampling.logprobs, 3);
  EXPECT_EQ(r->sampling.beam_width, 4);
  EXPECT_FLOAT_EQ(r->sampling.length_penalty, 0.5f);
  auto minimal = parse(R"({"prompt": "x", "stop": "END"})");
  ASSERT_TRUE(minimal.ok());
  EXPECT_EQ(minimal->id, "fallback");
  EXPECT_EQ(minimal->sampling.max_tokens, 9);
  EXPECT_EQ(minimal->sampling.stop, (std::vector<std::string>{"END"}));
  EXPECT_EQ(parse(R"({"id": 12, "prompt": "x"})")->id, "12");
}

TEST(RequestSpec, MalformedLinesAreErrorsNamingTheLineAndKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "in.jsonl:4: not valid JSON"},
      {"", "not valid JSON"},
      {"[1, 2]", "a request is a JSON object"},
      {"\"prompt\"", "a request is a JSON object"},
      {R"({"id": "a"})", "\"prompt\" is required"},
      {R"({"prompt": 3})", "\"prompt\" has the wrong type"},
      {R"({"prompt": "x", "max_tokens": "9"})", "\"max_tokens\" has the wrong type"},
      {R"({"prompt": "x", "max_tokens": 1.5})", "\"max_tokens\" has the wrong type"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens must be >= 1"},
      {R"({"prompt": "x", "max_tokens": -5})", "max_tokens must be >= 1"},
      {R"({"prompt": "x", "max_tokens": 99999999999})", "out of range"},
      {R"({"prompt": "x", "temperature": -1})", "temperature"},
      {R"({"prompt": "x", "seed": -1})", "\"seed\" has the wrong type"},
      {R"({"prompt": "x", "images": "a.jpg"})", "\"images\" must be a list of strings"},
      {R"({"prompt": "x", "images": [1]})", "\"images\" must be a list of strings"},
      {R"({"prompt": "x", "stop": [""]})", "stop strings must not be empty"},
      {R"({"prompt": "x", "stop_token_ids": [-1]})", "stop_token_ids"},
      {R"({"prompt": "x", "stop_token_ids": 3})", "stop_token_ids"},
      {R"({"prompt": "x", "n": 0})", "n must be"},
      {R"({"prompt": "x", "beam_width": 0})", "beam_width"},
      {R"({"prompt": "x", "beam_width": 2, "n": 3})", "exceeds beam_width"},
      {R"({"prompt": "x", "temprature": 1})", "unknown key \"temprature\""},
      {R"({"prompt": "x", "id": [1]})", "\"id\" must be"},
  };
  for (const auto& [line, want] : cases) {
    auto r = parse(line);
    ASSERT_FALSE(r.ok()) << line;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << line << " -> " << r.status().message();
    EXPECT_NE(r.status().message().find("in.jsonl:4"), std::string::npos) << r.status().message();
  }
  EXPECT_EQ(request_line_id(R"({"id": "z", "prompt": 3})", "f"), "z");
  EXPECT_EQ(request_line_id("{oops", "f"), "f");
  EXPECT_EQ(request_line_id(R"({"id": 4.5})", "f"), "f");
}

TEST(RequestSpec, AnswerLinesAreJson) {
  RequestOutput ok;
  ok.id = "a";
  ok.prompt_tokens = 5;
  Completion c;
  c.tokens = {1, 2};
  c.logprobs = {-0.5f, -1.f};
  c.top_logprobs = {{{1, -0.5f}}, {{2, -1.f}}};
  c.text = "ab\xff";  // model output may cut a UTF-8 sequence
  c.finish_reason = "length";
  ok.completions = {c};
  const auto j = nlohmann::json::parse(answer_line(ok));
  EXPECT_EQ(j["id"], "a");
  EXPECT_EQ(j["completions"][0]["tokens"], nlohmann::json({1, 2}));
  EXPECT_EQ(j["completions"][0]["top_logprobs"][1][0][0], 2);
  RequestOutput bad;
  bad.id = "b";
  bad.status = invalid_argument("request 'b': the prompt is empty");
  const auto e = nlohmann::json::parse(answer_line(bad));
  EXPECT_EQ(e["error"], "request 'b': the prompt is empty");
  EXPECT_FALSE(e.contains("completions"));
}

}  // namespace
}  // namespace vlm::infer

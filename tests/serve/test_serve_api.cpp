// The server's request side without a model: base64, the OpenAI request parser on good and malformed bodies (bad
// JSON, wrong types, out-of-range values, bad data: URLs, oversized images), prompts built from chat messages
// (corrupt images, pixel bombs, prompts over the context), stream text deltas around stop strings, the API key
// comparison and the latency histograms.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "data/image/image.h"
#include "data/tokenizer/bpe_trainer.h"
#include "data/tools/synth_shapes.h"
#include "http_test_server.h"
#include "serve/api_prompt.h"
#include "serve/api_request.h"
#include "serve/api_response.h"
#include "serve/base64.h"
#include "serve/metrics.h"
#include "serve/remote_image.h"
#include "serve/server.h"

namespace vlm::serve {
namespace {

TEST(Base64, RoundTripsAndRefusesMalformedInput) {
  const std::vector<std::string> inputs = {"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10 binary", 9)};
  for (const std::string& s : inputs) {
    const std::string enc = base64_encode(s);
    auto dec = base64_decode(enc, 1 << 20);
    ASSERT_TRUE(dec.has_value()) << enc;
    EXPECT_EQ(*dec, s);
    EXPECT_EQ(base64_decoded_size(enc), s.size());
  }
  EXPECT_EQ(*base64_decode("YWJj", 3), "abc");
  EXPECT_EQ(*base64_decode("YWI", 3), "ab");             // missing padding accepted
  EXPECT_EQ(*base64_decode("-_-_", 3), "\xfb\xff\xbf");  // URL-safe alphabet
  EXPECT_FALSE(base64_decode("YWJj", 2));                // over max_bytes
  EXPECT_FALSE(base64_decode("YW=j", 10));               // padding inside
  EXPECT_FALSE(base64_decode("Y", 10));                  // a lone 6-bit group
  EXPECT_FALSE(base64_decode("YWJ*", 10));               // outside the alphabet
  EXPECT_FALSE(base64_decode("YW J", 10));               // whitespace is not base64
  EXPECT_FALSE(base64_decode("YQ===", 10));              // too much padding
}

std::string png_data_url(int size) {
  auto png = encode_png(synth_shapes_sample(1, 0, size).image);
  EXPECT_TRUE(png.ok());
  return "data:image/png;base64," + base64_encode(std::string(png->begin(), png->end()));
}

std::string chat_body(const std::string& extra, const std::string& content = "\"hi\"") {
  return "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": " + content + "}]" + extra + "}";
}

struct Case {
  Endpoint endpoint;
  std::string body;
  int status;
  std::string param;  // expected ApiError::param
};

TEST(ApiRequest, MalformedBodiesAreErrorsNamingTheField) {
  const std::string img = "[{\"type\": \"image_url\", \"image_url\": {\"url\": \"";
  const Case cases[] = {
      {Endpoint::chat, "", 400, ""},
      {Endpoint::chat, "{\"messages\": [", 400, ""},
      {Endpoint::chat, "[1, 2]", 400, ""},
      {Endpoint::chat, "{\"model\": 3, \"messages\": []}", 400, "model"},
      {Endpoint::chat, "{\"model\": \"m\"}", 400, "messages"},
      {Endpoint::chat, "{\"messages\": []}", 400, "messages"},
      {Endpoint::chat, "{\"messages\": {\"role\": \"user\"}}", 400, "messages"},
      {Endpoint::chat, "{\"messages\": [\"hi\"]}", 400, "messages[0]"},
      {Endpoint::chat, "{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}", 400, "messages[0].role"},
      {Endpoint::chat, "{\"messages\": [{\"role\": 1, \"content\": \"x\"}]}", 400, "messages[0].role"},
      {Endpoint::chat, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", 400, "messages[0].content"},
      {Endpoint::chat, "{\"messages\": [{\"role\": \"user\"}]}", 400, "messages[0].content"},
      {Endpoint::chat,
       "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", "
       "\"content\": \"y\"}]}",
       400, "messages"},
      {Endpoint::chat, chat_body("", "[{\"type\": \"audio\"}]"), 400, "messages[0].content[0].type"},
      {Endpoint::chat, chat_body("", "[{\"type\": \"text\", \"text\": 7}]"), 400, "messages[0].content[0].text"},
      {Endpoint::chat, chat_body("", "[{\"type\": \"image_url\", \"image_url\": 7}]"), 400,
       "messages[0].content[0].image_url"},
      {Endpoint::chat, chat_body("", img + "https://example.com/a.png\"}}]"), 400,
       "messages[0].content[0].image_url.url"},
      {Endpoint::chat, chat_body("", img + "file:///etc/passwd\"}}]"), 400, "messages[0].content[0].image_url.url"},
      {Endpoint::chat, chat_body("", img + "data:image/png;base64,@@@@\"}}]"), 400,
       "messages[0].content[0].image_url.url"},
      {Endpoint::chat, chat_body("", img + "data:image/gif;base64,R0lG\"}}]"), 400,
       "messages[0].content[0].image_url.url"},
      {Endpoint::chat, chat_body("", img + "data:image/png,abcd\"}}]"), 400, "messages[0].content[0].image_url.url"},
      {Endpoint::chat, chat_body("", img + "data:image/png;base64," + std::string(4000, 'A') + "\"}}]"), 413,
       "messages[0].content[0].image_url.url"},
      {Endpoint::chat, chat_body(", \"max_tokens\": \"5\""), 400, "max_tokens"},
      {Endpoint::chat, chat_body(", \"max_tokens\": 0"), 400, "max_tokens"},
      {Endpoint::chat, chat_body(", \"max_tokens\": 1.5"), 400, "max_tokens"},
      {Endpoint::chat, chat_body(", \"max_completion_tokens\": 100000"), 400, "max_completion_tokens"},
      {Endpoint::chat, chat_body(", \"temperature\": 3"), 400, "temperature"},
      {Endpoint::chat, chat_body(", \"temperature\": \"hot\""), 400, "temperature"},
      {Endpoint::chat, chat_body(", \"top_p\": 0"), 400, "top_p"},
      {Endpoint::chat, chat_body(", \"n\": 9"), 400, "n"},
      {Endpoint::chat, chat_body(", \"seed\": \"x\""), 400, "seed"},
      {Endpoint::chat, chat_body(", \"stop\": 3"), 400, "stop"},
      {Endpoint::chat, chat_body(", \"stop\": [\"a\", \"\"]"), 400, "stop"},
      {Endpoint::chat, chat_body(", \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]"), 400, "stop"},
      {Endpoint::chat, chat_body(", \"logprobs\": 1"), 400, "logprobs"},
      {Endpoint::chat, chat_body(", \"top_logprobs\": 3"), 400, "top_logprobs"},
      {Endpoint::chat, chat_body(", \"logprobs\": true, \"top_logprobs\": 21"), 400, "top_logprobs"},
      {Endpoint::chat, chat_body(", \"stream\": \"yes\""), 400, "stream"},
      {Endpoint::chat, chat_body(", \"stream_options\": {\"include_usage\": true}"), 400, "stream_options"},
      {Endpoint::chat, chat_body(", \"tools\": [{\"type\": \"function\"}]"), 400, "tools"},
      {Endpoint::chat, chat_body(", \"response_format\": {\"type\": \"json_object\"}"), 400, "response_format"},
      {Endpoint::completion, "{\"prompt\": 5}", 400, "prompt"},
      {Endpoint::completion, "{\"prompt\": \"\"}", 400, "prompt"},
      {Endpoint::completion, "{\"prompt\": [\"a\", \"b\"]}", 400, "prompt"},
      {Endpoint::completion, "{\"max_tokens\": 4}", 400, "prompt"},
      {Endpoint::completion, "{\"prompt\": \"x\", \"logprobs\": true}", 400, "logprobs"},
      // Beam search (vLLM's fields): wrong types, widths over the limit, n over the width, and what a deterministic
      // search cannot honour.
      {Endpoint::chat, chat_body(", \"use_beam_search\": \"yes\""), 400, "use_beam_search"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": 1"), 400, "use_beam_search"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": true, \"best_of\": \"4\""), 400, "best_of"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": true, \"best_of\": 0"), 400, "best_of"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": true, \"best_of\": 2.5"), 400, "best_of"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": true, \"best_of\": 9"), 400, "best_of"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": true, \"best_of\": 1e12"), 400, "best_of"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": true, \"n\": 9"), 400, "n"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": true"), 400, "n"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": true, \"n\": 1, \"best_of\": 1"), 400, "best_of"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": true, \"n\": 3, \"best_of\": 2"), 400, "n"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": true, \"best_of\": 2, \"temperature\": 0.7"), 400,
       "temperature"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": true, \"best_of\": 2, \"top_p\": 0.5"), 400, "top_p"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": true, \"best_of\": 2, \"top_k\": 5"), 400, "top_k"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": true, \"best_of\": 2, \"min_p\": 0.1"), 400, "min_p"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": true, \"best_of\": 2, \"frequency_penalty\": 1"), 400,
       "frequency_penalty"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": true, \"best_of\": 2, \"presence_penalty\": -1"), 400,
       "presence_penalty"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": true, \"best_of\": 2, \"repetition_penalty\": 1.2"), 400,
       "repetition_penalty"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": true, \"best_of\": 2, \"stop\": \"x\""), 400, "stop"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": true, \"best_of\": 2, \"logprobs\": true"), 400, "logprobs"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": true, \"length_penalty\": \"long\""), 400, "length_penalty"},
      {Endpoint::chat, chat_body(", \"use_beam_search\": true, \"length_penalty\": 11"), 400, "length_penalty"},
      {Endpoint::chat, chat_body(", \"length_penalty\": 0.5"), 400, "length_penalty"},
      {Endpoint::chat, chat_body(", \"best_of\": 3"), 400, "best_of"},
      {Endpoint::chat, chat_body(", \"n\": 2, \"best_of\": 4"), 400, "best_of"},
      {Endpoint::completion, "{\"prompt\": \"x\", \"use_beam_search\": true, \"n\": 2, \"logprobs\": 1}", 400,
       "logprobs"},
      {Endpoint::completion, "{\"prompt\": \"x\", \"use_beam_search\": true, \"best_of\": 16}", 400, "best_of"},
      {Endpoint::completion, "{\"prompt\": \"x\", \"best_of\": 2}", 400, "best_of"},
  };
  RequestLimits limits;
  limits.max_tokens = 1000;
  limits.max_image_bytes = 1000;
  for (const Case& c : cases) {
    ApiRequest r;
    const ApiError e = parse_api_request(c.endpoint, c.body, limits, &r);
    EXPECT_EQ(e.status, c.status) << c.body.substr(0, 200) << " -> " << e.message;
    EXPECT_EQ(e.param, c.param) << c.body.substr(0, 200) << " -> " << e.message;
    EXPECT_FALSE(e.message.empty());
    if (!e.ok()) {
      const std::string body = error_body(e);
      EXPECT_NE(body.find("\"error\""), std::string::npos);
      EXPECT_NE(body.find("\"type\""), std::string::npos);
    }
  }
}

TEST(ApiRequest, GoodBodiesFillTheRequest) {
  RequestLimits limits;
  ApiRequest r;
  const std::string url = png_data_url(16);
  const std::string body =
      "{\"model\": \"m\", \"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", "
      "\"content\": [{\"type\": \"image_url\", \"image_url\": {\"url\": \"" +
      url +
      "\"}}, {\"type\": \"text\", \"text\": \"what color?\"}]}], \"max_completion_tokens\": 7, \"temperature\": 0.5, "
      "\"top_p\": 0.9, \"seed\": -3, \"stop\": \"\\n\", \"n\": 2, \"logprobs\": true, \"top_logprobs\": 2, "
      "\"stream\": true, \"stream_options\": {\"include_usage\": true}, \"user\": \"ignored\", \"tools\": []}";
  ASSERT_TRUE(parse_api_request(Endpoint::chat, body, limits, &r).ok());
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].text, "what color?");
  ASSERT_EQ(r.images.size(), 1u);
  EXPECT_EQ(r.images[0].bytes.substr(1, 3), "PNG");
  EXPECT_EQ(r.sampling.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_EQ(r.sampling.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_EQ(r.sampling.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(r.sampling.n, 2);
  EXPECT_EQ(r.sampling.logprobs, 2);
  EXPECT_TRUE(r.stream && r.include_usage);
  ASSERT_TRUE(parse_api_request(Endpoint::completion, "{\"prompt\": [\"abc\"], \"logprobs\": 0}", limits, &r).ok());
  EXPECT_EQ(r.prompt, "abc");
  EXPECT_EQ(r.sampling.logprobs, 0);
  EXPECT_EQ(r.sampling.max_tokens, limits.default_max_tokens);
}

TEST(ApiRequest, BeamSearchFieldsSetTheWidthAndKeepTheSamplingNeutral) {
  RequestLimits limits;
  ApiRequest r;
  // best_of is the width, n how many of the best come back; streaming is allowed (the choices come whole at the end).
  ASSERT_TRUE(parse_api_request(Endpoint::chat,
                                chat_body(", \"use_beam_search\": true, \"best_of\": 4, \"n\": 2, "
                                          "\"length_penalty\": 0.6, \"stream\": true, \"temperature\": 0, "
                                          "\"max_tokens\": 9, \"seed\": 3, \"ignore_eos\": true"),
                                limits, &r)
                  .ok());
  EXPECT_TRUE(r.use_beam_search && r.stream && r.ignore_eos);
  EXPECT_EQ(r.sampling.beam_width, 4);
  EXPECT_EQ(r.sampling.n, 2);
  EXPECT_FLOAT_EQ(r.sampling.length_penalty, 0.6f);
  EXPECT_EQ(r.sampling.max_tokens, 9);
  EXPECT_TRUE(r.sampling.validate().ok());
  // Without best_of the width is n; the neutral sampling values (as clients send their defaults) are accepted.
  ASSERT_TRUE(parse_api_request(Endpoint::completion,
                                "{\"prompt\": \"abc\", \"use_beam_search\": true, \"n\": 3, \"top_p\": 1, "
                                "\"top_k\": 0, \"frequency_penalty\": 0, \"repetition_penalty\": 1, \"stop\": []}",
                                limits, &r)
                  .ok());
  EXPECT_EQ(r.sampling.beam_width, 3);
  EXPECT_EQ(r.sampling.n, 3);
  EXPECT_FLOAT_EQ(r.sampling.length_penalty, 1.f);
  // The width is capped by the server's limit, inclusive.
  limits.max_beam_width = 3;
  EXPECT_TRUE(
      parse_api_request(Endpoint::chat, chat_body(", \"use_beam_search\": true, \"best_of\": 3"), limits, &r).ok());
  const ApiError over =
      parse_api_request(Endpoint::chat, chat_body(", \"use_beam_search\": true, \"best_of\": 4"), limits, &r);
  EXPECT_EQ(over.param, "best_of");
  EXPECT_NE(over.message.find("--max-beam-width"), std::string::npos) << over.message;
  // Not beam search: best_of equal to n (or 1) and length_penalty 1 change nothing, so they are accepted.
  for (const char* extra : {", \"best_of\": 1", ", \"n\": 2, \"best_of\": 2, \"temperature\": 1",
                            ", \"use_beam_search\": false, \"length_penalty\": 1"}) {
    ASSERT_TRUE(parse_api_request(Endpoint::chat, chat_body(extra), limits, &r).ok()) << extra;
    EXPECT_FALSE(r.use_beam_search);
    EXPECT_EQ(r.sampling.beam_width, 1) << extra;
  }
}

// A tiny tokenizer with the chat template's tokens, and prompts built against a 16 px pipeline.
struct PromptSetup {
  Tokenizer tokenizer;
  std::unique_ptr<infer::PromptBuilder> builder;
  PromptSetup() {
    BpeTrainOptions bo;
    bo.vocab_size = 300;
    bo.special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>"};
    tokenizer = *train_bpe({"what color is the square? the square is blue.", "describe the image."}, bo);
    ImagePipelineOptions p;
    p.size = 16;
    p.max_pixels = 1000;  // 31 x 31
    builder = std::make_unique<infer::PromptBuilder>(
        *infer::PromptBuilder::create(tokenizer, *chat_template_by_name("chat"), 4, p));
  }
};

TEST(ApiPrompt, ImagesAndContextAreCheckedWithClearErrors) {
  PromptSetup s;
  ApiPromptBuilder prompts(s.tokenizer, *s.builder, 64);
  RequestLimits limits;
  auto build = [&](const std::string& body, infer::Request* out) {
    ApiRequest api;
    const ApiError e = parse_api_request(Endpoint::chat, body, limits, &api);
    EXPECT_TRUE(e.ok()) << e.message;
    return prompts.build(api, "req", out);
  };
  auto image_body = [](const std::string& url) {
    return chat_body("",
                     "[{\"type\": \"text\", \"text\": \"what color?\"}, {\"type\": \"image_url\", \"image_url\": "
                     "{\"url\": \"" +
                         url + "\"}}]");
  };
  infer::Request r;
  ASSERT_TRUE(build(image_body(png_data_url(16)), &r).ok());
  EXPECT_EQ(r.images.size(), 1u);
  EXPECT_EQ(std::count(r.prompt.begin(), r.prompt.end(), s.builder->image_token_id()), 4);
  EXPECT_EQ(r.sampling.stop_ids, std::vector<int32_t>{s.builder->stop_token_id()});

  std::string png = png_data_url(16);
  const ApiError corrupt = build(image_body(png.substr(0, png.size() / 2)), &r);  // a truncated PNG
  EXPECT_EQ(corrupt.status, 422);
  EXPECT_EQ(corrupt.code, "invalid_image");
  EXPECT_EQ(corrupt.param, "messages[0].content[1].image_url.url");
  const ApiError not_an_image = build(image_body("data:image/png;base64," + base64_encode("hello world")), &r);
  EXPECT_EQ(not_an_image.status, 422);
  const ApiError bomb = build(image_body(png_data_url(64)), &r);  // 4096 pixels over the 1000 limit
  EXPECT_EQ(bomb.status, 422);
  EXPECT_EQ(bomb.code, "image_too_large");
  EXPECT_NE(bomb.message.find("pixel"), std::string::npos) << bomb.message;

  std::string long_text = "\"";
  for (int i = 0; i < 40; ++i) long_text += "what color is the square? ";
  const ApiError over = build(chat_body("", long_text + "\""), &r);
  EXPECT_EQ(over.status, 400);
  EXPECT_EQ(over.code, "context_length_exceeded");

  // System text joins the next user turn; an earlier answer is a turn of its own.
  ASSERT_TRUE(build("{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", "
                    "\"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"blue\"}, {\"role\": \"user\", "
                    "\"content\": \"why?\"}]}",
                    &r)
                  .ok());
  const std::string text = s.tokenizer.decode(r.prompt);
  EXPECT_EQ(text,
            "<|im_start|>user\nbe brief\n\nhi<|im_end|>\n<|im_start|>assistant\nblue<|im_end|>\n"
            "<|im_start|>user\nwhy?<|im_end|>\n<|im_start|>assistant\n");
}

TEST(TextStreamer, DeltasNeverShowAStopStringAndAddUpToTheFinalText) {
  PromptSetup s;
  const std::string full = "the square is blue. describe the image.";
  const std::vector<int32_t> ids = s.tokenizer.encode(full);
  for (const std::string stop : {"blue", "is b", "image.", "zzz"}) {
    TextStreamer streamer(s.tokenizer, {stop});
    std::string sent;
    std::vector<int32_t> so_far;
    for (int32_t id : ids) {
      sent += streamer.push(id);
      so_far.push_back(id);
      EXPECT_EQ(sent.find(stop), std::string::npos) << stop;
      EXPECT_EQ(s.tokenizer.decode(so_far).rfind(sent, 0), 0u);  // always a prefix of the text
    }
    const size_t at = full.find(stop);
    const std::string final_text = at == std::string::npos ? full : full.substr(0, at);
    sent += streamer.finish(final_text);
    EXPECT_EQ(sent, final_text) << stop;
  }
  // Half a UTF-8 character is held back until it completes.
  TextStreamer streamer(s.tokenizer, {});
  const std::vector<int32_t> e_acute = s.tokenizer.encode("\xc3\xa9");
  ASSERT_EQ(e_acute.size(), 2u);  // byte-level: one token per byte
  EXPECT_EQ(streamer.push(e_acute[0]), "");
  EXPECT_EQ(streamer.push(e_acute[1]), "\xc3\xa9");
}

TEST(ApiKey, ConstantTimeCompareIsExact) {
  EXPECT_TRUE(constant_time_equal("secret", "secret"));
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_FALSE(constant_time_equal("secret", "secreT"));
  EXPECT_FALSE(constant_time_equal("secret", "secret2"));
  EXPECT_FALSE(constant_time_equal("", "x"));
  EXPECT_FALSE(constant_time_equal(std::string("a\0b", 3), "a"));
}

TEST(Metrics, HistogramBucketsQuantilesAndText) {
  Histogram h({0.1, 0.2, 0.5});
  for (double v : {0.05, 0.15, 0.15, 0.3, 1.0}) h.observe(v);
  EXPECT_EQ(h.count(), 5);
  EXPECT_NEAR(h.quantile(0.5), 0.175, 1e-9);  // the 2.5th of 5 falls half-way into (0.1, 0.2]
  std::string text;
  h.render("x_seconds", "help", text);
  EXPECT_NE(text.find("x_seconds_bucket{le=\"0.2\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_seconds_bucket{le=\"+Inf\"} 5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_seconds_count 5\n"), std::string::npos) << text;
  ServeMetrics m;
  m.count_request("/v1/models", 200);
  const std::string page = m.render(EngineSnapshot{});
  EXPECT_NE(page.find("vlm_requests_total{endpoint=\"/v1/models\",status=\"200\"} 1"), std::string::npos);
  EXPECT_NE(page.find("vlm_kv_blocks_free 0"), std::string::npos);
  EXPECT_NE(page.find("# TYPE vlm_time_to_first_token_seconds histogram"), std::string::npos);
}

// --allow-remote-images: URLs are kept by the parser and fetched with byte and time limits through a loopback
// server; without the flag they are refused.
TEST(RemoteImages, FetchedWithinLimitsOrRefusedNamingTheField) {
  testing::HttpTestServer http;
  auto png = encode_png(synth_shapes_sample(1, 2, 16).image);
  ASSERT_TRUE(png.ok());
  http.add_file("/a.png", *png);
  http.add_file("/big.png", std::vector<uint8_t>(5000, 7));
  RequestLimits limits;
  limits.allow_remote_images = true;
  RemoteImageOptions o;
  o.max_bytes = 4000;
  o.timeout_s = 1;
  auto request = [&](const std::string& url, ApiRequest* r) {
    const std::string body = chat_body("", "[{\"type\": \"image_url\", \"image_url\": {\"url\": \"" + url + "\"}}]");
    const ApiError e = parse_api_request(Endpoint::chat, body, limits, r);
    EXPECT_TRUE(e.ok()) << e.message;
    return fetch_remote_images(r, o);
  };
  ApiRequest r;
  ASSERT_TRUE(request(http.url("/a.png"), &r).ok());
  EXPECT_EQ(r.images[0].bytes, std::string(png->begin(), png->end()));
  const ApiError missing = request(http.url("/missing.png"), &r);
  EXPECT_EQ(missing.status, 400);
  EXPECT_EQ(missing.code, "image_fetch_failed");
  EXPECT_EQ(missing.param, "messages[0].content[0].image_url.url");
  EXPECT_EQ(request(http.url("/big.png"), &r).status, 413);
  testing::HttpFaults stall;
  stall.stall_requests = 1;
  stall.stall_after_bytes = 10;
  stall.stall_ms = 4000;
  http.set_faults(stall);
  const auto t0 = std::chrono::steady_clock::now();
  const ApiError slow = request(http.url("/a.png"), &r);
  EXPECT_EQ(slow.status, 400) << slow.message;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 3.5);
  limits.allow_remote_images = false;
  ApiRequest refused;
  const ApiError e = parse_api_request(
      Endpoint::chat,
      chat_body("", "[{\"type\": \"image_url\", \"image_url\": {\"url\": \"" + http.url("/a.png") + "\"}}]"), limits,
      &refused);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "remote_image_refused");
}

}  // namespace
}  // namespace vlm::serve

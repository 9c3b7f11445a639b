// Malformed and unsupported tokenizer.json files: each must fail with the right StatusCode and a message naming
// the file and the field, never crash. Random corruptions of a valid file must also fail (or load) cleanly.
#include <gtest/gtest.h>

#include <functional>

#include "core/philox.h"
#include "data/tokenizer/fixtures.h"
#include "data/tokenizer/tokenizer.h"

namespace vlm {
namespace {

using nlohmann::json;

struct BadCase {
  const char* name;
  std::function<void(json&)> mutate;
  StatusCode code;
  const char* needle;  // must appear in the message
};

void expect_error(const std::string& text, StatusCode code, const std::string& needle, const std::string& label) {
  Expected<Tokenizer> t = Tokenizer::from_json_text(text, "bad_tokenizer.json");
  ASSERT_FALSE(t.ok()) << label << ": loaded although malformed";
  EXPECT_EQ(t.status().code(), code) << label << ": " << t.status().to_string();
  EXPECT_NE(t.status().message().find("bad_tokenizer.json"), std::string::npos) << label << ": " << t.status().to_string();
  EXPECT_NE(t.status().message().find(needle), std::string::npos)
      << label << ": expected '" << needle << "' in " << t.status().to_string();
}

TEST(TokenizerErrors, NotJson) {
  expect_error("{\"model\": {", StatusCode::parse_error, "not valid JSON", "truncated");
  expect_error("this is not json", StatusCode::parse_error, "not valid JSON", "text");
  expect_error("[1, 2, 3]", StatusCode::parse_error, "root", "array root");
  expect_error("", StatusCode::parse_error, "not valid JSON", "empty");
}

TEST(TokenizerErrors, MalformedFields) {
  const StatusCode P = StatusCode::parse_error, U = StatusCode::unsupported;
  std::vector<BadCase> cases = {
      {"missing model", [](json& j) { j.erase("model"); }, P, "model: missing"},
      {"null model", [](json& j) { j["model"] = nullptr; }, P, "model: missing"},
      {"model not object", [](json& j) { j["model"] = 3; }, P, "model"},
      {"unknown model type", [](json& j) { j["model"]["type"] = "Frobnicate"; }, P, "model.type"},
      {"wordpiece", [](json& j) { j["model"]["type"] = "WordPiece"; }, U, "model.type"},
      {"unigram", [](json& j) { j["model"]["type"] = "Unigram"; }, U, "Unigram"},
      {"missing vocab", [](json& j) { j["model"].erase("vocab"); }, P, "model.vocab"},
      {"vocab not object", [](json& j) { j["model"]["vocab"] = json::array({"a"}); }, P, "model.vocab"},
      {"vocab id not integer", [](json& j) { j["model"]["vocab"]["a"] = "two"; }, P, "model.vocab['a']"},
      {"negative id", [](json& j) { j["model"]["vocab"]["a"] = -1; }, P, "out of range"},
      {"huge id", [](json& j) { j["model"]["vocab"]["a"] = 1 << 30; }, P, "out of range"},
      {"duplicate id", [](json& j) { j["model"]["vocab"]["zz"] = 4; }, P, "duplicate id 4"},
      {"merge unknown left", [](json& j) { j["model"]["merges"].push_back("q b"); }, P, "model.merges[6]: unknown token 'q'"},
      {"merge unknown right", [](json& j) { j["model"]["merges"].push_back("a z"); }, P, "unknown token 'z'"},
      {"merged token missing", [](json& j) { j["model"]["merges"].push_back("a d"); }, P, "merged token 'ad'"},
      {"merge without space", [](json& j) { j["model"]["merges"][0] = "ab"; }, P, "model.merges[0]"},
      {"merge wrong shape", [](json& j) { j["model"]["merges"][1] = json::array({"a"}); }, P, "model.merges[1]"},
      {"merges not array", [](json& j) { j["model"]["merges"] = "a b"; }, P, "model.merges"},
      {"unk token missing", [](json& j) { j["model"]["unk_token"] = "<unk>"; }, P, "unk_token"},
      {"dropout", [](json& j) { j["model"]["dropout"] = 0.1; }, U, "model.dropout"},
      {"byte fallback wrong type", [](json& j) { j["model"]["byte_fallback"] = "yes"; }, P, "model.byte_fallback"},
      {"subword prefix", [](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }, U, "continuing_subword_prefix"},
      {"bool field wrong type", [](json& j) { j["model"]["fuse_unk"] = "yes"; }, P, "model.fuse_unk"},
      {"added token no id", [](json& j) { j["added_tokens"][1].erase("id"); }, P, "added_tokens[1].id"},
      {"added token no content", [](json& j) { j["added_tokens"][0].erase("content"); }, P, "added_tokens[0].content"},
      {"added token empty", [](json& j) { j["added_tokens"][0]["content"] = ""; }, P, "added_tokens[0].content"},
      {"added token id conflict", [](json& j) { j["added_tokens"][1]["id"] = 2; }, P, "added_tokens[1]"},
      {"added token duplicate id",
       [](json& j) {
         j["added_tokens"].push_back({{"id", 16}, {"content", "<x>"}, {"special", true}});
         j["added_tokens"].push_back({{"id", 16}, {"content", "<y>"}, {"special", true}});
       },
       P, "added_tokens[3].id: duplicate id 16"},
      {"sparse added id", [](json& j) { j["added_tokens"][0]["id"] = 1 << 20; }, P, "out of range"},
      {"sparse vocab id", [](json& j) { j["model"]["vocab"]["zz"] = 1 << 20; }, P, "model.vocab: id 1048576"},
      {"added token bad id", [](json& j) { j["added_tokens"][0]["id"] = -5; }, P, "added_tokens[0].id"},
      {"added tokens not array", [](json& j) { j["added_tokens"] = json::object(); }, P, "added_tokens"},
      {"normalizer lowercase", [](json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }, U, "normalizer.type"},
      {"normalizer no type", [](json& j) { j["normalizer"] = json::object(); }, P, "normalizer.type"},
      {"pre-tokenizer whitespace", [](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, U, "pre_tokenizer.type"},
      {"split regex does not compile",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers",
                                {{{"type", "Split"}, {"pattern", {{"Regex", "(\\w+"}}}, {"behavior", "Isolated"}},
                                 {{"type", "ByteLevel"}, {"use_regex", false}}}}};
       },
       P, "pre_tokenizer.pretokenizers[0].pattern.Regex: regex '(\\w+' does not compile at offset"},
      {"normalizer NFKD", [](json& j) { j["normalizer"] = {{"type", "NFKD"}}; }, U, "normalizer 'NFKD' is not supported"},
      {"replace normalizer no content",
       [](json& j) { j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}}; }, P, "normalizer.content"},
      {"replace normalizer bad regex",
       [](json& j) { j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", "[a-"}}}, {"content", "x"}}; },
       P, "normalizer.pattern.Regex"},
      {"metaspace bad scheme",
       [](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}, {"prepend_scheme", "sometimes"}}; }, P,
       "pre_tokenizer.prepend_scheme"},
      {"strip decoder no count",
       [](json& j) { j["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", -1}, {"stop", 0}}; }, P,
       "decoder.start"},
      {"split bad behavior",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers",
                                {{{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}},
                                 {{"type", "ByteLevel"}}}}};
       },
       P, "pretokenizers[0].behavior"},
      {"decoder wordpiece", [](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, U, "decoder.type"},
      {"post processor unknown", [](json& j) { j["post_processor"] = {{"type", "Mystery"}}; }, U, "post_processor.type"},
      {"template unknown token",
       [](json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}}},
                                {"special_tokens", json::object()}};
       },
       P, "post_processor.special_tokens"},
      {"template id out of vocab",
       [](json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}}},
                                {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {999}}, {"tokens", {"<s>"}}}}}}};
       },
       P, "post_processor"},
  };
  for (const BadCase& c : cases) {
    json j = vlm::testing::tiny_tokenizer_json();
    c.mutate(j);
    expect_error(j.dump(), c.code, c.needle, c.name);
  }
}

TEST(TokenizerErrors, LoadMissingFileNamesIt) {
  Expected<Tokenizer> t = Tokenizer::load("/nonexistent/dir/tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::not_found);
  EXPECT_NE(t.status().message().find("/nonexistent/dir/tokenizer.json"), std::string::npos);
}

TEST(TokenizerErrors, RandomCorruptionsFailCleanly) {
  const std::string good = vlm::testing::tiny_tokenizer_json().dump();
  ASSERT_TRUE(Tokenizer::from_json_text(good, "good.json").ok());
  Philox rng(1234);
  int failed = 0, loaded = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text = good;
    int edits = 1 + static_cast<int>(rng.uniform_int(4));
    for (int e = 0; e < edits; ++e) {
      size_t pos = rng.uniform_int(text.size());
      switch (rng.uniform_int(3)) {
        case 0: text[pos] = static_cast<char>(rng.next_u32() & 0xFF); break;
        case 1: text.erase(pos, 1 + rng.uniform_int(8)); break;
        default: text.insert(pos, 1, "{}[]\",:0-9a \\"[rng.uniform_int(14)]); break;
      }
    }
    Expected<Tokenizer> t = Tokenizer::from_json_text(text, "fuzz.json");
    if (!t.ok()) {
      ++failed;
      EXPECT_NE(t.status().message().find("fuzz.json"), std::string::npos) << t.status().to_string();
      continue;
    }
    ++loaded;
    std::vector<int32_t> ids = t->encode("ab c<image> dd 12 \xFF");
    for (int32_t id : ids) EXPECT_LT(id, t->vocab_size());
    (void)t->decode(ids);
  }
  EXPECT_GT(failed, 1000);  // most corruptions break the file
  EXPECT_GT(loaded + failed, 2999);
}

}  // namespace
}  // namespace vlm

// Parity with Hugging Face `tokenizers` on real tokenizer.json files (Llama-3, Qwen3, SmolVLM/SmolLM2, Mistral):
// every text of fixtures/hf/corpus.json encodes to the reference ids (with and without the post-processor's
// special tokens) and the ids decode to the reference strings.
#include <gtest/gtest.h>

#include <map>

#include "data/tokenizer/hf_fixtures.h"
#include "data/tokenizer/tokenizer.h"

namespace vlm {
namespace {

using Ids = std::vector<int32_t>;
using vlm::testing::hf_json;

// "" when equal, else where the two id lists first differ, with the tokens around it.
std::string first_difference(const Tokenizer& tok, const Ids& got, const Ids& want) {
  if (got == want) return "";
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  auto show = [&](const Ids& ids) {
    std::string s;
    for (size_t k = i >= 2 ? i - 2 : 0; k < ids.size() && k < i + 4; ++k) s += str(ids[k], ":'", tok.id_to_token(ids[k]), "' ");
    return s;
  };
  return str("first difference at ", i, " (got ", got.size(), " ids, want ", want.size(), "): got ", show(got),
             "| want ", show(want));
}

const Tokenizer& family_tokenizer(const std::string& family) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(family);
  if (it == cache.end()) {
    Expected<Tokenizer> t = Tokenizer::from_json_text(vlm::testing::hf_tokenizer_json(family), family + "/tokenizer.json");
    VLM_CHECK(t.ok(), t.status().to_string());
    it = cache.emplace(family, std::move(t).value()).first;
  }
  return it->second;
}

class HfTokenizerParity : public ::testing::TestWithParam<std::string> {};

TEST_P(HfTokenizerParity, EncodesAndDecodesLikeTokenizers) {
  const std::string family = GetParam();
  const Tokenizer& tok = family_tokenizer(family);
  auto expected = hf_json("expected/tokenize_" + family + ".json");
  ASSERT_EQ(expected["tokenizer"], family);
  size_t n = 0;
  for (const auto& c : expected["cases"]) {
    std::string text = c["text"];
    ++n;
    EXPECT_EQ(first_difference(tok, tok.encode(text), c["ids"].get<Ids>()), "") << family << " text: " << text;
    EXPECT_EQ(first_difference(tok, tok.encode(text, /*add_special_tokens=*/true), c["ids_with_special"].get<Ids>()), "")
        << family << " text: " << text;
    Ids ids = c["ids"].get<Ids>();
    EXPECT_EQ(tok.decode(ids), c["decoded"].get<std::string>()) << family << " text: " << text;
    EXPECT_EQ(tok.decode(ids, /*skip_special_tokens=*/true), c["decoded_skip_special"].get<std::string>())
        << family << " text: " << text;
  }
  EXPECT_EQ(n, hf_json("corpus.json")["texts"].size());
}

INSTANTIATE_TEST_SUITE_P(Families, HfTokenizerParity, ::testing::ValuesIn(vlm::testing::hf_families()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace vlm

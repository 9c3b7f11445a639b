// Tokenizer behaviour on the tiny hand-written tokenizer (fixtures.cpp), whose expected ids are derived by hand
// from its merge ranks: BPE order, added tokens and their strip/single-word rules, NFC, ignore_merges,
// post-processor templates, decode, save/load, thread safety.
#include "data/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <thread>

#include "data/tokenizer/fixtures.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

Tokenizer make(const json& j) {
  Expected<Tokenizer> t = Tokenizer::from_json_text(j.dump(), "tiny.json");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t).value() : Tokenizer();
}

TEST(TinyTokenizer, MergesApplyInRankOrder) {
  Tokenizer t = make(vlm::testing::tiny_tokenizer_json());
  ASSERT_TRUE(t.loaded());
  EXPECT_EQ(t.encode("abc"), (Ids{11}));       // a b c -> ab c (rank 0) -> abc (rank 2)
  EXPECT_EQ(t.encode("bcab"), (Ids{10, 9}));   // (a,b) rank 0 first, then (b,c) rank 1; (bc,ab) has no merge
  EXPECT_EQ(t.encode(" ab"), (Ids{12}));       // Ġ a b -> Ġ ab -> Ġab
  EXPECT_EQ(t.encode("ccc"), (Ids{13, 4}));    // equal ranks: the leftmost pair merges first
  EXPECT_EQ(t.encode("dddd"), (Ids{14, 14}));
  EXPECT_EQ(t.encode("abcd"), (Ids{11, 5}));   // abcd is in the vocabulary but no merge reaches it
  EXPECT_EQ(t.encode("a1 22"), (Ids{2, 7, 6, 8, 8}));  // pieces: "a" "1" " 22"
  EXPECT_EQ(t.encode(""), Ids{});
}

TEST(TinyTokenizer, SpecialTokensInTextAreMatchedFirst) {
  Tokenizer t = make(vlm::testing::tiny_tokenizer_json());
  EXPECT_EQ(t.encode("ab<image>c<|endoftext|>"), (Ids{9, 1, 4, 0}));
  EXPECT_EQ(t.encode("<image><image>"), (Ids{1, 1}));
  EXPECT_EQ(t.encode(" <image> ab"), (Ids{6, 1, 12}));
  EXPECT_EQ(t.decode({11, 1, 12}), "abc<image> ab");
  EXPECT_EQ(t.decode({11, 1, 12}, /*skip_special_tokens=*/true), "abc ab");
  EXPECT_TRUE(t.is_special(0));
  EXPECT_TRUE(t.is_special(1));
  EXPECT_FALSE(t.is_special(2));
  EXPECT_EQ(t.special_ids(), (Ids{0, 1}));
  EXPECT_EQ(t.token_to_id("<image>"), 1);
  EXPECT_EQ(t.token_to_id("\xC4\xA0" "ab"), 12);
  EXPECT_EQ(t.token_to_id("zzz"), std::nullopt);
  EXPECT_EQ(t.id_to_token(12), "\xC4\xA0" "ab");
  EXPECT_EQ(t.id_to_token(99), "");
  EXPECT_EQ(t.vocab_size(), 16);
}

TEST(TinyTokenizer, ConventionalIds) {
  json j = vlm::testing::tiny_tokenizer_json();
  Tokenizer t = make(j);
  EXPECT_EQ(t.bos_id(), 0);  // <|endoftext|> is both, as in GPT-2 and SmolLM2
  EXPECT_EQ(t.eos_id(), 0);
  EXPECT_EQ(t.pad_id(), std::nullopt);
  j["added_tokens"].push_back({{"id", 16}, {"content", "<pad>"}, {"special", true}});
  EXPECT_EQ(make(j).pad_id(), 16);
}

TEST(TinyTokenizer, LstripRstripAndSingleWord) {
  json j = vlm::testing::tiny_tokenizer_json();
  j["added_tokens"][1]["lstrip"] = true;
  j["added_tokens"][1]["rstrip"] = true;
  j["added_tokens"].push_back({{"id", 16}, {"content", "dab"}, {"single_word", true}, {"lstrip", false},
                               {"rstrip", false}, {"normalized", false}, {"special", false}});
  Tokenizer t = make(j);
  EXPECT_EQ(t.encode("ab  <image>  ab"), (Ids{9, 1, 9}));  // whitespace on both sides absorbed
  EXPECT_EQ(t.encode("dab"), (Ids{16}));
  EXPECT_EQ(t.encode("c dab"), (Ids{4, 6, 16}));
  EXPECT_EQ(t.encode("ddab"), (Ids{14, 9}));  // not a single word: plain BPE (d d a b -> d d ab -> dd ab)
  EXPECT_FALSE(t.is_special(16));
  EXPECT_EQ(t.vocab_size(), 17);
  EXPECT_EQ(t.decode({16, 1}, true), "dab");
}

TEST(TinyTokenizer, IgnoreMerges) {
  json j = vlm::testing::tiny_tokenizer_json();
  j["model"]["ignore_merges"] = true;
  Tokenizer t = make(j);
  EXPECT_EQ(t.encode("abcd"), (Ids{15}));
  EXPECT_EQ(t.encode("abc"), (Ids{11}));
  EXPECT_EQ(t.encode("ccc"), (Ids{13, 4}));
}

TEST(TinyTokenizer, NfcNormalizer) {
  json j = vlm::testing::tiny_tokenizer_json();
  // é is C3 A9, spelled "Ã©" in the byte-level alphabet.
  j["model"]["vocab"]["\xC3\x83"] = 16;
  j["model"]["vocab"]["\xC2\xA9"] = 17;
  j["model"]["vocab"]["\xC3\x83\xC2\xA9"] = 18;
  j["model"]["merges"].push_back("\xC3\x83 \xC2\xA9");
  j["normalizer"] = {{"type", "NFC"}};
  Tokenizer t = make(j);
  EXPECT_EQ(t.encode("\xC3\xA9"), (Ids{18}));
  EXPECT_EQ(t.encode("e\xCC\x81"), (Ids{18}));  // e + combining acute composes to é first
  j["normalizer"] = nullptr;
  Tokenizer raw = make(j);
  EXPECT_EQ(raw.encode("e\xCC\x81"), Ids{});  // no NFC: e, CC, 81 are not in this vocabulary (dropped, as HF)
}

TEST(TinyTokenizer, TemplatePostProcessorAddsSpecialTokensOnRequest) {
  json j = vlm::testing::tiny_tokenizer_json();
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "<image>"}, {"type_id", 0}}}}})},
      {"pair", json::array()},
      {"special_tokens",
       {{"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", {0}}, {"tokens", {"<|endoftext|>"}}}},
        {"<image>", {{"id", "<image>"}, {"ids", {1}}, {"tokens", {"<image>"}}}}}}};
  Tokenizer t = make(j);
  EXPECT_EQ(t.encode("ab"), (Ids{9}));
  EXPECT_EQ(t.encode("ab", /*add_special_tokens=*/true), (Ids{0, 9, 1}));
  EXPECT_EQ(t.bos_id(), 0);
}

TEST(TinyTokenizer, SequencePreTokenizerWithDigits) {
  json j = vlm::testing::tiny_tokenizer_json();
  j["model"]["vocab"]["12"] = 16;
  j["model"]["merges"].push_back("1 2");
  Tokenizer plain = make(j);
  EXPECT_EQ(plain.encode("12"), (Ids{16}));
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}},
                                           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}};
  Tokenizer digits = make(j);
  EXPECT_EQ(digits.encode("12"), (Ids{7, 8}));
  EXPECT_EQ(digits.encode("a 12"), (Ids{2, 6, 7, 8}));
}

TEST(TinyTokenizer, SaveLoadRoundTrip) {
  json j = vlm::testing::tiny_tokenizer_json();
  j["normalizer"] = {{"type", "NFC"}};
  j["model"]["ignore_merges"] = true;
  Tokenizer t = make(j);
  std::string path = vlm::testing::scratch_dir("tok_save") + "/tokenizer.json";
  ASSERT_TRUE(t.save(path).ok());
  Expected<Tokenizer> back = Tokenizer::load(path.substr(0, path.rfind('/')));  // a directory works too
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  for (const char* s : {"abc", "bcab", " ab<image>ccc", "abcd dddd", "a1 22<|endoftext|>"}) {
    EXPECT_EQ(back->encode(s), t.encode(s)) << s;
  }
  EXPECT_EQ(back->to_json_text(), t.to_json_text());
  json saved = json::parse(back->to_json_text());
  for (const char* key : {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
                          "post_processor", "decoder", "model"}) {
    EXPECT_TRUE(saved.contains(key)) << key;
  }
  EXPECT_EQ(saved["model"]["type"], "BPE");
  EXPECT_EQ(saved["model"]["merges"][3], "\xC4\xA0 ab");
  EXPECT_EQ(saved["model"]["vocab"]["abcd"], 15);
  EXPECT_EQ(saved["normalizer"]["type"], "NFC");
  EXPECT_EQ(saved["model"]["ignore_merges"], true);
}

TEST(TinyTokenizer, ConcurrentEncodesAgree) {
  Tokenizer t = make(vlm::testing::tiny_tokenizer_json());
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) {
    std::string s;
    for (int k = 0; k <= i % 13; ++k) s += std::string("ab c dd<image>12 abc ").substr((i + k) % 7, 1 + k % 5);
    texts.push_back(s);
  }
  std::vector<Ids> want;
  for (const std::string& s : texts) want.push_back(Tokenizer(t).encode(s));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      for (int rep = 0; rep < 50; ++rep) {
        for (size_t i = 0; i < texts.size(); ++i) mismatches[th] += t.encode(texts[i]) != want[i];
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(TinyTokenizer, ArbitraryBytesNeverCrash) {
  Tokenizer t = make(vlm::testing::tiny_tokenizer_json());
  Philox rng(7);
  for (int i = 0; i < 500; ++i) {
    std::string s;
    int n = static_cast<int>(rng.next_u32() % 40);
    for (int k = 0; k < n; ++k) s.push_back(static_cast<char>(rng.next_u32() & 0xFF));
    Ids ids = t.encode(s);
    for (int32_t id : ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, t.vocab_size());
    }
    (void)t.decode(ids);
  }
}

}  // namespace
}  // namespace vlm

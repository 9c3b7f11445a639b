// BPE training: hand-derived merges on tiny corpora, deterministic tie-breaking, frequent words becoming single
// tokens, special tokens at ids 0..k-1, digits option, option validation, and speed on ~100k captions.
#include "data/tokenizer/bpe_trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

#include <nlohmann/json.hpp>

#include "core/philox.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

using Ids = std::vector<int32_t>;
const std::string kSpace = "\xC4\xA0";  // Ġ

TEST(BpeTrainer, HandDerivedMerges) {
  // Words: "ab" x1, " ab" x2, "abc" x1. Pair counts: (a,b) 4, (Ġ,a) 2, (b,c) 1.
  // Merge 1: a+b. Then (Ġ,ab) 2 and (ab,c) 1. Merge 2: Ġ+ab. Merge 3: ab+c.
  BpeTrainOptions o;
  o.vocab_size = 256 + 3;
  o.min_frequency = 1;
  Expected<Tokenizer> t = train_bpe({"ab ab ab", "abc"}, o);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->vocab_size(), 259);
  EXPECT_EQ(t->token_to_id("ab"), 256);
  EXPECT_EQ(t->token_to_id(kSpace + "ab"), 257);
  EXPECT_EQ(t->token_to_id("abc"), 258);
  EXPECT_EQ(t->encode("abc ab"), (Ids{258, 257}));
  // " abc" -> Ġ a b c -> Ġ ab c -> Ġab c (rank 1 before rank 2): two tokens.
  Ids ids = t->encode(" abc");
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], 257);
  EXPECT_EQ(t->id_to_token(ids[1]), "c");
  // The first 256 ids are the byte symbols in GPT-2's order: '!' first, Ġ (space) at 188 + 32 = 220.
  EXPECT_EQ(t->token_to_id("!"), 0);
  EXPECT_EQ(t->token_to_id(kSpace), 220);
  nlohmann::json j = nlohmann::json::parse(t->to_json_text());
  EXPECT_EQ(j["model"]["merges"], nlohmann::json({"a b", kSpace + " ab", "ab c"}));
}

TEST(BpeTrainer, TiesGoToTheSmallerPair) {
  BpeTrainOptions o;
  o.vocab_size = 256 + 1;
  o.min_frequency = 1;
  Expected<Tokenizer> t = train_bpe({"zw", "xy"}, o);  // (z,w) and (x,y) both occur once; x < z
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->token_to_id("xy").has_value());
  EXPECT_FALSE(t->token_to_id("zw").has_value());
}

TEST(BpeTrainer, MinFrequencyStopsEarly) {
  BpeTrainOptions o;
  o.vocab_size = 1000;
  o.min_frequency = 3;
  Expected<Tokenizer> t = train_bpe({"ab ab", "cd cd cd"}, o);
  ASSERT_TRUE(t.ok());
  // (c,d) 3 and then (Ġ,cd) 2 < 3: one merge only.
  EXPECT_EQ(t->vocab_size(), 257);
  EXPECT_TRUE(t->token_to_id("cd").has_value());
}

std::vector<std::string> synthetic_captions(size_t n, uint64_t seed) {
  const char* adjectives[] = {"red", "small", "happy", "old", "bright", "wooden", "fluffy", "green", "tall", "dark"};
  const char* nouns[] = {"cat", "dog", "car", "house", "tree", "bird", "horse", "boat", "chair", "flower", "child"};
  const char* places[] = {"on the beach", "in the park", "near a river", "on a table", "in the snow",
                          "under a bridge", "at night", "in a kitchen"};
  const char* starts[] = {"A photo of a", "An image of a", "A picture showing a", "Close-up of a"};
  Philox rng(seed);
  std::vector<std::string> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    std::string s = std::string(starts[rng.uniform_int(4)]) + " " + adjectives[rng.uniform_int(10)] + " " +
                    nouns[rng.uniform_int(11)] + " " + places[rng.uniform_int(8)];
    if (rng.uniform_int(4) == 0) s += ", taken in " + std::to_string(1990 + rng.uniform_int(35));
    s += ".";
    out.push_back(std::move(s));
  }
  return out;
}

TEST(BpeTrainer, FrequentWordsBecomeSingleTokensAndTrainingIsDeterministic) {
  std::vector<std::string> corpus = synthetic_captions(100000, 5);
  BpeTrainOptions o;
  o.vocab_size = 1500;
  o.special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<pad>"};
  auto start = std::chrono::steady_clock::now();
  Expected<Tokenizer> t = train_bpe(corpus, o);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  std::printf("[ info ] trained %d ids on %zu captions in %.2f s\n", t->vocab_size(), corpus.size(), seconds);
  EXPECT_LE(t->vocab_size(), 1500);

  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(t->token_to_id(o.special_tokens[i]), i);
    EXPECT_TRUE(t->is_special(i));
  }
  EXPECT_EQ(t->pad_id(), 4);
  for (const char* word : {" photo", " cat", " horse", " beach", " flower", " kitchen", " fluffy", " bridge"}) {
    EXPECT_EQ(t->encode(word).size(), 1u) << word;
  }
  Ids ids = t->encode("<|im_start|>A photo of a red cat on the beach.<|im_end|>");
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  EXPECT_EQ(ids.size(), 12u);  // 2 special tokens + 10 pieces ("A", " photo", ..., "."), each now one token
  EXPECT_EQ(t->decode(ids), "<|im_start|>A photo of a red cat on the beach.<|im_end|>");
  EXPECT_EQ(t->decode(ids, true), "A photo of a red cat on the beach.");
  for (const std::string& s : {std::string("Unseen wørds ünd 日本 \xFF\xFE bytes"), corpus[17]}) {
    EXPECT_EQ(t->decode(t->encode(s)), s);
  }

  Expected<Tokenizer> again = train_bpe(corpus, o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->to_json_text(), t->to_json_text());

  std::string path = vlm::testing::scratch_dir("bpe_train") + "/tokenizer.json";
  ASSERT_TRUE(t->save(path).ok());
  Expected<Tokenizer> back = Tokenizer::load(path);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  for (size_t i = 0; i < 200; ++i) EXPECT_EQ(back->encode(corpus[i]), t->encode(corpus[i]));
}

// Captions over a 5000-word pseudo-word lexicon drawn with Zipf frequencies: enough distinct words that the
// vocabulary fills up, as with real captions.
TEST(BpeTrainer, FillsVocabularyOnZipfCorpusQuickly) {
  const char* syllables[] = {"ka", "to", "ri", "ne", "su", "mo", "la", "pi", "de", "vo", "shi", "ga", "ru", "be",
                             "no", "ta", "mi", "ko", "re", "zu", "fa", "el", "an", "or", "ist"};
  Philox rng(11);
  std::vector<std::string> lexicon;
  for (int i = 0; i < 5000; ++i) {
    std::string w;
    int n = 1 + static_cast<int>(rng.uniform_int(4));
    for (int k = 0; k < n; ++k) w += syllables[rng.uniform_int(25)];
    lexicon.push_back(w);
  }
  std::vector<double> cdf(lexicon.size());
  double sum = 0;
  for (size_t i = 0; i < lexicon.size(); ++i) cdf[i] = (sum += 1.0 / static_cast<double>(i + 1));
  auto pick = [&] {
    double u = rng.uniform() * sum;
    return lexicon[std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin()];
  };
  std::vector<std::string> corpus;
  for (int i = 0; i < 100000; ++i) {
    std::string s = pick();
    for (int k = 0; k < 7; ++k) s += str(" ", pick());
    corpus.push_back(s + ".");
  }
  BpeTrainOptions o;
  o.vocab_size = 2000;
  o.special_tokens = {"<|endoftext|>"};
  auto start = std::chrono::steady_clock::now();
  Expected<Tokenizer> t = train_bpe(corpus, o);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(t.ok());
  std::printf("[ info ] trained %d ids on %zu Zipf captions in %.2f s\n", t->vocab_size(), corpus.size(), seconds);
  EXPECT_EQ(t->vocab_size(), 2000);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(t->encode(str(" ", lexicon[i])).size(), 1u) << lexicon[i];
  EXPECT_EQ(t->decode(t->encode(corpus[3])), corpus[3]);
}

TEST(BpeTrainer, IndividualDigits) {
  std::vector<std::string> corpus(2000, "in 2024 and 2024 again");
  BpeTrainOptions o;
  o.vocab_size = 400;
  o.individual_digits = true;
  Expected<Tokenizer> t = train_bpe(corpus, o);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->encode("2024").size(), 4u);
  EXPECT_EQ(t->encode(" again").size(), 1u);
  o.individual_digits = false;
  Expected<Tokenizer> u = train_bpe(corpus, o);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->encode(" 2024").size(), 1u);
}

TEST(BpeTrainer, RejectsBadOptions) {
  BpeTrainOptions o;
  o.vocab_size = 100;
  Expected<Tokenizer> t = train_bpe({"x"}, o);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(t.status().message().find("vocab_size"), std::string::npos);

  o.vocab_size = 1000;
  o.special_tokens = {"<a>", "<a>"};
  t = train_bpe({"x"}, o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("special_tokens[1]"), std::string::npos);

  o.special_tokens = {""};
  EXPECT_FALSE(train_bpe({"x"}, o).ok());
  o.special_tokens = {"\xFF"};
  EXPECT_FALSE(train_bpe({"x"}, o).ok());
  o.special_tokens = {"!"};  // the byte-level spelling of '!'
  EXPECT_FALSE(train_bpe({"x"}, o).ok());
}

TEST(BpeTrainer, EmptyCorpusGivesByteTokenizer) {
  BpeTrainOptions o;
  o.special_tokens = {"<pad>"};
  Expected<Tokenizer> t = train_bpe({}, o);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->vocab_size(), 257);
  EXPECT_EQ(t->encode("hi").size(), 2u);
  EXPECT_EQ(t->decode(t->encode("hi \xC3\xA9")), "hi \xC3\xA9");
}

}  // namespace
}  // namespace vlm

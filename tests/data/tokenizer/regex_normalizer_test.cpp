// The PCRE2 path (regex.h) against the hand-written GPT-2 / Llama-3 / Qwen2 scanners on random text (two
// independent implementations of the same patterns must split identically), plus the SentencePiece-style steps:
// normalizers (Prepend, Replace, Strip), the Metaspace pre-tokenizer and the decoder chain, on hand-derived cases.
#include <gtest/gtest.h>

#include "core/philox.h"
#include "data/tokenizer/decoder.h"
#include "data/tokenizer/normalizer.h"
#include "data/tokenizer/pre_tokenizer.h"
#include "data/tokenizer/regex.h"
#include "data/tokenizer/tokenizer.h"

namespace vlm::tok {
namespace {

using V = std::vector<std::string>;

std::shared_ptr<const Regex> compiled(const std::string& pattern) {
  Expected<std::shared_ptr<const Regex>> re = Regex::compile(pattern);
  VLM_CHECK(re.ok(), re.status().to_string());
  return std::move(re).value();
}

// Random text over an alphabet that exercises every alternative of the patterns: letters of several scripts,
// digits (ASCII and others), contractions in both cases, whitespace runs with newlines, punctuation, emoji.
std::string random_text(Philox& rng) {
  static const char* const kParts[] = {"a", "Z", "é", "ß", "Ω", "я", "中", "ア", "1", "7", "٣", "½", " ", "  ", "\t",
                                       "\n", "\r\n", " \n ", "'", "'s", "'T", "'re", "'LL", "'ve", "'d", "'M", ".",
                                       ",", "!?", "-", "_", "🤗", "\xE2\x80\x83", "x", "ab", "The", "0"};
  std::string s;
  int n = static_cast<int>(rng.uniform_int(24));
  for (int i = 0; i < n; ++i) s += kParts[rng.uniform_int(sizeof(kParts) / sizeof(kParts[0]))];
  return s;
}

V pieces(std::string_view text, const std::vector<Span>& spans) {
  V out;
  for (const Span& s : spans) out.emplace_back(text.substr(s.begin, s.end - s.begin));
  return out;
}

TEST(Pcre2Split, AgreesWithHandWrittenScanners) {
  auto gpt2 = compiled(kGpt2Pattern), llama3 = compiled(kLlama3Pattern), gpt4 = compiled(kGpt4Pattern),
       qwen2 = compiled(kQwen2Pattern);
  Philox rng(35);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text = random_text(rng);
    std::vector<Span> want, got;
    split_gpt2(text, want);
    gpt2->find_all(text, got);
    ASSERT_EQ(pieces(text, got), pieces(text, want)) << "gpt2: " << text;
    want.clear();
    got.clear();
    split_llama3(text, 3, want);
    llama3->find_all(text, got);
    ASSERT_EQ(pieces(text, got), pieces(text, want)) << "llama3: " << text;
    got.clear();
    gpt4->find_all(text, got);
    ASSERT_EQ(pieces(text, got), pieces(text, want)) << "gpt4: " << text;
    want.clear();
    got.clear();
    split_llama3(text, 1, want);
    qwen2->find_all(text, got);
    ASSERT_EQ(pieces(text, got), pieces(text, want)) << "qwen2: " << text;
  }
}

TEST(Pcre2Split, OtherPatternsAndInvalidUtf8) {
  std::vector<Span> spans;
  std::string text = "ab  c_d\xff" "e";
  compiled(R"(\w+)")->find_all(text, spans);
  EXPECT_EQ(pieces(text, spans), (V{"ab", "c_d", "e"}));  // the invalid byte matches nothing
  spans.clear();
  compiled("x*")->find_all("axxb", spans);  // empty matches are not reported
  EXPECT_EQ(pieces("axxb", spans), (V{"xx"}));
  EXPECT_FALSE(Regex::compile("(unclosed").ok());
  EXPECT_NE(Regex::compile("[z-a]").status().message().find("offset"), std::string::npos);
}

TEST(Normalizers, SentencePieceSteps) {
  const std::string sp = "\xE2\x96\x81";  // ▁
  std::vector<NormalizerStep> steps(2);
  steps[0].kind = NormalizerKind::prepend;
  steps[0].text = sp;
  steps[1].kind = NormalizerKind::replace;
  steps[1].text = " ";
  steps[1].content = sp;
  EXPECT_EQ(normalize(steps, "Hello  world"), sp + "Hello" + sp + sp + "world");
  EXPECT_EQ(normalize(steps, ""), "");  // Prepend leaves empty text empty
  NormalizerStep strip;
  strip.kind = NormalizerKind::strip;
  strip.strip_left = true;
  EXPECT_EQ(normalize({strip}, " \t\xE2\x80\x83x y  "), "x y  ");
  strip.strip_right = true;
  EXPECT_EQ(normalize({strip}, " x y \n"), "x y");
  EXPECT_EQ(normalize({strip}, "   "), "");
  NormalizerStep re;
  re.kind = NormalizerKind::replace;
  re.regex = compiled(" {2,}");
  re.content = " ";
  EXPECT_EQ(normalize({re}, "a   b  c d"), "a b c d");
}

TEST(Metaspace, PrependSchemesAndSplit) {
  const std::string sp = "\xE2\x96\x81";
  PreTokenizerStep m;
  m.kind = PreTokenizerKind::metaspace;
  V out;
  pre_tokenize({m}, "Hey friend  !", true, out);
  EXPECT_EQ(out, (V{sp + "Hey", sp + "friend", sp, sp + "!"}));
  out.clear();
  m.prepend = PrependScheme::first;
  pre_tokenize({m}, "later text", false, out);  // not at the start of the input: nothing prepended
  EXPECT_EQ(out, (V{"later", sp + "text"}));
  out.clear();
  m.prepend = PrependScheme::never;
  m.metaspace_split = false;
  pre_tokenize({m}, "a b", true, out);
  EXPECT_EQ(out, (V{"a" + sp + "b"}));
}

TEST(Decoders, SentencePieceChain) {
  const std::string sp = "\xE2\x96\x81";
  std::vector<DecoderStep> chain(4);
  chain[0].kind = DecoderKind::replace;
  chain[0].text = sp;
  chain[0].content = " ";
  chain[1].kind = DecoderKind::byte_fallback;
  chain[2].kind = DecoderKind::fuse;
  chain[3].kind = DecoderKind::strip;
  chain[3].content = " ";
  chain[3].start = 1;
  EXPECT_EQ(decode_tokens(chain, {sp + "Hello", sp + "w", "orld", "<0xF0>", "<0x9F>", "<0xA4>", "<0x97>", "!"}),
            "Hello world\xF0\x9F\xA4\x97!");
  EXPECT_EQ(decode_tokens(chain, {"<s>", sp + "Hi"}), "<s> Hi");
  EXPECT_EQ(decode_tokens(chain, {sp + sp + "x"}), " x");  // Strip removes at most `start` characters
  DecoderStep meta;
  meta.kind = DecoderKind::metaspace;
  meta.text = sp;
  EXPECT_EQ(decode_tokens({meta}, {sp + "Hey", sp + "friend"}), "Hey friend");
  meta.prepend = false;
  EXPECT_EQ(decode_tokens({meta}, {sp + "Hey"}), " Hey");
}

// A hand-made SentencePiece-style tokenizer.json (the fuzz seed tests/fuzz/corpus/tokenizer_json/sentencepiece_bpe.json)
// whose encodings follow by hand from its merges: Prepend/Replace normalizers, Metaspace, byte fallback, fused unk.
const char* const kSentencePieceJson = R"json({
  "version": "1.0",
  "added_tokens": [
    {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
  ],
  "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
  "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": true},
  "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                     "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
  "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
  "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
            "vocab": {"<unk>": 0, "<s>": 1, "<0x00>": 2, "<0xC3>": 3, "<0xB6>": 4, "\u2581": 5, "H": 6, "e": 7, "l": 8, "o": 9, "\u2581H": 10, "ll": 11, "\u2581Hell": 12, "He": 13, "\u2581He": 14, "w": 15, "\u2581w": 16, "r": 17, "d": 18},
            "merges": ["\u2581 H", "l l", "\u2581H e", "\u2581He ll", "H e", "\u2581 w"]}
}
)json";

TEST(SentencePieceBpe, HandDerivedEncodings) {
  Expected<Tokenizer> t = Tokenizer::from_json_text(kSentencePieceJson, "sentencepiece_bpe.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  // "▁Hello" merges to ▁Hell + o; "▁wörld": ▁w, ö as the bytes <0xC3> <0xB6>, r, l, d.
  std::vector<int32_t> want = {12, 9, 16, 3, 4, 17, 8, 18};
  EXPECT_EQ(t->encode("Hello w\xC3\xB6rld"), want);
  want.insert(want.begin(), 1);
  EXPECT_EQ(t->encode("Hello w\xC3\xB6rld", /*add_special_tokens=*/true), want);
  EXPECT_EQ(t->decode(want), "<s> Hello w\xC3\xB6rld");
  EXPECT_EQ(t->decode(want, /*skip_special_tokens=*/true), "Hello w\xC3\xB6rld");
  // 'z' has neither a token nor a byte token: unk, and a run of them fuses into one.
  EXPECT_EQ(t->encode("Hzz"), (std::vector<int32_t>{10, 0}));
  // Save and reload keep the pipeline.
  Expected<Tokenizer> again = Tokenizer::from_json_text(t->to_json_text(), "saved.json");
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->encode("Hello w\xC3\xB6rld Hzz"), t->encode("Hello w\xC3\xB6rld Hzz"));
}

}  // namespace
}  // namespace vlm::tok

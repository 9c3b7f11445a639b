// UTF-8 decoding, character classes, the byte-level alphabet, and NFC against Python's unicodedata outputs
// (fixtures/nfc_cases.json, written by dev/fixtures/gen_unicode_tables.py).
#include <gtest/gtest.h>

#include <set>

#include "data/tokenizer/byte_level.h"
#include "data/tokenizer/fixtures.h"
#include "data/tokenizer/unicode.h"

namespace vlm::tok {
namespace {

TEST(Utf8, DecodesValidSequences) {
  std::string s = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80";  // a é 中 😀
  EXPECT_EQ(utf8_decode(s, 0).cp, 'a');
  EXPECT_EQ(utf8_decode(s, 1).cp, 0xE9u);
  EXPECT_EQ(utf8_decode(s, 1).len, 2u);
  EXPECT_EQ(utf8_decode(s, 3).cp, 0x4E2Du);
  EXPECT_EQ(utf8_decode(s, 3).len, 3u);
  EXPECT_EQ(utf8_decode(s, 6).cp, 0x1F600u);
  EXPECT_EQ(utf8_decode(s, 6).len, 4u);
  std::string out;
  for (uint32_t cp : {0x61u, 0xE9u, 0x4E2Du, 0x1F600u}) utf8_append(out, cp);
  EXPECT_EQ(out, s);
}

TEST(Utf8, InvalidBytesAreSingleInvalidCharacters) {
  for (std::string bad : {std::string("\xFF"), std::string("\x80"), std::string("\xC3"), std::string("\xC0\xAF"),
                          std::string("\xED\xA0\x80"), std::string("\xF4\x90\x80\x80"), std::string("\xE4\xB8")}) {
    Utf8Char ch = utf8_decode(bad, 0);
    EXPECT_EQ(ch.cp, kInvalidCodepoint) << "input byte " << int(static_cast<unsigned char>(bad[0]));
    EXPECT_EQ(ch.len, 1u);
  }
}

TEST(CharClass, MatchesUnicodeCategories) {
  EXPECT_EQ(char_class('a'), CharClass::letter);
  EXPECT_EQ(char_class('7'), CharClass::number);
  EXPECT_EQ(char_class(' '), CharClass::whitespace);
  EXPECT_EQ(char_class('\''), CharClass::other);
  EXPECT_EQ(char_class(0xE9), CharClass::letter);     // é
  EXPECT_EQ(char_class(0x4E2D), CharClass::letter);   // 中 (Lo)
  EXPECT_EQ(char_class(0x2B0), CharClass::letter);    // ʰ (Lm)
  EXPECT_EQ(char_class(0x301), CharClass::other);     // combining acute (Mn)
  EXPECT_EQ(char_class(0x663), CharClass::number);    // Arabic-Indic three (Nd)
  EXPECT_EQ(char_class(0x2163), CharClass::number);   // Roman numeral four (Nl)
  EXPECT_EQ(char_class(0xBD), CharClass::number);     // ½ (No)
  EXPECT_EQ(char_class(0x3000), CharClass::whitespace);
  EXPECT_EQ(char_class(0x85), CharClass::whitespace);
  EXPECT_EQ(char_class(0xFEFF), CharClass::other);    // BOM is not White_Space
  EXPECT_EQ(char_class(0x200B), CharClass::other);    // zero width space neither
  EXPECT_EQ(char_class(0x1F600), CharClass::other);   // emoji
  EXPECT_EQ(char_class(kInvalidCodepoint), CharClass::other);
  EXPECT_EQ(char_class(0x10FFFF), CharClass::other);
}

TEST(ByteLevel, AlphabetIsABijectionMatchingGpt2) {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    uint32_t cp = byte_to_codepoint(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second);
    EXPECT_EQ(codepoint_to_byte(cp), b);
  }
  EXPECT_EQ(byte_to_codepoint(' '), 0x120u);   // Ġ
  EXPECT_EQ(byte_to_codepoint('\n'), 0x10Au);  // Ċ
  EXPECT_EQ(byte_to_codepoint('A'), uint32_t('A'));
  EXPECT_EQ(byte_to_codepoint(0xAD), 0x143u);  // the last remapped byte
  EXPECT_EQ(codepoint_to_byte(0x144), -1);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string back;
  ASSERT_TRUE(byte_level_decode(byte_level_encode(all), back));
  EXPECT_EQ(back, all);
  std::string out = "x";
  EXPECT_FALSE(byte_level_decode("a b", out));  // a literal space is not in the alphabet
  EXPECT_EQ(out, "x");
}

TEST(Nfc, MatchesPythonUnicodedata) {
  nlohmann::json cases = nlohmann::json::parse(
      vlm::testing::read_file_or_die(vlm::testing::tokenizer_fixture_path("nfc_cases.json")));
  ASSERT_GE(cases["cases"].size(), 200u);
  int changed = 0;
  for (const auto& c : cases["cases"]) {
    std::string in = c["input"], want = c["nfc"];
    EXPECT_EQ(nfc(in), want) << "input: " << in;
    changed += in != want;
  }
  EXPECT_GT(changed, 50);  // the fixture exercises composition, not just identity
}

TEST(Nfc, HandCases) {
  EXPECT_EQ(nfc("e\xCC\x81"), "\xC3\xA9");                          // e + U+0301 -> é
  EXPECT_EQ(nfc("\xE2\x84\xAB"), "\xC3\x85");                       // Angstrom sign -> Å (singleton)
  EXPECT_EQ(nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // Hangul L V T -> 각
  EXPECT_EQ(nfc("plain"), "plain");
  // Invalid bytes pass through and block nothing around them.
  EXPECT_EQ(nfc("\xFF" "e\xCC\x81\xC3"), "\xFF\xC3\xA9\xC3");
}

}  // namespace
}  // namespace vlm::tok

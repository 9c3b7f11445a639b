// Unicode helpers for the tokenizer: lenient UTF-8 decoding (invalid bytes become one-byte "invalid" characters,
// never an error), the character classes the pre-tokenizer regexes need (\p{L}, \p{N}, \s) and NFC normalization.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace vlm::tok {

// Code point returned for a byte that does not start a valid UTF-8 sequence (overlong forms, surrogates, code
// points above U+10FFFF and truncated sequences are all invalid). Such a byte is its own one-byte character.
inline constexpr uint32_t kInvalidCodepoint = 0xFFFFFFFFu;

struct Utf8Char {
  uint32_t cp;  // kInvalidCodepoint for an invalid byte
  uint32_t len;  // bytes consumed, 1..4
};

// Decodes the character starting at byte `pos` (< s.size()).
Utf8Char utf8_decode(std::string_view s, size_t pos);
// Appends the UTF-8 encoding of a valid code point.
void utf8_append(std::string& out, uint32_t cp);
bool is_ascii(std::string_view s);

// The classes the GPT-2 / Llama-3 split patterns distinguish. `other` is [^\s\p{L}\p{N}], invalid bytes included.
enum class CharClass : uint8_t { letter, number, whitespace, other };

bool is_letter(uint32_t cp);      // \p{L}: Lu Ll Lt Lm Lo
bool is_number(uint32_t cp);      // \p{N}: Nd Nl No
bool is_whitespace(uint32_t cp);  // \s: the Unicode White_Space property
CharClass char_class(uint32_t cp);

// Canonical combining class (0 for starters and for invalid code points).
uint8_t combining_class(uint32_t cp);

// Unicode Normalization Form C. Invalid bytes are copied through unchanged and act as starters that nothing
// composes with. Pure-ASCII input is returned as is.
std::string nfc(std::string_view s);

// Version of the Unicode Character Database the tables were generated from.
const char* unicode_version();

}  // namespace vlm::tok

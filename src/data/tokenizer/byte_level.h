// GPT-2's byte-level alphabet: a reversible map from the 256 byte values to printable code points (printable
// Latin-1 bytes map to themselves, the others to U+0100..U+0143), so any byte string is a string of "characters"
// that BPE vocabularies can spell.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace vlm::tok {

uint32_t byte_to_codepoint(uint8_t byte);
// The byte a byte-level code point stands for, or -1 when `cp` is not in the alphabet.
int codepoint_to_byte(uint32_t cp);

// Maps every byte of `bytes` to its byte-level character (UTF-8 encoded) and appends the result to `out`.
void byte_level_encode(std::string_view bytes, std::string& out);
std::string byte_level_encode(std::string_view bytes);

// Appends to `out` the bytes that the byte-level string `token` spells. Returns false and appends nothing when a
// character of `token` is not in the alphabet (Hugging Face's ByteLevel decoder then uses the token's own bytes).
bool byte_level_decode(std::string_view token, std::string& out);

}  // namespace vlm::tok

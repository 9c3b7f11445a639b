// The byte-level alphabet tables, built once: bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF keep their value, the
// remaining 68 bytes (controls, space, 0x7F..0xA0, 0xAD) take U+0100 + n in byte order.
#include "data/tokenizer/byte_level.h"

#include <array>

#include "data/tokenizer/unicode.h"

namespace vlm::tok {
namespace {

struct ByteTables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 0x144> from_cp{};  // indexed by code point < 0x144; -1 when not in the alphabet
  std::array<std::string, 256> utf8;     // UTF-8 of to_cp[b]
};

bool keeps_value(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

const ByteTables& tables() {
  static const ByteTables t = [] {
    ByteTables t;
    t.from_cp.fill(-1);
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      t.to_cp[b] = keeps_value(b) ? static_cast<uint32_t>(b) : next++;
      t.from_cp[t.to_cp[b]] = static_cast<int16_t>(b);
      utf8_append(t.utf8[b], t.to_cp[b]);
    }
    return t;
  }();
  return t;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t byte) { return tables().to_cp[byte]; }

int codepoint_to_byte(uint32_t cp) { return cp < 0x144 ? tables().from_cp[cp] : -1; }

void byte_level_encode(std::string_view bytes, std::string& out) {
  const ByteTables& t = tables();
  for (char c : bytes) out += t.utf8[static_cast<unsigned char>(c)];
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  byte_level_encode(bytes, out);
  return out;
}

bool byte_level_decode(std::string_view token, std::string& out) {
  size_t start = out.size();
  for (size_t pos = 0; pos < token.size();) {
    Utf8Char ch = utf8_decode(token, pos);
    int b = ch.cp == kInvalidCodepoint ? -1 : codepoint_to_byte(ch.cp);
    if (b < 0) {
      out.resize(start);
      return false;
    }
    out.push_back(static_cast<char>(b));
    pos += ch.len;
  }
  return true;
}

}  // namespace vlm::tok

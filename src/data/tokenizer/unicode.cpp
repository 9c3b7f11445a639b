// Lenient UTF-8 decoding, character classes from the generated range tables, and NFC (decompose, canonical
// reorder, compose; Hangul syllables handled algorithmically as in UAX #15).
#include "data/tokenizer/unicode.h"

#include <algorithm>
#include <vector>

#include "data/tokenizer/unicode_tables.h"

namespace vlm::tok {
namespace {

// Hangul syllable constants (Unicode 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// Invalid bytes travel through NFC as values above the Unicode range so they can be restored byte for byte.
constexpr uint32_t kRawByteBase = 0x200000;

bool in_ranges(const CodepointRange* ranges, size_t count, uint32_t cp) {
  const CodepointRange* end = ranges + count;
  const CodepointRange* it =
      std::upper_bound(ranges, end, cp, [](uint32_t v, const CodepointRange& r) { return v < r.first; });
  if (it == ranges) return false;
  --it;
  return cp <= it->last;
}

const DecompositionEntry* find_decomposition(uint32_t cp) {
  const DecompositionEntry* end = kDecompositions + kDecompositionCount;
  const DecompositionEntry* it =
      std::lower_bound(kDecompositions, end, cp, [](const DecompositionEntry& e, uint32_t v) { return e.cp < v; });
  return (it != end && it->cp == cp) ? it : nullptr;
}

// The primary composite of (a, b), or 0 when there is none.
uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const CompositionEntry* end = kCompositions + kCompositionCount;
  const CompositionEntry* it = std::lower_bound(kCompositions, end, std::pair<uint32_t, uint32_t>(a, b),
                                                [](const CompositionEntry& e, const std::pair<uint32_t, uint32_t>& v) {
                                                  return e.first != v.first ? e.first < v.first : e.second < v.second;
                                                });
  return (it != end && it->first == a && it->second == b) ? it->composite : 0;
}

uint8_t ccc_of(uint32_t v) { return v >= kRawByteBase ? 0 : combining_class(v); }

void decompose_into(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (const DecompositionEntry* d = find_decomposition(cp)) {
    out.insert(out.end(), kDecompositionData + d->offset, kDecompositionData + d->offset + d->length);
    return;
  }
  out.push_back(cp);
}

}  // namespace

Utf8Char utf8_decode(std::string_view s, size_t pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + pos;
  size_t avail = s.size() - pos;
  unsigned char b0 = p[0];
  if (b0 < 0x80) return {b0, 1};
  uint32_t len, cp, min_cp;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min_cp = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min_cp = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min_cp = 0x10000;
  } else {
    return {kInvalidCodepoint, 1};
  }
  if (avail < len) return {kInvalidCodepoint, 1};
  for (uint32_t i = 1; i < len; ++i) {
    if ((p[i] & 0xC0) != 0x80) return {kInvalidCodepoint, 1};
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {kInvalidCodepoint, 1};
  return {cp, len};
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

bool is_letter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return cp != kInvalidCodepoint && in_ranges(kLetterRanges, kLetterRangeCount, cp);
}

bool is_number(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return cp != kInvalidCodepoint && in_ranges(kNumberRanges, kNumberRangeCount, cp);
}

bool is_whitespace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

CharClass char_class(uint32_t cp) {
  if (is_whitespace(cp)) return CharClass::whitespace;
  if (is_letter(cp)) return CharClass::letter;
  if (is_number(cp)) return CharClass::number;
  return CharClass::other;
}

uint8_t combining_class(uint32_t cp) {
  if (cp < 0x300 || cp == kInvalidCodepoint) return 0;
  const CombiningClassRange* end = kCombiningClassRanges + kCombiningClassRangeCount;
  const CombiningClassRange* it = std::upper_bound(kCombiningClassRanges, end, cp,
                                                   [](uint32_t v, const CombiningClassRange& r) { return v < r.first; });
  if (it == kCombiningClassRanges) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

std::string nfc(std::string_view s) {
  if (is_ascii(s)) return std::string(s);
  // 1. Full canonical decomposition.
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    Utf8Char ch = utf8_decode(s, pos);
    if (ch.cp == kInvalidCodepoint) {
      cps.push_back(kRawByteBase + static_cast<unsigned char>(s[pos]));
    } else {
      decompose_into(ch.cp, cps);
    }
    pos += ch.len;
  }
  // 2. Canonical ordering: stable sort of every run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (ccc_of(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc_of(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j,
                     [](uint32_t a, uint32_t b) { return ccc_of(a) < ccc_of(b); });
    i = j;
  }
  // 3. Canonical composition. `last_ccc` is -1 while the current character is adjacent to the starter.
  std::vector<uint32_t> out;
  out.reserve(cps.size());
  long starter = -1;
  int last_ccc = -1;
  for (uint32_t c : cps) {
    int cc = ccc_of(c);
    if (starter >= 0 && c < kRawByteBase && out[starter] < kRawByteBase &&
        (last_ccc == -1 || (last_ccc != 0 && last_ccc < cc))) {
      if (uint32_t composite = compose_pair(out[starter], c)) {
        out[starter] = composite;
        continue;
      }
    }
    if (cc == 0) {
      starter = static_cast<long>(out.size());
      last_ccc = -1;
    } else {
      last_ccc = cc;
    }
    out.push_back(c);
  }
  std::string result;
  result.reserve(s.size());
  for (uint32_t c : out) {
    if (c >= kRawByteBase) {
      result.push_back(static_cast<char>(c - kRawByteBase));
    } else {
      utf8_append(result, c);
    }
  }
  return result;
}

const char* unicode_version() { return kUnicodeVersion; }

}  // namespace vlm::tok

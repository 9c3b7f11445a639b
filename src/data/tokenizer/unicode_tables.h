// Generated Unicode tables (unicode_tables_{categories,decompositions,compositions}.cpp, written by
// dev/fixtures/gen_unicode_tables.py). Internal to the tokenizer: use the queries in unicode.h rather than these arrays.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vlm::tok {

struct CodepointRange {
  uint32_t first, last;  // inclusive
};
struct CombiningClassRange {
  uint32_t first, last;  // inclusive; every code point in it has canonical combining class `ccc` (never 0)
  uint8_t ccc;
};
struct DecompositionEntry {
  uint32_t cp;      // a code point whose NFD differs from itself (Hangul syllables excluded: algorithmic)
  uint16_t offset;  // into kDecompositionData
  uint8_t length;
};
struct CompositionEntry {
  uint32_t first, second, composite;  // primary composite; sorted by (first, second)
};

extern const char* const kUnicodeVersion;
extern const CodepointRange kLetterRanges[];  // \p{L}, sorted, disjoint
extern const size_t kLetterRangeCount;
extern const CodepointRange kNumberRanges[];  // \p{N}
extern const size_t kNumberRangeCount;
extern const CombiningClassRange kCombiningClassRanges[];
extern const size_t kCombiningClassRangeCount;
extern const uint32_t kDecompositionData[];
extern const DecompositionEntry kDecompositions[];  // sorted by cp
extern const size_t kDecompositionCount;
extern const CompositionEntry kCompositions[];
extern const size_t kCompositionCount;

}  // namespace vlm::tok

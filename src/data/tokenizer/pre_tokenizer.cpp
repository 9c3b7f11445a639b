// Hand-written matchers for the GPT-2 and Llama-3/Qwen2 split patterns, and the Split/Digits/ByteLevel steps.
// Each matcher decides, at a character position, which alternative of the pattern a backtracking regex engine
// would take first and how far it would extend, then continues after the match.
#include "data/tokenizer/pre_tokenizer.h"

#include <cstring>

#include "data/tokenizer/regex.h"
#include "data/tokenizer/unicode.h"

namespace vlm::tok {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kGpt4Pattern =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

struct Char {
  uint32_t cp;
  CharClass cls;
};

// Decodes `text` into characters; offsets[i] is the byte offset of character i, offsets[n] == text.size().
void decode_chars(std::string_view text, std::vector<Char>& chars, std::vector<size_t>& offsets) {
  chars.clear();
  offsets.clear();
  for (size_t pos = 0; pos < text.size();) {
    Utf8Char ch = utf8_decode(text, pos);
    chars.push_back({ch.cp, char_class(ch.cp)});
    offsets.push_back(pos);
    pos += ch.len;
  }
  offsets.push_back(text.size());
}

size_t run_of(const std::vector<Char>& c, size_t k, CharClass cls) {
  while (k < c.size() && c[k].cls == cls) ++k;
  return k;
}

bool is_newline(uint32_t cp) { return cp == '\r' || cp == '\n'; }

// Folds the letters of the contraction suffixes (s t m d r e v l) for the (?i:...) group; U+017F (long s) folds
// to 's' under Unicode case-insensitive matching.
uint32_t fold(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp == 0x17F) return 's';
  return cp;
}

// Length (in characters) of the contraction starting at i ('s 't 're 've 'm 'll 'd), or 0.
size_t contraction_at(const std::vector<Char>& c, size_t i, bool ignore_case) {
  if (c[i].cp != '\'' || i + 1 >= c.size()) return 0;
  auto at = [&](size_t k) { return ignore_case ? fold(c[k].cp) : c[k].cp; };
  uint32_t a = at(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= c.size()) return 0;
  uint32_t b = at(i + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// End of `\s+(?!\S)|\s+` for the whitespace run starting at i: the run minus its last character when a non-space
// follows and the run has at least two characters, else the whole run.
size_t whitespace_tail(const std::vector<Char>& c, size_t i) {
  size_t j = run_of(c, i, CharClass::whitespace);
  if (j < c.size() && j - i >= 2) return j - 1;
  return j;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t match_gpt2(const std::vector<Char>& c, size_t i) {
  if (size_t n = contraction_at(c, i, false)) return i + n;
  size_t start = i;
  if (c[i].cp == ' ' && i + 1 < c.size() && c[i + 1].cls != CharClass::whitespace) start = i + 1;
  if (c[start].cls != CharClass::whitespace) return run_of(c, start, c[start].cls);
  return whitespace_tail(c, i);
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+
// |\s+(?!\S)|\s+
size_t match_llama3(const std::vector<Char>& c, size_t i, int max_digits) {
  const size_t n = c.size();
  if (size_t k = contraction_at(c, i, true)) return i + k;
  const Char& ch = c[i];
  if (ch.cls == CharClass::letter) return run_of(c, i, CharClass::letter);
  if (!is_newline(ch.cp) && ch.cls != CharClass::number && i + 1 < n && c[i + 1].cls == CharClass::letter) {
    return run_of(c, i + 1, CharClass::letter);
  }
  if (ch.cls == CharClass::number) {
    size_t k = i;
    while (k < n && c[k].cls == CharClass::number && k - i < static_cast<size_t>(max_digits)) ++k;
    return k;
  }
  size_t start = (ch.cp == ' ' && i + 1 < n && c[i + 1].cls == CharClass::other) ? i + 1 : i;
  if (c[start].cls == CharClass::other) {
    size_t k = run_of(c, start, CharClass::other);
    while (k < n && is_newline(c[k].cp)) ++k;
    return k;
  }
  // ch is whitespace. \s*[\r\n]+ ends just after the last newline of the run, if the run has one.
  size_t j = run_of(c, i, CharClass::whitespace);
  for (size_t p = j; p > i; --p) {
    if (is_newline(c[p - 1].cp)) return p;
  }
  return whitespace_tail(c, i);
}

template <class Matcher>
void split_with(std::string_view text, std::vector<Span>& matches, Matcher&& match) {
  thread_local std::vector<Char> chars;
  thread_local std::vector<size_t> offsets;
  decode_chars(text, chars, offsets);
  for (size_t i = 0; i < chars.size();) {
    size_t j = match(chars, i);
    matches.push_back({offsets[i], offsets[j]});
    i = j;
  }
}

// Byte-range segments of one piece, each flagged as a match of the split pattern or not; they cover the piece.
struct Segment {
  size_t begin, end;
  bool is_match;
};

void segments_from_matches(size_t size, const std::vector<Span>& matches, bool invert, std::vector<Segment>& out) {
  out.clear();
  size_t pos = 0;
  for (const Span& m : matches) {
    if (m.begin > pos) out.push_back({pos, m.begin, invert});
    if (m.end > m.begin) out.push_back({m.begin, m.end, !invert});
    pos = m.end;
  }
  if (pos < size) out.push_back({pos, size, invert});
}

// Applies `behavior` to the segments of `piece` (see Hugging Face's SplitDelimiterBehavior: for "the-final--
// countdown" split on "-": removed [the, final, countdown], isolated [the, -, final, -, -, countdown],
// merged_with_previous [the-, final-, -, countdown], merged_with_next [the, -final, -, -countdown],
// contiguous [the, -, final, --, countdown]).
void emit_segments(std::string_view piece, const std::vector<Segment>& segs, SplitBehavior behavior,
                   std::vector<std::string>& out) {
  auto text = [&](const Segment& s) { return std::string(piece.substr(s.begin, s.end - s.begin)); };
  switch (behavior) {
    case SplitBehavior::isolated:
      for (const Segment& s : segs) out.push_back(text(s));
      return;
    case SplitBehavior::removed:
      for (const Segment& s : segs) {
        if (!s.is_match) out.push_back(text(s));
      }
      return;
    case SplitBehavior::contiguous: {
      bool prev_match = false;
      for (const Segment& s : segs) {
        if (s.is_match && prev_match) {
          out.back() += text(s);
        } else {
          out.push_back(text(s));
        }
        prev_match = s.is_match;
      }
      return;
    }
    case SplitBehavior::merged_with_previous: {
      bool prev_match = true;  // nothing to merge into at the start
      for (const Segment& s : segs) {
        if (s.is_match && !prev_match) {
          out.back() += text(s);
        } else {
          out.push_back(text(s));
        }
        prev_match = s.is_match;
      }
      return;
    }
    case SplitBehavior::merged_with_next: {
      std::string pending;
      bool has_pending = false;
      for (const Segment& s : segs) {
        if (s.is_match) {
          if (has_pending) out.push_back(std::move(pending));
          pending = text(s);
          has_pending = true;
        } else {
          out.push_back(has_pending ? pending + text(s) : text(s));
          pending.clear();
          has_pending = false;
        }
      }
      if (has_pending) out.push_back(std::move(pending));
      return;
    }
  }
}

void find_literal(std::string_view piece, std::string_view literal, std::vector<Span>& matches) {
  if (literal.empty()) return;
  for (size_t pos = piece.find(literal); pos != std::string_view::npos; pos = piece.find(literal, pos)) {
    matches.push_back({pos, pos + literal.size()});
    pos += literal.size();
  }
}

void find_numbers(std::string_view piece, std::vector<Span>& matches) {
  for (size_t pos = 0; pos < piece.size();) {
    Utf8Char ch = utf8_decode(piece, pos);
    if (is_number(ch.cp)) matches.push_back({pos, pos + ch.len});
    pos += ch.len;
  }
}

// Metaspace on one piece: spaces -> replacement, the prepend scheme, then a split before every replacement
// (MergedWithNext).
void metaspace(const PreTokenizerStep& step, std::string_view piece, bool first_piece, std::vector<std::string>& out) {
  const std::string& rep = step.replacement;
  std::string s;
  s.reserve(piece.size() + rep.size());
  bool starts_with_rep = piece.substr(0, 1) == " " || piece.substr(0, rep.size()) == rep;
  bool prepend = step.prepend == PrependScheme::always || (step.prepend == PrependScheme::first && first_piece);
  if (prepend && !starts_with_rep) s += rep;
  for (char c : piece) {
    if (c == ' ') {
      s += rep;
    } else {
      s += c;
    }
  }
  if (!step.metaspace_split) {
    out.push_back(std::move(s));
    return;
  }
  std::vector<Span> matches;
  find_literal(s, rep, matches);
  std::vector<Segment> segs;
  segments_from_matches(s.size(), matches, false, segs);
  emit_segments(s, segs, SplitBehavior::merged_with_next, out);
}

void apply_step(const PreTokenizerStep& step, const std::vector<std::string>& in, bool at_start,
                std::vector<std::string>& out) {
  std::vector<Span> matches;
  std::vector<Segment> segs;
  std::string prefixed;
  for (size_t index = 0; index < in.size(); ++index) {
    const std::string& piece_in = in[index];
    std::string_view piece = piece_in;
    matches.clear();
    SplitBehavior behavior = SplitBehavior::isolated;
    bool invert = false;
    switch (step.kind) {
      case PreTokenizerKind::byte_level:
        if (step.add_prefix_space && !piece.empty() && piece[0] != ' ') {  // HF never prepends to an empty piece
          prefixed.resize(piece_in.size() + 1);
          prefixed[0] = ' ';
          std::memcpy(prefixed.data() + 1, piece_in.data(), piece_in.size());
          piece = prefixed;
        }
        if (!step.use_regex) {
          out.emplace_back(piece);
          continue;
        }
        split_gpt2(piece, matches);
        break;
      case PreTokenizerKind::digits:
        find_numbers(piece, matches);
        behavior = step.individual_digits ? SplitBehavior::isolated : SplitBehavior::contiguous;
        break;
      case PreTokenizerKind::metaspace:
        metaspace(step, piece, at_start && index == 0, out);
        continue;
      case PreTokenizerKind::split:
        switch (step.regex) {
          case SplitRegex::literal: find_literal(piece, step.pattern, matches); break;
          case SplitRegex::gpt2: split_gpt2(piece, matches); break;
          case SplitRegex::llama3: split_llama3(piece, 3, matches); break;
          case SplitRegex::qwen2: split_llama3(piece, 1, matches); break;
          case SplitRegex::pcre2: step.compiled->find_all(piece, matches); break;
        }
        behavior = step.behavior;
        invert = step.invert;
        break;
    }
    segments_from_matches(piece.size(), matches, invert, segs);
    emit_segments(piece, segs, behavior, out);
  }
}

}  // namespace

void split_gpt2(std::string_view text, std::vector<Span>& matches) {
  split_with(text, matches, [](const std::vector<Char>& c, size_t i) { return match_gpt2(c, i); });
}

void split_llama3(std::string_view text, int max_digits, std::vector<Span>& matches) {
  split_with(text, matches,
             [max_digits](const std::vector<Char>& c, size_t i) { return match_llama3(c, i, max_digits); });
}

bool split_regex_from_pattern(std::string_view pattern, SplitRegex& out) {
  if (pattern == kGpt2Pattern) {
    out = SplitRegex::gpt2;
  } else if (pattern == kLlama3Pattern || pattern == kGpt4Pattern) {
    out = SplitRegex::llama3;
  } else if (pattern == kQwen2Pattern) {
    out = SplitRegex::qwen2;
  } else {
    return false;
  }
  return true;
}

const char* split_behavior_name(SplitBehavior behavior) {
  switch (behavior) {
    case SplitBehavior::removed: return "Removed";
    case SplitBehavior::isolated: return "Isolated";
    case SplitBehavior::merged_with_previous: return "MergedWithPrevious";
    case SplitBehavior::merged_with_next: return "MergedWithNext";
    case SplitBehavior::contiguous: return "Contiguous";
  }
  return "Isolated";
}

bool split_behavior_from_name(std::string_view name, SplitBehavior& out) {
  for (SplitBehavior b : {SplitBehavior::removed, SplitBehavior::isolated, SplitBehavior::merged_with_previous,
                          SplitBehavior::merged_with_next, SplitBehavior::contiguous}) {
    if (name == split_behavior_name(b)) {
      out = b;
      return true;
    }
  }
  return false;
}

void pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::string_view text, bool at_start,
                  std::vector<std::string>& pieces) {
  std::vector<std::string> current{std::string(text)};
  std::vector<std::string> next;
  for (const PreTokenizerStep& step : steps) {
    next.clear();
    apply_step(step, current, at_start, next);
    current.swap(next);
  }
  for (std::string& p : current) {
    if (!p.empty()) pieces.push_back(std::move(p));
  }
}

}  // namespace vlm::tok

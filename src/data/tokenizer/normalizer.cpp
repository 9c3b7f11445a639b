// The normalizer steps over UTF-8 strings (invalid bytes pass through untouched).
#include "data/tokenizer/normalizer.h"

#include "data/tokenizer/unicode.h"

namespace vlm::tok {
namespace {

std::string replace_literal(std::string_view s, std::string_view pattern, std::string_view content) {
  if (pattern.empty()) return std::string(s);
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit = s.find(pattern); hit != std::string_view::npos; hit = s.find(pattern, pos)) {
    out.append(s.substr(pos, hit - pos));
    out.append(content);
    pos = hit + pattern.size();
  }
  out.append(s.substr(pos));
  return out;
}

std::string replace_regex(std::string_view s, const Regex& re, std::string_view content) {
  std::vector<Span> matches;
  re.find_all(s, matches);
  std::string out;
  size_t pos = 0;
  for (const Span& m : matches) {
    out.append(s.substr(pos, m.begin - pos));
    out.append(content);
    pos = m.end;
  }
  out.append(s.substr(pos));
  return out;
}

std::string strip(std::string_view s, bool left, bool right) {
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      Utf8Char ch = utf8_decode(s, begin);
      if (ch.cp == kInvalidCodepoint || !is_whitespace(ch.cp)) break;
      begin += ch.len;
    }
  }
  if (right) {
    // Walk forward remembering where the trailing whitespace run starts.
    size_t run = end;
    for (size_t pos = begin; pos < end;) {
      Utf8Char ch = utf8_decode(s, pos);
      bool ws = ch.cp != kInvalidCodepoint && is_whitespace(ch.cp);
      if (!ws) run = end;
      else if (run == end) run = pos;
      pos += ch.len;
    }
    end = run;
  }
  return std::string(s.substr(begin, end - begin));
}

}  // namespace

std::string normalize(const std::vector<NormalizerStep>& steps, std::string_view text) {
  std::string s(text);
  for (const NormalizerStep& step : steps) {
    switch (step.kind) {
      case NormalizerKind::nfc: s = nfc(s); break;
      case NormalizerKind::prepend:
        if (!s.empty()) s.insert(0, step.text);
        break;
      case NormalizerKind::replace:
        s = step.regex ? replace_regex(s, *step.regex, step.content) : replace_literal(s, step.text, step.content);
        break;
      case NormalizerKind::strip: s = strip(s, step.strip_left, step.strip_right); break;
    }
  }
  return s;
}

}  // namespace vlm::tok

// PTB-style caption tokenization with coco-caption's punctuation removal (rules in the header).
#include "eval/caption_tokenizer.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace vlm {
namespace {

// coco-caption's PUNCTUATIONS list, compared after lower-casing (so the upper-case bracket escapes never match).
constexpr std::array<std::string_view, 17> kRemoved = {"''", "'", "``", "`", "-LRB-", "-RRB-", "-LCB-", "-RCB-", ".",
                                                       "?", "!", ",", ":", "-", "--", "...", ";"};

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool ends_with_ci(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && lower(s.substr(s.size() - suffix.size())) == suffix;
}

// Curly quotes, dashes and the ellipsis character as the ASCII forms PTBTokenizer maps them to; dashes become
// separate "--" tokens; whitespace of any kind is a space.
std::string ascii_punctuation(std::string_view in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(in[i]);
    if (c == 0xE2 && i + 2 < in.size() && static_cast<unsigned char>(in[i + 1]) == 0x80) {
      const unsigned char d = static_cast<unsigned char>(in[i + 2]);
      const char* repl = nullptr;
      if (d == 0x98) repl = "`";                          // U+2018
      else if (d == 0x99) repl = "'";                     // U+2019
      else if (d == 0x9C || d == 0x9D) repl = "\"";       // U+201C, U+201D
      else if (d == 0x93 || d == 0x94) repl = " -- ";     // U+2013, U+2014
      else if (d == 0xA6) repl = "...";                   // U+2026
      if (repl) {
        out += repl;
        i += 2;
        continue;
      }
    }
    if (c == '-' && i + 1 < in.size() && in[i + 1] == '-') {  // an ASCII dash "--" (or longer) is its own token
      while (i + 1 < in.size() && in[i + 1] == '-') ++i;
      out += " -- ";
      continue;
    }
    out.push_back(std::isspace(c) || c < 0x20 ? ' ' : static_cast<char>(c));  // control characters too
  }
  return out;
}

// "u.s.", "a.m.", "e.g.": two or more letter-period pairs keep their final period.
bool is_acronym(std::string_view w) {
  if (w.size() < 4 || w.size() % 2 != 0) return false;
  for (size_t i = 0; i < w.size(); i += 2)
    if (!is_alpha(w[i]) || w[i + 1] != '.') return false;
  return true;
}

bool is_clitic(std::string_view w) {
  const std::string l = lower(w);
  return l == "'s" || l == "'m" || l == "'d" || l == "'ll" || l == "'re" || l == "'ve" || l == "n't";
}

// Splits clitics off one word (no punctuation left at its ends).
void split_clitics(std::string_view w, std::vector<std::string>& out) {
  if (w.empty()) return;
  static const std::array<std::array<std::string_view, 3>, 6> kWhole = {{{"cannot", "can", "not"},
                                                                          {"gonna", "gon", "na"},
                                                                          {"gotta", "got", "ta"},
                                                                          {"wanna", "wan", "na"},
                                                                          {"lemme", "lem", "me"},
                                                                          {"gimme", "gim", "me"}}};
  const std::string l = lower(w);
  for (const auto& [word, a, b] : kWhole)
    if (l == word) {
      out.emplace_back(w.substr(0, a.size()));
      out.emplace_back(w.substr(a.size()));
      return;
    }
  if (is_clitic(w)) {
    out.emplace_back(w);
    return;
  }
  for (std::string_view suffix : {"n't", "'ll", "'re", "'ve", "'s", "'m", "'d"}) {
    if (w.size() > suffix.size() && ends_with_ci(w, suffix)) {
      out.emplace_back(w.substr(0, w.size() - suffix.size()));
      out.emplace_back(w.substr(w.size() - suffix.size()));
      return;
    }
  }
  out.emplace_back(w);
}

// One whitespace-free chunk into PTB tokens (not yet lower-cased or filtered).
void tokenize_chunk(std::string_view w, std::vector<std::string>& out) {
  std::vector<std::string> back;  // split off the end, in reverse order
  // Opening punctuation.
  while (!w.empty()) {
    const char c = w.front();
    if (c == '(' || c == '[' || c == '{') {
      out.emplace_back(c == '(' ? "-LRB-" : c == '[' ? "-LSB-" : "-LCB-");
    } else if (c == '"') {
      out.emplace_back("``");
    } else if (c == '`') {
      out.emplace_back(w.size() > 1 && w[1] == '`' ? "``" : "`");
      if (w.size() > 1 && w[1] == '`') w.remove_prefix(1);
    } else if (c == '\'' && w.size() > 1 && !is_clitic(w)) {
      out.emplace_back("`");
    } else if ((c == '$' || c == '#') && w.size() > 1) {
      out.emplace_back(1, c);
    } else {
      break;
    }
    w.remove_prefix(1);
  }
  // Closing punctuation.
  while (!w.empty()) {
    const char c = w.back();
    if (c == ')' || c == ']' || c == '}') {
      back.emplace_back(c == ')' ? "-RRB-" : c == ']' ? "-RSB-" : "-RCB-");
    } else if (c == '"') {
      back.emplace_back("''");
    } else if (c == '\'' && w.size() > 1) {
      if (w[w.size() - 2] == '\'') {
        back.emplace_back("''");
        w.remove_suffix(1);
      } else {
        back.emplace_back("'");
      }
    } else if (c == '.') {
      size_t run = 0;
      while (run < w.size() && w[w.size() - 1 - run] == '.') ++run;
      if (run >= 2) {
        back.emplace_back("...");
        w.remove_suffix(run - 1);
      } else if (is_acronym(w)) {
        break;
      } else {
        back.emplace_back(".");
      }
    } else if (c == ',' || c == ';' || c == ':' || c == '!' || c == '?') {
      back.emplace_back(1, c);
    } else if (c == '%' && w.size() > 1) {
      back.emplace_back("%");
    } else {
      break;
    }
    w.remove_suffix(1);
  }
  // Inside the word: , ; ! ? split it, except a comma or colon between digits.
  size_t start = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const char c = w[i];
    const bool between_digits = i > 0 && i + 1 < w.size() && is_digit(w[i - 1]) && is_digit(w[i + 1]);
    if ((c == ',' && !between_digits) || c == ';' || c == '!' || c == '?') {
      split_clitics(w.substr(start, i - start), out);
      out.emplace_back(1, c);
      start = i + 1;
    }
  }
  split_clitics(w.substr(start), out);
  out.insert(out.end(), back.rbegin(), back.rend());
}

}  // namespace

std::vector<std::string> coco_caption_tokens(std::string_view caption) {
  const std::string text = ascii_punctuation(caption);
  std::vector<std::string> ptb;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ') ++i;
    size_t j = i;
    while (j < text.size() && text[j] != ' ') ++j;
    if (j > i) tokenize_chunk(std::string_view(text).substr(i, j - i), ptb);
    i = j;
  }
  std::vector<std::string> out;
  for (const std::string& t : ptb) {
    std::string l = lower(t);
    if (std::find(kRemoved.begin(), kRemoved.end(), l) == kRemoved.end()) out.push_back(std::move(l));
  }
  return out;
}

std::string coco_caption_tokenize(std::string_view caption) {
  std::string out;
  for (const std::string& t : coco_caption_tokens(caption)) {
    if (!out.empty()) out.push_back(' ');
    out += t;
  }
  return out;
}

}  // namespace vlm

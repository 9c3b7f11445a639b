// The official VQA answer processing and leave-one-out accuracy, step for step.
#include "eval/vqa_metrics.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <set>
#include <string_view>
#include <unordered_map>

namespace vlm {
namespace {

constexpr std::array<char, 21> kPunct = {';', '/', '[', ']', '"', '{', '}', '(', ')', '=', '+',
                                         '\\', '_', '-', '>', '<', '@', '`', ',', '?', '!'};
constexpr std::array<std::string_view, 3> kArticles = {"a", "an", "the"};
constexpr int kMaxPeriodsStripped = 32;  // the reference passes re.UNICODE (32) as re.sub's count

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

const std::unordered_map<std::string, std::string>& number_words() {
  static const std::unordered_map<std::string, std::string> m = {
      {"none", "0"}, {"zero", "0"}, {"one", "1"}, {"two", "2"}, {"three", "3"}, {"four", "4"},
      {"five", "5"}, {"six", "6"},  {"seven", "7"}, {"eight", "8"}, {"nine", "9"}, {"ten", "10"}};
  return m;
}

// The reference's contraction table (entries that can match a lower-cased word and change it).
const std::unordered_map<std::string, std::string>& contractions() {
  static const std::unordered_map<std::string, std::string> m = {
    {"aint", "ain't"}, {"arent", "aren't"}, {"cant", "can't"}, {"couldve", "could've"}, {"couldnt", "couldn't"},
    {"couldn'tve", "couldn't've"}, {"couldnt've", "couldn't've"}, {"didnt", "didn't"}, {"doesnt", "doesn't"},
    {"dont", "don't"}, {"hadnt", "hadn't"}, {"hadnt've", "hadn't've"}, {"hadn'tve", "hadn't've"},
    {"hasnt", "hasn't"}, {"havent", "haven't"}, {"hed", "he'd"}, {"hed've", "he'd've"}, {"he'dve", "he'd've"},
    {"hes", "he's"}, {"howd", "how'd"}, {"howll", "how'll"}, {"hows", "how's"}, {"isnt", "isn't"}, {"itd", "it'd"},
    {"itd've", "it'd've"}, {"it'dve", "it'd've"}, {"itll", "it'll"}, {"maam", "ma'am"}, {"mightnt", "mightn't"},
    {"mightnt've", "mightn't've"}, {"mightn'tve", "mightn't've"}, {"mightve", "might've"}, {"mustnt", "mustn't"},
    {"mustve", "must've"}, {"neednt", "needn't"}, {"notve", "not've"}, {"oclock", "o'clock"},
    {"oughtnt", "oughtn't"}, {"ow's'at", "'ow's'at"}, {"'ows'at", "'ow's'at"}, {"'ow'sat", "'ow's'at"},
    {"shant", "shan't"}, {"shed've", "she'd've"}, {"she'dve", "she'd've"}, {"shouldve", "should've"},
    {"shouldnt", "shouldn't"}, {"shouldnt've", "shouldn't've"}, {"shouldn'tve", "shouldn't've"},
    {"somebody'd", "somebodyd"}, {"somebodyd've", "somebody'd've"}, {"somebody'dve", "somebody'd've"},
    {"somebodyll", "somebody'll"}, {"somebodys", "somebody's"}, {"someoned", "someone'd"},
    {"someoned've", "someone'd've"}, {"someone'dve", "someone'd've"}, {"someonell", "someone'll"},
    {"someones", "someone's"}, {"somethingd", "something'd"}, {"somethingd've", "something'd've"},
    {"something'dve", "something'd've"}, {"somethingll", "something'll"}, {"thats", "that's"},
    {"thered", "there'd"}, {"thered've", "there'd've"}, {"there'dve", "there'd've"}, {"therere", "there're"},
    {"theres", "there's"}, {"theyd", "they'd"}, {"theyd've", "they'd've"}, {"they'dve", "they'd've"},
    {"theyll", "they'll"}, {"theyre", "they're"}, {"theyve", "they've"}, {"twas", "'twas"}, {"wasnt", "wasn't"},
    {"wed've", "we'd've"}, {"we'dve", "we'd've"}, {"weve", "we've"}, {"werent", "weren't"}, {"whatll", "what'll"},
    {"whatre", "what're"}, {"whats", "what's"}, {"whatve", "what've"}, {"whens", "when's"}, {"whered", "where'd"},
    {"wheres", "where's"}, {"whereve", "where've"}, {"whod", "who'd"}, {"whod've", "who'd've"},
    {"who'dve", "who'd've"}, {"wholl", "who'll"}, {"whos", "who's"}, {"whove", "who've"}, {"whyll", "why'll"},
    {"whyre", "why're"}, {"whys", "why's"}, {"wont", "won't"}, {"wouldve", "would've"}, {"wouldnt", "wouldn't"},
    {"wouldnt've", "wouldn't've"}, {"wouldn'tve", "wouldn't've"}, {"yall", "y'all"}, {"yall'll", "y'all'll"},
    {"y'allll", "y'all'll"}, {"yall'd've", "y'all'd've"}, {"y'alld've", "y'all'd've"}, {"y'all'dve", "y'all'd've"},
    {"youd", "you'd"}, {"youd've", "you'd've"}, {"you'dve", "you'd've"}, {"youll", "you'll"}, {"youre", "you're"},
    {"youve", "you've"}};
  return m;
}

bool has_digit_comma_digit(const std::string& s) {
  for (size_t i = 1; i + 1 < s.size(); ++i)
    if (s[i] == ',' && is_digit(s[i - 1]) && is_digit(s[i + 1])) return true;
  return false;
}

std::string replace_all(const std::string& s, char from, const char* to) {
  std::string out;
  for (char c : s) {
    if (c == from) out += to;
    else out.push_back(c);
  }
  return out;
}

// Newlines and tabs as spaces, then whitespace trimmed (the reference's replace + strip).
std::string clean(const std::string& s) {
  std::string t = s;
  for (char& c : t)
    if (c == '\n' || c == '\t') c = ' ';
  size_t b = 0, e = t.size();
  while (b < e && is_space(t[b])) ++b;
  while (e > b && is_space(t[e - 1])) --e;
  return t.substr(b, e - b);
}

}  // namespace

std::string vqa_process_punctuation(const std::string& in) {
  const bool digit_comma = has_digit_comma_digit(in);
  std::string out = in;
  for (char p : kPunct) {
    const std::string before{p, ' '}, after{' ', p};
    const bool drop = in.find(before) != std::string::npos || in.find(after) != std::string::npos || digit_comma;
    out = replace_all(out, p, drop ? "" : " ");
  }
  std::string stripped;
  int removed = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == '.' && removed < kMaxPeriodsStripped && !(i + 1 < out.size() && is_digit(out[i + 1]))) {
      ++removed;
      continue;
    }
    stripped.push_back(out[i]);
  }
  return stripped;
}

std::string vqa_process_digit_article(const std::string& in) {
  std::vector<std::string> words;
  std::string w;
  auto flush = [&] {
    if (w.empty()) return;
    auto n = number_words().find(w);
    if (n != number_words().end()) w = n->second;
    if (std::find(kArticles.begin(), kArticles.end(), w) == kArticles.end()) {
      auto c = contractions().find(w);
      words.push_back(c == contractions().end() ? w : c->second);
    }
    w.clear();
  };
  for (char c : in) {
    if (is_space(c)) flush();
    else w.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  flush();
  std::string out;
  for (const std::string& x : words) {
    if (!out.empty()) out.push_back(' ');
    out += x;
  }
  return out;
}

std::string vqa_normalize_answer(const std::string& text) {
  return vqa_process_digit_article(vqa_process_punctuation(clean(text)));
}

double vqa_accuracy(const std::string& prediction, const std::vector<std::string>& answers_in) {
  if (answers_in.empty()) return 0;
  std::vector<std::string> answers;
  for (const std::string& a : answers_in) answers.push_back(clean(a));
  std::string pred = clean(prediction);
  if (std::set<std::string>(answers.begin(), answers.end()).size() > 1) {
    for (std::string& a : answers) a = vqa_process_digit_article(vqa_process_punctuation(a));
    pred = vqa_process_digit_article(vqa_process_punctuation(pred));
  }
  const double matches = static_cast<double>(std::count(answers.begin(), answers.end(), pred));
  double sum = 0;
  for (const std::string& a : answers) {
    const double others = matches - (a == pred ? 1 : 0);
    sum += std::min(1.0, others / 3.0);
  }
  return sum / static_cast<double>(answers.size());
}

}  // namespace vlm

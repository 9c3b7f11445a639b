// The lexer's scanning: tags found by their delimiters, text between them trimmed by the whitespace rules,
// tokens inside tags up to the closing delimiter (which does not count while brackets are open, so "}}" can
// close a dict literal).
#include "data/template/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace vlm::jinja {

void fail(const Pos& pos, const std::string& msg) {
  throw TemplateError("line " + std::to_string(pos.line) + ", column " + std::to_string(pos.column) + ": " + msg);
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Python's str.rstrip() / the \s* after "-%}": Unicode whitespace (ASCII suffices for the template syntax; other
// whitespace characters are matched too so the effect equals Jinja's).
size_t rstrip_end(const std::string& s) {
  size_t end = s.size();
  while (end > 0) {
    unsigned char c = static_cast<unsigned char>(s[end - 1]);
    if (is_space(static_cast<char>(c)) || (c >= 0x1C && c <= 0x1F)) {
      --end;
      continue;
    }
    // Multi-byte whitespace (U+00A0, U+2000.., U+3000, ...): decode the last character.
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && end - start < 4) --start;
    std::vector<uint32_t> cps = code_points(s.substr(start, end - start));
    if (cps.size() == 1 && cps[0] >= 0x80 && is_py_space(cps[0])) {
      end = start;
      continue;
    }
    break;
  }
  return end;
}

size_t lstrip_begin(const std::string& s, size_t pos) {
  while (pos < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[pos]);
    if (c < 0x80) {
      if (is_space(static_cast<char>(c)) || (c >= 0x1C && c <= 0x1F)) {
        ++pos;
        continue;
      }
      break;
    }
    size_t len = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    std::vector<uint32_t> cps = code_points(s.substr(pos, len));
    if (cps.size() == 1 && is_py_space(cps[0])) {
      pos += len;
      continue;
    }
    break;
  }
  return pos;
}

class Lexer {
 public:
  explicit Lexer(const std::string& raw) {
    // Line breaks \r\n, \r and \n all become \n; one trailing line break is dropped (keep_trailing_newline=False).
    src_.reserve(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '\r') {
        src_ += '\n';
        if (i + 1 < raw.size() && raw[i + 1] == '\n') ++i;
      } else {
        src_ += raw[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t tag = find_tag(pos);
      std::string text = src_.substr(pos, (tag == std::string::npos ? src_.size() : tag) - pos);
      if (tag == std::string::npos) {
        push_text(std::move(text), pos);
        break;
      }
      char kind = src_[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '-') {
        text.resize(rstrip_end(text));
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks: blocks and comments only
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 || line_starting) {
          bool blank = l_pos < text.size();
          for (size_t i = l_pos; i < text.size() && blank; ++i) blank = text[i] == ' ' || text[i] == '\t' || text[i] == '\f' || text[i] == '\v';
          if (blank) text.resize(l_pos);
        }
      }
      push_text(std::move(text), pos);
      size_t body = tag + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      if (kind == '#') {
        size_t end = src_.find("#}", body);
        if (end == std::string::npos) fail(pos_of(tag), "unterminated comment: '{#' without '#}'");
        pos = finish_tag(end, end + 2, true, line_starting);
        continue;
      }
      Pos open = pos_of(tag);
      tokens_.push_back({kind == '{' ? Tok::var_begin : Tok::block_begin, kind == '{' ? "{{" : "{%", Value(), open});
      pos = lex_inside(body, kind == '{', open, line_starting);
    }
    tokens_.push_back({Tok::eof, "", Value(), pos_of(src_.size())});
    return std::move(tokens_);
  }

 private:
  Pos pos_of(size_t offset) const {
    size_t lo = 0, hi = line_starts_.size();
    while (hi - lo > 1) {
      size_t mid = (lo + hi) / 2;
      if (line_starts_[mid] <= offset) lo = mid;
      else hi = mid;
    }
    return Pos{static_cast<int>(lo + 1), static_cast<int>(offset - line_starts_[lo] + 1)};
  }

  size_t find_tag(size_t from) const {
    for (size_t p = src_.find('{', from); p != std::string::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) return p;
    }
    return std::string::npos;
  }

  void push_text(std::string text, size_t at) {
    if (!text.empty()) tokens_.push_back({Tok::text, std::move(text), Value(), pos_of(at)});
  }

  // After a tag's closing delimiter [end, after): "-" strips the following whitespace, trim_blocks drops one
  // newline after a block or comment unless "+" precedes the delimiter. Returns where the text resumes.
  size_t finish_tag(size_t end, size_t after, bool block_like, bool& line_starting) {
    char before = end > 0 ? src_[end - 1] : '\0';
    size_t resume = after;
    if (before == '-') {
      resume = lstrip_begin(src_, after);
    } else if (block_like && before != '+' && after < src_.size() && src_[after] == '\n') {
      resume = after + 1;
    }
    line_starting = resume > after && src_[resume - 1] == '\n';  // the tag's match ended with a newline
    return resume;
  }

  // Tokens inside {{ ... }} or {% ... %} up to the closing delimiter (not counted while brackets are open).
  size_t lex_inside(size_t pos, bool variable, const Pos& open, bool& line_starting) {
    std::vector<char> brackets;
    const char* close = variable ? "}}" : "%}";
    while (true) {
      while (pos < src_.size() && is_space(src_[pos])) ++pos;
      if (pos >= src_.size()) fail(open, std::string("unterminated tag: '") + (variable ? "{{" : "{%") + "' without '" + close + "'");
      Pos at = pos_of(pos);
      if (brackets.empty()) {
        size_t delim = std::string::npos;
        if (src_.compare(pos, 2, close) == 0) delim = pos;
        else if ((src_[pos] == '-' || src_[pos] == '+') && src_.compare(pos + 1, 2, close) == 0) delim = pos + 1;
        if (delim != std::string::npos) {
          tokens_.push_back({variable ? Tok::var_end : Tok::block_end, close, Value(), at});
          if (variable && src_[pos] == '+') fail(at, "unexpected '+' before '}}'");
          return finish_tag(delim, delim + 2, !variable, line_starting);
        }
      }
      char c = src_[pos];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t end = pos;
        while (end < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) ++end;
        tokens_.push_back({Tok::name, src_.substr(pos, end - pos), Value(), at});
        pos = end;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        pos = lex_number(pos, at);
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos, at);
      } else {
        static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
                                           "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
        const char* op = nullptr;
        for (const char* o : kOps) {
          if (src_.compare(pos, std::strlen(o), o) == 0) {
            op = o;
            break;
          }
        }
        if (op == nullptr) fail(at, std::string("unexpected character '") + c + "'");
        std::string o = op;
        if (o == "(" || o == "[" || o == "{") brackets.push_back(o == "(" ? ')' : o == "[" ? ']' : '}');
        if (o == ")" || o == "]" || o == "}") {
          if (brackets.empty()) fail(at, "unexpected '" + o + "'");
          if (brackets.back() != o[0]) fail(at, "unexpected '" + o + "', expected '" + std::string(1, brackets.back()) + "'");
          brackets.pop_back();
        }
        tokens_.push_back({Tok::op, o, Value(), at});
        pos += o.size();
      }
    }
  }

  size_t lex_number(size_t pos, const Pos& at) {
    size_t end = pos;
    std::string digits;
    while (end < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) {
      if (src_[end] != '_') digits += src_[end];
      ++end;
    }
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' && std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
      is_float = true;
      digits += '.';
      ++end;
      while (end < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) {
        if (src_[end] != '_') digits += src_[end];
        ++end;
      }
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t e = end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
        is_float = true;
        digits += 'e';
        digits += src_.substr(end + 1, e - end - 1);
        end = e;
        while (end < src_.size() && std::isdigit(static_cast<unsigned char>(src_[end]))) digits += src_[end++];
      }
    }
    Token t{is_float ? Tok::floating : Tok::integer, src_.substr(pos, end - pos), Value(), at};
    try {
      t.literal = is_float ? Value(std::stod(digits)) : Value(static_cast<int64_t>(std::stoll(digits)));
    } catch (const std::exception&) {
      fail(at, "number '" + t.text + "' out of range");
    }
    tokens_.push_back(std::move(t));
    return end;
  }

  // Python string literal escapes (Jinja decodes with "unicode-escape"); unknown escapes keep the backslash.
  size_t lex_string(size_t pos, const Pos& at) {
    char quote = src_[pos];
    std::string out;
    size_t i = pos + 1;
    while (true) {
      if (i >= src_.size()) fail(at, "unterminated string literal");
      char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) fail(at, "unterminated string literal");
      char e = src_[i + 1];
      i += 2;
      auto hex = [&](int n) {
        uint32_t v = 0;
        for (int k = 0; k < n; ++k, ++i) {
          if (i >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[i]))) {
            fail(at, "truncated \\x / \\u escape in string literal");
          }
          char h = src_[i];
          v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        return v;
      };
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': break;  // line continuation
        case 'x': append_utf8(out, hex(2)); break;
        case 'u': append_utf8(out, hex(4)); break;
        case 'U': {
          uint32_t cp = hex(8);
          if (cp > 0x10FFFF) fail(at, "\\U escape out of range in string literal");
          append_utf8(out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k) v = v * 8 + static_cast<uint32_t>(src_[i++] - '0');
            append_utf8(out, v);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    tokens_.push_back({Tok::string, src_.substr(pos, i + 1 - pos), Value(std::move(out)), at});
    return i + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex_template(const std::string& source) { return Lexer(source).run(); }

}  // namespace vlm::jinja

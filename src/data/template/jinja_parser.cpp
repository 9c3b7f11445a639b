// Lexer and recursive-descent parser following Jinja's grammar and operator precedence:
// condexpr < or < and < not < comparison < + - < ~ < * / // % < ** < unary - + < filters | tests is < postfix.
#include "data/template/jinja_parser.h"

#include <cstring>

namespace vlm::jinja {
namespace {

enum class Tok : uint8_t { text, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof };

struct Token {
  Tok kind;
  std::string text;  // text data, name, operator, or the raw literal
  Value literal;     // string / number value
  Pos pos;
};

[[noreturn]] void fail(const Pos& pos, const std::string& msg) {
  throw TemplateError("line " + std::to_string(pos.line) + ", column " + std::to_string(pos.column) + ": " + msg);
}

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

// Tags of Jinja this interpreter does not implement: named in the error instead of "unknown tag".
const char* const kUnsupportedTags[] = {"include", "import", "from", "extends", "block", "call", "with", "raw",
                                        "autoescape", "print", "do", "trans"};

// Bounds the recursion of the expression parser (and so of the evaluator): hostile templates nest deeply.
class DepthGuard {
 public:
  DepthGuard(int& depth, const Pos& pos) : depth_(depth) {
    if (++depth_ > 400) fail(pos, "expression nested too deeply");
  }
  ~DepthGuard() { --depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  int& depth_;
};

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body parse_all() {
    Body body = parse_body({});
    if (peek().kind != Tok::eof) fail(peek().pos, "unexpected tag");
    return body;
  }

 private:
  const Token& peek(size_t k = 0) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& next() { return t_[std::min(i_++, t_.size() - 1)]; }
  bool is_op(const char* op, size_t k = 0) const { return peek(k).kind == Tok::op && peek(k).text == op; }
  bool is_name(const char* n, size_t k = 0) const { return peek(k).kind == Tok::name && peek(k).text == n; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(peek().pos, std::string("expected '") + op + "', got " + describe(peek()));
    ++i_;
  }
  std::string expect_name() {
    if (peek().kind != Tok::name) fail(peek().pos, "expected a name, got " + describe(peek()));
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != Tok::block_end) fail(peek().pos, "expected '%}', got " + describe(peek()));
    ++i_;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Tok::eof: return "end of template";
      case Tok::text: return "text";
      case Tok::block_end: return "'%}'";
      case Tok::var_end: return "'}}'";
      default: return "'" + t.text + "'";
    }
  }

  // Statements until a block tag whose name is in `ends` (left unconsumed: the caller reads it).
  Body parse_body(const std::vector<const char*>& ends) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.kind == Tok::eof) {
        if (!ends.empty()) {
          std::string want;
          for (const char* e : ends) want += std::string(want.empty() ? "" : " or ") + "'" + e + "'";
          fail(t.pos, "unexpected end of template: expected " + want + " to close the block opened at line " +
                          std::to_string(open_lines_.empty() ? 0 : open_lines_.back().line) + ", column " +
                          std::to_string(open_lines_.empty() ? 0 : open_lines_.back().column));
        }
        return body;
      }
      if (t.kind == Tok::text) {
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::text;
        n->pos = t.pos;
        n->text = t.text;
        body.push_back(std::move(n));
        ++i_;
      } else if (t.kind == Tok::var_begin) {
        ++i_;
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::output;
        n->pos = t.pos;
        n->expr = parse_expression();
        if (peek().kind != Tok::var_end) fail(peek().pos, "expected '}}', got " + describe(peek()));
        ++i_;
        body.push_back(std::move(n));
      } else if (t.kind == Tok::block_begin) {
        const Token& tag = peek(1);
        if (tag.kind != Tok::name) fail(tag.pos, "expected a tag name after '{%', got " + describe(tag));
        for (const char* e : ends) {
          if (tag.text == e) return body;
        }
        ++i_;
        body.push_back(parse_statement());
      } else {
        fail(t.pos, "unexpected " + describe(t));
      }
    }
  }

  NodePtr parse_statement() {
    const Token& tag = next();
    const std::string& name = tag.text;
    auto n = std::make_unique<Node>();
    n->pos = tag.pos;
    if (name == "if") return parse_if(std::move(n));
    if (name == "for") return parse_for(std::move(n));
    if (name == "set") return parse_set(std::move(n));
    if (name == "macro") return parse_macro(std::move(n));
    if (name == "filter") {
      n->kind = NodeKind::filter_block;
      n->filter_chain = parse_filters_on_placeholder(tag.pos);
      expect_block_end();
      n->body = parse_block_body(tag.pos, {"endfilter"});
      close_tag("endfilter");
      return n;
    }
    if (name == "generation") {  // transformers' assistant-mask extension: renders its body
      n->kind = NodeKind::generation;
      expect_block_end();
      n->body = parse_block_body(tag.pos, {"endgeneration"});
      close_tag("endgeneration");
      return n;
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail(tag.pos, "'" + name + "' outside of a for loop");
      n->kind = name == "break" ? NodeKind::break_loop : NodeKind::continue_loop;
      expect_block_end();
      return n;
    }
    for (const char* u : kUnsupportedTags) {
      if (name == u) fail(tag.pos, "unsupported tag '" + name + "' (this interpreter implements if, for, set, macro, "
                                   "filter, break, continue and generation)");
    }
    fail(tag.pos, "unknown tag '" + name + "'");
  }

  Body parse_block_body(const Pos& open, const std::vector<const char*>& ends) {
    if (open_lines_.size() >= 256) fail(open, "blocks nested more than 256 deep");
    open_lines_.push_back(open);
    Body b = parse_body(ends);
    open_lines_.pop_back();
    return b;
  }

  // Consumes "{% name %}" (the closing tag parse_body stopped at).
  void close_tag(const char* name) {
    ++i_;  // {%
    if (!is_name(name)) fail(peek().pos, std::string("expected '") + name + "'");
    ++i_;
    expect_block_end();
  }

  NodePtr parse_if(NodePtr n) {
    n->kind = NodeKind::if_chain;
    ExprPtr cond = parse_expression();
    expect_block_end();
    while (true) {
      Body body = parse_block_body(n->pos, {"elif", "else", "endif"});
      n->branches.emplace_back(std::move(cond), std::move(body));
      ++i_;  // {%
      std::string which = next().text;
      if (which == "elif") {
        cond = parse_expression();
        expect_block_end();
      } else if (which == "else") {
        expect_block_end();
        Body else_body = parse_block_body(n->pos, {"endif"});
        n->branches.emplace_back(nullptr, std::move(else_body));
        close_tag("endif");
        return n;
      } else {
        expect_block_end();
        return n;
      }
    }
  }

  NodePtr parse_for(NodePtr n) {
    n->kind = NodeKind::for_loop;
    n->targets.push_back(expect_name());
    while (is_op(",")) {
      ++i_;
      n->targets.push_back(expect_name());
    }
    if (!is_name("in")) fail(peek().pos, "expected 'in' in for loop, got " + describe(peek()));
    ++i_;
    n->expr = parse_expression(/*with_condexpr=*/false);
    if (is_name("if")) {
      ++i_;
      n->loop_filter = parse_expression();
    }
    if (is_name("recursive")) fail(peek().pos, "unsupported construct 'recursive' loop");
    expect_block_end();
    ++loop_depth_;
    n->body = parse_block_body(n->pos, {"else", "endfor"});
    --loop_depth_;
    ++i_;  // {%
    if (next().text == "else") {
      expect_block_end();
      n->else_body = parse_block_body(n->pos, {"endfor"});
      close_tag("endfor");
    } else {
      expect_block_end();
    }
    return n;
  }

  NodePtr parse_set(NodePtr n) {
    n->targets.push_back(expect_name());
    if (is_op(".")) {
      ++i_;
      n->attribute = expect_name();
    } else {
      while (is_op(",")) {
        ++i_;
        n->targets.push_back(expect_name());
      }
    }
    if (is_op("=")) {
      ++i_;
      n->kind = NodeKind::set;
      n->expr = parse_tuple_or_expression();
      expect_block_end();
      return n;
    }
    if (!n->attribute.empty() || n->targets.size() != 1) fail(peek().pos, "expected '=' in set");
    n->kind = NodeKind::set_block;
    if (is_op("|")) n->filter_chain = parse_filters_on_placeholder(n->pos);
    expect_block_end();
    n->body = parse_block_body(n->pos, {"endset"});
    close_tag("endset");
    return n;
  }

  NodePtr parse_macro(NodePtr n) {
    n->kind = NodeKind::macro;
    n->name = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      std::string param = expect_name();
      ExprPtr def;
      if (is_op("=")) {
        ++i_;
        def = parse_expression();
      }
      n->params.emplace_back(std::move(param), std::move(def));
      if (!is_op(",")) break;
      ++i_;
    }
    expect_op(")");
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    n->body = parse_block_body(n->pos, {"endmacro"});
    loop_depth_ = saved;
    close_tag("endmacro");
    return n;
  }

  // "| f(args) | g" applied to a placeholder (an empty name) that the evaluator binds to the block's output.
  ExprPtr parse_filters_on_placeholder(const Pos& pos) {
    auto e = std::make_unique<Expr>();
    e->kind = ExprKind::name;
    e->pos = pos;
    if (is_op("|")) ++i_;
    e = parse_filter(std::move(e));
    while (is_op("|")) {
      ++i_;
      e = parse_filter(std::move(e));
    }
    return e;
  }

  ExprPtr make(ExprKind kind, const Pos& pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // "a, b" without parentheses (set a = 1, 2).
  ExprPtr parse_tuple_or_expression() {
    Pos pos = peek().pos;
    ExprPtr first = parse_expression();
    if (!is_op(",")) return first;
    ExprPtr t = make(ExprKind::tuple, pos);
    t->children.push_back(std::move(first));
    while (is_op(",")) {
      ++i_;
      if (peek().kind == Tok::block_end) break;
      t->children.push_back(parse_expression());
    }
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr = true) {
    DepthGuard guard(depth_, peek().pos);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      Pos pos = next().pos;
      ExprPtr cond = parse_or();
      ExprPtr otherwise;
      if (is_name("else")) {
        ++i_;
        otherwise = parse_condexpr();
      }
      ExprPtr c = make(ExprKind::cond, pos);
      c->children.push_back(std::move(cond));
      c->children.push_back(std::move(expr));
      c->children.push_back(std::move(otherwise));
      expr = std::move(c);
    }
    return expr;
  }

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, const Pos& pos) {
    ExprPtr b = make(ExprKind::binary, pos);
    b->name = op;
    b->children.push_back(std::move(l));
    b->children.push_back(std::move(r));
    return b;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      Pos pos = next().pos;
      l = binary("or", std::move(l), parse_and(), pos);
    }
    return l;
  }

  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      Pos pos = next().pos;
      l = binary("and", std::move(l), parse_not(), pos);
    }
    return l;
  }

  ExprPtr parse_not() {
    DepthGuard guard(depth_, peek().pos);
    if (is_name("not")) {
      Pos pos = next().pos;
      ExprPtr u = make(ExprKind::unary, pos);
      u->name = "not";
      u->children.push_back(parse_not());
      return u;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr l = parse_math1();
    while (true) {
      Pos pos = peek().pos;
      std::string op;
      if (peek().kind == Tok::op && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                     peek().text == "<=" || peek().text == ">" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        ++i_;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        i_ += 2;
        op = "notin";
      } else {
        return l;
      }
      // Chained comparisons (a < b < c) are rare in templates; they read as (a < b) < c here.
      l = binary(op, std::move(l), parse_math1(), pos);
    }
  }

  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      Token op = next();
      l = binary(op.text, std::move(l), parse_concat(), op.pos);
    }
    return l;
  }

  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) {
      Pos pos = next().pos;
      l = binary("~", std::move(l), parse_math2(), pos);
    }
    return l;
  }

  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      Token op = next();
      l = binary(op.text, std::move(l), parse_pow(), op.pos);
    }
    return l;
  }

  ExprPtr parse_pow() {
    ExprPtr l = parse_unary();
    while (is_op("**")) {
      Pos pos = next().pos;
      l = binary("**", std::move(l), parse_unary(), pos);
    }
    return l;
  }

  ExprPtr parse_unary(bool with_filter = true) {
    DepthGuard guard(depth_, peek().pos);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      Token op = next();
      e = make(ExprKind::unary, op.pos);
      e->name = op.text;
      e->children.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    DepthGuard guard(depth_, t.pos);
    ExprPtr e;
    if (t.kind == Tok::name) {
      ++i_;
      if (t.text == "true" || t.text == "True") e = literal(Value(true), t.pos);
      else if (t.text == "false" || t.text == "False") e = literal(Value(false), t.pos);
      else if (t.text == "none" || t.text == "None") e = literal(Value::none(), t.pos);
      else {
        e = make(ExprKind::name, t.pos);
        e->name = t.text;
      }
    } else if (t.kind == Tok::string) {
      std::string s;
      Pos pos = t.pos;
      while (peek().kind == Tok::string) s += next().literal.str_ref();  // adjacent literals concatenate
      e = literal(Value(std::move(s)), pos);
    } else if (t.kind == Tok::integer || t.kind == Tok::floating) {
      ++i_;
      e = literal(t.literal, t.pos);
    } else if (is_op("(")) {
      Pos pos = next().pos;
      if (is_op(")")) {
        ++i_;
        e = make(ExprKind::tuple, pos);
      } else {
        ExprPtr first = parse_expression();
        if (is_op(",")) {
          e = make(ExprKind::tuple, pos);
          e->children.push_back(std::move(first));
          while (is_op(",")) {
            ++i_;
            if (is_op(")")) break;
            e->children.push_back(parse_expression());
          }
        } else {
          e = std::move(first);
        }
        expect_op(")");
      }
    } else if (is_op("[")) {
      Pos pos = next().pos;
      e = make(ExprKind::list, pos);
      while (!is_op("]")) {
        e->children.push_back(parse_expression());
        if (!is_op(",")) break;
        ++i_;
      }
      expect_op("]");
    } else if (is_op("{")) {
      Pos pos = next().pos;
      e = make(ExprKind::dict, pos);
      while (!is_op("}")) {
        e->children.push_back(parse_expression());
        expect_op(":");
        e->children.push_back(parse_expression());
        if (!is_op(",")) break;
        ++i_;
      }
      expect_op("}");
    } else {
      fail(t.pos, "unexpected " + describe(t) + " in expression");
    }
    return e;
  }

  ExprPtr literal(Value v, const Pos& pos) {
    ExprPtr e = make(ExprKind::literal, pos);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        Pos pos = next().pos;
        ExprPtr a = make(ExprKind::attr, pos);
        if (peek().kind == Tok::integer) {  // foo.0 is foo[0]
          a->kind = ExprKind::item;
          a->children.push_back(std::move(e));
          a->children.push_back(literal(next().literal, pos));
        } else {
          a->name = expect_name();
          a->children.push_back(std::move(e));
        }
        e = std::move(a);
      } else if (is_op("[")) {
        Pos pos = next().pos;
        e = parse_subscript(std::move(e), pos);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target, const Pos& pos) {
    ExprPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (!is_op("]")) {
      if (is_op(":")) {
        is_slice = true;
        ++i_;
        if (++part > 2) fail(peek().pos, "too many ':' in slice");
        continue;
      }
      if (parts[part]) fail(peek().pos, "expected ']' or ':' in subscript");
      parts[part] = parse_expression();
    }
    expect_op("]");
    ExprPtr s = make(is_slice ? ExprKind::slice : ExprKind::item, pos);
    s->children.push_back(std::move(target));
    if (!is_slice) {
      if (!parts[0]) fail(pos, "empty subscript");
      s->children.push_back(std::move(parts[0]));
    } else {
      for (auto& p : parts) s->children.push_back(std::move(p));
    }
    return s;
  }

  // "(args, key=value)" after a callee, filter or test name.
  void parse_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().kind == Tok::name && is_op("=", 1)) {
        std::string key = next().text;
        ++i_;
        e.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!e.kwargs.empty()) fail(peek().pos, "positional argument after keyword argument");
        if (is_op("*") || is_op("**")) fail(peek().pos, "unsupported construct '*args' / '**kwargs' in a call");
        e.children.push_back(parse_expression());
      }
      if (!is_op(",")) break;
      ++i_;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    ExprPtr c = make(ExprKind::call, peek().pos);
    c->children.push_back(std::move(callee));
    parse_args(*c);
    return c;
  }

  ExprPtr parse_filter(ExprPtr target) {
    Pos pos = peek().pos;
    ExprPtr f = make(ExprKind::filter, pos);
    f->name = expect_name();
    while (is_op(".")) {  // dotted filter names
      ++i_;
      f->name += "." + expect_name();
    }
    f->children.push_back(std::move(target));
    if (is_op("(")) parse_args(*f);
    return f;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        ++i_;
        e = parse_filter(std::move(e));
      } else if (is_name("is")) {
        Pos pos = next().pos;
        ExprPtr t = make(ExprKind::test, pos);
        if (is_name("not")) {
          ++i_;
          t->negated = true;
        }
        t->name = expect_name();
        t->children.push_back(std::move(e));
        if (is_op("(")) {
          parse_args(*t);
        } else if ((peek().kind == Tok::name || peek().kind == Tok::string || peek().kind == Tok::integer ||
                    peek().kind == Tok::floating || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if") && !is_name("in") &&
                   !is_name("is") && !is_name("not")) {
          ExprPtr arg = parse_primary();
          t->children.push_back(parse_postfix(std::move(arg)));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;
  std::vector<Pos> open_lines_;
};

}  // namespace

Body parse_template(const std::string& source) {
  Lexer lexer(source);
  Parser parser(lexer.run());
  return parser.parse_all();
}

}  // namespace vlm::jinja

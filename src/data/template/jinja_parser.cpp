// Recursive-descent parser following Jinja's grammar and operator precedence:
// condexpr < or < and < not < comparison < + - < ~ < * / // % < ** < unary - + < filters | tests is < postfix.
#include "data/template/jinja_parser.h"

#include <algorithm>

#include "data/template/jinja_lexer.h"

namespace vlm::jinja {
namespace {

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
  Parser parser(lex_template(source));
  return parser.parse_all();
}

}  // namespace vlm::jinja

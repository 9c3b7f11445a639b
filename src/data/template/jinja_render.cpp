// The tree-walking interpreter: scopes (the context, the template's top level, one per loop iteration and macro
// call), expression evaluation with Python semantics, statement execution, and the JinjaTemplate API around it.
#include <unordered_map>
#include <unordered_set>

#include "data/template/jinja.h"
#include "data/template/jinja_builtins.h"
#include "data/template/jinja_parser.h"

namespace vlm {
namespace jinja {
namespace {

// A TemplateError whose message already names the position; raised once, at the innermost failing node.
struct PositionedError : TemplateError {
  using TemplateError::TemplateError;
};

std::string at(const Pos& p) { return "line " + std::to_string(p.line) + ", column " + std::to_string(p.column) + ": "; }

// Constructs whose names are not filters/tests known here are rejected before rendering.
void validate(const Body& body);

void validate_expr(const Expr* e) {
  if (e == nullptr) return;
  if (e->kind == ExprKind::filter && !has_filter(e->name)) {
    throw PositionedError(at(e->pos) + "unsupported filter '" + e->name + "'");
  }
  if (e->kind == ExprKind::test && !has_test(e->name)) {
    throw PositionedError(at(e->pos) + "unsupported test '" + e->name + "'");
  }
  for (const auto& c : e->children) validate_expr(c.get());
  for (const auto& [k, v] : e->kwargs) validate_expr(v.get());
}

void validate(const Body& body) {
  for (const NodePtr& n : body) {
    validate_expr(n->expr.get());
    validate_expr(n->loop_filter.get());
    validate_expr(n->filter_chain.get());
    for (const auto& [cond, b] : n->branches) {
      validate_expr(cond.get());
      validate(b);
    }
    for (const auto& [p, def] : n->params) validate_expr(def.get());
    validate(n->body);
    validate(n->else_body);
  }
}

// Whether `target` (a namespace's storage) is reachable from `v`: storing such a value into the namespace would
// make a reference cycle, which reference counting never frees.
bool reaches(const Value& v, const void* target, std::unordered_set<const void*>& seen) {
  const void* id = v.identity();
  if (id == nullptr || !seen.insert(id).second) return false;
  if (id == target) return true;
  if (v.is_list()) {
    for (const Value& item : v.items()) {
      if (reaches(item, target, seen)) return true;
    }
  } else if (v.is_dict()) {
    for (const auto& e : v.entries().entries) {
      if (reaches(e.second, target, seen)) return true;
    }
  }
  return false;
}

constexpr size_t kMaxOutput = size_t{64} << 20;
constexpr int64_t kMaxIterations = 1'000'000;  // loop iterations per render: nested ranges cannot hang a render
constexpr int kMaxCallDepth = 64;

class Renderer {
 public:
  explicit Renderer(Value context) {
    frames_.push_back(Frame{});
    for (auto& [k, v] : global_functions().entries) frames_[0].vars[k] = v;
    for (const auto& [k, v] : context.entries().entries) frames_[0].vars[k] = v;
    frames_.push_back(Frame{});  // the template's top level
  }

  std::string run(const Body& body) {
    std::string out;
    exec(body, out);
    return out;
  }

 private:
  struct Frame {
    std::unordered_map<std::string, Value> vars;
  };
  enum class Flow : uint8_t { normal, break_loop, continue_loop };

  Value lookup(const std::string& name) const {
    for (size_t i = frames_.size(); i > 0; --i) {
      const Frame& f = frames_[i - 1];
      auto it = f.vars.find(name);
      if (it != f.vars.end()) return it->second;
      if (i - 1 == barrier_ && barrier_ > 1) i = 3;  // inside a macro: skip the caller's frames to the top level
    }
    return Value::undefined("'" + name + "' is undefined");
  }

  void assign(const std::string& name, Value v) { frames_.back().vars[name] = std::move(v); }

  [[noreturn]] static void undefined_error(const Value& v) {
    throw TemplateError(v.undefined_hint().empty() ? "value is undefined" : v.undefined_hint());
  }

  void emit(std::string& out, const std::string& s) {
    if (out.size() + s.size() > kMaxOutput) throw TemplateError("output exceeds 64 MiB");
    out += s;
  }

  // ---- statements ----

  Flow exec(const Body& body, std::string& out) {
    for (const NodePtr& n : body) {
      Flow f = exec_node(*n, out);
      if (f != Flow::normal) return f;
    }
    return Flow::normal;
  }

  Flow exec_node(const Node& n, std::string& out) {
    try {
      return exec_node_unpositioned(n, out);
    } catch (const PositionedError&) {
      throw;
    } catch (const TemplateError& e) {
      throw PositionedError(at(n.pos) + e.what());
    }
  }

  Flow exec_node_unpositioned(const Node& n, std::string& out) {
    switch (n.kind) {
      case NodeKind::text: emit(out, n.text); return Flow::normal;
      case NodeKind::output: emit(out, eval(*n.expr).to_str()); return Flow::normal;
      case NodeKind::if_chain:
        for (const auto& [cond, body] : n.branches) {
          if (cond == nullptr || eval(*cond).truthy()) return exec(body, out);
        }
        return Flow::normal;
      case NodeKind::for_loop: return exec_for(n, out);
      case NodeKind::set: exec_set(n); return Flow::normal;
      case NodeKind::set_block: {
        std::string captured;
        exec(n.body, captured);
        Value v(captured);
        if (n.filter_chain) v = apply_chain(*n.filter_chain, v);
        assign(n.targets[0], v);
        return Flow::normal;
      }
      case NodeKind::filter_block: {
        std::string captured;
        Flow f = exec(n.body, captured);
        emit(out, apply_chain(*n.filter_chain, Value(captured)).to_str());
        return f;
      }
      case NodeKind::generation: return exec(n.body, out);
      case NodeKind::macro: assign(n.name, make_macro(n)); return Flow::normal;
      case NodeKind::break_loop: return Flow::break_loop;
      case NodeKind::continue_loop: return Flow::continue_loop;
    }
    return Flow::normal;
  }

  void exec_set(const Node& n) {
    Value v = eval(*n.expr);
    if (!n.attribute.empty()) {
      Value ns = lookup(n.targets[0]);
      if (ns.type() != Type::name_space) {
        throw TemplateError("cannot assign attribute '" + n.attribute + "' on '" + n.targets[0] +
                            "': only namespace() objects can be modified");
      }
      std::unordered_set<const void*> seen;
      if (reaches(v, ns.identity(), seen)) {
        throw TemplateError("unsupported construct: storing namespace '" + n.targets[0] + "' inside itself");
      }
      ns.mutable_namespace().set(n.attribute, std::move(v));
      return;
    }
    if (n.targets.size() == 1) {
      assign(n.targets[0], std::move(v));
      return;
    }
    ValueList parts = iterate(v);
    if (parts.size() != n.targets.size()) {
      throw TemplateError("cannot unpack " + std::to_string(parts.size()) + " values into " +
                          std::to_string(n.targets.size()) + " names");
    }
    for (size_t i = 0; i < parts.size(); ++i) assign(n.targets[i], parts[i]);
  }

  Flow exec_for(const Node& n, std::string& out) {
    Value seq = eval(*n.expr);
    if (!seq.is_undefined() && !seq.is_list() && !seq.is_dict() && !seq.is_string()) {
      throw TemplateError(std::string("'") + seq.type_name() + "' object is not iterable");
    }
    ValueList items = iterate(seq);
    auto bind = [&](Frame& f, const Value& item) {
      if (n.targets.size() == 1) {
        f.vars[n.targets[0]] = item;
        return;
      }
      ValueList parts = iterate(item);
      if (parts.size() != n.targets.size()) {
        throw TemplateError("cannot unpack " + std::to_string(parts.size()) + " values into " +
                            std::to_string(n.targets.size()) + " loop variables");
      }
      for (size_t i = 0; i < parts.size(); ++i) f.vars[n.targets[i]] = parts[i];
    };
    if (n.loop_filter) {  // "for x in xs if cond": the loop variables count the kept items only
      ValueList kept;
      for (const Value& item : items) {
        frames_.push_back(Frame{});
        bind(frames_.back(), item);
        bool keep = eval(*n.loop_filter).truthy();
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec(n.else_body, out);
      return Flow::normal;
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      if (++iterations_ > kMaxIterations) throw TemplateError("more than 1,000,000 loop iterations");
      frames_.push_back(Frame{});
      bind(frames_.back(), items[static_cast<size_t>(i)]);
      ValueDict loop;
      loop.set("index", Value(i + 1));
      loop.set("index0", Value(i));
      loop.set("revindex", Value(len - i));
      loop.set("revindex0", Value(len - i - 1));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i == len - 1));
      loop.set("length", Value(len));
      loop.set("depth", Value(int64_t{1}));
      loop.set("depth0", Value(int64_t{0}));
      loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item"));
      loop.set("nextitem", i + 1 < len ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item"));
      loop.set("cycle", Value::function("loop.cycle", [i](Args& a) {
                 if (a.positional.empty()) throw TemplateError("loop.cycle() needs at least one argument");
                 return a.positional[static_cast<size_t>(i) % a.positional.size()];
               }));
      frames_.back().vars["loop"] = Value::dict(std::move(loop));
      Flow f;
      try {
        f = exec(n.body, out);
      } catch (...) {
        frames_.pop_back();
        throw;
      }
      frames_.pop_back();
      if (f == Flow::break_loop) break;
    }
    return Flow::normal;
  }

  Value make_macro(const Node& n) {
    const Node* node = &n;
    return Value::function(n.name, [this, node](Args& a) {
      if (call_depth_ >= kMaxCallDepth) throw TemplateError("macro calls nested deeper than 64");
      if (a.positional.size() > node->params.size()) {
        throw TemplateError("macro '" + node->name + "' takes " + std::to_string(node->params.size()) +
                            " arguments, got " + std::to_string(a.positional.size()));
      }
      Frame f;
      for (size_t i = 0; i < node->params.size(); ++i) {
        const auto& [pname, def] = node->params[i];
        Value v = a.get(i, pname, Value::undefined());
        if (v.is_undefined() && def) v = eval(*def);
        if (v.is_undefined()) v = Value::undefined("'" + pname + "' is undefined");
        f.vars[pname] = v;
      }
      for (const auto& [k, v] : a.keyword) {
        bool known = false;
        for (const auto& p : node->params) known |= p.first == k;
        if (!known) throw TemplateError("macro '" + node->name + "' has no parameter '" + k + "'");
      }
      size_t saved_barrier = barrier_;
      barrier_ = frames_.size();
      frames_.push_back(std::move(f));
      ++call_depth_;
      std::string out;
      try {
        exec(node->body, out);
      } catch (...) {
        frames_.pop_back();
        barrier_ = saved_barrier;
        --call_depth_;
        throw;
      }
      frames_.pop_back();
      barrier_ = saved_barrier;
      --call_depth_;
      return Value(out);
    });
  }

  // Applies the filters of a set/filter block (a filter chain whose innermost operand is the placeholder).
  Value apply_chain(const Expr& e, const Value& body) {
    if (e.kind != ExprKind::filter) return body;
    Value input = apply_chain(*e.children[0], body);
    Args args = eval_args(e);
    return apply_filter(e.name, input, args);
  }

  // ---- expressions ----

  Args eval_args(const Expr& e) {
    Args a;
    for (size_t i = 1; i < e.children.size(); ++i) a.positional.push_back(eval(*e.children[i]));
    for (const auto& [k, v] : e.kwargs) a.keyword.emplace_back(k, eval(*v));
    return a;
  }

  Value eval(const Expr& e) {
    try {
      return eval_unpositioned(e);
    } catch (const PositionedError&) {
      throw;
    } catch (const TemplateError& err) {
      throw PositionedError(at(e.pos) + err.what());
    }
  }

  Value eval_unpositioned(const Expr& e) {
    switch (e.kind) {
      case ExprKind::literal: return e.value;
      case ExprKind::name: return lookup(e.name);
      case ExprKind::list:
      case ExprKind::tuple: {
        ValueList items;
        for (const auto& c : e.children) items.push_back(eval(*c));
        return Value::list(std::move(items));
      }
      case ExprKind::dict: {
        ValueDict d;
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          Value k = eval(*e.children[i]);
          if (!k.is_string()) throw TemplateError("dict keys must be strings here, not " + std::string(k.type_name()));
          d.set(k.str_ref(), eval(*e.children[i + 1]));
        }
        return Value::dict(std::move(d));
      }
      case ExprKind::attr: {
        Value obj = eval(*e.children[0]);
        if (obj.is_undefined()) undefined_error(obj);
        return get_attribute(obj, e.name);
      }
      case ExprKind::item: {
        Value obj = eval(*e.children[0]);
        if (obj.is_undefined()) undefined_error(obj);
        return get_item(obj, eval(*e.children[1]));
      }
      case ExprKind::slice: {
        Value obj = eval(*e.children[0]);
        if (obj.is_undefined()) undefined_error(obj);
        auto part = [&](size_t i) { return e.children[i] ? eval(*e.children[i]) : Value(); };
        return get_slice(obj, part(1), part(2), part(3));
      }
      case ExprKind::call: {
        Value fn = eval(*e.children[0]);
        if (fn.is_undefined()) undefined_error(fn);
        if (!fn.is_callable()) throw TemplateError(std::string("'") + fn.type_name() + "' object is not callable");
        Args a = eval_args(e);
        a.what = fn.function_name() + "()";
        return fn.call(a);
      }
      case ExprKind::filter: {
        Value input = eval(*e.children[0]);
        Args a = eval_args(e);
        return apply_filter(e.name, input, a);
      }
      case ExprKind::test: {
        Value input = eval(*e.children[0]);
        Args a = eval_args(e);
        bool r = apply_test(e.name, input, a);
        return Value(e.negated ? !r : r);
      }
      case ExprKind::unary: {
        Value v = eval(*e.children[0]);
        if (e.name == "not") return Value(!v.truthy());
        if (v.is_undefined()) undefined_error(v);
        if (!v.is_number()) throw TemplateError("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
        if (e.name == "+") return v.type() == Type::boolean ? Value(v.as_int()) : v;
        return v.type() == Type::floating ? Value(-v.as_double()) : Value(-v.as_int());
      }
      case ExprKind::cond:
        if (eval(*e.children[0]).truthy()) return eval(*e.children[1]);
        return e.children[2] ? eval(*e.children[2]) : Value::undefined("the inline if expression had no else");
      case ExprKind::binary: return eval_binary(e);
    }
    return Value();
  }

  Value eval_binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value l = eval(*e.children[0]);
      return l.truthy() ? eval(*e.children[1]) : l;
    }
    if (op == "or") {
      Value l = eval(*e.children[0]);
      return l.truthy() ? l : eval(*e.children[1]);
    }
    Value l = eval(*e.children[0]), r = eval(*e.children[1]);
    if (op == "==") return Value(equals(l, r));
    if (op == "!=") return Value(!equals(l, r));
    if (op == "~") return Value(l.to_str() + r.to_str());
    if (op == "in" || op == "notin") {
      Args a;
      a.what = "operator in";
      a.positional.push_back(r);
      if (!r.is_string() && !r.is_list() && !r.is_dict() && !r.is_undefined()) {
        throw TemplateError(std::string("argument of type '") + r.type_name() + "' is not iterable");
      }
      if (r.is_string() && !l.is_string()) {
        throw TemplateError(std::string("'in <string>' requires string as left operand, not ") + l.type_name());
      }
      bool found = apply_test("in", l, a);
      return Value(op == "in" ? found : !found);
    }
    if (l.is_undefined()) undefined_error(l);
    if (r.is_undefined()) undefined_error(r);
    if (op == "<") return Value(less_than(l, r));
    if (op == ">") return Value(less_than(r, l));
    if (op == "<=") return Value(!less_than(r, l));
    if (op == ">=") return Value(!less_than(l, r));
    return arithmetic(op, l, r);
  }

  static Value arithmetic(const std::string& op, const Value& l, const Value& r) {
    auto unsupported_operands = [&]() -> Value {
      if (op == "+" && l.is_string()) {
        throw TemplateError(std::string("can only concatenate str (not \"") + r.type_name() + "\") to str");
      }
      if (op == "+" && l.is_list()) {
        throw TemplateError(std::string("can only concatenate list (not \"") + r.type_name() + "\") to list");
      }
      throw TemplateError("unsupported operand type(s) for " + op + ": '" + l.type_name() + "' and '" + r.type_name() + "'");
    };
    if (l.is_number() && r.is_number()) {
      bool fl = l.type() == Type::floating || r.type() == Type::floating;
      if (op == "/") {
        if (r.as_double() == 0) throw TemplateError("division by zero");
        return Value(l.as_double() / r.as_double());
      }
      if (fl) {
        double a = l.as_double(), b = r.as_double();
        if (op == "+") return Value(a + b);
        if (op == "-") return Value(a - b);
        if (op == "*") return Value(a * b);
        if (op == "**") return Value(std::pow(a, b));
        if (b == 0) throw TemplateError("float division by zero");
        if (op == "//") return Value(std::floor(a / b));
        if (op == "%") return Value(a - b * std::floor(a / b));
      } else {
        int64_t a = l.as_int(), b = r.as_int(), out = 0;
        bool overflow = false;
        if (op == "+") overflow = __builtin_add_overflow(a, b, &out);
        else if (op == "-") overflow = __builtin_sub_overflow(a, b, &out);
        else if (op == "*") overflow = __builtin_mul_overflow(a, b, &out);
        else if (op == "**") {
          if (b < 0) return Value(std::pow(static_cast<double>(a), static_cast<double>(b)));
          out = 1;
          for (int64_t k = 0; k < b && !overflow; ++k) overflow = __builtin_mul_overflow(out, a, &out);
        } else {
          if (b == 0) throw TemplateError("integer division or modulo by zero");
          int64_t q = a / b, m = a % b;
          if (m != 0 && ((m < 0) != (b < 0))) {
            --q;
            m += b;
          }
          out = op == "//" ? q : m;
        }
        if (overflow) throw TemplateError("integer overflow in " + op);
        return Value(out);
      }
    }
    if (op == "+" && l.is_string() && r.is_string()) return Value(l.str_ref() + r.str_ref());
    if (op == "+" && l.is_list() && r.is_list()) {
      ValueList items = l.items();
      items.insert(items.end(), r.items().begin(), r.items().end());
      return Value::list(std::move(items));
    }
    if (op == "*" && (l.is_string() || l.is_list()) && (r.type() == Type::integer || r.type() == Type::boolean)) {
      int64_t n = r.as_int();
      size_t unit = l.is_string() ? l.str_ref().size() : l.items().size();
      if (n > 0 && unit * static_cast<size_t>(n) > kMaxOutput) throw TemplateError("repetition result too large");
      if (l.is_string()) {
        std::string out;
        for (int64_t k = 0; k < n; ++k) out += l.str_ref();
        return Value(out);
      }
      ValueList items;
      for (int64_t k = 0; k < n; ++k) items.insert(items.end(), l.items().begin(), l.items().end());
      return Value::list(std::move(items));
    }
    if (op == "%" && l.is_string()) throw TemplateError("unsupported construct: printf-style string formatting with %");
    return unsupported_operands();
  }

  std::vector<Frame> frames_;
  size_t barrier_ = 0;
  int call_depth_ = 0;
  int64_t iterations_ = 0;
};

}  // namespace
}  // namespace jinja

Expected<JinjaTemplate> JinjaTemplate::parse(const std::string& source, const std::string& name) {
  JinjaTemplate t;
  t.name_ = name;
  try {
    auto body = std::make_shared<jinja::Body>(jinja::parse_template(source));
    jinja::validate(*body);
    t.body_ = std::move(body);
  } catch (const jinja::TemplateError& e) {
    std::string msg = e.what();
    bool unsupported_construct = msg.find("unsupported") != std::string::npos;
    std::string full = name + ": " + msg;
    return unsupported_construct ? unsupported(full) : parse_error(full);
  }
  return t;
}

Expected<std::string> JinjaTemplate::render(const nlohmann::ordered_json& variables) const {
  if (!body_) return invalid_argument("render() on an empty JinjaTemplate");
  if (!variables.is_object()) return invalid_argument(name_ + ": template variables must be a JSON object");
  try {
    jinja::Renderer r(jinja::Value::from_json(variables));
    return r.run(*body_);
  } catch (const jinja::TemplateError& e) {
    return invalid_argument(name_ + ": " + e.what());
  }
}

}  // namespace vlm

// Syntax tree of a parsed Jinja template: expression nodes (literals, names, operators, attribute and item access,
// calls, filters, tests, conditionals) and statement nodes (text, output, if, for, set, macro, break/continue,
// filter and generation blocks). Every node keeps its source position for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/template/jinja_value.h"

namespace vlm::jinja {

struct Pos {
  int line = 1, column = 1;
};

enum class ExprKind : uint8_t {
  literal,   // value
  name,      // name
  list,      // children
  tuple,     // children
  dict,      // children: key, value, key, value, ...
  attr,      // children[0].name
  item,      // children[0][children[1]]
  slice,     // children[0][children[1]:children[2]:children[3]] (null parts allowed)
  call,      // children[0](children[1..], kwargs)
  filter,    // children[0] | name(children[1..], kwargs)
  test,      // children[0] is [not] name(children[1..]); negated
  unary,     // name in {"-", "+", "not"} applied to children[0]
  binary,    // children[0] name children[1]: + - * / // % ** ~ == != < <= > >= in notin and or
  cond,      // children[1] if children[0] else children[2] (children[2] may be null)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::literal;
  Pos pos;
  Value value;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;
};

enum class NodeKind : uint8_t { text, output, if_chain, for_loop, set, set_block, macro, break_loop, continue_loop,
                                filter_block, generation };

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  NodeKind kind = NodeKind::text;
  Pos pos;
  std::string text;                                    // text
  ExprPtr expr;                                        // output value, set value, for iterable
  std::vector<std::pair<ExprPtr, Body>> branches;      // if_chain: (condition, body); else: null condition
  std::vector<std::string> targets;                    // for / set: names (several = tuple unpacking)
  std::string attribute;                               // set ns.attribute = ...
  ExprPtr loop_filter;                                 // for ... if condition
  Body body, else_body;                                // for, set_block, macro, filter_block, generation
  std::string name;                                    // macro name
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters with optional defaults
  ExprPtr filter_chain;                                // set_block / filter_block: filters applied to the body
};

}  // namespace vlm::jinja

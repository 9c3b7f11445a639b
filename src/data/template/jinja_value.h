// Values of the Jinja interpreter with Python's semantics (what Hugging Face chat templates are written against):
// undefined, none, booleans, integers, floats, strings, lists, insertion-ordered dicts, callables (builtins,
// macros, bound methods) and the mutable namespace() object. Lists and dicts are immutable once built (the
// sandbox transformers renders in forbids mutation), so copies share them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace vlm::jinja {

// Raised inside the interpreter and turned into a Status at the API boundary (jinja.cpp): every operation of a
// template can fail, deep inside recursive evaluation, and must abort the whole render.
struct TemplateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Value;
using ValueList = std::vector<Value>;
struct ValueDict;
struct Args;
using NativeFunction = std::function<Value(Args&)>;

enum class Type : uint8_t { undefined, none, boolean, integer, floating, string, list, dict, function, name_space };

class Value {
 public:
  Value() = default;  // undefined
  static Value undefined(std::string hint = "");
  static Value none();
  Value(bool b);
  Value(int64_t i);
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(double d);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  static Value list(ValueList items);
  static Value dict(ValueDict d);
  static Value function(std::string name, NativeFunction fn);
  static Value name_space(ValueDict d);  // namespace(): attributes may be assigned
  static Value from_json(const nlohmann::ordered_json& j);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::undefined; }
  bool is_none() const { return type_ == Type::none; }
  bool is_string() const { return type_ == Type::string; }
  bool is_number() const { return type_ == Type::integer || type_ == Type::floating || type_ == Type::boolean; }
  bool is_list() const { return type_ == Type::list; }
  bool is_dict() const { return type_ == Type::dict || type_ == Type::name_space; }
  bool is_callable() const { return type_ == Type::function; }

  bool as_bool() const { return b_; }
  int64_t as_int() const;  // booleans and integers
  double as_double() const;
  const std::string& str_ref() const { return *s_; }
  const ValueList& items() const { return *list_; }
  const ValueDict& entries() const { return *dict_; }
  ValueDict& mutable_namespace() const { return *dict_; }
  const std::string& undefined_hint() const { return *s_; }
  const std::string& function_name() const { return *s_; }
  Value call(Args& args) const { return (*fn_)(args); }

  bool truthy() const;
  // Python's str() (what {{ }} prints: None, True, [1, 'a'], {'k': 'v'}), '' for undefined.
  std::string to_str() const;
  // Python's repr() (strings quoted and escaped).
  std::string repr() const;
  // json.dumps(value, ensure_ascii=False, indent, separators, sort_keys) as transformers' tojson filter does.
  std::string to_json(int indent, const std::string& item_sep, const std::string& key_sep, bool sort_keys) const;
  const char* type_name() const;  // Python's type names: 'str', 'list', 'dict', 'NoneType', ...
  int depth() const { return depth_; }
  // The shared storage of a list, dict or namespace (null otherwise): identity for cycle checks.
  const void* identity() const {
    return list_ ? static_cast<const void*>(list_.get()) : static_cast<const void*>(dict_.get());
  }

 private:
  Type type_ = Type::undefined;
  uint16_t depth_ = 0;  // lists and dicts: 1 + the deepest element (bounded, so destruction cannot overflow the stack)
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<std::string> s_;
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<NativeFunction> fn_;
};

struct ValueDict {
  std::vector<std::pair<std::string, Value>> entries;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
};

// Arguments of a call: positional then keyword, in source order. Accessors raise TemplateError naming `what`.
struct Args {
  std::string what;  // "filter 'join'", "function 'range'", ...
  ValueList positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index` or named `name`; `fallback` when absent.
  Value get(size_t index, const std::string& name, Value fallback = Value()) const;
  void expect_at_most(size_t n) const;
};

bool equals(const Value& a, const Value& b);
// Python's ordering (<) for numbers, strings and lists; TemplateError for other types.
bool less_than(const Value& a, const Value& b);
// The elements iteration yields: list items, dict keys, string characters; empty for undefined.
ValueList iterate(const Value& v);

// Case mapping of ASCII, Latin-1, Greek and Cyrillic letters (enough for the role names and prose of chat
// templates); other characters are kept.
std::string to_upper(const std::string& s);
std::string to_lower(const std::string& s);
// Python's str.isspace() for one code point.
bool is_py_space(uint32_t cp);
// Decodes UTF-8 leniently into code points for character-wise string operations; an invalid byte b becomes the
// out-of-range value 0x110000 + b, which append_utf8 writes back as the byte itself.
std::vector<uint32_t> code_points(const std::string& s);
void append_utf8(std::string& out, uint32_t cp);

}  // namespace vlm::jinja

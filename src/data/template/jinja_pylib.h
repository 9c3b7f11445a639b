// Python library pieces the interpreter's builtins share: argument accessors, str methods (strip, split, replace,
// capitalize, title, ...) with Python 3's semantics, and the bound methods of strings and dicts.
#pragma once

#include <cstdint>
#include <string>

#include "data/template/jinja_value.h"

namespace vlm::jinja {

// Raises TemplateError "<what>: <msg>".
[[noreturn]] void bad(const std::string& what, const std::string& msg);
// Argument `i` or keyword `name` of a call as a string / integer / truth value, `fallback` when absent or None.
std::string str_arg(const Args& a, size_t i, const std::string& name, const std::string& fallback);
int64_t int_arg(const Args& a, size_t i, const std::string& name, int64_t fallback);
bool bool_arg(const Args& a, size_t i, const std::string& name, bool fallback);

size_t char_count(const std::string& s);
// Python's str.strip / lstrip / rstrip: `chars` null strips whitespace.
std::string strip_chars(const std::string& s, const std::string* chars, bool left, bool right);
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);
// str.split(sep, maxsplit): `sep` undefined or None splits on whitespace runs; maxsplit < 0 is unlimited.
Value py_split(const std::string& s, const Value& sep, int64_t maxsplit);
std::string py_capitalize(const std::string& s);
// Jinja's title filter (words start after runs of [-\s({\[<]), unlike Python's str.title().
std::string jinja_title(const std::string& s);

// s.name / d.name as bound methods; undefined (with a hint) when the type has no such method.
Value string_method(const std::string& s, const std::string& name);
Value dict_method(const Value& d, const std::string& name);

}  // namespace vlm::jinja

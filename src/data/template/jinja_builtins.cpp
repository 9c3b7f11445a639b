// Filters, tests, string/dict methods and global functions with the semantics of Jinja 3 and Python 3.
#include "data/template/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <optional>

namespace vlm::jinja {
namespace {

[[noreturn]] void bad(const std::string& what, const std::string& msg) { throw TemplateError(what + ": " + msg); }

std::string str_arg(const Args& a, size_t i, const std::string& name, const std::string& fallback) {
  Value v = a.get(i, name, Value(fallback));
  if (v.is_undefined() || v.is_none()) return fallback;
  if (!v.is_string()) bad(a.what, "argument '" + name + "' must be a string, not " + v.type_name());
  return v.str_ref();
}

int64_t int_arg(const Args& a, size_t i, const std::string& name, int64_t fallback) {
  Value v = a.get(i, name, Value(fallback));
  if (v.is_undefined() || v.is_none()) return fallback;
  if (v.type() != Type::integer && v.type() != Type::boolean) bad(a.what, "argument '" + name + "' must be an integer");
  return v.as_int();
}

bool bool_arg(const Args& a, size_t i, const std::string& name, bool fallback) {
  Value v = a.get(i, name, Value(fallback));
  return v.is_undefined() ? fallback : v.truthy();
}

size_t char_count(const std::string& s) { return code_points(s).size(); }

// Python's str.strip family: `chars` empty (None) strips whitespace.
std::string strip_chars(const std::string& s, const std::string* chars, bool left, bool right) {
  std::vector<uint32_t> cps = code_points(s), set;
  if (chars != nullptr) set = code_points(*chars);
  auto strip_it = [&](uint32_t c) {
    return chars == nullptr ? is_py_space(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_it(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(cps[e - 1])) --e;
  }
  std::string out;
  for (size_t i = b; i < e; ++i) append_utf8(out, cps[i]);
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    std::vector<uint32_t> cps = code_points(s);
    int64_t n = 0;
    for (uint32_t c : cps) {
      if (count < 0 || n < count) {
        out += repl;
        ++n;
      }
      append_utf8(out, c);
    }
    if (count < 0 || n < count) out += repl;
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  for (size_t hit = s.find(old); hit != std::string::npos && (count < 0 || n < count); hit = s.find(old, pos), ++n) {
    out.append(s, pos, hit - pos);
    out += repl;
    pos = hit + old.size();
  }
  out.append(s, pos, std::string::npos);
  return out;
}

Value py_split(const std::string& s, const Value& sep, int64_t maxsplit) {
  ValueList parts;
  if (sep.is_undefined() || sep.is_none()) {  // runs of whitespace, no empty strings
    std::vector<uint32_t> cps = code_points(s);
    size_t i = 0;
    int64_t n = 0;
    while (i < cps.size()) {
      while (i < cps.size() && is_py_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      std::string word;
      if (maxsplit >= 0 && n >= maxsplit) {
        for (; i < cps.size(); ++i) append_utf8(word, cps[i]);
        // Python keeps the remainder as is, trailing whitespace stripped.
        parts.emplace_back(strip_chars(word, nullptr, false, true));
        break;
      }
      while (i < cps.size() && !is_py_space(cps[i])) append_utf8(word, cps[i++]);
      parts.emplace_back(std::move(word));
      ++n;
    }
    return Value::list(std::move(parts));
  }
  if (!sep.is_string()) throw TemplateError(std::string("split: separator must be a string, not ") + sep.type_name());
  const std::string& d = sep.str_ref();
  if (d.empty()) throw TemplateError("split: empty separator");
  size_t pos = 0;
  int64_t n = 0;
  for (size_t hit = s.find(d); hit != std::string::npos && (maxsplit < 0 || n < maxsplit); hit = s.find(d, pos), ++n) {
    parts.emplace_back(s.substr(pos, hit - pos));
    pos = hit + d.size();
  }
  parts.emplace_back(s.substr(pos));
  return Value::list(std::move(parts));
}

std::string py_capitalize(const std::string& s) {
  std::vector<uint32_t> cps = code_points(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    std::string c;
    append_utf8(c, cps[i]);
    out += i == 0 ? to_upper(c) : to_lower(c);
  }
  return out;
}

bool is_letter_cp(uint32_t c) {
  std::string s;
  append_utf8(s, c);
  return to_upper(s) != to_lower(s) || (c >= 0xAA && c < 0x110000 && c != 0xD7 && c != 0xF7 && c >= 0xC0);
}

// Python's str.title(): a cased character after an uncased one is upper case, others lower case.
std::string py_title(const std::string& s) {
  std::string out;
  bool prev_letter = false;
  for (uint32_t c : code_points(s)) {
    std::string ch;
    append_utf8(ch, c);
    out += prev_letter ? to_lower(ch) : to_upper(ch);
    prev_letter = is_letter_cp(c);
  }
  return out;
}

// Jinja's title filter: words start after runs of [-\s({\[<].
std::string jinja_title(const std::string& s) {
  std::string out;
  bool start = true;
  for (uint32_t c : code_points(s)) {
    std::string ch;
    append_utf8(ch, c);
    bool sep = is_py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    out += sep ? ch : (start ? to_upper(ch) : to_lower(ch));
    start = sep;
  }
  return out;
}

bool starts_or_ends(const std::string& s, const Value& arg, bool start, const std::string& what) {
  auto check = [&](const Value& p) {
    if (!p.is_string()) bad(what, std::string("expected a string or a tuple of strings, not ") + p.type_name());
    const std::string& x = p.str_ref();
    if (x.size() > s.size()) return false;
    return start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (arg.is_list()) {
    for (const Value& p : arg.items()) {
      if (check(p)) return true;
    }
    return false;
  }
  return check(arg);
}

Value bound(const std::string& name, std::function<Value(Args&)> fn) { return Value::function(name, std::move(fn)); }

Value string_method(const std::string& s, const std::string& name) {
  std::string what = "str." + name + "()";
  auto self = s;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool l = name != "rstrip", r = name != "lstrip";
    return bound(what, [self, l, r, what](Args& a) {
      a.expect_at_most(1);
      Value c = a.get(0, "chars");
      if (c.is_undefined() || c.is_none()) return Value(strip_chars(self, nullptr, l, r));
      if (!c.is_string()) bad(what, "chars must be a string");
      return Value(strip_chars(self, &c.str_ref(), l, r));
    });
  }
  if (name == "split") {
    return bound(what, [self](Args& a) { return py_split(self, a.get(0, "sep"), int_arg(a, 1, "maxsplit", -1)); });
  }
  if (name == "splitlines") {
    return bound(what, [self](Args&) {
      ValueList lines;
      std::string cur;
      for (size_t i = 0; i < self.size(); ++i) {
        if (self[i] == '\n' || self[i] == '\r') {
          lines.emplace_back(cur);
          cur.clear();
          if (self[i] == '\r' && i + 1 < self.size() && self[i + 1] == '\n') ++i;
        } else {
          cur += self[i];
        }
      }
      if (!cur.empty()) lines.emplace_back(cur);
      return Value::list(std::move(lines));
    });
  }
  if (name == "startswith" || name == "endswith") {
    bool start = name == "startswith";
    return bound(what, [self, start, what](Args& a) { return Value(starts_or_ends(self, a.get(0, "prefix"), start, what)); });
  }
  if (name == "upper") return bound(what, [self](Args&) { return Value(to_upper(self)); });
  if (name == "lower") return bound(what, [self](Args&) { return Value(to_lower(self)); });
  if (name == "title") return bound(what, [self](Args&) { return Value(py_title(self)); });
  if (name == "capitalize") return bound(what, [self](Args&) { return Value(py_capitalize(self)); });
  if (name == "replace") {
    return bound(what, [self, what](Args& a) {
      return Value(py_replace(self, str_arg(a, 0, "old", ""), str_arg(a, 1, "new", ""), int_arg(a, 2, "count", -1)));
    });
  }
  if (name == "find" || name == "rfind" || name == "count") {
    return bound(what, [self, name](Args& a) {
      std::string sub = str_arg(a, 0, "sub", "");
      if (name == "count") {
        if (sub.empty()) return Value(static_cast<int64_t>(char_count(self) + 1));
        int64_t n = 0;
        for (size_t p = self.find(sub); p != std::string::npos; p = self.find(sub, p + sub.size())) ++n;
        return Value(n);
      }
      size_t p = name == "find" ? self.find(sub) : self.rfind(sub);
      return Value(p == std::string::npos ? int64_t{-1} : static_cast<int64_t>(char_count(self.substr(0, p))));
    });
  }
  if (name == "join") {
    return bound(what, [self](Args& a) {
      std::string out;
      ValueList items = iterate(a.get(0, "iterable"));
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].is_string()) bad("str.join()", std::string("sequence item ") + std::to_string(i) + ": expected str instance, " + items[i].type_name() + " found");
        out += (i ? self : "") + items[i].str_ref();
      }
      return Value(out);
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isupper" || name == "islower") {
    return bound(what, [self, name](Args&) {
      std::vector<uint32_t> cps = code_points(self);
      if (cps.empty()) return Value(false);
      if (name == "isupper") return Value(to_lower(self) != self && to_upper(self) == self);
      if (name == "islower") return Value(to_upper(self) != self && to_lower(self) == self);
      for (uint32_t c : cps) {
        bool ok = name == "isdigit" ? (c >= '0' && c <= '9') : name == "isspace" ? is_py_space(c) : is_letter_cp(c);
        if (!ok) return Value(false);
      }
      return Value(true);
    });
  }
  if (name == "format") {
    return bound(what, [](Args&) -> Value { throw TemplateError("unsupported construct: str.format()"); });
  }
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

Value dict_method(const Value& d, const std::string& name) {
  std::string what = "dict." + name + "()";
  if (name == "items") {
    return bound(what, [d](Args&) {
      ValueList out;
      for (const auto& [k, v] : d.entries().entries) out.push_back(Value::list({Value(k), v}));
      return Value::list(std::move(out));
    });
  }
  if (name == "keys" || name == "values") {
    bool keys = name == "keys";
    return bound(what, [d, keys](Args&) {
      ValueList out;
      for (const auto& [k, v] : d.entries().entries) out.push_back(keys ? Value(k) : v);
      return Value::list(std::move(out));
    });
  }
  if (name == "get") {
    return bound(what, [d](Args& a) {
      Value key = a.get(0, "key");
      const Value* v = key.is_string() ? d.entries().find(key.str_ref()) : nullptr;
      return v != nullptr ? *v : a.get(1, "default", Value::none());
    });
  }
  return Value();
}

Value attribute_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t pos = 0;
  while (true) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = numeric ? get_item(cur, Value(static_cast<int64_t>(std::stoll(part)))) : get_item(cur, Value(part));
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

// Arguments after the first `skip` positional ones, for select/reject style filters that forward them to a test.
Args forward_args(const Args& a, size_t skip, const std::string& what) {
  Args out;
  out.what = what;
  for (size_t i = skip; i < a.positional.size(); ++i) out.positional.push_back(a.positional[i]);
  out.keyword = a.keyword;
  return out;
}

std::string escape_html(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value to_number(const Value& v, bool as_float, const Value& fallback) {
  if (v.type() == Type::integer || v.type() == Type::boolean) return as_float ? Value(v.as_double()) : Value(v.as_int());
  if (v.type() == Type::floating) return as_float ? v : Value(static_cast<int64_t>(v.as_double()));
  if (v.is_string()) {
    std::string s = strip_chars(v.str_ref(), nullptr, true, true);
    try {
      size_t used = 0;
      if (as_float) {
        double d = std::stod(s, &used);
        if (used == s.size()) return Value(d);
      } else {
        long long i = std::stoll(s, &used, 10);
        if (used == s.size()) return Value(static_cast<int64_t>(i));
      }
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

using Filter = Value (*)(const Value&, Args&);

// Sort key comparison for sort/unique/min/max: case-insensitive strings unless asked otherwise.
Value sort_key(const Value& v, bool case_sensitive, const std::string& attribute) {
  Value k = attribute.empty() ? v : attribute_path(v, attribute);
  if (!case_sensitive && k.is_string()) return Value(to_lower(k.str_ref()));
  return k;
}

const std::map<std::string, Filter>& filters() {
  static const std::map<std::string, Filter> table = {
      {"abs", [](const Value& v, Args& a) -> Value {
         if (v.type() == Type::floating) return Value(std::fabs(v.as_double()));
         if (v.is_number()) return Value(static_cast<int64_t>(std::llabs(v.as_int())));
         bad(a.what, std::string("bad operand type for abs(): '") + v.type_name() + "'");
       }},
      {"attr", [](const Value& v, Args& a) { return get_attribute(v, str_arg(a, 0, "name", "")); }},
      {"capitalize", [](const Value& v, Args&) { return Value(py_capitalize(v.to_str())); }},
      {"count", [](const Value& v, Args& a) { return apply_filter("length", v, a); }},
      {"default", [](const Value& v, Args& a) {
         bool boolean = bool_arg(a, 1, "boolean", false);
         if (v.is_undefined() || (boolean && !v.truthy())) return a.get(0, "default_value", Value(""));
         return v;
       }},
      {"d", [](const Value& v, Args& a) { return apply_filter("default", v, a); }},
      {"escape", [](const Value& v, Args&) { return Value(escape_html(v.to_str())); }},
      {"e", [](const Value& v, Args&) { return Value(escape_html(v.to_str())); }},
      {"first", [](const Value& v, Args&) {
         ValueList items = iterate(v);
         return items.empty() ? Value::undefined("no first item, sequence was empty") : items.front();
       }},
      {"last", [](const Value& v, Args&) {
         ValueList items = iterate(v);
         return items.empty() ? Value::undefined("no last item, sequence was empty") : items.back();
       }},
      {"float", [](const Value& v, Args& a) { return to_number(v, true, a.get(0, "default", Value(0.0))); }},
      {"int", [](const Value& v, Args& a) { return to_number(v, false, a.get(0, "default", Value(int64_t{0}))); }},
      {"items", [](const Value& v, Args& a) -> Value {
         if (v.is_undefined()) return Value::list({});
         if (!v.is_dict()) bad(a.what, std::string("can only get item pairs from a mapping, not ") + v.type_name());
         Args none;
         return dict_method(v, "items").call(none);
       }},
      {"join", [](const Value& v, Args& a) {
         std::string sep = str_arg(a, 0, "d", "");
         Value attribute = a.get(1, "attribute");
         std::string out;
         ValueList items = iterate(v);
         for (size_t i = 0; i < items.size(); ++i) {
           Value item = attribute.is_undefined() ? items[i] : attribute_path(items[i], attribute.to_str());
           out += (i ? sep : "") + item.to_str();
         }
         return Value(out);
       }},
      {"length", [](const Value& v, Args& a) -> Value {
         if (v.is_string()) return Value(static_cast<int64_t>(char_count(v.str_ref())));
         if (v.is_list()) return Value(static_cast<int64_t>(v.items().size()));
         if (v.is_dict()) return Value(static_cast<int64_t>(v.entries().entries.size()));
         if (v.is_undefined()) return Value(int64_t{0});
         bad(a.what, std::string("object of type '") + v.type_name() + "' has no len()");
       }},
      {"list", [](const Value& v, Args&) { return Value::list(iterate(v)); }},
      {"lower", [](const Value& v, Args&) { return Value(to_lower(v.to_str())); }},
      {"upper", [](const Value& v, Args&) { return Value(to_upper(v.to_str())); }},
      {"map", [](const Value& v, Args& a) {
         ValueList out;
         Value attribute = a.get(99, "attribute");
         for (const Value& item : iterate(v)) {
           if (!attribute.is_undefined()) {
             Value got = attribute_path(item, attribute.to_str());
             out.push_back(got.is_undefined() ? a.get(99, "default", got) : got);
           } else {
             if (a.positional.empty() || !a.positional[0].is_string()) bad(a.what, "expected a filter name or attribute=");
             Args fa = forward_args(a, 1, "filter '" + a.positional[0].str_ref() + "'");
             out.push_back(apply_filter(a.positional[0].str_ref(), item, fa));
           }
         }
         return Value::list(std::move(out));
       }},
      {"max", [](const Value& v, Args& a) {
         ValueList items = iterate(v);
         if (items.empty()) return Value::undefined("no max item, sequence was empty");
         bool cs = bool_arg(a, 0, "case_sensitive", false);
         std::string attr = str_arg(a, 1, "attribute", "");
         Value best = items[0];
         for (const Value& x : items) {
           if (less_than(sort_key(best, cs, attr), sort_key(x, cs, attr))) best = x;
         }
         return best;
       }},
      {"min", [](const Value& v, Args& a) {
         ValueList items = iterate(v);
         if (items.empty()) return Value::undefined("no min item, sequence was empty");
         bool cs = bool_arg(a, 0, "case_sensitive", false);
         std::string attr = str_arg(a, 1, "attribute", "");
         Value best = items[0];
         for (const Value& x : items) {
           if (less_than(sort_key(x, cs, attr), sort_key(best, cs, attr))) best = x;
         }
         return best;
       }},
      {"select", [](const Value& v, Args& a) {
         ValueList out;
         for (const Value& item : iterate(v)) {
           bool keep;
           if (a.positional.empty()) {
             keep = item.truthy();
           } else {
             Args ta = forward_args(a, 1, "test '" + a.positional[0].to_str() + "'");
             keep = apply_test(a.positional[0].to_str(), item, ta);
           }
           if (keep) out.push_back(item);
         }
         return Value::list(std::move(out));
       }},
      {"reject", [](const Value& v, Args& a) {
         ValueList out;
         for (const Value& item : iterate(v)) {
           bool match;
           if (a.positional.empty()) {
             match = item.truthy();
           } else {
             Args ta = forward_args(a, 1, "test '" + a.positional[0].to_str() + "'");
             match = apply_test(a.positional[0].to_str(), item, ta);
           }
           if (!match) out.push_back(item);
         }
         return Value::list(std::move(out));
       }},
      {"selectattr", [](const Value& v, Args& a) {
         if (a.positional.empty()) bad(a.what, "missing the attribute name");
         std::string attr = a.positional[0].to_str();
         ValueList out;
         for (const Value& item : iterate(v)) {
           Value x = attribute_path(item, attr);
           bool keep;
           if (a.positional.size() < 2) {
             keep = x.truthy();
           } else {
             Args ta = forward_args(a, 2, "test '" + a.positional[1].to_str() + "'");
             keep = apply_test(a.positional[1].to_str(), x, ta);
           }
           if (keep) out.push_back(item);
         }
         return Value::list(std::move(out));
       }},
      {"rejectattr", [](const Value& v, Args& a) {
         if (a.positional.empty()) bad(a.what, "missing the attribute name");
         std::string attr = a.positional[0].to_str();
         ValueList out;
         for (const Value& item : iterate(v)) {
           Value x = attribute_path(item, attr);
           bool match;
           if (a.positional.size() < 2) {
             match = x.truthy();
           } else {
             Args ta = forward_args(a, 2, "test '" + a.positional[1].to_str() + "'");
             match = apply_test(a.positional[1].to_str(), x, ta);
           }
           if (!match) out.push_back(item);
         }
         return Value::list(std::move(out));
       }},
      {"replace", [](const Value& v, Args& a) {
         return Value(py_replace(v.to_str(), str_arg(a, 0, "old", ""), str_arg(a, 1, "new", ""), int_arg(a, 2, "count", -1)));
       }},
      {"reverse", [](const Value& v, Args&) -> Value {
         if (v.is_string()) {
           std::vector<uint32_t> cps = code_points(v.str_ref());
           std::string out;
           for (size_t i = cps.size(); i > 0; --i) append_utf8(out, cps[i - 1]);
           return Value(out);
         }
         ValueList items = iterate(v);
         std::reverse(items.begin(), items.end());
         return Value::list(std::move(items));
       }},
      {"round", [](const Value& v, Args& a) -> Value {
         if (!v.is_number()) bad(a.what, std::string("expected a number, got ") + v.type_name());
         int64_t precision = int_arg(a, 0, "precision", 0);
         std::string method = str_arg(a, 1, "method", "common");
         double scale = std::pow(10.0, static_cast<double>(precision));
         double x = v.as_double() * scale;
         if (method == "common") x = std::nearbyint(x);  // Python's round(): halves to even
         else if (method == "ceil") x = std::ceil(x);
         else if (method == "floor") x = std::floor(x);
         else bad(a.what, "method must be common, ceil or floor");
         return Value(x / scale);
       }},
      {"safe", [](const Value& v, Args&) { return v; }},
      {"sort", [](const Value& v, Args& a) {
         ValueList items = iterate(v);
         bool reverse = bool_arg(a, 0, "reverse", false), cs = bool_arg(a, 1, "case_sensitive", false);
         std::string attr = str_arg(a, 2, "attribute", "");
         std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
           return reverse ? less_than(sort_key(y, cs, attr), sort_key(x, cs, attr))
                          : less_than(sort_key(x, cs, attr), sort_key(y, cs, attr));
         });
         return Value::list(std::move(items));
       }},
      {"string", [](const Value& v, Args&) { return Value(v.to_str()); }},
      {"sum", [](const Value& v, Args& a) {
         std::string attr = str_arg(a, 0, "attribute", "");
         Value total = a.get(1, "start", Value(int64_t{0}));
         for (const Value& item : iterate(v)) {
           Value x = attr.empty() ? item : attribute_path(item, attr);
           if (!x.is_number() || !total.is_number()) bad(a.what, "can only sum numbers");
           total = (x.type() == Type::floating || total.type() == Type::floating) ? Value(total.as_double() + x.as_double())
                                                                                  : Value(total.as_int() + x.as_int());
         }
         return total;
       }},
      {"title", [](const Value& v, Args&) { return Value(jinja_title(v.to_str())); }},
      {"tojson", [](const Value& v, Args& a) {
         // transformers replaces Jinja's tojson: json.dumps(x, ensure_ascii=False, indent, separators, sort_keys).
         Value indent = a.get(1, "indent");
         int ind = indent.is_undefined() || indent.is_none() ? -1 : static_cast<int>(indent.as_int());
         if (ind > 64) bad(a.what, "indent too large");
         std::string item_sep = ind >= 0 ? "," : ", ", key_sep = ": ";
         Value seps = a.get(2, "separators");
         if (seps.is_list()) {
           if (seps.items().size() != 2 || !seps.items()[0].is_string() || !seps.items()[1].is_string()) {
             bad(a.what, "separators must be a pair of strings");
           }
           item_sep = seps.items()[0].str_ref();
           key_sep = seps.items()[1].str_ref();
         }
         if (bool_arg(a, 0, "ensure_ascii", false)) bad(a.what, "unsupported argument ensure_ascii=true");
         return Value(v.to_json(ind, item_sep, key_sep, bool_arg(a, 3, "sort_keys", false)));
       }},
      {"trim", [](const Value& v, Args& a) {
         Value chars = a.get(0, "chars");
         std::string s = v.to_str();
         if (chars.is_undefined() || chars.is_none()) return Value(strip_chars(s, nullptr, true, true));
         std::string c = chars.to_str();
         return Value(strip_chars(s, &c, true, true));
       }},
      {"unique", [](const Value& v, Args& a) {
         bool cs = bool_arg(a, 0, "case_sensitive", false);
         std::string attr = str_arg(a, 1, "attribute", "");
         ValueList out, seen;
         for (const Value& item : iterate(v)) {
           Value k = sort_key(item, cs, attr);
           if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) {
             seen.push_back(k);
             out.push_back(item);
           }
         }
         return Value::list(std::move(out));
       }},
      {"indent", [](const Value& v, Args& a) {
         Value width = a.get(0, "width", Value(int64_t{4}));
         std::string ind = width.is_string() ? width.str_ref() : std::string(static_cast<size_t>(std::clamp<int64_t>(width.as_int(), 0, 1024)), ' ');
         bool first = bool_arg(a, 1, "first", false), blank = bool_arg(a, 2, "blank", false);
         std::string s = v.to_str() + "\n";
         std::vector<std::string> lines;
         std::string cur;
         for (char c : s) {
           if (c == '\n') {
             lines.push_back(cur);
             cur.clear();
           } else {
             cur += c;
           }
         }
         if (!cur.empty()) lines.push_back(cur);
         std::string out = lines.empty() ? "" : lines[0];
         for (size_t i = 1; i < lines.size(); ++i) out += "\n" + ((blank || !lines[i].empty()) ? ind : "") + lines[i];
         return Value(first ? ind + out : out);
       }},
      {"wordcount", [](const Value& v, Args&) {
         Value words = py_split(v.to_str(), Value(), -1);
         return Value(static_cast<int64_t>(words.items().size()));
       }},
  };
  return table;
}

using Test = bool (*)(const Value&, Args&);

Value test_arg(const Args& a) {
  if (a.positional.empty() && a.keyword.empty()) bad(a.what, "missing the value to compare with");
  return a.get(0, "other");
}

const std::map<std::string, Test>& tests() {
  static const std::map<std::string, Test> table = {
      {"defined", [](const Value& v, Args&) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, Args&) { return v.is_undefined(); }},
      {"none", [](const Value& v, Args&) { return v.is_none(); }},
      {"boolean", [](const Value& v, Args&) { return v.type() == Type::boolean; }},
      {"true", [](const Value& v, Args&) { return v.type() == Type::boolean && v.as_bool(); }},
      {"false", [](const Value& v, Args&) { return v.type() == Type::boolean && !v.as_bool(); }},
      {"integer", [](const Value& v, Args&) { return v.type() == Type::integer; }},
      {"float", [](const Value& v, Args&) { return v.type() == Type::floating; }},
      {"number", [](const Value& v, Args&) { return v.is_number(); }},
      {"string", [](const Value& v, Args&) { return v.is_string(); }},
      {"mapping", [](const Value& v, Args&) { return v.type() == Type::dict; }},
      {"iterable", [](const Value& v, Args&) {
         return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
       }},
      {"sequence", [](const Value& v, Args&) { return v.is_string() || v.is_list() || v.type() == Type::dict; }},
      {"callable", [](const Value& v, Args&) { return v.is_callable(); }},
      {"sameas", [](const Value& v, Args& a) {
         Value o = test_arg(a);
         if (v.is_none() || o.is_none() || v.type() == Type::boolean || o.type() == Type::boolean) {
           return v.type() == o.type() && equals(v, o);
         }
         return false;
       }},
      {"equalto", [](const Value& v, Args& a) { return equals(v, test_arg(a)); }},
      {"eq", [](const Value& v, Args& a) { return equals(v, test_arg(a)); }},
      {"==", [](const Value& v, Args& a) { return equals(v, test_arg(a)); }},
      {"ne", [](const Value& v, Args& a) { return !equals(v, test_arg(a)); }},
      {"!=", [](const Value& v, Args& a) { return !equals(v, test_arg(a)); }},
      {"lt", [](const Value& v, Args& a) { return less_than(v, test_arg(a)); }},
      {"lessthan", [](const Value& v, Args& a) { return less_than(v, test_arg(a)); }},
      {"<", [](const Value& v, Args& a) { return less_than(v, test_arg(a)); }},
      {"le", [](const Value& v, Args& a) { return !less_than(test_arg(a), v); }},
      {"<=", [](const Value& v, Args& a) { return !less_than(test_arg(a), v); }},
      {"gt", [](const Value& v, Args& a) { return less_than(test_arg(a), v); }},
      {"greaterthan", [](const Value& v, Args& a) { return less_than(test_arg(a), v); }},
      {">", [](const Value& v, Args& a) { return less_than(test_arg(a), v); }},
      {"ge", [](const Value& v, Args& a) { return !less_than(v, test_arg(a)); }},
      {">=", [](const Value& v, Args& a) { return !less_than(v, test_arg(a)); }},
      {"in", [](const Value& v, Args& a) {
         Value seq = test_arg(a);
         if (seq.is_string()) return v.is_string() && seq.str_ref().find(v.str_ref()) != std::string::npos;
         if (seq.is_dict()) return v.is_string() && seq.entries().find(v.str_ref()) != nullptr;
         for (const Value& x : iterate(seq)) {
           if (equals(x, v)) return true;
         }
         return false;
       }},
      {"odd", [](const Value& v, Args& a) {
         if (v.type() != Type::integer) bad(a.what, "expected an integer");
         return v.as_int() % 2 != 0;
       }},
      {"even", [](const Value& v, Args& a) {
         if (v.type() != Type::integer) bad(a.what, "expected an integer");
         return v.as_int() % 2 == 0;
       }},
      {"divisibleby", [](const Value& v, Args& a) {
         int64_t n = test_arg(a).as_int();
         if (n == 0) bad(a.what, "division by zero");
         return v.as_int() % n == 0;
       }},
      {"lower", [](const Value& v, Args&) { return v.is_string() && to_lower(v.str_ref()) == v.str_ref(); }},
      {"upper", [](const Value& v, Args&) { return v.is_string() && to_upper(v.str_ref()) == v.str_ref(); }},
  };
  return table;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) > 0; }
bool has_test(const std::string& name) { return tests().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& input, Args& args) {
  auto it = filters().find(name);
  if (it == filters().end()) throw TemplateError("unknown filter '" + name + "'");
  if (args.what.empty()) args.what = "filter '" + name + "'";
  return it->second(input, args);
}

bool apply_test(const std::string& name, const Value& input, Args& args) {
  auto it = tests().find(name);
  if (it == tests().end()) throw TemplateError("unknown test '" + name + "'");
  if (args.what.empty()) args.what = "test '" + name + "'";
  return it->second(input, args);
}

Value get_attribute(const Value& obj, const std::string& name) {
  switch (obj.type()) {
    case Type::dict: {
      Value m = dict_method(obj, name);
      if (!m.is_undefined()) return m;
      const Value* v = obj.entries().find(name);
      return v != nullptr ? *v : Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    case Type::name_space: {
      const Value* v = obj.entries().find(name);
      return v != nullptr ? *v : Value::undefined("'Namespace object' has no attribute '" + name + "'");
    }
    case Type::string: return string_method(obj.str_ref(), name);
    default: return Value::undefined(std::string("'") + obj.type_name() + " object' has no attribute '" + name + "'");
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_dict()) {
    if (key.is_string()) {
      const Value* v = obj.entries().find(key.str_ref());
      if (v != nullptr) return *v;
      if (obj.type() == Type::dict) {
        Value m = dict_method(obj, key.str_ref());
        if (!m.is_undefined()) return m;
      }
      return Value::undefined("'dict object' has no attribute '" + key.str_ref() + "'");
    }
    return Value::undefined("'dict object' has no attribute " + key.repr());
  }
  if ((obj.is_list() || obj.is_string()) && (key.type() == Type::integer || key.type() == Type::boolean)) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("list object has no element " + key.to_str());
      return obj.items()[static_cast<size_t>(i)];
    }
    std::vector<uint32_t> cps = code_points(obj.str_ref());
    int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined("str object has no element " + key.to_str());
    std::string c;
    append_utf8(c, cps[static_cast<size_t>(i)]);
    return Value(c);
  }
  if (key.is_string()) return get_attribute(obj, key.str_ref());
  return Value::undefined(std::string(obj.type_name()) + " object has no element " + key.repr());
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  auto opt = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (v.type() != Type::integer && v.type() != Type::boolean) {
      throw TemplateError(std::string("slice ") + what + " must be an integer or None");
    }
    return v.as_int();
  };
  std::optional<int64_t> a = opt(start, "start"), b = opt(stop, "stop"), s = opt(step, "step");
  int64_t st = s.value_or(1);
  if (st == 0) throw TemplateError("slice step cannot be zero");
  std::vector<Value> seq;
  std::vector<uint32_t> cps;
  int64_t n;
  if (obj.is_list()) {
    n = static_cast<int64_t>(obj.items().size());
  } else if (obj.is_string()) {
    cps = code_points(obj.str_ref());
    n = static_cast<int64_t>(cps.size());
  } else {
    throw TemplateError(std::string("'") + obj.type_name() + "' object is not subscriptable");
  }
  auto clamp = [&](std::optional<int64_t> v, int64_t def_pos, int64_t def_neg) {
    if (!v) return st > 0 ? def_pos : def_neg;
    int64_t x = *v < 0 ? *v + n : *v;
    if (st > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t lo = clamp(a, 0, n - 1), hi = clamp(b, n, -1);
  std::vector<int64_t> idx;
  for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) idx.push_back(i);
  if (obj.is_list()) {
    ValueList out;
    for (int64_t i : idx) out.push_back(obj.items()[static_cast<size_t>(i)]);
    return Value::list(std::move(out));
  }
  std::string out;
  for (int64_t i : idx) append_utf8(out, cps[static_cast<size_t>(i)]);
  return Value(out);
}

ValueDict global_functions() {
  ValueDict g;
  g.set("range", Value::function("range", [](Args& a) {
          a.what = "range()";
          a.expect_at_most(3);
          for (const Value& v : a.positional) {
            if (v.type() != Type::integer && v.type() != Type::boolean) bad(a.what, "arguments must be integers");
          }
          if (a.positional.empty()) bad(a.what, "expected at least 1 argument");
          int64_t start = 0, stop, step = 1;
          if (a.positional.size() == 1) {
            stop = a.positional[0].as_int();
          } else {
            start = a.positional[0].as_int();
            stop = a.positional[1].as_int();
            if (a.positional.size() == 3) step = a.positional[2].as_int();
          }
          if (step == 0) bad(a.what, "step must not be zero");
          ValueList out;
          for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (out.size() >= 100000) bad(a.what, "more than 100000 items");
            out.emplace_back(i);
          }
          return Value::list(std::move(out));
        }));
  g.set("namespace", Value::function("namespace", [](Args& a) {
          ValueDict d;
          for (const Value& p : a.positional) {
            if (!p.is_dict()) bad("namespace()", "positional arguments must be mappings");
            for (const auto& [k, v] : p.entries().entries) d.set(k, v);
          }
          for (const auto& [k, v] : a.keyword) d.set(k, v);
          return Value::name_space(std::move(d));
        }));
  g.set("dict", Value::function("dict", [](Args& a) {
          ValueDict d;
          for (const auto& [k, v] : a.keyword) d.set(k, v);
          return Value::dict(std::move(d));
        }));
  g.set("raise_exception", Value::function("raise_exception", [](Args& a) -> Value {
          throw TemplateError("raise_exception: " + a.get(0, "message").to_str());
        }));
  g.set("strftime_now", Value::function("strftime_now", [](Args& a) {
          std::string fmt = str_arg(a, 0, "format", "%Y-%m-%d");
          std::time_t now = std::time(nullptr);
          std::tm tm{};
          localtime_r(&now, &tm);
          char buf[256];
          size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
          return Value(std::string(buf, n));
        }));
  return g;
}

}  // namespace vlm::jinja

// Python 3 string and dict semantics for the interpreter's methods and filters, and attribute / item / slice access.
#include "data/template/jinja_pylib.h"

#include <algorithm>
#include <optional>

#include "data/template/jinja_builtins.h"

namespace vlm::jinja {

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

static bool is_letter_cp(uint32_t c) {
  std::string s;
  append_utf8(s, c);
  return to_upper(s) != to_lower(s) || (c >= 0xAA && c < 0x110000 && c != 0xD7 && c != 0xF7 && c >= 0xC0);
}

// Python's str.title(): a cased character after an uncased one is upper case, others lower case.
static std::string py_title(const std::string& s) {
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

static bool starts_or_ends(const std::string& s, const Value& arg, bool start, const std::string& what) {
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

static Value bound(const std::string& name, std::function<Value(Args&)> fn) { return Value::function(name, std::move(fn)); }

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


}  // namespace vlm::jinja

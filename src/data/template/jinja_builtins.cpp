// Filters, tests and global functions with the semantics of Jinja 3 and Python 3.
#include "data/template/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <map>

#include "data/template/jinja_pylib.h"

namespace vlm::jinja {
namespace {

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
         constexpr size_t kKeywordOnly = SIZE_MAX;  // attribute= and default= are keyword-only in map()
         Value attribute = a.get(kKeywordOnly, "attribute");
         for (const Value& item : iterate(v)) {
           if (!attribute.is_undefined()) {
             Value got = attribute_path(item, attribute.to_str());
             out.push_back(got.is_undefined() ? a.get(kKeywordOnly, "default", got) : got);
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

// Value construction, Python-style conversions (str, repr, json.dumps), comparison and iteration.
#include "data/template/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace vlm::jinja {

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::make_shared<std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.type_ = Type::none;
  return v;
}

Value::Value(bool b) : type_(Type::boolean), b_(b), i_(b ? 1 : 0) {}
Value::Value(int64_t i) : type_(Type::integer), i_(i) {}
Value::Value(double d) : type_(Type::floating), d_(d) {}
Value::Value(std::string s) : type_(Type::string), s_(std::make_shared<std::string>(std::move(s))) {}

namespace {
constexpr int kMaxNesting = 512;
}  // namespace

Value Value::list(ValueList items) {
  Value v;
  int depth = 0;
  for (const Value& item : items) depth = std::max(depth, item.depth_ + 1);
  if (depth > kMaxNesting) throw TemplateError("value nested more than 512 deep");
  v.depth_ = static_cast<uint16_t>(depth);
  v.type_ = Type::list;
  v.list_ = std::make_shared<ValueList>(std::move(items));
  return v;
}

Value Value::dict(ValueDict d) {
  Value v;
  int depth = 0;
  for (const auto& e : d.entries) depth = std::max(depth, e.second.depth_ + 1);
  if (depth > kMaxNesting) throw TemplateError("value nested more than 512 deep");
  v.depth_ = static_cast<uint16_t>(depth);
  v.type_ = Type::dict;
  v.dict_ = std::make_shared<ValueDict>(std::move(d));
  return v;
}

Value Value::name_space(ValueDict d) {
  Value v = dict(std::move(d));
  v.type_ = Type::name_space;
  return v;
}

Value Value::function(std::string name, NativeFunction fn) {
  Value v;
  v.type_ = Type::function;
  v.s_ = std::make_shared<std::string>(std::move(name));
  v.fn_ = std::make_shared<NativeFunction>(std::move(fn));
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      return u <= static_cast<uint64_t>(INT64_MAX) ? Value(static_cast<int64_t>(u)) : Value(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      for (const auto& e : j) items.push_back(from_json(e));
      return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.set(it.key(), from_json(it.value()));
      return dict(std::move(d));
    }
    default: return none();  // binary / discarded: not produced by the JSON parser
  }
}

int64_t Value::as_int() const {
  if (type_ == Type::floating) return static_cast<int64_t>(d_);
  return i_;
}

double Value::as_double() const { return type_ == Type::floating ? d_ : static_cast<double>(i_); }

bool Value::truthy() const {
  switch (type_) {
    case Type::undefined:
    case Type::none: return false;
    case Type::boolean: return b_;
    case Type::integer: return i_ != 0;
    case Type::floating: return d_ != 0;
    case Type::string: return !s_->empty();
    case Type::list: return !list_->empty();
    case Type::dict: return !dict_->entries.empty();
    case Type::function:
    case Type::name_space: return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (type_) {
    case Type::undefined: return "Undefined";
    case Type::none: return "NoneType";
    case Type::boolean: return "bool";
    case Type::integer: return "int";
    case Type::floating: return "float";
    case Type::string: return "str";
    case Type::list: return "list";
    case Type::dict: return "dict";
    case Type::function: return "function";
    case Type::name_space: return "Namespace";
  }
  return "object";
}

namespace {

// Python's repr() of a float: the shortest string that round-trips, in Python's notation.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  int exp = std::stoi(sci.substr(e + 1));
  std::string digits;
  bool neg = mant[0] == '-';
  for (char c : mant) {
    if (c >= '0' && c <= '9') digits += c;
  }
  std::string out = neg ? "-" : "";
  if (exp >= 16 || exp < -4) {  // Python switches to exponent notation outside [1e-4, 1e16)
    out.push_back(digits[0]);
    if (digits.size() > 1) {
      out.push_back('.');
      out.append(digits, 1, std::string::npos);
    }
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + eb;
  }
  if (exp >= 0) {
    if (static_cast<int>(digits.size()) <= exp + 1) {
      out += digits + std::string(static_cast<size_t>(exp + 1) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exp + 1)) + "." + digits.substr(static_cast<size_t>(exp + 1));
    }
    return out;
  }
  return out + "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
}

// Characters Python's repr() escapes (str.isprintable() is false) beyond the ASCII controls.
bool repr_escapes(uint32_t cp) {
  return (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
         (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF || cp == 0x1680 || (cp >= 0xD800 && cp <= 0xDFFF);
}

std::string string_repr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (uint32_t cp : code_points(s)) {
    char buf[16];
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xFF && repr_escapes(cp))) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", cp);
      out += buf;
    } else if (cp >= 0x110000) {  // an invalid byte: Python would show the surrogate escape
      std::snprintf(buf, sizeof(buf), "\\udc%02x", cp - 0x110000);
      out += buf;
    } else if (repr_escapes(cp)) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      out += buf;
    } else {
      append_utf8(out, cp);
    }
  }
  out += quote;
  return out;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

}  // namespace

namespace {
// Values can nest without bound at render time ({% set ns.x = [ns.x] %} in a loop); printing, serializing and
// comparing them recurse, so the depth is bounded.
constexpr int kMaxValueDepth = 512;
thread_local int value_depth = 0;
struct ValueDepth {
  ValueDepth() {
    if (++value_depth > kMaxValueDepth) {
      value_depth = 0;
      throw TemplateError("value nested more than 512 deep");
    }
  }
  ~ValueDepth() {
    if (value_depth > 0) --value_depth;
  }
};
}  // namespace

std::string Value::to_str() const {
  ValueDepth depth;
  switch (type_) {
    case Type::undefined: return "";
    case Type::none: return "None";
    case Type::boolean: return b_ ? "True" : "False";
    case Type::integer: return std::to_string(i_);
    case Type::floating: return float_repr(d_);
    case Type::string: return *s_;
    case Type::list: {
      std::string out = "[";
      for (size_t i = 0; i < list_->size(); ++i) out += (i ? ", " : "") + (*list_)[i].repr();
      return out + "]";
    }
    case Type::dict: {
      std::string out = "{";
      for (size_t i = 0; i < dict_->entries.size(); ++i) {
        out += (i ? ", " : "") + string_repr(dict_->entries[i].first) + ": " + dict_->entries[i].second.repr();
      }
      return out + "}";
    }
    case Type::function: return "<function " + *s_ + ">";
    case Type::name_space: return "<Namespace>";
  }
  return "";
}

std::string Value::repr() const { return type_ == Type::string ? string_repr(*s_) : to_str(); }

std::string Value::to_json(int indent, const std::string& item_sep, const std::string& key_sep, bool sort_keys) const {
  // json.dumps with indent: items on their own lines; the level is tracked through a recursive helper.
  std::function<std::string(const Value&, int)> dump = [&](const Value& v, int level) -> std::string {
    ValueDepth depth;
    std::string nl, nl_in;
    if (indent >= 0) {
      nl.assign(1, '\n');
      nl.append(static_cast<size_t>(indent * level), ' ');
      nl_in = nl;
      nl_in.append(static_cast<size_t>(indent), ' ');
    }
    switch (v.type_) {
      case Type::none: return "null";
      case Type::boolean: return v.b_ ? "true" : "false";
      case Type::integer: return std::to_string(v.i_);
      case Type::floating:
        if (std::isnan(v.d_)) return "NaN";
        if (std::isinf(v.d_)) return v.d_ > 0 ? "Infinity" : "-Infinity";
        return float_repr(v.d_);
      case Type::string: return json_string(*v.s_);
      case Type::list: {
        if (v.list_->empty()) return "[]";
        std::string out = "[";
        for (size_t i = 0; i < v.list_->size(); ++i) out += (i ? item_sep : "") + nl_in + dump((*v.list_)[i], level + 1);
        return out + nl + "]";
      }
      case Type::dict:
      case Type::name_space: {
        if (v.dict_->entries.empty()) return "{}";
        std::vector<const std::pair<std::string, Value>*> order;
        for (const auto& e : v.dict_->entries) order.push_back(&e);
        if (sort_keys) {
          std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
        }
        std::string out = "{";
        for (size_t i = 0; i < order.size(); ++i) {
          out += (i ? item_sep : "") + nl_in + json_string(order[i]->first) + key_sep + dump(order[i]->second, level + 1);
        }
        return out + nl + "}";
      }
      default: throw TemplateError(std::string("Object of type ") + v.type_name() + " is not JSON serializable");
    }
  };
  return dump(*this, 0);
}

const Value* ValueDict::find(const std::string& key) const {
  for (const auto& e : entries) {
    if (e.first == key) return &e.second;
  }
  return nullptr;
}

void ValueDict::set(const std::string& key, Value v) {
  for (auto& e : entries) {
    if (e.first == key) {
      e.second = std::move(v);
      return;
    }
  }
  entries.emplace_back(key, std::move(v));
}

Value Args::get(size_t index, const std::string& name, Value fallback) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return v;
  }
  if (index < positional.size()) return positional[index];
  return fallback;
}

void Args::expect_at_most(size_t n) const {
  if (positional.size() > n) {
    throw TemplateError(what + " takes at most " + std::to_string(n) + " positional arguments, got " +
                        std::to_string(positional.size()));
  }
}

bool equals(const Value& a, const Value& b) {
  ValueDepth depth;
  if (a.is_number() && b.is_number()) {
    if (a.type() == Type::floating || b.type() == Type::floating) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Type::undefined:
    case Type::none: return true;
    case Type::string: return a.str_ref() == b.str_ref();
    case Type::list: {
      if (a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i) {
        if (!equals(a.items()[i], b.items()[i])) return false;
      }
      return true;
    }
    case Type::dict: {
      if (a.entries().entries.size() != b.entries().entries.size()) return false;
      for (const auto& [k, v] : a.entries().entries) {
        const Value* other = b.entries().find(k);
        if (other == nullptr || !equals(v, *other)) return false;
      }
      return true;
    }
    default: return &a == &b;
  }
}

bool less_than(const Value& a, const Value& b) {
  ValueDepth depth;
  if (a.is_number() && b.is_number()) return a.as_double() < b.as_double();
  if (a.is_string() && b.is_string()) return code_points(a.str_ref()) < code_points(b.str_ref());
  if (a.is_list() && b.is_list()) {
    const ValueList &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw TemplateError(std::string("'<' not supported between instances of '") + a.type_name() + "' and '" +
                      b.type_name() + "'");
}

ValueList iterate(const Value& v) {
  switch (v.type()) {
    case Type::undefined: return {};
    case Type::list: return v.items();
    case Type::dict:
    case Type::name_space: {
      ValueList keys;
      for (const auto& e : v.entries().entries) keys.emplace_back(e.first);
      return keys;
    }
    case Type::string: {
      ValueList chars;
      for (uint32_t cp : code_points(v.str_ref())) {
        std::string c;
        append_utf8(c, cp);
        chars.emplace_back(std::move(c));
      }
      return chars;
    }
    default: throw TemplateError(std::string("'") + v.type_name() + "' object is not iterable");
  }
}

std::vector<uint32_t> code_points(const std::string& s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = len > 0 && i + static_cast<size_t>(len) <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      ok = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (ok && len > 1) {
      static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= kMin[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    }
    if (!ok) {
      out.push_back(0x110000 + c);
      i += 1;
    } else {
      out.push_back(cp);
      i += static_cast<size_t>(len);
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp >= 0x110000) {
    out += static_cast<char>(cp - 0x110000);
  } else if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

uint32_t upper_cp(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

uint32_t lower_cp(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

std::string map_case(const std::string& s, uint32_t (*f)(uint32_t)) {
  std::string out;
  out.reserve(s.size());
  for (uint32_t cp : code_points(s)) append_utf8(out, f(cp));
  return out;
}

}  // namespace

std::string to_upper(const std::string& s) { return map_case(s, upper_cp); }
std::string to_lower(const std::string& s) { return map_case(s, lower_cp); }

bool is_py_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

}  // namespace vlm::jinja

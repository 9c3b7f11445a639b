// OptionSet implementation on top of toml++.
#include "core/options.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <toml++/toml.h>

namespace vlm {

struct OptionSet::Option {
  std::string key, help, type;
  std::string default_text;
  std::string source = "default";
  std::function<std::string(const toml::node&)> assign;  // empty string on success, else the reason
  std::function<std::string()> to_text;                  // current value in TOML syntax
  std::function<std::string()> check;                    // empty when valid
};

namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default: out += c;
    }
  }
  return out + "\"";
}

std::string float_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream os;
  os.precision(9);
  os << v;
  std::string s = os.str();
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

const char* node_type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "a list";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}

// Per-type conversion.
template <class T>
struct Conv;

template <>
struct Conv<bool> {
  static const char* name() { return "bool"; }
  static std::string from(const toml::node& n, bool& out) {
    if (auto v = n.value<bool>(); v && n.is_boolean()) {
      out = *v;
      return "";
    }
    return std::string("expected true or false, got ") + node_type_name(n);
  }
  static std::string text(const bool& v) { return v ? "true" : "false"; }
};

template <class I>
struct ConvInt {
  static std::string from(const toml::node& n, I& out) {
    if (!n.is_integer()) return std::string("expected an integer, got ") + node_type_name(n);
    int64_t v = *n.value<int64_t>();
    if (v < static_cast<int64_t>(std::numeric_limits<I>::min()) ||
        v > static_cast<int64_t>(std::numeric_limits<I>::max()))
      return "integer " + std::to_string(v) + " is out of range";
    out = static_cast<I>(v);
    return "";
  }
  static std::string text(const I& v) { return std::to_string(v); }
};
template <>
struct Conv<int> : ConvInt<int> {
  static const char* name() { return "int"; }
};
template <>
struct Conv<int64_t> : ConvInt<int64_t> {
  static const char* name() { return "int"; }
};

template <class F>
struct ConvFloat {
  static std::string from(const toml::node& n, F& out) {
    if (n.is_integer()) {
      out = static_cast<F>(*n.value<int64_t>());
      return "";
    }
    if (n.is_floating_point()) {
      out = static_cast<F>(*n.value<double>());
      return "";
    }
    return std::string("expected a number, got ") + node_type_name(n);
  }
  static std::string text(const F& v) { return float_text(static_cast<double>(v)); }
};
template <>
struct Conv<float> : ConvFloat<float> {
  static const char* name() { return "float"; }
};
template <>
struct Conv<double> : ConvFloat<double> {
  static const char* name() { return "float"; }
};

template <>
struct Conv<std::string> {
  static const char* name() { return "string"; }
  static std::string from(const toml::node& n, std::string& out) {
    if (!n.is_string()) return std::string("expected a string, got ") + node_type_name(n);
    out = *n.value<std::string>();
    return "";
  }
  static std::string text(const std::string& v) { return quote(v); }
};

template <class E>
struct ConvList {
  static std::string from(const toml::node& n, std::vector<E>& out) {
    const toml::array* arr = n.as_array();
    if (!arr) return std::string("expected a list, got ") + node_type_name(n);
    std::vector<E> values;
    for (size_t i = 0; i < arr->size(); ++i) {
      E e{};
      std::string err = Conv<E>::from(*arr->get(i), e);
      if (!err.empty()) return "element " + std::to_string(i) + ": " + err;
      values.push_back(std::move(e));
    }
    out = std::move(values);
    return "";
  }
  static std::string text(const std::vector<E>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + Conv<E>::text(v[i]);
    return s + "]";
  }
};
template <>
struct Conv<std::vector<std::string>> : ConvList<std::string> {
  static const char* name() { return "list of strings"; }
};
template <>
struct Conv<std::vector<float>> : ConvList<float> {
  static const char* name() { return "list of floats"; }
};

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

void flatten(const toml::table& table, const std::string& prefix,
             std::vector<std::pair<std::string, const toml::node*>>& out) {
  for (const auto& [k, v] : table) {
    std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const toml::table* t = v.as_table())
      flatten(*t, key, out);
    else
      out.emplace_back(key, &v);
  }
}

}  // namespace

OptionCheck<std::string> one_of(std::vector<std::string> choices) {
  return [choices](const std::string& v) {
    if (std::find(choices.begin(), choices.end(), v) != choices.end()) return std::string();
    std::string s = "must be one of";
    for (size_t i = 0; i < choices.size(); ++i) s += (i ? ", " : " ") + choices[i];
    return s;
  };
}

OptionSet::OptionSet() = default;
OptionSet::~OptionSet() = default;
OptionSet::OptionSet(OptionSet&&) noexcept = default;
OptionSet& OptionSet::operator=(OptionSet&&) noexcept = default;

void OptionSet::add_option(std::unique_ptr<Option> option) {
  VLM_CHECK(!has(option->key), "option '", option->key, "' declared twice");
  options_.push_back(std::move(option));
}

template <class T>
void OptionSet::add(const std::string& key, T* target, const std::string& help, OptionCheck<T> check) {
  auto o = std::make_unique<Option>();
  o->key = key;
  o->help = help;
  o->type = Conv<T>::name();
  o->default_text = Conv<T>::text(*target);
  o->assign = [target](const toml::node& n) { return Conv<T>::from(n, *target); };
  o->to_text = [target] { return Conv<T>::text(*target); };
  if (check) o->check = [target, check] { return check(*target); };
  add_option(std::move(o));
}

template void OptionSet::add<bool>(const std::string&, bool*, const std::string&, OptionCheck<bool>);
template void OptionSet::add<int>(const std::string&, int*, const std::string&, OptionCheck<int>);
template void OptionSet::add<int64_t>(const std::string&, int64_t*, const std::string&, OptionCheck<int64_t>);
template void OptionSet::add<float>(const std::string&, float*, const std::string&, OptionCheck<float>);
template void OptionSet::add<double>(const std::string&, double*, const std::string&, OptionCheck<double>);
template void OptionSet::add<std::string>(const std::string&, std::string*, const std::string&,
                                          OptionCheck<std::string>);
template void OptionSet::add<std::vector<std::string>>(const std::string&, std::vector<std::string>*,
                                                       const std::string&, OptionCheck<std::vector<std::string>>);
template void OptionSet::add<std::vector<float>>(const std::string&, std::vector<float>*, const std::string&,
                                                 OptionCheck<std::vector<float>>);

bool OptionSet::has(const std::string& key) const {
  return std::any_of(options_.begin(), options_.end(), [&](const auto& o) { return o->key == key; });
}

Status OptionSet::load_toml_string(const std::string& text, const std::string& source) {
  toml::table table;
  try {
    table = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return parse_error(str(source, ":", e.source().begin.line, ":", e.source().begin.column, ": ", e.description()));
  }
  std::vector<std::pair<std::string, const toml::node*>> leaves;
  flatten(table, "", leaves);
  for (const auto& leaf : leaves) {
    const std::string& key = leaf.first;  // (not a structured binding: clang 14 cannot capture those in lambdas)
    const toml::node* node = leaf.second;
    auto it = std::find_if(options_.begin(), options_.end(), [&](const auto& o) { return o->key == key; });
    if (it == options_.end()) {
      std::string best;
      size_t best_d = 4;
      for (const auto& o : options_) {
        size_t d = edit_distance(o->key, key);
        if (d < best_d) best_d = d, best = o->key;
      }
      return parse_error(source + ": unknown key '" + key + "'" + (best.empty() ? "" : " (did you mean '" + best + "'?)"));
    }
    std::string err = (*it)->assign(*node);
    if (!err.empty()) return parse_error(source + ": " + key + ": " + err);
    (*it)->source = source;
  }
  return Status();
}

Status OptionSet::load_toml_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return io_error(path + ": cannot open");
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  std::fclose(f);
  return load_toml_string(text, path);
}

Status OptionSet::set(const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) return invalid_argument("--set '" + assignment + "': expected key=value");
  const std::string key = assignment.substr(0, eq);
  const std::string value = assignment.substr(eq + 1);
  auto it = std::find_if(options_.begin(), options_.end(), [&](const auto& o) { return o->key == key; });
  if (it == options_.end()) return invalid_argument("--set: unknown key '" + key + "'");
  Option& o = **it;
  // Try the value as TOML; fall back to a bare string or a comma-separated list of bare strings.
  std::string err;
  try {
    toml::table t = toml::parse("v = " + value);
    err = o.assign(*t.get("v"));
  } catch (const toml::parse_error&) {
    err = "unparsed";
  }
  if (!err.empty() && (o.type == "string" || o.type == "list of strings")) {
    toml::table t;
    if (o.type == "string") {
      t.insert("v", value);
    } else {
      toml::array arr;
      std::stringstream ss(value);
      std::string item;
      while (std::getline(ss, item, ',')) arr.push_back(item);
      t.insert("v", std::move(arr));
    }
    err = o.assign(*t.get("v"));
  }
  if (!err.empty()) {
    if (err == "unparsed") err = "cannot parse '" + value + "' as " + o.type;
    return invalid_argument("--set " + key + ": " + err);
  }
  o.source = "--set";
  return Status();
}

Status OptionSet::validate() const {
  for (const auto& o : options_) {
    if (!o->check) continue;
    std::string err = o->check();
    if (!err.empty()) return invalid_argument(o->source + ": " + o->key + ": " + err + " (got " + o->to_text() + ")");
  }
  return Status();
}

std::string OptionSet::to_toml() const {
  // Group by section (everything before the last dot), in declaration order of first appearance.
  std::vector<std::string> sections;
  std::map<std::string, std::vector<const Option*>> by_section;
  for (const auto& o : options_) {
    size_t dot = o->key.rfind('.');
    std::string section = dot == std::string::npos ? "" : o->key.substr(0, dot);
    if (!by_section.count(section)) sections.push_back(section);
    by_section[section].push_back(o.get());
  }
  std::string out;
  for (const auto& section : sections) {
    if (!section.empty()) out += "\n[" + section + "]\n";
    for (const Option* o : by_section[section]) {
      size_t dot = o->key.rfind('.');
      out += (dot == std::string::npos ? o->key : o->key.substr(dot + 1)) + " = " + o->to_text() + "\n";
    }
  }
  return out;
}

std::string OptionSet::help() const {
  size_t width = 0;
  for (const auto& o : options_) width = std::max(width, o->key.size());
  std::string out;
  for (const auto& o : options_) {
    out += "  " + o->key + std::string(width + 2 - o->key.size(), ' ') + o->help + " (" + o->type + ", default " +
           o->default_text + ")\n";
  }
  return out;
}

}  // namespace vlm

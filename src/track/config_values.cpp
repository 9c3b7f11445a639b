// flatten_toml: see config_values.h.
#include "track/config_values.h"

#include <sstream>
#include <toml++/toml.h>

namespace vlm {

namespace {

void flatten(const toml::table& table, const std::string& prefix, std::vector<HParam>& out) {
  for (const auto& [k, v] : table) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const toml::table* t = v.as_table()) {
      flatten(*t, key, out);
      continue;
    }
    HParam h;
    h.name = key;
    if (const auto* i = v.as_integer()) {
      h.number = static_cast<double>(i->get());
    } else if (const auto* f = v.as_floating_point()) {
      h.number = f->get();
    } else if (const auto* b = v.as_boolean()) {
      h.kind = HParam::Kind::boolean;
      h.flag = b->get();
    } else if (const auto* s = v.as_string()) {
      h.kind = HParam::Kind::text;
      h.text = s->get();
    } else {  // arrays, dates: their TOML text
      h.kind = HParam::Kind::text;
      std::ostringstream os;
      os << toml::toml_formatter(v);
      h.text = os.str();
    }
    out.push_back(std::move(h));
  }
}

}  // namespace

Expected<std::vector<HParam>> flatten_toml(const std::string& text, const std::string& source) {
  toml::table table;
  try {
    table = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return parse_error(str(source, ":", e.source().begin.line, ":", e.source().begin.column, ": ", e.description()));
  }
  std::vector<HParam> out;
  flatten(table, "", out);
  return out;
}

}  // namespace vlm

// Sample filters and caption cleaning (see filters.h).
#include "data/loader/filters.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "data/io/webdataset.h"

namespace vlm {

const char* filter_reason_name(FilterReason reason) {
  switch (reason) {
    case FilterReason::pass: return "pass";
    case FilterReason::bad_json: return "bad_json";
    case FilterReason::missing_field: return "missing_field";
    case FilterReason::bad_field: return "bad_field";
    case FilterReason::similarity: return "similarity";
    case FilterReason::punsafe: return "punsafe";
    case FilterReason::pwatermark: return "pwatermark";
    case FilterReason::json_rule: return "json_rule";
    case FilterReason::no_caption: return "no_caption";
    case FilterReason::caption_invalid_utf8: return "caption_invalid_utf8";
    case FilterReason::caption_too_short: return "caption_too_short";
    case FilterReason::caption_too_long: return "caption_too_long";
    case FilterReason::no_image: return "no_image";
    case FilterReason::bad_image_header: return "bad_image_header";
    case FilterReason::image_too_small: return "image_too_small";
    case FilterReason::image_too_large: return "image_too_large";
    case FilterReason::aspect_ratio: return "aspect_ratio";
  }
  return "?";
}

// ---- UTF-8 and caption cleaning ----
namespace {

constexpr uint32_t kInvalid = 0xFFFFFFFFu;

// Decodes the code point at s[i] into `cp` and returns its length. For an ill-formed sequence `cp` is kInvalid and
// the length is that of its maximal valid prefix (at least 1), per the Unicode "maximal subpart" practice.
size_t utf8_next(std::string_view s, size_t i, uint32_t& cp) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c0 = b(i);
  cp = kInvalid;
  if (c0 < 0x80) {
    cp = c0;
    return 1;
  }
  int need = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c0 >= 0xC2 && c0 <= 0xDF) need = 1;
  else if (c0 == 0xE0) need = 2, lo = 0xA0;
  else if (c0 >= 0xE1 && c0 <= 0xEC) need = 2;
  else if (c0 == 0xED) need = 2, hi = 0x9F;  // no surrogates
  else if (c0 >= 0xEE && c0 <= 0xEF) need = 2;
  else if (c0 == 0xF0) need = 3, lo = 0x90;
  else if (c0 >= 0xF1 && c0 <= 0xF3) need = 3;
  else if (c0 == 0xF4) need = 3, hi = 0x8F;  // <= U+10FFFF
  else return 1;
  uint32_t v = c0 & (0x3F >> need);
  for (int k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return static_cast<size_t>(k);
    const uint8_t ck = b(i + k);
    const uint8_t klo = k == 1 ? lo : 0x80, khi = k == 1 ? hi : 0xBF;
    if (ck < klo || ck > khi) return static_cast<size_t>(k);
    v = (v << 6) | (ck & 0x3F);
  }
  cp = v;
  return static_cast<size_t>(need) + 1;
}

bool is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool is_control(uint32_t cp) { return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F); }

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Drops leading and trailing whitespace code points of valid UTF-8 text.
std::string trim_spaces(const std::string& s) {
  size_t first = std::string::npos, last_end = 0;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const size_t n = utf8_next(s, i, cp);
    if (!is_space(cp)) {
      if (first == std::string::npos) first = i;
      last_end = i + n;
    }
    i += n;
  }
  return first == std::string::npos ? std::string() : s.substr(first, last_end - first);
}

}  // namespace

size_t first_invalid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    const size_t n = utf8_next(text, i, cp);
    if (cp == kInvalid) return i;
    i += n;
  }
  return std::string_view::npos;
}

std::string repair_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    const size_t n = utf8_next(text, i, cp);
    if (cp == kInvalid) {
      out.append(kReplacement);
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

size_t utf8_length(std::string_view text) {
  size_t n = 0;
  for (size_t i = 0; i < text.size(); ++n) {
    uint32_t cp;
    i += utf8_next(text, i, cp);
  }
  return n;
}

Expected<std::string> clean_caption(std::string_view raw, const CaptionCleanOptions& o) {
  std::string out;
  out.reserve(raw.size());
  bool pending_space = false;
  for (size_t i = 0; i < raw.size();) {
    uint32_t cp;
    const size_t n = utf8_next(raw, i, cp);
    std::string_view bytes = raw.substr(i, n);
    if (cp == kInvalid) {
      if (o.invalid_utf8 == InvalidUtf8::reject)
        return parse_error(str("caption: invalid UTF-8 at byte ", i, " of ", raw.size()));
      bytes = kReplacement;
    } else if (is_space(cp)) {
      if (o.collapse_whitespace) {
        pending_space = !out.empty();
        i += n;
        continue;
      }
    } else if (o.drop_control && is_control(cp)) {
      i += n;
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out.append(bytes);
    i += n;
  }
  if (!o.collapse_whitespace) out = trim_spaces(out);
  if (o.max_chars > 0) {
    size_t i = 0;
    for (int k = 0; k < o.max_chars && i < out.size(); ++k) {
      uint32_t cp;
      i += utf8_next(out, i, cp);
    }
    if (i < out.size()) out = trim_spaces(out.substr(0, i));
  }
  return out;
}

// ---- rules ----

std::string JsonFieldRule::to_string() const {
  static const char* kOps[] = {"<", "<=", ">", ">=", "==", "!="};
  std::string value;
  if (text_value) {
    value = nlohmann::json(text).dump();
  } else {
    value = str(number);
  }
  return str(field, " ", kOps[static_cast<int>(op)], " ", value);
}

Expected<JsonFieldRule> parse_json_field_rule(std::string_view text) {
  const auto fail = [&](const std::string& why) {
    return invalid_argument(str("filter rule '", text, "': ", why, " (expected `field op value`, op one of "
                                "< <= > >= == !=)"));
  };
  static const std::pair<const char*, JsonFieldRule::Op> kOps[] = {
      {"<=", JsonFieldRule::Op::le}, {">=", JsonFieldRule::Op::ge}, {"==", JsonFieldRule::Op::eq},
      {"!=", JsonFieldRule::Op::ne}, {"<", JsonFieldRule::Op::lt},  {">", JsonFieldRule::Op::gt}};
  size_t pos = std::string_view::npos, op_len = 0;
  JsonFieldRule rule;
  for (const auto& [sym, op] : kOps) {
    const size_t p = text.find(sym);
    if (p != std::string_view::npos && (pos == std::string_view::npos || p < pos ||
                                        (p == pos && std::string_view(sym).size() > op_len))) {
      pos = p;
      op_len = std::string_view(sym).size();
      rule.op = op;
    }
  }
  if (pos == std::string_view::npos) return fail("no comparison operator");
  const auto strip = [](std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
  };
  const std::string_view field = strip(text.substr(0, pos));
  const std::string_view value = strip(text.substr(pos + op_len));
  if (field.empty()) return fail("no field name");
  if (value.empty()) return fail("no value");
  rule.field = std::string(field);
  const std::string v(value);
  char* end = nullptr;
  const double number = std::strtod(v.c_str(), &end);
  if (end == v.c_str() + v.size() && std::isfinite(number) && value.front() != '"') {
    rule.number = number;
    return rule;
  }
  if (rule.op != JsonFieldRule::Op::eq && rule.op != JsonFieldRule::Op::ne)
    return fail(str("'", value, "' is not a number (strings compare with == and != only)"));
  rule.text_value = true;
  if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
    auto parsed = nlohmann::json::parse(value, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_string()) return fail("bad quoted string");
    rule.text = parsed.get<std::string>();
  } else {
    rule.text = v;
  }
  return rule;
}

// ---- config ----

Status FilterConfig::validate() const {
  const auto bad = [](const std::string& field, const std::string& why) {
    return invalid_argument(str("filter config: ", field, ": ", why));
  };
  for (auto [name, v] : {std::pair{"min_width", min_width}, {"min_height", min_height}, {"max_width", max_width},
                         {"max_height", max_height}, {"min_caption_chars", min_caption_chars},
                         {"max_caption_chars", max_caption_chars}, {"caption.max_chars", caption.max_chars}})
    if (v < 0) return bad(name, str("must be >= 0 (got ", v, ")"));
  if (max_width > 0 && min_width > max_width) return bad("min_width", "larger than max_width");
  if (max_height > 0 && min_height > max_height) return bad("min_height", "larger than max_height");
  if (max_caption_chars > 0 && min_caption_chars > max_caption_chars)
    return bad("min_caption_chars", "larger than max_caption_chars");
  if (!(max_aspect_ratio == 0.0 || max_aspect_ratio >= 1.0) || !std::isfinite(max_aspect_ratio))
    return bad("max_aspect_ratio", str("must be 0 (off) or >= 1 (got ", max_aspect_ratio, ")"));
  for (auto [name, v] : {std::pair{"min_similarity", min_similarity}, {"max_punsafe", max_punsafe},
                         {"max_pwatermark", max_pwatermark}})
    if (v && !std::isfinite(*v)) return bad(name, "must be finite");
  for (const JsonFieldRule& r : json_rules)
    if (r.field.empty()) return bad("json_rules", "a rule has no field");
  return Status();
}

// ---- the filter ----
namespace {

using Json = nlohmann::json;

// The value at `field`: a top-level key, else a dotted path into nested objects. nullptr when absent.
const Json* find_field(const Json& j, const std::string& field) {
  if (auto it = j.find(field); it != j.end()) return &*it;
  const Json* cur = &j;
  size_t start = 0;
  while (start <= field.size()) {
    const size_t dot = field.find('.', start);
    const std::string part = field.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(part);
    if (it == cur->end()) return nullptr;
    cur = &*it;
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
  return nullptr;
}

struct Check {
  FilterReason reason = FilterReason::pass;
  std::string detail;
};

// A numeric field: `value` set and pass; missing_field / bad_field otherwise (missing passes with `present` false
// when missing fields do not fail).
Check number_field(const Json* j, const std::string& field, bool missing_fails, double& value, bool& present) {
  present = false;
  const Json* v = j ? find_field(*j, field) : nullptr;
  if (!v || v->is_null()) {
    if (!missing_fails) return {};
    return {FilterReason::missing_field, str("json has no \"", field, "\"")};
  }
  if (!v->is_number()) return {FilterReason::bad_field, str("json \"", field, "\" is not a number: ", v->dump())};
  value = v->get<double>();
  present = true;
  return {};
}

Check json_checks(const FilterConfig& c, const Json* j) {
  double v = 0;
  bool present = false;
  struct Threshold {
    const char* field;
    const std::optional<double>& limit;
    bool min;  // value >= limit passes; else value < limit passes
    FilterReason reason;
  };
  const Threshold thresholds[] = {{"similarity", c.min_similarity, true, FilterReason::similarity},
                                  {"punsafe", c.max_punsafe, false, FilterReason::punsafe},
                                  {"pwatermark", c.max_pwatermark, false, FilterReason::pwatermark}};
  for (const Threshold& t : thresholds) {
    if (!t.limit) continue;
    Check ck = number_field(j, t.field, c.missing_field_fails, v, present);
    if (ck.reason != FilterReason::pass) return ck;
    if (!present) continue;
    if (t.min ? !(v >= *t.limit) : !(v < *t.limit))
      return {t.reason, str(t.field, " ", v, t.min ? " < " : " >= ", *t.limit)};
  }
  for (const JsonFieldRule& r : c.json_rules) {
    const Json* f = j ? find_field(*j, r.field) : nullptr;
    if (!f || f->is_null()) {
      if (c.missing_field_fails) return {FilterReason::missing_field, str("json has no \"", r.field, "\"")};
      continue;
    }
    bool holds = false;
    if (r.text_value) {
      if (!f->is_string())
        return {FilterReason::bad_field, str("json \"", r.field, "\" is not a string: ", f->dump())};
      const bool eq = f->get_ref<const std::string&>() == r.text;
      holds = r.op == JsonFieldRule::Op::eq ? eq : !eq;
    } else {
      if (!f->is_number())
        return {FilterReason::bad_field, str("json \"", r.field, "\" is not a number: ", f->dump())};
      const double x = f->get<double>();
      switch (r.op) {
        case JsonFieldRule::Op::lt: holds = x < r.number; break;
        case JsonFieldRule::Op::le: holds = x <= r.number; break;
        case JsonFieldRule::Op::gt: holds = x > r.number; break;
        case JsonFieldRule::Op::ge: holds = x >= r.number; break;
        case JsonFieldRule::Op::eq: holds = x == r.number; break;
        case JsonFieldRule::Op::ne: holds = x != r.number; break;
      }
    }
    if (!holds) return {FilterReason::json_rule, str("rule `", r.to_string(), "` fails: ", r.field, " = ", f->dump())};
  }
  return {};
}

}  // namespace

FilterResult filter_sample(const WebDatasetSample& sample, const FilterConfig& c) {
  FilterResult res;
  const auto reject = [&](FilterReason reason, std::string detail) {
    res.reason = reason;
    res.detail = std::move(detail);
    res.caption.clear();
    return res;
  };

  // Metadata first: a number comparison is cheaper than anything below.
  const std::vector<uint8_t>* json_bytes = sample.get("json");
  const bool has_txt = sample.has("txt");
  Json j;
  bool json_ok = false;
  if (json_bytes && (c.needs_json() || !has_txt)) {
    j = Json::parse(json_bytes->begin(), json_bytes->end(), nullptr, false);
    json_ok = !j.is_discarded() && j.is_object();
    if (!json_ok && c.needs_json()) return reject(FilterReason::bad_json, "the .json field is not a JSON object");
  }
  if (c.needs_json()) {
    Check ck = json_checks(c, json_ok ? &j : nullptr);
    if (ck.reason != FilterReason::pass) return reject(ck.reason, std::move(ck.detail));
  }

  // Caption.
  std::string raw;
  bool has_caption = has_txt;
  if (has_txt) {
    raw = sample.text("txt");
  } else if (json_ok && j.contains("caption") && j["caption"].is_string()) {
    raw = j["caption"].get<std::string>();
    has_caption = true;
  }
  if (!has_caption && c.require_caption) return reject(FilterReason::no_caption, "no .txt and no json \"caption\"");
  CaptionCleanOptions uncapped = c.caption;
  uncapped.max_chars = 0;
  auto cleaned = clean_caption(raw, uncapped);
  if (!cleaned.ok()) return reject(FilterReason::caption_invalid_utf8, cleaned.status().message());
  const size_t chars = utf8_length(*cleaned);
  if (c.min_caption_chars > 0 && chars < static_cast<size_t>(c.min_caption_chars))
    return reject(FilterReason::caption_too_short, str("caption has ", chars, " characters < ", c.min_caption_chars));
  if (c.max_caption_chars > 0 && chars > static_cast<size_t>(c.max_caption_chars))
    return reject(FilterReason::caption_too_long, str("caption has ", chars, " characters > ", c.max_caption_chars));
  if (c.caption.max_chars > 0 && chars > static_cast<size_t>(c.caption.max_chars)) {
    auto capped = clean_caption(*cleaned, c.caption);  // already clean: only the cap applies
    res.caption = capped.ok() ? std::move(*capped) : std::move(*cleaned);
  } else {
    res.caption = std::move(*cleaned);
  }

  // Image size from the header only.
  const std::vector<uint8_t>* image = nullptr;
  for (const char* field : {"jpg", "jpeg", "png", "webp"})
    if ((image = sample.get(field))) break;
  if (!image) return reject(FilterReason::no_image, "no jpg/jpeg/png/webp field");
  auto info = read_image_info(image->data(), image->size());
  if (!info.ok()) return reject(FilterReason::bad_image_header, info.status().message());
  res.image = *info;
  const int w = info->width, h = info->height;
  if ((c.min_width > 0 && w < c.min_width) || (c.min_height > 0 && h < c.min_height))
    return reject(FilterReason::image_too_small, str("image ", w, "x", h, " below ", c.min_width, "x", c.min_height));
  if ((c.max_width > 0 && w > c.max_width) || (c.max_height > 0 && h > c.max_height) ||
      (c.max_pixels > 0 && static_cast<uint64_t>(w) * static_cast<uint64_t>(h) > c.max_pixels))
    return reject(FilterReason::image_too_large, str("image ", w, "x", h, " above the limits"));
  if (c.max_aspect_ratio > 0.0) {
    const double ratio = static_cast<double>(std::max(w, h)) / std::max(1, std::min(w, h));
    if (ratio > c.max_aspect_ratio)
      return reject(FilterReason::aspect_ratio, str("aspect ratio ", ratio, " > ", c.max_aspect_ratio));
  }
  return res;
}

// ---- counters ----

uint64_t FilterCounters::total() const {
  uint64_t n = 0;
  for (uint64_t v : counts) n += v;
  return n;
}

uint64_t FilterCounters::rejected() const { return total() - get(FilterReason::pass); }

FilterCounters& FilterCounters::operator+=(const FilterCounters& other) {
  for (size_t i = 0; i < counts.size(); ++i) counts[i] += other.counts[i];
  return *this;
}

std::string FilterCounters::to_json() const {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (int i = 0; i < kFilterReasonCount; ++i) j[filter_reason_name(static_cast<FilterReason>(i))] = counts[i];
  return j.dump();
}

}  // namespace vlm

// Shard spec expansion (see shard_spec.h).
#include "data/io/shard_spec.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace vlm {
namespace {

namespace fs = std::filesystem;

bool parse_int(const std::string& s, int64_t& out) {
  size_t i = s[0] == '-' ? 1 : 0;
  if (i >= s.size() || s.size() - i > 18) return false;
  int64_t v = 0;
  for (size_t j = i; j < s.size(); ++j) {
    if (s[j] < '0' || s[j] > '9') return false;
    v = v * 10 + (s[j] - '0');
  }
  out = i ? -v : v;
  return true;
}

bool zero_padded(const std::string& s) {
  size_t i = s[0] == '-' ? 1 : 0;
  return s.size() - i > 1 && s[i] == '0';
}

std::string pad_number(int64_t v, size_t width) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  const size_t sign = v < 0 ? 1 : 0;
  if (digits.size() + sign < width) digits.insert(0, width - digits.size() - sign, '0');
  return v < 0 ? "-" + digits : digits;
}

// The alternatives of one brace body ("a,b" or "001..010"); their own braces are expanded by the caller.
Expected<std::vector<std::string>> brace_items(const std::string& body, const std::string& pattern, size_t max) {
  std::vector<std::string> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] == '{') ++depth;
    if (body[i] == '}') --depth;
    if (body[i] == ',' && depth == 0) {
      items.push_back(body.substr(start, i - start));
      start = i + 1;
    }
  }
  if (!items.empty()) {
    items.push_back(body.substr(start));
    return items;
  }
  const size_t dots = body.find("..");
  int64_t lo = 0, hi = 0;
  if (dots == std::string::npos || dots == 0 || !parse_int(body.substr(0, dots), lo) ||
      !parse_int(body.substr(dots + 2), hi))
    return invalid_argument(
        str("shard spec '", pattern, "': '{", body, "}' is neither a list {a,b} nor a range {0..9}"));
  const std::string a = body.substr(0, dots), b = body.substr(dots + 2);
  const size_t width = zero_padded(a) || zero_padded(b) ? std::max(a.size(), b.size()) : 0;
  const uint64_t count = static_cast<uint64_t>(lo <= hi ? hi - lo : lo - hi) + 1;
  if (count > max) return invalid_argument(str("shard spec '", pattern, "': range {", body, "} has ", count, " items"));
  const int64_t step = lo <= hi ? 1 : -1;
  for (int64_t v = lo;; v += step) {
    items.push_back(pad_number(v, width));
    if (v == hi) break;
  }
  return items;
}

Expected<std::vector<std::string>> expand_rec(const std::string& s, const std::string& pattern, size_t max) {
  const size_t open = s.find('{');
  const size_t close_first = s.find('}');
  if (open == std::string::npos) {
    if (close_first != std::string::npos) return invalid_argument(str("shard spec '", pattern, "': unbalanced '}'"));
    return std::vector<std::string>{s};
  }
  if (close_first < open) return invalid_argument(str("shard spec '", pattern, "': unbalanced '}'"));
  int depth = 0;
  size_t close = std::string::npos;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == '{') ++depth;
    if (s[i] == '}' && --depth == 0) {
      close = i;
      break;
    }
  }
  if (close == std::string::npos) return invalid_argument(str("shard spec '", pattern, "': unbalanced '{'"));
  const std::string body = s.substr(open + 1, close - open - 1);
  if (body.empty()) return invalid_argument(str("shard spec '", pattern, "': empty braces"));
  VLM_ASSIGN_OR_RETURN(auto items, brace_items(body, pattern, max));
  VLM_ASSIGN_OR_RETURN(auto tails, expand_rec(s.substr(close + 1), pattern, max));
  const std::string head = s.substr(0, open);
  std::vector<std::string> out;
  for (const auto& item : items) {
    VLM_ASSIGN_OR_RETURN(auto middles, expand_rec(item, pattern, max));
    if (out.size() + middles.size() * tails.size() > max)
      return invalid_argument(str("shard spec '", pattern, "' expands to more than ", max, " names"));
    for (const auto& m : middles)
      for (const auto& t : tails) out.push_back(head + m + t);
  }
  return out;
}

bool is_url(const std::string& s) { return s.find("://") != std::string::npos || s.rfind("pipe:", 0) == 0; }

Expected<std::vector<std::string>> expand_one(const std::string& spec, int depth);

Expected<std::vector<std::string>> expand_list_file(const std::string& path, int depth) {
  std::ifstream in(path);
  if (!in) return not_found(str("shard list '", path, "': cannot open"));
  const fs::path dir = fs::path(path).parent_path();
  std::vector<std::string> out;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    const size_t e = line.find_last_not_of(" \t\r");
    std::string entry = line.substr(b, e - b + 1);
    if (entry[0] != '/' && entry[0] != '@' && !is_url(entry) && !dir.empty()) entry = (dir / entry).string();
    auto items = expand_one(entry, depth + 1);
    if (!items.ok()) return items.status().with_context(str(path, ":", line_no));
    out.insert(out.end(), items->begin(), items->end());
  }
  return out;
}

Expected<std::vector<std::string>> expand_one(const std::string& spec, int depth) {
  if (depth > 8) return invalid_argument(str("shard spec '", spec, "': @list files nested too deep"));
  if (spec.empty()) return invalid_argument("empty shard spec");
  if (spec[0] == '@') return expand_list_file(spec.substr(1), depth);
  if (spec.find('{') == std::string::npos && !is_url(spec)) {
    std::error_code ec;
    if (fs::is_directory(spec, ec)) {
      std::vector<std::string> out;
      for (const auto& e : fs::directory_iterator(spec, ec))
        if (e.path().extension() == ".tar" && e.is_regular_file(ec)) out.push_back(e.path().string());
      if (ec) return io_error(str("shard directory '", spec, "': ", ec.message()));
      if (out.empty()) return not_found(str("shard directory '", spec, "' has no *.tar files"));
      std::sort(out.begin(), out.end());
      return out;
    }
  }
  return expand_braces(spec);
}

// The next "::" separator at or after `from` that is not inside [...] (an IPv6 host such as http://[::1]:8080/).
size_t find_spec_separator(const std::string& spec, size_t from) {
  int brackets = 0;
  for (size_t i = from; i + 1 < spec.size(); ++i) {
    if (spec[i] == '[') ++brackets;
    if (spec[i] == ']' && brackets > 0) --brackets;
    if (brackets == 0 && spec[i] == ':' && spec[i + 1] == ':') return i;
  }
  return std::string::npos;
}

}  // namespace

Expected<std::vector<std::string>> expand_braces(const std::string& pattern, size_t max_results) {
  return expand_rec(pattern, pattern, max_results);
}

Expected<std::vector<std::string>> expand_shard_spec(const std::string& spec) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t sep = find_spec_separator(spec, start);
    const std::string part = spec.substr(start, sep == std::string::npos ? std::string::npos : sep - start);
    VLM_ASSIGN_OR_RETURN(auto items, expand_one(part, 0));
    out.insert(out.end(), items.begin(), items.end());
    if (sep == std::string::npos) break;
    start = sep + 2;
  }
  return out;
}

}  // namespace vlm

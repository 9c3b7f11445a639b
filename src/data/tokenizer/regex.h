// Regular expressions of tokenizer.json files (Split pre-tokenizers and Replace normalizers whose pattern the
// hand-written scanners do not cover), compiled with PCRE2 in UTF + Unicode-property mode so \s, \w, \d and \p{..}
// follow Unicode as in the Oniguruma engine Hugging Face `tokenizers` uses. Invalid UTF-8 in the subject never
// fails a match: it is simply not matched by character classes.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "data/tokenizer/pre_tokenizer.h"

namespace vlm::tok {

class Regex {
 public:
  // Compiles `pattern`; the error (invalid_argument) quotes the pattern and names the offset PCRE2 reports.
  static Expected<std::shared_ptr<const Regex>> compile(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // All non-overlapping matches, leftmost first, as Rust's find_iter reports them (an empty match advances one
  // character and is not reported).
  void find_all(std::string_view text, std::vector<Span>& matches) const;
  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace vlm::tok

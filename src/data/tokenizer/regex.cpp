// PCRE2 wrapper: compile once, match from many threads (each call allocates its own match data).
#include "data/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "data/tokenizer/unicode.h"

namespace vlm::tok {

Expected<std::shared_ptr<const Regex>> Regex::compile(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(error, msg, sizeof(msg));
    return invalid_argument(str("regex '", pattern, "' does not compile at offset ", offset, ": ",
                                reinterpret_cast<const char*>(msg)));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // best effort: the interpreter is used when JIT is unavailable
  auto re = std::shared_ptr<Regex>(new Regex());
  re->pattern_ = pattern;
  re->code_ = code;
  return std::shared_ptr<const Regex>(std::move(re));
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_all(std::string_view text, std::vector<Span>& matches) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  size_t pos = 0;
  while (pos <= text.size()) {
    int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos, 0, md, nullptr);
    if (rc < 0) break;  // no match (or a resource limit: the rest is left unmatched)
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t begin = ov[0], end = ov[1];
    if (end > begin) {
      matches.push_back({begin, end});
      pos = end;
    } else {
      if (begin >= text.size()) break;
      pos = begin + utf8_decode(text, begin).len;
    }
  }
  pcre2_match_data_free(md);
}

}  // namespace vlm::tok

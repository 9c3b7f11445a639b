// Pre-tokenizers: split normalized text into the pieces BPE runs on, as Hugging Face `tokenizers` does. The regex
// patterns byte-level BPE tokenizers ship with (GPT-2's, Llama-3's / GPT-4's, Qwen2's) are implemented by hand as
// code-point scanners that reproduce the leftmost-first regex semantics exactly; any other Split pattern runs on
// PCRE2 (regex.h). Metaspace is SentencePiece's: spaces become "▁", optionally prepended, split before each "▁".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace vlm::tok {

// The exact pattern strings recognised in a Split pre-tokenizer (as they read after JSON unescaping).
extern const char* const kGpt2Pattern;    // also the pattern ByteLevel(use_regex=true) applies
extern const char* const kLlama3Pattern;  // Llama-3 (= tiktoken cl100k)
extern const char* const kGpt4Pattern;    // tiktoken's cl100k spelling (possessive quantifiers): same matches
extern const char* const kQwen2Pattern;   // Llama-3's with single digits

enum class SplitRegex : uint8_t { literal, gpt2, llama3, qwen2, pcre2 };
// How the matches of a Split are kept (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior : uint8_t { removed, isolated, merged_with_previous, merged_with_next, contiguous };

enum class PreTokenizerKind : uint8_t { byte_level, digits, split, metaspace };
enum class PrependScheme : uint8_t { always, first, never };

class Regex;

struct PreTokenizerStep {
  PreTokenizerKind kind = PreTokenizerKind::byte_level;
  // byte_level: prepend a space to each piece that does not start with one; then split with the GPT-2 pattern
  // when use_regex. trim_offsets only affects offsets (kept for saving).
  bool add_prefix_space = false;
  bool trim_offsets = true;
  bool use_regex = true;
  // digits: every \p{N} character its own piece (individual_digits) or runs of them.
  bool individual_digits = false;
  // split: `pattern` is the regex source (regex != literal) or the literal string to split on.
  SplitRegex regex = SplitRegex::literal;
  std::string pattern;
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;
  std::shared_ptr<const Regex> compiled;  // split with regex == pcre2
  // metaspace: `replacement` replaces every space; prepended per `prepend`; pieces split before each replacement
  // when `metaspace_split`.
  std::string replacement = "\xE2\x96\x81";  // U+2581
  PrependScheme prepend = PrependScheme::always;
  bool metaspace_split = true;
};

// Byte range [begin, end) of `text`.
struct Span {
  size_t begin, end;
};

// The matches of the GPT-2 pattern over `text`, in order. They cover the text exactly (every character belongs to
// one alternative). Bytes that are not valid UTF-8 count as single [^\s\p{L}\p{N}] characters.
void split_gpt2(std::string_view text, std::vector<Span>& matches);
// The matches of the Llama-3 pattern (max_digits = 3) or Qwen2's (max_digits = 1).
void split_llama3(std::string_view text, int max_digits, std::vector<Span>& matches);

// Recognises one of the patterns above; false for anything else.
bool split_regex_from_pattern(std::string_view pattern, SplitRegex& out);
const char* split_behavior_name(SplitBehavior behavior);
bool split_behavior_from_name(std::string_view name, SplitBehavior& out);

// Runs `steps` in order over `text` (each step splits every piece of the previous one) and appends the non-empty
// final pieces to `pieces`. `at_start`: `text` begins the whole input (Metaspace's prepend scheme "first" prepends
// only there).
void pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::string_view text, bool at_start,
                  std::vector<std::string>& pieces);

}  // namespace vlm::tok

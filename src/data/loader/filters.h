// Sample filters for image-text shards, applied before any pixel is decoded: image size and aspect ratio come from
// the image header (read_image_info), captions are cleaned and measured, and metadata thresholds read the json that
// img2dataset writes beside each image (LAION's "similarity", "punsafe", "pwatermark", or any `field op value`
// rule). Each rejection has one reason (the first failing check, in the order of FilterReason below);
// FilterCounters keeps one counter per reason for the run metrics.
//
// Caption cleaning: invalid UTF-8 is rejected (or repaired: each maximal invalid sequence becomes U+FFFD), control
// characters (Unicode Cc other than whitespace) are dropped, runs of whitespace (ASCII and Unicode spaces, line
// and paragraph separators) become one ASCII space, both ends are trimmed, and the result may be capped to a
// number of code points. "Characters" are Unicode code points throughout.
// Thread-safe (pure functions); FilterCounters is a plain value (one per thread, then +=).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/image/image.h"

namespace vlm {

struct WebDatasetSample;

enum class FilterReason {
  pass,                  // kept
  bad_json,              // a .json field that is not a JSON object (checked when a json check is configured)
  missing_field,         // a threshold's or rule's field is absent or null (when missing_field_fails)
  bad_field,             // a field of the wrong type (a string where a number is needed, ...)
  similarity,            // similarity < min_similarity
  punsafe,               // punsafe >= max_punsafe
  pwatermark,            // pwatermark >= max_pwatermark
  json_rule,             // a generic `field op value` rule does not hold
  no_caption,            // no .txt and no json "caption" (when require_caption)
  caption_invalid_utf8,  // with InvalidUtf8::reject
  caption_too_short,     // cleaned caption shorter than min_caption_chars
  caption_too_long,      // cleaned caption longer than max_caption_chars
  no_image,              // no jpg / jpeg / png / webp field
  bad_image_header,      // the image header cannot be read (not an image, truncated, unknown format)
  image_too_small,       // width < min_width or height < min_height
  image_too_large,       // width > max_width, height > max_height or width * height > max_pixels
  aspect_ratio,          // max(w, h) / min(w, h) > max_aspect_ratio
};
constexpr int kFilterReasonCount = 17;
const char* filter_reason_name(FilterReason reason);  // the enumerator's name: "pass", "bad_json", ...

// A generic metadata rule, e.g. "aesthetic >= 5.5", "status == success", "lang != \"en\"".
struct JsonFieldRule {
  enum class Op { lt, le, gt, ge, eq, ne };
  std::string field;     // a top-level key, or a dotted path into nested objects ("exif.width")
  Op op = Op::ge;
  bool text_value = false;  // compare as a string (eq / ne only) instead of a number
  double number = 0.0;
  std::string text;
  std::string to_string() const;  // "aesthetic >= 5.5"
};
// Parses "field op value"; op is one of < <= > >= == !=; value is a number, or a string (bare or double-quoted)
// for == and !=. invalid_argument names the rule text and the problem.
Expected<JsonFieldRule> parse_json_field_rule(std::string_view text);

enum class InvalidUtf8 { reject, repair };

struct CaptionCleanOptions {
  InvalidUtf8 invalid_utf8 = InvalidUtf8::reject;
  bool drop_control = true;         // drop Unicode Cc characters (tab, newline... count as whitespace instead)
  bool collapse_whitespace = true;  // runs of whitespace -> one ASCII space (ends are always trimmed)
  int max_chars = 0;                // cap: truncate to this many code points (then trim); 0: no cap
};

// parse_error (with the byte offset) for invalid UTF-8 under InvalidUtf8::reject.
Expected<std::string> clean_caption(std::string_view raw, const CaptionCleanOptions& options = {});
// The byte offset of the first ill-formed UTF-8 sequence in `text`; npos when it is all valid.
size_t first_invalid_utf8(std::string_view text);
// `text` with each maximal ill-formed UTF-8 sequence replaced by U+FFFD, nothing else changed.
std::string repair_utf8(std::string_view text);
// Code points in valid UTF-8 text (invalid bytes count one each).
size_t utf8_length(std::string_view text);

struct FilterConfig {
  int min_width = 0, min_height = 0;  // 0: no minimum
  int max_width = 0, max_height = 0;  // 0: no maximum
  uint64_t max_pixels = 0;            // width * height; 0: no maximum
  double max_aspect_ratio = 0.0;      // max(w, h) / min(w, h); 0: no limit
  bool require_caption = false;
  int min_caption_chars = 0;  // on the cleaned caption; 0: no minimum
  int max_caption_chars = 0;  // on the cleaned caption before the cap; 0: no maximum
  CaptionCleanOptions caption;
  // img2dataset / LAION metadata: kept when similarity >= min_similarity, punsafe < max_punsafe,
  // pwatermark < max_pwatermark.
  std::optional<double> min_similarity, max_punsafe, max_pwatermark;
  std::vector<JsonFieldRule> json_rules;  // all must hold
  bool missing_field_fails = true;        // an absent (or null) field rejects; false: the check is skipped

  bool needs_json() const { return min_similarity || max_punsafe || max_pwatermark || !json_rules.empty(); }
  Status validate() const;  // invalid_argument naming the field (negative sizes, min > max, ratio in (0, 1)...)
};

struct FilterResult {
  FilterReason reason = FilterReason::pass;
  std::string detail;   // for logs: "similarity 0.21 < 0.28"
  std::string caption;  // the cleaned (and capped) caption; empty when there is none
  ImageInfo image;      // from the header, once read
  bool passed() const { return reason == FilterReason::pass; }
};

// Runs every configured check on the sample without decoding pixels. The caption is the .txt field, else the
// json's "caption" string.
FilterResult filter_sample(const WebDatasetSample& sample, const FilterConfig& config);

struct FilterCounters {
  std::array<uint64_t, kFilterReasonCount> counts{};

  void add(FilterReason reason) { ++counts[static_cast<size_t>(reason)]; }
  uint64_t get(FilterReason reason) const { return counts[static_cast<size_t>(reason)]; }
  uint64_t total() const;     // samples seen
  uint64_t rejected() const;  // total() - get(pass)
  FilterCounters& operator+=(const FilterCounters& other);
  // {"pass":..,"bad_json":..,...}: every reason, zeros included, in enum order.
  std::string to_json() const;
};

}  // namespace vlm

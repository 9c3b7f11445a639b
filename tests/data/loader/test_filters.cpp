// Sample filters: every rejection reason, the counters, rejection from the image header without decoding, malformed
// json fields, `field op value` rules, and caption cleaning (whitespace, control characters, UTF-8, caps).
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "data/io/webdataset.h"
#include "data/loader/filters.h"
#include "data_test_util.h"

namespace vlm {
namespace {

std::vector<uint8_t> bytes_of(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

// A LAION-style sample: a w x h JPEG, a caption and img2dataset's json.
WebDatasetSample sample(int w = 64, int h = 48, const std::string& caption = "a red bicycle leaning on a wall",
                        const std::string& json = R"({"similarity": 0.31, "punsafe": 0.02, "pwatermark": 0.1,
                                                      "status": "success", "exif": {"width": 64}})") {
  WebDatasetSample s;
  s.shard = "shard.tar";
  s.key = "000001";
  s.fields["jpg"] = *encode_jpeg(testing::test_image(w, h), 85);
  s.fields["txt"] = bytes_of(caption);
  if (!json.empty()) s.fields["json"] = bytes_of(json);
  return s;
}

FilterConfig laion_config() {
  FilterConfig c;
  c.min_width = c.min_height = 32;
  c.max_width = c.max_height = 1024;
  c.max_aspect_ratio = 3.0;
  c.min_caption_chars = 5;
  c.max_caption_chars = 200;
  c.min_similarity = 0.28;
  c.max_punsafe = 0.5;
  c.max_pwatermark = 0.8;
  c.json_rules.push_back(*parse_json_field_rule("status == success"));
  return c;
}

FilterReason reason_of(const WebDatasetSample& s, const FilterConfig& c) { return filter_sample(s, c).reason; }

TEST(Filters, PassesAGoodSampleAndKeepsTheCleanCaption) {
  const FilterResult r = filter_sample(sample(64, 48, "  a red\n\tbicycle  "), laion_config());
  EXPECT_TRUE(r.passed()) << r.detail;
  EXPECT_EQ(r.caption, "a red bicycle");
  EXPECT_EQ(r.image.width, 64);
  EXPECT_EQ(r.image.height, 48);
  EXPECT_EQ(r.image.format, ImageFormat::jpeg);
}

TEST(Filters, EveryReason) {
  const FilterConfig c = laion_config();
  EXPECT_EQ(reason_of(sample(64, 48, "caption ok", "[1, 2]"), c), FilterReason::bad_json);
  EXPECT_EQ(reason_of(sample(64, 48, "caption ok", "{not json"), c), FilterReason::bad_json);
  EXPECT_EQ(reason_of(sample(64, 48, "caption ok", R"({"punsafe": 0.1, "pwatermark": 0.1})"), c),
            FilterReason::missing_field);
  EXPECT_EQ(reason_of(sample(64, 48, "caption ok", ""), c), FilterReason::missing_field);  // no json at all
  EXPECT_EQ(reason_of(sample(64, 48, "caption ok", R"({"similarity": 0.2, "punsafe": 0, "pwatermark": 0})"), c),
            FilterReason::similarity);
  EXPECT_EQ(reason_of(sample(64, 48, "caption ok", R"({"similarity": 0.3, "punsafe": 0.5, "pwatermark": 0})"), c),
            FilterReason::punsafe);  // punsafe < 0.5 is kept, 0.5 is not
  EXPECT_EQ(reason_of(sample(64, 48, "caption ok", R"({"similarity": 0.3, "punsafe": 0, "pwatermark": 0.9})"), c),
            FilterReason::pwatermark);
  EXPECT_EQ(reason_of(sample(64, 48, "caption ok",
                             R"({"similarity": 0.3, "punsafe": 0, "pwatermark": 0, "status": "failed"})"),
                      c),
            FilterReason::json_rule);
  EXPECT_EQ(reason_of(sample(64, 48, "bad \xff byte"), c), FilterReason::caption_invalid_utf8);
  EXPECT_EQ(reason_of(sample(64, 48, "  cat \n"), c), FilterReason::caption_too_short);
  EXPECT_EQ(reason_of(sample(64, 48, std::string(201, 'x')), c), FilterReason::caption_too_long);
  WebDatasetSample no_image = sample();
  no_image.fields.erase("jpg");
  EXPECT_EQ(reason_of(no_image, c), FilterReason::no_image);
  WebDatasetSample junk = sample();
  junk.fields["jpg"] = bytes_of("<html>404 not found</html>");
  EXPECT_EQ(reason_of(junk, c), FilterReason::bad_image_header);
  EXPECT_EQ(reason_of(sample(31, 48), c), FilterReason::image_too_small);
  EXPECT_EQ(reason_of(sample(64, 20), c), FilterReason::image_too_small);
  EXPECT_EQ(reason_of(sample(1025, 400), c), FilterReason::image_too_large);
  EXPECT_EQ(reason_of(sample(200, 66), c), FilterReason::aspect_ratio);  // 3.03 > 3
  EXPECT_EQ(reason_of(sample(198, 66), c), FilterReason::pass);          // exactly 3

  FilterConfig need_caption;
  need_caption.require_caption = true;
  WebDatasetSample silent = sample(64, 48, "", "{}");
  silent.fields.erase("txt");
  EXPECT_EQ(reason_of(silent, need_caption), FilterReason::no_caption);
  // json "caption" is the fallback when there is no .txt.
  silent.fields["json"] = bytes_of(R"({"caption": "  from the json "})");
  const FilterResult r = filter_sample(silent, need_caption);
  EXPECT_TRUE(r.passed()) << r.detail;
  EXPECT_EQ(r.caption, "from the json");

  FilterConfig pixels;
  pixels.max_pixels = 64 * 48 - 1;
  EXPECT_EQ(reason_of(sample(64, 48), pixels), FilterReason::image_too_large);
  pixels.max_pixels = 64 * 48;
  EXPECT_EQ(reason_of(sample(64, 48), pixels), FilterReason::pass);
}

TEST(Filters, MalformedJsonFields) {
  FilterConfig c;
  c.min_similarity = 0.3;
  EXPECT_EQ(reason_of(sample(64, 48, "ok", R"({"similarity": "0.35"})"), c), FilterReason::bad_field);
  EXPECT_EQ(reason_of(sample(64, 48, "ok", R"({"similarity": true})"), c), FilterReason::bad_field);
  EXPECT_EQ(reason_of(sample(64, 48, "ok", R"({"similarity": null})"), c), FilterReason::missing_field);
  EXPECT_EQ(reason_of(sample(64, 48, "ok", R"({"similarity": [0.4]})"), c), FilterReason::bad_field);
  EXPECT_EQ(reason_of(sample(64, 48, "ok", "\"just a string\""), c), FilterReason::bad_json);
  EXPECT_EQ(reason_of(sample(64, 48, "ok", R"({"similarity": 0.35})"), c), FilterReason::pass);
  const FilterResult r = filter_sample(sample(64, 48, "ok", R"({"similarity": "high"})"), c);
  EXPECT_NE(r.detail.find("similarity"), std::string::npos) << r.detail;
  // With missing_field_fails off, an absent field skips the check; a wrong type still rejects.
  c.missing_field_fails = false;
  EXPECT_EQ(reason_of(sample(64, 48, "ok", R"({"other": 1})"), c), FilterReason::pass);
  EXPECT_EQ(reason_of(sample(64, 48, "ok", R"({"similarity": null})"), c), FilterReason::pass);
  EXPECT_EQ(reason_of(sample(64, 48, "ok", R"({"similarity": "x"})"), c), FilterReason::bad_field);
  // A broken json is ignored when no json check is configured.
  EXPECT_EQ(reason_of(sample(64, 48, "ok", "{broken"), FilterConfig{}), FilterReason::pass);
}

TEST(Filters, JsonRules) {
  auto r = parse_json_field_rule("  aesthetic >= 5.5 ");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->field, "aesthetic");
  EXPECT_EQ(r->op, JsonFieldRule::Op::ge);
  EXPECT_FALSE(r->text_value);
  EXPECT_EQ(r->number, 5.5);
  EXPECT_EQ(r->to_string(), "aesthetic >= 5.5");
  auto q = parse_json_field_rule(R"(lang != "en us")");
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(q->text_value);
  EXPECT_EQ(q->text, "en us");
  EXPECT_EQ(q->op, JsonFieldRule::Op::ne);
  EXPECT_EQ(parse_json_field_rule("w<10")->op, JsonFieldRule::Op::lt);
  EXPECT_EQ(parse_json_field_rule("w<=10")->op, JsonFieldRule::Op::le);
  EXPECT_EQ(parse_json_field_rule("w>-1e3")->number, -1000.0);
  for (const char* bad : {"aesthetic", ">= 5", "aesthetic >=", "lang >= en", "x < \"3\""}) {
    auto b = parse_json_field_rule(bad);
    EXPECT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find(bad), std::string::npos) << b.status().message();
  }

  FilterConfig c;
  c.json_rules = {*parse_json_field_rule("exif.width > 50"), *parse_json_field_rule("status == success")};
  EXPECT_EQ(reason_of(sample(), c), FilterReason::pass);
  c.json_rules[0] = *parse_json_field_rule("exif.width > 64");
  EXPECT_EQ(reason_of(sample(), c), FilterReason::json_rule);
  c.json_rules[0] = *parse_json_field_rule("exif.height > 1");
  EXPECT_EQ(reason_of(sample(), c), FilterReason::missing_field);
  c.json_rules[0] = *parse_json_field_rule("status > 1");
  EXPECT_EQ(reason_of(sample(), c), FilterReason::bad_field);
  c.json_rules = {*parse_json_field_rule("similarity == \"0.31\"")};
  EXPECT_EQ(reason_of(sample(), c), FilterReason::bad_field);
}

TEST(Filters, RejectsFromTheHeaderWithoutDecoding) {
  FilterConfig c;
  c.min_width = 16;
  c.max_pixels = 100u << 20;
  // A JPEG cut right after its header: the header gives the size, the pixels are not there. The filter keeps it
  // (decoding would fail later and be counted as a bad image), proving it never decodes.
  WebDatasetSample cut = sample(300, 200);
  auto& jpg = cut.fields["jpg"];
  jpg.resize(jpg.size() / 3);
  EXPECT_FALSE(decode_image(jpg).ok());
  const FilterResult kept = filter_sample(cut, c);
  EXPECT_TRUE(kept.passed()) << kept.detail;
  EXPECT_EQ(kept.image.width, 300);
  // A 30000 x 30000 bomb is rejected from its header at once.
  WebDatasetSample bomb = sample(16, 16);
  auto& b = bomb.fields["jpg"];
  for (size_t i = 2; i + 8 < b.size(); ++i)
    if (b[i] == 0xFF && b[i + 1] == 0xC0) {
      b[i + 5] = 30000 >> 8, b[i + 6] = 30000 & 0xff, b[i + 7] = 30000 >> 8, b[i + 8] = 30000 & 0xff;
      break;
    }
  const auto t0 = std::chrono::steady_clock::now();
  const FilterResult r = filter_sample(bomb, c);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.reason, FilterReason::image_too_large);
  EXPECT_EQ(r.image.width, 30000);
  EXPECT_LT(ms, 100.0);
  // PNG and WebP headers too.
  for (auto&& [field, bytes] : {std::pair{"png", *encode_png(testing::test_image(10, 40))},
                                std::pair{"webp", *encode_webp(testing::test_image(10, 40))}}) {
    WebDatasetSample s = sample();
    s.fields.erase("jpg");
    s.fields[field] = bytes;
    const FilterResult fr = filter_sample(s, c);
    EXPECT_EQ(fr.reason, FilterReason::image_too_small) << field;
    EXPECT_EQ(fr.image.height, 40) << field;
  }
}

TEST(Filters, Counters) {
  const FilterConfig c = laion_config();
  FilterCounters a, b;
  a.add(reason_of(sample(), c));
  a.add(reason_of(sample(10, 10), c));
  a.add(reason_of(sample(10, 10), c));
  b.add(reason_of(sample(64, 48, "x"), c));
  b.add(reason_of(sample(), c));
  a += b;
  EXPECT_EQ(a.total(), 5u);
  EXPECT_EQ(a.get(FilterReason::pass), 2u);
  EXPECT_EQ(a.get(FilterReason::image_too_small), 2u);
  EXPECT_EQ(a.get(FilterReason::caption_too_short), 1u);
  EXPECT_EQ(a.rejected(), 3u);
  const auto j = nlohmann::ordered_json::parse(a.to_json());
  EXPECT_EQ(j.size(), static_cast<size_t>(kFilterReasonCount));
  EXPECT_EQ(j["image_too_small"], 2);
  EXPECT_EQ(j["aspect_ratio"], 0);
  EXPECT_EQ(j.begin().key(), "pass");
  for (int i = 0; i < kFilterReasonCount; ++i)
    EXPECT_TRUE(j.contains(filter_reason_name(static_cast<FilterReason>(i)))) << i;
}

TEST(Filters, ConfigValidation) {
  EXPECT_TRUE(FilterConfig{}.validate().ok());
  EXPECT_TRUE(laion_config().validate().ok());
  FilterConfig c;
  c.min_width = -1;
  EXPECT_NE(c.validate().message().find("min_width"), std::string::npos);
  c = FilterConfig{};
  c.min_height = 100, c.max_height = 50;
  EXPECT_NE(c.validate().message().find("min_height"), std::string::npos);
  c = FilterConfig{};
  c.max_aspect_ratio = 0.5;
  EXPECT_NE(c.validate().message().find("max_aspect_ratio"), std::string::npos);
  c = FilterConfig{};
  c.min_caption_chars = 10, c.max_caption_chars = 5;
  EXPECT_FALSE(c.validate().ok());
  c = FilterConfig{};
  c.max_punsafe = std::nan("");
  EXPECT_NE(c.validate().message().find("max_punsafe"), std::string::npos);
}

TEST(CaptionClean, WhitespaceControlAndTrim) {
  EXPECT_EQ(*clean_caption("  hello   world \t\n"), "hello world");
  EXPECT_EQ(*clean_caption("a\u00a0\u2003b\u3000c\u2028d"), "a b c d");  // NBSP, em space, ideographic, LS
  EXPECT_EQ(*clean_caption("bell\x07 and\x1b[0m esc\x7f"), "bell and[0m esc");
  EXPECT_EQ(*clean_caption("c1\xc2\x80\xc2\x9f" "done"), "c1done");  // U+0080, U+009F (C1 controls)
  EXPECT_EQ(*clean_caption("x \x01 y"), "x y");  // a dropped control does not split a whitespace run
  EXPECT_EQ(*clean_caption(""), "");
  EXPECT_EQ(*clean_caption(" \n\t "), "");
  CaptionCleanOptions keep;
  keep.collapse_whitespace = false;
  keep.drop_control = false;
  EXPECT_EQ(*clean_caption("  a  \x07 b\n", keep), "a  \x07 b");
  EXPECT_EQ(utf8_length("h\u00e9llo \u4e16\u754c \U0001F600"), 10u);
}

TEST(CaptionClean, InvalidUtf8RejectedOrRepaired) {
  for (const char* bad : {"a\xff", "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "cut \xe4\xb8", "\x80x"}) {
    auto r = clean_caption(bad);
    ASSERT_FALSE(r.ok()) << ::testing::PrintToString(std::string(bad));
    EXPECT_EQ(r.status().code(), StatusCode::parse_error);
    EXPECT_NE(r.status().message().find("invalid UTF-8 at byte"), std::string::npos);
  }
  CaptionCleanOptions repair;
  repair.invalid_utf8 = InvalidUtf8::repair;
  const std::string fffd = "\xef\xbf\xbd";
  EXPECT_EQ(*clean_caption("a\xff" "b", repair), "a" + fffd + "b");
  EXPECT_EQ(*clean_caption("cut \xe4\xb8", repair), "cut " + fffd);  // a truncated sequence is one U+FFFD
  EXPECT_EQ(*clean_caption("\xed\xa0\x80", repair), fffd + fffd + fffd);  // surrogate: ED, then two lone bytes
  EXPECT_EQ(*clean_caption("ok \xe4\xb8\x96", repair), "ok \xe4\xb8\x96");  // valid text unchanged
  EXPECT_EQ(*clean_caption("\xf0\x9f\x98\x80 smile", repair), "\xf0\x9f\x98\x80 smile");
}

TEST(CaptionClean, CapCutsAtCodePoints) {
  CaptionCleanOptions cap;
  cap.max_chars = 4;
  EXPECT_EQ(*clean_caption("\u4e16\u754c\u4e16\u754c\u4e16", cap), "\u4e16\u754c\u4e16\u754c");
  EXPECT_EQ(*clean_caption("abc defgh", cap), "abc");  // trailing space trimmed after the cut
  EXPECT_EQ(*clean_caption("ab", cap), "ab");
  // In the filter the length limits see the uncapped caption; the kept caption is capped.
  FilterConfig c;
  c.caption.max_chars = 5;
  c.max_caption_chars = 12;
  const FilterResult r = filter_sample(sample(64, 48, "a long caption"), c);
  EXPECT_EQ(r.reason, FilterReason::caption_too_long);
  const FilterResult k = filter_sample(sample(64, 48, "short one!"), c);
  EXPECT_TRUE(k.passed());
  EXPECT_EQ(k.caption, "short");
}

}  // namespace
}  // namespace vlm

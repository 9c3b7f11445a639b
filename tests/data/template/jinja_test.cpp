// The Jinja interpreter against Jinja itself: jinja_cases.json holds small templates over every construct chat
// templates use, with the output of Jinja configured as transformers configures it (dev/fixtures/make_jinja_cases.py),
// or the fact that Jinja raised. Plus the error messages of this implementation: unsupported constructs and syntax
// errors name the construct and its line and column.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "data/template/jinja.h"

namespace vlm {
namespace {

using ojson = nlohmann::ordered_json;

Expected<std::string> render(const std::string& source, const ojson& vars = ojson::object()) {
  Expected<JinjaTemplate> t = JinjaTemplate::parse(source, "test.jinja");
  if (!t.ok()) return t.status();
  return t->render(vars);
}

TEST(Jinja, MatchesJinjaOnEveryCase) {
  std::ifstream in(std::string(VLM_HF_FIXTURES) + "/../../../template/jinja_cases.json");
  ASSERT_TRUE(in.good());
  std::stringstream buf;
  buf << in.rdbuf();
  ojson cases = ojson::parse(buf.str())["cases"];
  ASSERT_GE(cases.size(), 80u);
  for (const ojson& c : cases) {
    std::string name = c["name"];
    Expected<std::string> got = render(c["template"], c["vars"]);
    if (c.contains("text")) {
      ASSERT_TRUE(got.ok()) << name << ": " << got.status().to_string();
      EXPECT_EQ(*got, c["text"].get<std::string>()) << name;
    } else {
      EXPECT_FALSE(got.ok()) << name << ": rendered '" << (got.ok() ? *got : "") << "' although Jinja raised "
                             << c["error"].get<std::string>();
    }
  }
}

void expect_error(const std::string& source, StatusCode code, const std::vector<std::string>& needles,
                  const ojson& vars = ojson::object()) {
  Expected<std::string> got = render(source, vars);
  ASSERT_FALSE(got.ok()) << source;
  EXPECT_EQ(got.status().code(), code) << got.status().to_string();
  for (const std::string& n : needles) {
    EXPECT_NE(got.status().message().find(n), std::string::npos) << "'" << n << "' not in " << got.status().to_string();
  }
}

TEST(Jinja, UnsupportedConstructsNameThemselvesAndTheirPosition) {
  expect_error("ok\n  {% include 'other.jinja' %}", StatusCode::unsupported,
               {"test.jinja", "line 2, column 6", "unsupported tag 'include'"});
  expect_error("{% extends 'base' %}", StatusCode::unsupported, {"unsupported tag 'extends'"});
  expect_error("{% call m() %}x{% endcall %}", StatusCode::unsupported, {"unsupported tag 'call'"});
  expect_error("a\nb {{ x | center(10) }}", StatusCode::unsupported, {"line 2, column 10", "unsupported filter 'center'"});
  // Filters and tests are checked when parsing, even in branches that would not run.
  expect_error("{% if false %}{{ x is prime }}{% endif %}", StatusCode::unsupported, {"unsupported test 'prime'"});
  expect_error("{% for x in xs recursive %}{% endfor %}", StatusCode::unsupported, {"'recursive'"});
  expect_error("{{ f(*args) }}", StatusCode::unsupported, {"'*args'"});
  expect_error("{{ '%s' % 1 }}", StatusCode::invalid_argument, {"printf-style string formatting"});
  expect_error("{{ 'a {}'.format(1) }}", StatusCode::invalid_argument, {"str.format()"});
}

TEST(Jinja, SyntaxErrorsNameTheProblem) {
  expect_error("{% if x %}\nabc", StatusCode::parse_error,
               {"unexpected end of template", "'elif' or 'else' or 'endif'", "opened at line 1, column 4"});
  expect_error("x\n{% for a in b %}{{ a }}", StatusCode::parse_error, {"'else' or 'endfor'", "opened at line 2"});
  expect_error("{{ x", StatusCode::parse_error, {"unterminated tag", "'{{' without '}}'"});
  expect_error("{% if x", StatusCode::parse_error, {"unterminated tag", "'{%' without '%}'"});
  expect_error("{# never closed", StatusCode::parse_error, {"unterminated comment"});
  expect_error("{{ 'abc }}", StatusCode::parse_error, {"unterminated string literal"});
  expect_error("{{ (1 }}", StatusCode::parse_error, {"unexpected '}', expected ')'"});
  expect_error("{% frobnicate %}", StatusCode::parse_error, {"unknown tag 'frobnicate'"});
  expect_error("{% endif %}", StatusCode::parse_error, {"unknown tag 'endif'"});
  expect_error("{% break %}", StatusCode::parse_error, {"'break' outside of a for loop"});
  expect_error("{{ 1 + }}", StatusCode::parse_error, {"line 1, column 8", "unexpected '}}'"});
  expect_error("{{ 99999999999999999999 }}", StatusCode::parse_error, {"out of range"});
}

TEST(Jinja, RenderErrorsCarryTheMessageAndPosition) {
  expect_error("{{ 'a' }}\n  {{ 'b' + 1 }}", StatusCode::invalid_argument,
               {"line 2, column", "can only concatenate str (not \"int\") to str"});
  expect_error("{{ raise_exception('Conversation roles must alternate') }}", StatusCode::invalid_argument,
               {"raise_exception: Conversation roles must alternate"});
  expect_error("{{ messages[0].content }}", StatusCode::invalid_argument, {"'messages' is undefined"});
  expect_error("{{ m.tool_calls[0] }}", StatusCode::invalid_argument, {"'dict object' has no attribute 'tool_calls'"},
               {{"m", ojson::object()}});
  expect_error("{% for i in range(1000000) %}{% endfor %}", StatusCode::invalid_argument, {"more than 100000"});
  expect_error("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", StatusCode::invalid_argument, {"nested deeper"});
  expect_error("{{ 'x' * 100000000 }}", StatusCode::invalid_argument, {"too large"});
  expect_error("{{ 9223372036854775807 + 1 }}", StatusCode::invalid_argument, {"integer overflow"});
}

TEST(Jinja, DeepNestingIsAnErrorNotACrash) {
  std::string deep = "{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}";
  expect_error(deep, StatusCode::parse_error, {"nested too deeply"});
  expect_error("{{ " + std::string(100000, '-') + "1 }}", StatusCode::parse_error, {"nested too deeply"});
  std::string nots;
  for (int i = 0; i < 50000; ++i) nots += "not ";
  expect_error("{{ " + nots + "x }}", StatusCode::parse_error, {"nested too deeply"});
  std::string blocks;
  for (int i = 0; i < 100000; ++i) blocks += "{% if x %}";
  expect_error(blocks, StatusCode::parse_error, {"nested more than 256 deep"});
  expect_error("{% set ns = namespace(x=1) %}{% for i in range(50000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
               StatusCode::invalid_argument, {"nested more than 512 deep"});
  expect_error("{% set ns = namespace(x=1) %}{% set ns.x = [1, {'a': ns}] %}", StatusCode::invalid_argument,
               {"storing namespace 'ns' inside itself"});
  expect_error("{% set a = namespace() %}{% set b = namespace(x=a) %}{% set a.y = b %}", StatusCode::invalid_argument,
               {"storing namespace 'a' inside itself"});
  expect_error("{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
               StatusCode::invalid_argument, {"more than 1,000,000 loop iterations"});
  std::string ifs;
  for (int i = 0; i < 50; ++i) ifs += "{% if true %}";
  ifs += "x";
  for (int i = 0; i < 50; ++i) ifs += "{% endif %}";
  Expected<std::string> out = render(ifs);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, "x");
}

}  // namespace
}  // namespace vlm

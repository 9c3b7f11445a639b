// The environment registry: its parsing rules (plain decimals in range, the default when unset or empty, one of the
// choices, a fatal error naming the variable), the declarations themselves, the typed accessors (an undeclared name
// or a kind other than the declaration's is fatal), EnvSwitch, vlm_environment and the generated lists.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

#include "core/env.h"
#include "testing/test_util.h"

namespace vlm::testing {
namespace {

// A variable of the tests' own, outside the registry: the parsing rules take any Var.
const env::Var kInt{"VLM_TEST_ENV_INT", env::Kind::integer, env::Audience::testing, "7", nullptr, "tests",
                    "an integer", -5, 100};
const env::Var kAuto{"VLM_TEST_ENV_AUTO", env::Kind::flag, env::Audience::testing, nullptr, "automatic", "tests",
                     "a flag without a default"};
const env::Var kChoice{"VLM_TEST_ENV_CHOICE", env::Kind::choice, env::Audience::testing, "b", nullptr, "tests",
                       "a choice", 0, 0, "a|b|cc"};

TEST(Env, IntegersArePlainDecimalsInRangeAndTheDefaultWhenUnsetOrEmpty) {
  EXPECT_EQ(env::parse_integer(kInt, nullptr), 7);
  EXPECT_EQ(env::parse_integer(kInt, ""), 7);
  EXPECT_EQ(env::parse_integer(kInt, "0"), 0);
  EXPECT_EQ(env::parse_integer(kInt, "100"), 100);
  EXPECT_EQ(env::parse_integer(kInt, "-5"), -5);
  EXPECT_EQ(env::parse_integer(kAuto, nullptr), std::nullopt);
  EXPECT_EQ(env::parse_integer(kAuto, ""), std::nullopt);
  EXPECT_EQ(env::parse_integer(kAuto, "1"), 1);
}

TEST(Env, OtherSpellingsAndOutOfRangeValuesAreFatalNamingTheVariable) {
  for (const char* bad : {"101", "-6", "+1", " 1", "1 ", "01", "-0x", "1x", "x", "-", "9999999999", "1.0"}) {
    EXPECT_DEATH(env::parse_integer(kInt, bad), "VLM_TEST_ENV_INT must be an integer in \\[-5, 100\\], not '")
        << "value '" << bad << "'";
  }
  EXPECT_DEATH(env::parse_integer(kAuto, "2"), "VLM_TEST_ENV_AUTO must be an integer in \\[0, 1\\], not '2'");
}

TEST(Env, ChoicesAreOneOfTheListedValues) {
  EXPECT_EQ(env::parse_text(kChoice, nullptr), "b");
  EXPECT_EQ(env::parse_text(kChoice, ""), "b");
  EXPECT_EQ(env::parse_text(kChoice, "a"), "a");
  EXPECT_EQ(env::parse_text(kChoice, "cc"), "cc");
  for (const char* bad : {"c", "A", "a|b", " a", "ccc"})
    EXPECT_DEATH(env::parse_text(kChoice, bad), "VLM_TEST_ENV_CHOICE must be one of a\\|b\\|cc, not '") << bad;
}

TEST(Env, EveryDeclarationIsWellFormed) {
  const std::regex name_rule("VLM_[A-Z0-9_]+");
  std::set<std::string> names;
  int last_audience = -1;
  std::string last_name;
  for (const env::Var& v : env::registry()) {
    SCOPED_TRACE(v.name);
    EXPECT_TRUE(std::regex_match(v.name, name_rule));
    EXPECT_TRUE(names.insert(v.name).second) << "declared twice";
    // Grouped by audience in the enum's order, by name within a group.
    const int audience = static_cast<int>(v.audience);
    EXPECT_GE(audience, last_audience);
    if (audience == last_audience) {
      EXPECT_LT(last_name, v.name);
    }
    last_audience = audience;
    last_name = v.name;
    for (const char* text : {v.meaning, v.read_by}) {
      ASSERT_NE(text, nullptr);
      EXPECT_FALSE(std::string(text).empty());
      EXPECT_EQ(std::string(text).find('\n'), std::string::npos);
    }
    EXPECT_TRUE(v.default_value != nullptr || v.default_text != nullptr) << "the default is documented";
    switch (v.kind) {
      case env::Kind::flag:
        EXPECT_EQ(v.lo, 0);
        EXPECT_EQ(v.hi, 1);
        [[fallthrough]];
      case env::Kind::integer:
        EXPECT_LE(v.lo, v.hi);
        if (v.default_value != nullptr) env::parse_integer(v, v.default_value);  // aborts when it does not parse
        break;
      case env::Kind::choice:
        ASSERT_NE(v.choices, nullptr);
        ASSERT_NE(v.default_value, nullptr);
        env::parse_text(v, v.default_value);
        break;
      case env::Kind::path:
      case env::Kind::text: break;
    }
  }
}

// Undeclared names (not as literals at the call, which tests/apps/check_env.py would report as undeclared reads).
constexpr const char* kUndeclared = "VLM_NOT_A_SETTING";
constexpr const char* kRemoved = "VLM_PDL";

TEST(Env, AccessorsReadDeclaredVariablesOnly) {
  EXPECT_DEATH(env::flag(kUndeclared), "environment variable VLM_NOT_A_SETTING is not declared");
  EXPECT_DEATH(env::text(kRemoved), "environment variable VLM_PDL is not declared");
  EXPECT_DEATH(env::integer("VLM_LOG_LEVEL"), "VLM_LOG_LEVEL is declared as debug\\|info");
  EXPECT_DEATH(env::text("VLM_CUDA_SYNC"), "VLM_CUDA_SYNC is declared as 0\\|1, read as a string");
  EXPECT_DEATH(env::flag("VLM_FLASH_PERSISTENT"), "VLM_FLASH_PERSISTENT is not a flag with a default");
  {
    const ScopedEnv unset("VLM_TEST_LONG_PIPE_MIB", nullptr);
    EXPECT_EQ(env::integer("VLM_TEST_LONG_PIPE_MIB"), 1024);
  }
  {
    const ScopedEnv set("VLM_TEST_LONG_PIPE_MIB", "5000");
    EXPECT_EQ(env::integer("VLM_TEST_LONG_PIPE_MIB"), 5000);
  }
  {
    const ScopedEnv bad("VLM_TEST_LONG_PIPE_MIB", "0");
    EXPECT_DEATH(env::integer("VLM_TEST_LONG_PIPE_MIB"), "VLM_TEST_LONG_PIPE_MIB must be an integer in \\[1, ");
  }
  {
    const ScopedEnv unset("VLM_FLASH_PERSISTENT", nullptr);
    EXPECT_EQ(env::integer_if_set("VLM_FLASH_PERSISTENT"), std::nullopt);
  }
  {
    const ScopedEnv set("VLM_FLASH_PERSISTENT", "0");
    EXPECT_EQ(env::integer_if_set("VLM_FLASH_PERSISTENT"), 0);
  }
  {
    const ScopedEnv set("VLM_LOG_LEVEL", "warn");
    EXPECT_EQ(env::text("VLM_LOG_LEVEL"), "warn");
  }
  {
    const ScopedEnv bad("VLM_LOG_LEVEL", "verbose");
    EXPECT_DEATH(env::text("VLM_LOG_LEVEL"), "VLM_LOG_LEVEL must be one of debug\\|info\\|warn\\|error\\|off");
  }
}

TEST(EnvSwitch, ReadsTheDeclaredFlagOnFirstUseUnlessSetFirst) {
  constexpr const char* kSwitch = "VLM_ATTENTION_FLASH";  // default 1
  {
    const ScopedEnv unset(kSwitch, nullptr);
    EnvSwitch s(kSwitch);
    EXPECT_TRUE(s.on());
  }
  const ScopedEnv off(kSwitch, "0");
  EnvSwitch from_env(kSwitch), set_first(kSwitch);
  set_first.set(true);
  EXPECT_FALSE(from_env.on());
  EXPECT_TRUE(set_first.on());
  {
    const ScopedEnv on(kSwitch, "1");
    EXPECT_FALSE(from_env.on()) << "read once, on first use";
  }
  from_env.set(true);
  EXPECT_TRUE(from_env.on());
  from_env.set(false);
  EXPECT_FALSE(from_env.on());
  const ScopedEnv bad(kSwitch, "2");
  EnvSwitch bad_switch(kSwitch);
  EXPECT_DEATH(bad_switch.on(), "VLM_ATTENTION_FLASH must be an integer in \\[0, 1\\], not '2'");
  EnvSwitch undeclared(kUndeclared);
  EXPECT_DEATH(undeclared.on(), "VLM_NOT_A_SETTING is not declared");
}

TEST(VlmEnvironment, ListsDeclaredVariablesInNameOrderThenUndeclaredOnes) {
  const ScopedEnv a("VLM_SKIMAGE_DATA", "x y"), b("VLM_TEST_LONG_PIPE_MIB", "2");
  const ScopedEnv c("VLM_TEST_ENV_UNDECLARED", "1"), d("NOT_VLM_TEST_ENV", "1");
  const std::string all = vlm_environment();
  const size_t pa = all.find("VLM_SKIMAGE_DATA=x y"), pb = all.find("VLM_TEST_LONG_PIPE_MIB=2"),
               pc = all.find("VLM_TEST_ENV_UNDECLARED=1(undeclared)");
  ASSERT_NE(pa, std::string::npos) << all;
  ASSERT_NE(pb, std::string::npos) << all;
  ASSERT_NE(pc, std::string::npos) << all;
  EXPECT_LT(pa, pb);
  EXPECT_LT(pb, pc);
  EXPECT_EQ(all.find("NOT_VLM"), std::string::npos) << all;
}

TEST(Env, HelpAndMarkdownListEveryVariable) {
  const std::string help = env::help_text(), md = env::markdown();
  for (const env::Var& v : env::registry()) {
    EXPECT_NE(help.find(std::string("  ") + v.name + "="), std::string::npos) << v.name;
    EXPECT_NE(md.find(std::string("| `") + v.name + "` |"), std::string::npos) << v.name;
    EXPECT_NE(help.find(v.meaning), std::string::npos) << v.name;
  }
  EXPECT_NE(md.find("debug\\|info\\|warn\\|error\\|off"), std::string::npos) << "'|' escaped in table cells";
}

}  // namespace
}  // namespace vlm::testing

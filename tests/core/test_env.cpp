// env_int: plain decimal integers in range, the fallback when unset or empty, and a fatal error naming the variable;
// EnvSwitch: the variable read on first use unless set first, then fixed until set again; vlm_environment: the VLM_*
// variables in name order.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/env.h"

namespace vlm::testing {
namespace {

constexpr const char* kVar = "VLM_TEST_ENV_INT";

int read_with(const char* value) {
  if (value == nullptr) {
    unsetenv(kVar);
  } else {
    setenv(kVar, value, 1);
  }
  const int v = env_int(kVar, 7, -5, 100);
  unsetenv(kVar);
  return v;
}

TEST(EnvInt, ReadsPlainDecimalsAndFallsBackWhenUnsetOrEmpty) {
  EXPECT_EQ(read_with(nullptr), 7);
  EXPECT_EQ(read_with(""), 7);
  EXPECT_EQ(read_with("0"), 0);
  EXPECT_EQ(read_with("100"), 100);
  EXPECT_EQ(read_with("-5"), -5);
}

TEST(EnvInt, RejectsOtherSpellingsAndOutOfRangeValuesNamingTheVariable) {
  for (const char* bad : {"101", "-6", "+1", " 1", "1 ", "01", "-0x", "1x", "x", "-", "9999999999", "1.0"}) {
    EXPECT_DEATH(read_with(bad), "VLM_TEST_ENV_INT must be an integer in \\[-5, 100\\], not '")
        << "value '" << bad << "'";
  }
}

TEST(EnvSwitch, ReadsTheVariableOnFirstUseUnlessSetFirst) {
  constexpr const char* kSwitch = "VLM_TEST_ENV_SWITCH";
  unsetenv(kSwitch);
  EnvSwitch unset_on(kSwitch, true), unset_off(kSwitch, false);
  EXPECT_TRUE(unset_on.on());
  EXPECT_FALSE(unset_off.on());

  setenv(kSwitch, "0", 1);
  EnvSwitch from_env(kSwitch, true), set_first(kSwitch, true);
  set_first.set(true);
  EXPECT_FALSE(from_env.on());
  EXPECT_TRUE(set_first.on());
  setenv(kSwitch, "1", 1);
  EXPECT_FALSE(from_env.on()) << "read once, on first use";
  from_env.set(true);
  EXPECT_TRUE(from_env.on());
  from_env.set(false);
  EXPECT_FALSE(from_env.on());

  setenv(kSwitch, "2", 1);
  EnvSwitch bad(kSwitch, false);
  EXPECT_DEATH(bad.on(), "VLM_TEST_ENV_SWITCH must be an integer in \\[0, 1\\], not '2'");
  unsetenv(kSwitch);
}

TEST(VlmEnvironment, ListsTheVlmVariablesInNameOrder) {
  for (const std::string& v : {std::string("VLM_TEST_ENV_B"), std::string("VLM_TEST_ENV_A")}) unsetenv(v.c_str());
  const std::string before = vlm_environment();
  setenv("VLM_TEST_ENV_B", "2", 1);
  setenv("VLM_TEST_ENV_A", "x y", 1);
  setenv("NOT_VLM_TEST_ENV", "1", 1);
  const std::string all = vlm_environment();
  unsetenv("VLM_TEST_ENV_A");
  unsetenv("VLM_TEST_ENV_B");
  unsetenv("NOT_VLM_TEST_ENV");
  const size_t a = all.find("VLM_TEST_ENV_A=x y"), b = all.find("VLM_TEST_ENV_B=2");
  ASSERT_NE(a, std::string::npos) << all;
  ASSERT_NE(b, std::string::npos) << all;
  EXPECT_LT(a, b);
  EXPECT_EQ(all.find("NOT_VLM"), std::string::npos) << all;
  EXPECT_EQ(vlm_environment(), before);
}

}  // namespace
}  // namespace vlm::testing

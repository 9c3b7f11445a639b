// env_int: plain decimal integers in range, the fallback when unset or empty, and a fatal error naming the variable.
#include <gtest/gtest.h>

#include <cstdlib>

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

}  // namespace
}  // namespace vlm::testing

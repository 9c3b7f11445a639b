// OptionSet: TOML loading, --set overrides, validation messages, help and the resolved dump.
#include <gtest/gtest.h>

#include "core/options.h"

namespace vlm {
namespace {

struct Cfg {
  float lr = 1e-3f;
  int steps = 100;
  bool flag = false;
  std::string name = "tiny";
  std::vector<std::string> freeze;
  std::vector<float> mean = {0.5f, 0.5f, 0.5f};
};

OptionSet make(Cfg& c) {
  OptionSet o;
  o.add("train.lr", &c.lr, "peak learning rate", positive<float>());
  o.add("train.steps", &c.steps, "optimizer steps", positive<int>());
  o.add("train.flag", &c.flag, "a flag");
  o.add("model.name", &c.name, "preset", one_of({"tiny", "base"}));
  o.add("train.freeze", &c.freeze, "parts to freeze");
  o.add("data.mean", &c.mean, "pixel mean");
  return o;
}

TEST(Options, TomlOverridesDefaults) {
  Cfg c;
  OptionSet o = make(c);
  ASSERT_TRUE(o.load_toml_string("[train]\nlr = 3e-4\nsteps = 7\nfreeze = [\"vision\"]\n[model]\nname = \"base\"\n",
                                 "x.toml")
                  .ok());
  EXPECT_FLOAT_EQ(c.lr, 3e-4f);
  EXPECT_EQ(c.steps, 7);
  EXPECT_EQ(c.name, "base");
  ASSERT_EQ(c.freeze.size(), 1u);
  EXPECT_TRUE(o.validate().ok());
}

TEST(Options, IntegerAcceptedForFloat) {
  Cfg c;
  OptionSet o = make(c);
  ASSERT_TRUE(o.load_toml_string("train.lr = 1\n", "x.toml").ok());
  EXPECT_FLOAT_EQ(c.lr, 1.f);
}

TEST(Options, UnknownKeyNamesFileKeyAndSuggestion) {
  Cfg c;
  OptionSet o = make(c);
  Status s = o.load_toml_string("[train]\nlrr = 1.0\n", "runs/a.toml");
  EXPECT_EQ(s.code(), StatusCode::parse_error);
  EXPECT_NE(s.message().find("runs/a.toml"), std::string::npos);
  EXPECT_NE(s.message().find("train.lrr"), std::string::npos);
  EXPECT_NE(s.message().find("did you mean 'train.lr'"), std::string::npos);
}

TEST(Options, WrongTypeNamesKey) {
  Cfg c;
  OptionSet o = make(c);
  Status s = o.load_toml_string("train.steps = \"many\"\n", "a.toml");
  EXPECT_NE(s.message().find("a.toml: train.steps: expected an integer, got a string"), std::string::npos)
      << s.message();
  s = o.load_toml_string("train.freeze = [1]\n", "a.toml");
  EXPECT_NE(s.message().find("element 0"), std::string::npos) << s.message();
}

TEST(Options, SyntaxErrorHasLine) {
  Cfg c;
  OptionSet o = make(c);
  Status s = o.load_toml_string("[train\n", "bad.toml");
  EXPECT_EQ(s.code(), StatusCode::parse_error);
  EXPECT_NE(s.message().find("bad.toml:1"), std::string::npos) << s.message();
}

TEST(Options, ValidateNamesSourceKeyAndReason) {
  Cfg c;
  OptionSet o = make(c);
  ASSERT_TRUE(o.load_toml_string("train.lr = -1.0\n", "cfg.toml").ok());
  Status s = o.validate();
  EXPECT_EQ(s.message(), "cfg.toml: train.lr: must be > 0 (got -1.0)");
  ASSERT_TRUE(o.set("train.lr=0.5").ok());
  EXPECT_TRUE(o.validate().ok());
  ASSERT_TRUE(o.set("model.name=huge").ok());
  EXPECT_NE(o.validate().message().find("--set: model.name: must be one of tiny, base"), std::string::npos);
}

TEST(Options, SetParsesEachType) {
  Cfg c;
  OptionSet o = make(c);
  EXPECT_TRUE(o.set("train.steps=12").ok());
  EXPECT_EQ(c.steps, 12);
  EXPECT_TRUE(o.set("train.flag=true").ok());
  EXPECT_TRUE(c.flag);
  EXPECT_TRUE(o.set("model.name=base").ok());
  EXPECT_EQ(c.name, "base");
  EXPECT_TRUE(o.set("train.freeze=vision,projector").ok());
  EXPECT_EQ(c.freeze, (std::vector<std::string>{"vision", "projector"}));
  EXPECT_TRUE(o.set("data.mean=[0.1, 0.2, 0.3]").ok());
  EXPECT_FLOAT_EQ(c.mean[2], 0.3f);
  EXPECT_FALSE(o.set("train.steps=abc").ok());
  EXPECT_FALSE(o.set("nokey=1").ok());
  EXPECT_FALSE(o.set("novalue").ok());
}

TEST(Options, ResolvedDumpRoundTrips) {
  Cfg c;
  OptionSet o = make(c);
  ASSERT_TRUE(o.set("train.lr=0.25").ok());
  ASSERT_TRUE(o.set("model.name=base").ok());
  std::string dumped = o.to_toml();
  Cfg d;
  OptionSet o2 = make(d);
  ASSERT_TRUE(o2.load_toml_string(dumped, "dump").ok()) << dumped;
  EXPECT_FLOAT_EQ(d.lr, 0.25f);
  EXPECT_EQ(d.name, "base");
  EXPECT_NE(o.help().find("train.lr"), std::string::npos);
  EXPECT_NE(o.help().find("peak learning rate"), std::string::npos);
}

}  // namespace
}  // namespace vlm

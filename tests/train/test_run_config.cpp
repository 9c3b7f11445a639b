// Run files: presets under file values under --set, validation messages naming file and key, the resolved dump.
#include <gtest/gtest.h>

#include <fstream>

#include "testing/test_util.h"
#include "train/train_config.h"

namespace vlm {
namespace {

std::string write(const std::string& name, const std::string& text) {
  const std::string path = testing::scratch_dir("cfg_" + name) + "/" + name + ".toml";
  std::ofstream(path) << text;
  return path;
}

TEST(RunConfig, PresetThenFileThenSet) {
  const std::string path = write("a", "[model]\npreset = \"nanovlm-222m\"\n[model.text]\nlayers = 2\n[train]\nlr = 0.5\n");
  std::string resolved;
  auto c = load_run_config(path, {"train.lr=0.25", "train.freeze=vision"}, &resolved);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->model.vision.hidden, 768);  // from the preset
  EXPECT_EQ(c->model.text.layers, 2);      // the file beats the preset
  EXPECT_FLOAT_EQ(c->train.adamw.lr, 0.25f);  // --set beats the file
  EXPECT_EQ(c->train.freeze, std::vector<std::string>{"vision"});
  // The resolved dump loads back to the same values.
  const std::string again_path = write("b", resolved);
  auto again = load_run_config(again_path, {});
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->model.text.layers, 2);
  EXPECT_FLOAT_EQ(again->train.adamw.lr, 0.25f);
}

TEST(RunConfig, BadValuesNameFileKeyAndReason) {
  auto c = load_run_config(write("c", "[train]\nlr = -1.0\n"), {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("c.toml: train.lr: must be > 0"), std::string::npos) << c.status().message();
  c = load_run_config(write("d", "[train]\nfreeze = [\"eyes\"]\n"), {});
  EXPECT_NE(c.status().message().find("unknown part 'eyes'"), std::string::npos) << c.status().message();
  c = load_run_config(write("e", "[model.text]\nheads = 5\n"), {});
  EXPECT_NE(c.status().message().find("model.text.hidden"), std::string::npos) << c.status().message();
  c = load_run_config(write("f", "[trian]\nlr = 1.0\n"), {});
  EXPECT_NE(c.status().message().find("unknown key 'trian.lr'"), std::string::npos) << c.status().message();
  c = load_run_config(write("g", "[train]\nlr = \"fast\"\n"), {});
  EXPECT_NE(c.status().message().find("train.lr: expected a number"), std::string::npos) << c.status().message();
  c = load_run_config(write("h", "[data]\ntask = \"dance\"\n"), {});
  EXPECT_NE(c.status().message().find("data.task: must be one of"), std::string::npos) << c.status().message();
  c = load_run_config("/nonexistent.toml", {});
  EXPECT_FALSE(c.ok());
  c = load_run_config("", {"model.preset=huge"});
  EXPECT_NE(c.status().message().find("unknown model preset 'huge'"), std::string::npos) << c.status().message();
}

TEST(RunConfig, RecomputeIsNoneOrBlocks) {
  auto c = load_run_config("", {});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->train.recompute, "none");  // the default
  c = load_run_config(write("r1", "[train]\nrecompute = \"blocks\"\n"), {});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->train.recompute, "blocks");
  c = load_run_config("", {"train.recompute=blocks"});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->train.recompute, "blocks");
  c = load_run_config(write("r2", "[train]\nrecompute = \"layers\"\n"), {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("r2.toml: train.recompute: must be one of"), std::string::npos)
      << c.status().message();
  c = load_run_config(write("r3", "[train]\nrecompute = true\n"), {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("train.recompute"), std::string::npos) << c.status().message();
  c = load_run_config("", {"train.recompute="});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("train.recompute"), std::string::npos) << c.status().message();
}

TEST(RunConfig, DeterministicIsABoolOffByDefault) {
  auto c = load_run_config("", {});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_FALSE(c->train.deterministic);
  c = load_run_config(write("d1", "[train]\ndeterministic = true\n"), {});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->train.deterministic);
  c = load_run_config("", {"train.deterministic=true"});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->train.deterministic);
  c = load_run_config(write("d2", "[train]\ndeterministic = \"yes please\"\n"), {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("train.deterministic"), std::string::npos) << c.status().message();
}

TEST(RunConfig, PrecisionIsParsedAndBf16NeedsCuda) {
  auto c = load_run_config("", {});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->train.precision, "fp32");  // the default
  ASSERT_TRUE(training_compute_dtype(c->train).ok());
  EXPECT_EQ(*training_compute_dtype(c->train), DType::f32);

  c = load_run_config(write("p1", "[train]\nprecision = \"bf16\"\ndevice = \"cuda:0\"\n"), {});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->train.precision, "bf16");
  EXPECT_EQ(*training_compute_dtype(c->train), DType::bf16);
  c = load_run_config("", {"train.device=cuda", "train.precision=bf16"});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(*training_compute_dtype(c->train), DType::bf16);

  // bf16 on the CPU (explicitly or by the default device) is refused, naming the file and both options.
  c = load_run_config(write("p2", "[train]\nprecision = \"bf16\"\n"), {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("p2.toml: train.precision = \"bf16\" needs train.device = cuda"),
            std::string::npos)
      << c.status().message();
  EXPECT_NE(c.status().message().find("(got \"cpu\")"), std::string::npos) << c.status().message();
  c = load_run_config("", {"train.precision=bf16", "train.device=cpu"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("train.precision"), std::string::npos) << c.status().message();
  // --set can turn it back.
  c = load_run_config(write("p3", "[train]\nprecision = \"bf16\"\n"), {"train.precision=fp32"});
  EXPECT_TRUE(c.ok()) << c.status().to_string();

  // Unknown precisions and devices are named.
  c = load_run_config(write("p4", "[train]\nprecision = \"fp16\"\n"), {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("train.precision: must be one of"), std::string::npos) << c.status().message();
  c = load_run_config(write("p5", "[train]\nprecision = 16\n"), {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("train.precision"), std::string::npos) << c.status().message();
  OptimConfig t;
  t.precision = "bf16";
  t.device = "tpu";
  auto dt = training_compute_dtype(t);
  ASSERT_FALSE(dt.ok());
  EXPECT_NE(dt.status().message().find("train.device"), std::string::npos) << dt.status().message();
  t.precision = "int8";
  dt = training_compute_dtype(t);
  ASSERT_FALSE(dt.ok());
  EXPECT_NE(dt.status().message().find("'int8'"), std::string::npos) << dt.status().message();
}

}  // namespace
}  // namespace vlm

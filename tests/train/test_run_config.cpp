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
  EXPECT_FLOAT_EQ(c->train.lr, 0.25f);     // --set beats the file
  EXPECT_EQ(c->train.freeze, std::vector<std::string>{"vision"});
  // The resolved dump loads back to the same values.
  const std::string again_path = write("b", resolved);
  auto again = load_run_config(again_path, {});
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->model.text.layers, 2);
  EXPECT_FLOAT_EQ(again->train.lr, 0.25f);
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

}  // namespace
}  // namespace vlm

// Fixture-driven parity with transformers (see hf_parity.h).
#include "hf_parity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/safetensors.h"
#include "model/model_forward.h"
#include "model/model_io.h"

namespace vlm::testing {

const std::vector<std::string>& hf_fixture_families() {
  static const std::vector<std::string> f = {"idefics3", "llama", "qwen2", "siglip", "nanovlm"};
  return f;
}

std::string hf_fixture_root() { return "tests/model/fixtures/hf"; }

namespace {
// max |a - b| / max |b|; infinity when a holds a NaN or infinity.
double rel_err(const Tensor& a, const Tensor& b) {
  double diff = 0, ref = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double x = a.item_f32(i), y = b.item_f32(i);
    if (!std::isfinite(x)) return INFINITY;
    diff = std::max(diff, std::fabs(x - y));
    ref = std::max(ref, std::fabs(y));
  }
  return diff / std::max(ref, 1e-30);
}
}  // namespace

void expect_hf_parity(const std::string& family, Device device, DType dtype) {
  if (!std::filesystem::exists(hf_fixture_root()))
    GTEST_SKIP() << hf_fixture_root() << " is absent: make it with dev/fixtures/make_hf_fixtures.py";
  const std::string dir = hf_fixture_root() + "/" + family;
  ASSERT_TRUE(std::filesystem::exists(dir + "/inputs.safetensors")) << dir << " is missing";
  auto model = load_model_dir(dir + "/model", device, {}, dtype);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto inputs = safetensors_load(dir + "/inputs.safetensors");
  auto ref = safetensors_load(dir + "/outputs.safetensors");
  ASSERT_TRUE(inputs.ok() && ref.ok());
  int image_token_id = -1;
  if (auto it = inputs->metadata.find("image_token_id"); it != inputs->metadata.end())
    image_token_id = std::stoi(it->second);
  auto out = model_forward(**model, inputs->tensors, image_token_id);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  const std::string key = ref->tensors.count("logits") ? "logits" : "last_hidden_state";
  const Tensor& want = ref->tensors.at(key);
  ASSERT_TRUE(out->count(key)) << key;
  const Tensor& got = out->at(key);
  ASSERT_EQ(got.shape(), want.shape()) << family;
  const double err = rel_err(got, want);
  double tol = 1e-4;
  if (dtype == DType::bf16) tol = 2 * rel_err(ref->tensors.at(key + "_bf16"), want) + 5e-3;
  EXPECT_LE(err, tol) << family << " on " << device.to_string() << " in " << dtype_name(dtype) << ": " << key
                      << " max rel err " << err;
  std::printf("%s %s %s: %s max rel err %.3e (tolerance %.1e)\n", family.c_str(), device.to_string().c_str(),
              dtype_name(dtype), key.c_str(), err, tol);
}

}  // namespace vlm::testing

// The engine tests' model, prompts and greedy oracle.
#include "engine_fixture.h"

#include "infer/prefix_hash.h"
#include "model/generate.h"
#include "model_fixture.h"
#include "testing/test_util.h"

namespace vlm::testing {

EngineCase make_engine_case(Device device, uint64_t seed, int max_new) {
  ModelConfig c = tiny_config(/*tied=*/true, 0);
  c.text.max_seq_len = 96;
  EngineCase ec;
  ec.max_new = max_new;
  ec.model = std::make_unique<VlmModel>(c, device);
  ec.model->init_weights(seed);
  const int per_image = c.image_tokens();
  const int64_t S = c.vision.image_size;
  std::vector<Tensor> pixels;
  for (int i = 0; i < 3; ++i) pixels.push_back(random_normal({3, S, S}, seed * 10 + static_cast<uint64_t>(i)));
  Philox rng(seed, 7);
  auto text = [&](int n) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) {
      int32_t id = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(c.text.vocab_size)));
      t.push_back(id == kImageToken ? id + 1 : id);
    }
    return t;
  };
  auto image = [&]() { return std::vector<int32_t>(static_cast<size_t>(per_image), kImageToken); };
  auto cat = [](std::vector<std::vector<int32_t>> parts) {
    std::vector<int32_t> out;
    for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  const std::vector<int32_t> system = text(19);  // a shared prefix over several blocks
  struct P {
    std::vector<int32_t> tokens;
    std::vector<int> images;
  };
  std::vector<P> prompts = {
      {text(3), {}},
      {cat({{1}, image(), text(6)}), {0}},
      {cat({system, text(5)}), {}},
      {cat({system, text(9)}), {}},
      {cat({{2}, image(), text(2), image(), text(30)}), {1, 2}},
      {cat({{1}, image(), text(6)}), {0}},  // the same image as prompt 1, other text
      {cat({system, image(), text(4)}), {2}},
      {text(41), {}},
  };
  Tensor batch = Tensor::empty({3, 3, S, S}, DType::f32);
  for (int i = 0; i < 3; ++i) batch.slice(0, i, i + 1).view({3, S, S}).copy_from(pixels[static_cast<size_t>(i)]);
  std::vector<GenerationPrompt> gp;
  for (const P& p : prompts) gp.push_back({p.tokens, p.images});
  GenerateOptions go;
  go.max_new_tokens = max_new;
  ec.expected = generate_greedy(*ec.model, batch, gp, kImageToken, go);
  for (size_t i = 0; i < prompts.size(); ++i) {
    infer::Request r;
    r.id = "p";
    r.id += std::to_string(i);  // (not "p" + ...: GCC 12 warns -Wrestrict there)
    r.prompt = prompts[i].tokens;
    for (int img : prompts[i].images)
      r.images.push_back({pixels[static_cast<size_t>(img)], infer::image_key("image" + std::to_string(img), "tiny")});
    r.sampling.max_tokens = max_new;
    ec.requests.push_back(std::move(r));
  }
  return ec;
}

}  // namespace vlm::testing

// Greedy decoding by full recomputation over the active sequences.
#include "model/generate.h"

#include <algorithm>

#include "kernels/ops.h"

namespace vlm {

std::vector<std::vector<int32_t>> generate_greedy(VlmModel& model, const Tensor& images,
                                                  const std::vector<std::vector<int32_t>>& prompts,
                                                  int32_t image_token_id, const GenerateOptions& options) {
  const Device dev = model.device();
  const int per_image = model.config().image_tokens();
  const int hidden = model.config().text.hidden;
  std::vector<std::vector<int32_t>> out(prompts.size());
  if (prompts.empty()) return out;

  // Image tokens of every image, and which image rows belong to which prompt.
  Tensor image_tokens = images.defined() && images.numel() > 0 ? model.encode_images(images.to(dev)) : Tensor();
  std::vector<int> first_image_row(prompts.size() + 1, 0);
  for (size_t i = 0; i < prompts.size(); ++i) {
    int64_t n = std::count(prompts[i].begin(), prompts[i].end(), image_token_id);
    VLM_CHECK(n % per_image == 0, "prompt ", i, " has ", n, " image placeholders, not a multiple of ", per_image);
    first_image_row[i + 1] = first_image_row[i] + static_cast<int>(n);
  }
  VLM_CHECK(!image_tokens.defined() || first_image_row.back() == image_tokens.dim(0),
            "prompts hold ", first_image_row.back(), " image placeholders but the images give ",
            image_tokens.defined() ? image_tokens.dim(0) : 0, " image tokens");

  std::vector<bool> done(prompts.size(), false);
  for (int step = 0; step < options.max_new_tokens; ++step) {
    std::vector<int32_t> tokens, positions, cu{0}, image_rows, image_src, last_rows;
    std::vector<size_t> active;
    int max_len = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (done[i]) continue;
      active.push_back(i);
      const int32_t base = static_cast<int32_t>(tokens.size());
      int32_t pos = 0, img = first_image_row[i];
      auto push = [&](int32_t id) {
        if (id == image_token_id) {
          image_rows.push_back(static_cast<int32_t>(tokens.size()));
          image_src.push_back(img++);
        }
        tokens.push_back(id);
        positions.push_back(pos++);
      };
      for (int32_t id : prompts[i]) push(id);
      for (int32_t id : out[i]) push(id);
      cu.push_back(static_cast<int32_t>(tokens.size()));
      last_rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
      max_len = std::max(max_len, static_cast<int>(tokens.size()) - base);
    }
    if (active.empty()) break;
    const int64_t T = static_cast<int64_t>(tokens.size());
    VlmInputs in;
    in.tokens = Tensor::from_vector(tokens, {T}).to(dev);
    in.positions = Tensor::from_vector(positions, {T}).to(dev);
    in.cu_seqlens = Tensor::from_vector(cu, {static_cast<int64_t>(cu.size())}).to(dev);
    in.max_seqlen = max_len;
    Tensor active_image_tokens;
    if (!image_rows.empty()) {
      const int64_t n = static_cast<int64_t>(image_rows.size());
      in.image_rows = Tensor::from_vector(image_rows, {n}).to(dev);
      active_image_tokens = Tensor::empty({n, hidden}, DType::f32, dev);
      ops::gather_rows(active_image_tokens, image_tokens, Tensor::from_vector(image_src, {n}).to(dev));
    }
    Tensor rows = Tensor::from_vector(last_rows, {static_cast<int64_t>(last_rows.size())}).to(dev);
    Tensor logits = model.logits_at_rows(in, active_image_tokens, rows).to(Device::cpu());
    const int64_t V = logits.dim(1);
    for (size_t a = 0; a < active.size(); ++a) {
      const float* row = logits.data<float>() + static_cast<int64_t>(a) * V;
      const int32_t best = static_cast<int32_t>(std::max_element(row, row + V) - row);
      out[active[a]].push_back(best);
      if (std::find(options.stop_ids.begin(), options.stop_ids.end(), best) != options.stop_ids.end())
        done[active[a]] = true;
    }
  }
  return out;
}

}  // namespace vlm

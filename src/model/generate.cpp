// Greedy decoding by full recomputation over the active sequences.
#include "model/generate.h"

#include <algorithm>
#include <limits>

#include "kernels/ops.h"

namespace vlm {

std::vector<std::vector<int32_t>> generate_greedy(VlmModel& model, const Tensor& images,
                                                  const std::vector<GenerationPrompt>& prompts,
                                                  int32_t image_token_id, const GenerateOptions& options) {
  const Device dev = model.device();
  const int per_image = model.config().image_tokens();
  const int hidden = model.config().text.hidden;
  std::vector<std::vector<int32_t>> out(prompts.size());
  if (prompts.empty()) return out;

  const int64_t n_images = images.defined() ? images.dim(0) : 0;
  // A text model's prompts hold no placeholders (image_tokens() == 0): its images are not encoded.
  Tensor image_tokens = n_images > 0 && per_image > 0 ? model.encode_images(images.to(dev)) : Tensor();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t n = std::count(prompts[i].tokens.begin(), prompts[i].tokens.end(), image_token_id);
    VLM_CHECK(n == static_cast<int64_t>(prompts[i].images.size()) * per_image, "prompt ", i, " has ", n,
              " image placeholders for ", prompts[i].images.size(), " images of ", per_image, " tokens");
    for (int img : prompts[i].images) VLM_CHECK(img >= 0 && img < n_images, "prompt ", i, ": no image ", img);
  }

  std::vector<bool> done(prompts.size(), false);
  for (int step = 0; step < options.max_new_tokens; ++step) {
    std::vector<int32_t> tokens, positions, cu{0}, image_rows, image_src, last_rows;
    std::vector<size_t> active;
    int max_len = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (done[i]) continue;
      active.push_back(i);
      const size_t base = tokens.size();
      int32_t pos = 0;
      size_t placeholder = 0;
      auto push = [&](int32_t id, bool from_prompt) {
        if (from_prompt && id == image_token_id) {
          const int img = prompts[i].images[placeholder / static_cast<size_t>(per_image)];
          image_rows.push_back(static_cast<int32_t>(tokens.size()));
          image_src.push_back(img * per_image + static_cast<int32_t>(placeholder % static_cast<size_t>(per_image)));
          ++placeholder;
        }
        tokens.push_back(id);
        positions.push_back(pos++);
      };
      for (int32_t id : prompts[i].tokens) push(id, true);
      for (int32_t id : out[i]) push(id, false);  // never the image token (masked below)
      cu.push_back(static_cast<int32_t>(tokens.size()));
      last_rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
      max_len = std::max(max_len, static_cast<int>(tokens.size() - base));
    }
    if (active.empty()) break;
    auto i32 = [&](const std::vector<int32_t>& v) {
      return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(dev);
    };
    VlmInputs in;
    in.tokens = i32(tokens);
    in.positions = i32(positions);
    in.cu_seqlens = i32(cu);
    in.max_seqlen = max_len;
    Tensor active_image_tokens;
    if (!image_rows.empty()) {
      in.image_rows = i32(image_rows);
      active_image_tokens = Tensor::empty({static_cast<int64_t>(image_rows.size()), hidden}, image_tokens.dtype(), dev);
      ops::gather_rows(active_image_tokens, image_tokens, i32(image_src));
    }
    Tensor logits = model.logits_at_rows(in, active_image_tokens, i32(last_rows)).to(Device::cpu());
    const int64_t V = logits.dim(1);
    for (size_t a = 0; a < active.size(); ++a) {
      // The image token is not text: its embedding is replaced by image features in training and never learned, and
      // a generated one would read as a placeholder without an image. A barely trained model (an eval early in a
      // run) does pick it, so it is never chosen.
      float* row = logits.data<float>() + static_cast<int64_t>(a) * V;
      if (image_token_id >= 0 && image_token_id < V) row[image_token_id] = -std::numeric_limits<float>::infinity();
      const int32_t best = static_cast<int32_t>(std::max_element(row, row + V) - row);
      out[active[a]].push_back(best);
      if (std::find(options.stop_ids.begin(), options.stop_ids.end(), best) != options.stop_ids.end())
        done[active[a]] = true;
    }
  }
  return out;
}

}  // namespace vlm

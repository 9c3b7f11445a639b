// Pair scoring over packed sequences (image tokens encoded once) and recall@K.
#include "eval/retrieval.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"

namespace vlm {

RetrievalRecall retrieval_recall(const std::vector<double>& scores, int n) {
  RetrievalRecall r;
  if (n <= 0) return r;
  auto score = [&](int image, int caption) { return scores[static_cast<size_t>(image) * n + caption]; };
  for (int i = 0; i < n; ++i) {
    int rank_i2t = 0, rank_t2i = 0;  // other candidates scoring at least as high as the partner
    for (int j = 0; j < n; ++j) {
      if (j == i) continue;
      rank_i2t += score(i, j) >= score(i, i);
      rank_t2i += score(j, i) >= score(i, i);
    }
    for (size_t k = 0; k < kRecallAt.size(); ++k) {
      r.image_to_text[k] += rank_i2t < kRecallAt[k];
      r.text_to_image[k] += rank_t2i < kRecallAt[k];
    }
  }
  for (size_t k = 0; k < kRecallAt.size(); ++k) {
    r.image_to_text[k] /= n;
    r.text_to_image[k] /= n;
  }
  return r;
}

Expected<std::vector<double>> score_image_caption_pairs(VlmModel& model, const Tokenizer& tokenizer,
                                                        const Tensor& images, const std::vector<std::string>& captions,
                                                        const PairScoring& o) {
  const auto image_id = tokenizer.token_to_id(o.chat.image_token);
  if (!image_id) return invalid_argument("the tokenizer lacks the image token '" + o.chat.image_token + "'");
  const int64_t n_images = images.dim(0);
  const int per_image = model.config().image_tokens();
  if (per_image != o.image_tokens)
    return invalid_argument("retrieval: " + std::to_string(o.image_tokens) + " image placeholders per image, the model "
                            "has " + std::to_string(per_image));
  std::vector<TokenizedChat> chats;
  for (const std::string& c : captions) {
    VLM_ASSIGN_OR_RETURN(TokenizedChat chat, tokenize_chat(tokenizer, o.chat, {{o.caption_prompt, c}}, 1,
                                                           o.image_tokens, /*generation_prompt=*/false));
    chats.push_back(std::move(chat));
  }
  const Device dev = model.device();
  const int hidden = model.config().text.hidden;
  Tensor image_tokens = model.encode_images(images.to(dev));  // [N * per_image, hidden]
  const int64_t n_pairs = n_images * static_cast<int64_t>(captions.size());
  std::vector<double> out(static_cast<size_t>(n_pairs), 0.0);
  auto i32 = [&](const std::vector<int32_t>& v) {
    return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(dev);
  };
  for (int64_t first = 0; first < n_pairs; first += std::max(1, o.batch_pairs)) {
    const int64_t last = std::min(n_pairs, first + std::max(1, o.batch_pairs));
    std::vector<int32_t> tokens, positions, cu{0}, image_rows, image_src, rows, targets;
    std::vector<int64_t> row_pair;  // the pair of each scored row
    int max_len = 0;
    for (int64_t p = first; p < last; ++p) {
      const int64_t image = p / static_cast<int64_t>(captions.size());
      const TokenizedChat& chat = chats[static_cast<size_t>(p % static_cast<int64_t>(captions.size()))];
      const int32_t base = static_cast<int32_t>(tokens.size());
      int32_t placeholder = 0;
      for (size_t t = 0; t < chat.tokens.size(); ++t) {
        if (chat.tokens[t] == *image_id) {
          image_rows.push_back(base + static_cast<int32_t>(t));
          image_src.push_back(static_cast<int32_t>(image) * per_image + placeholder++);
        }
        tokens.push_back(chat.tokens[t]);
        positions.push_back(static_cast<int32_t>(t));
        if (t + 1 < chat.tokens.size() && chat.is_target[t + 1]) {
          rows.push_back(base + static_cast<int32_t>(t));
          targets.push_back(chat.tokens[t + 1]);
          row_pair.push_back(p);
        }
      }
      cu.push_back(static_cast<int32_t>(tokens.size()));
      max_len = std::max(max_len, static_cast<int>(chat.tokens.size()));
    }
    VlmInputs in;
    in.tokens = i32(tokens);
    in.positions = i32(positions);
    in.cu_seqlens = i32(cu);
    in.max_seqlen = max_len;
    in.image_rows = i32(image_rows);
    Tensor batch_image_tokens =
        Tensor::empty({static_cast<int64_t>(image_rows.size()), hidden}, image_tokens.dtype(), dev);
    ops::gather_rows(batch_image_tokens, image_tokens, i32(image_src));
    Tensor logits = model.logits_at_rows(in, batch_image_tokens, i32(rows)).to(Device::cpu());  // [R, V]
    const int64_t V = logits.dim(1);
    std::vector<int> count(static_cast<size_t>(last - first), 0);
    for (size_t r = 0; r < rows.size(); ++r) {
      const float* row = logits.data<float>() + static_cast<int64_t>(r) * V;
      const float mx = *std::max_element(row, row + V);
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
      const double logp = static_cast<double>(row[targets[r]]) - mx - std::log(sum);
      out[static_cast<size_t>(row_pair[r])] += logp;
      ++count[static_cast<size_t>(row_pair[r] - first)];
    }
    for (int64_t p = first; p < last; ++p) {
      const int n = count[static_cast<size_t>(p - first)];
      if (n > 0) out[static_cast<size_t>(p)] /= n;
    }
  }
  return out;
}

}  // namespace vlm

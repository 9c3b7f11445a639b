// Image-text retrieval by model scoring: every (image, caption) pair of a held-out set is scored by the mean
// log-likelihood of the caption's answer tokens (its end-of-turn token included) given the image and the caption
// prompt; recall@K ranks, for each image, all captions (image -> text) and, for each caption, all images
// (text -> image), the pair's own partner being the one right answer.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "data/loader/prompt.h"
#include "data/tokenizer/tokenizer.h"
#include "model/vlm.h"

namespace vlm {

constexpr std::array<int, 3> kRecallAt = {1, 5, 10};

struct RetrievalRecall {
  std::array<double, 3> image_to_text{};  // recall@1, @5, @10
  std::array<double, 3> text_to_image{};
};

// `scores` [n * n], row-major: scores[i * n + j] = score(image i, caption j); caption i belongs to image i.
// A partner ties with others pessimistically: its rank counts every other candidate scoring at least as high, so an
// untrained model scoring everything alike gets recall K/n, not 1.
RetrievalRecall retrieval_recall(const std::vector<double>& scores, int n);

struct PairScoring {
  ChatTemplate chat;
  std::string caption_prompt;  // the user turn; the caption is the assistant's answer
  int image_tokens = 16;       // placeholders per image
  int batch_pairs = 64;        // pairs per forward pass
};

// Mean log-likelihood of each caption given each image: [n_images * captions.size()], row-major by image.
// `images` f32 [N, 3, S, S] on the host. invalid_argument when the tokenizer lacks the template's tokens.
Expected<std::vector<double>> score_image_caption_pairs(VlmModel& model, const Tokenizer& tokenizer,
                                                        const Tensor& images, const std::vector<std::string>& captions,
                                                        const PairScoring& options);

}  // namespace vlm

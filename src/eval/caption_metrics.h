// Captioning metrics as coco-caption's reference scorers compute them, on captions already tokenized
// (caption_tokenizer.h): BLEU-1..4 (corpus level, "closest" reference length, as Bleu(4)), ROUGE-L (LCS F-measure
// with beta 1.2 against the best reference, averaged over images) and CIDEr-D (n = 1..4, sigma 6, clipped tf-idf
// cosine with a Gaussian length penalty, x10; document frequencies over the references of the images scored
// together, so a score depends on the whole set).
// Quirks kept so the numbers equal the reference: CIDEr-D's "length" is the number of bigrams; ROUGE-L reads an
// empty caption as one empty token; BLEU adds 1e-15 / 1e-9 to every n-gram precision.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "core/status.h"

namespace vlm {

using CaptionTokens = std::vector<std::string>;

struct CaptionScores {
  std::array<double, 4> bleu{};   // BLEU-1..4
  double rouge_l = 0;             // mean over images
  double cider_d = 0;             // mean over images
  std::vector<double> rouge_l_per_image, cider_d_per_image;
};

// `candidates[i]` is image i's generated caption, `references[i]` its reference captions (at least one each).
// invalid_argument when the sizes differ, the set is empty or an image has no reference.
Expected<CaptionScores> score_captions(const std::vector<CaptionTokens>& candidates,
                                       const std::vector<std::vector<CaptionTokens>>& references);

}  // namespace vlm

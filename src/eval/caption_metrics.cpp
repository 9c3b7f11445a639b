// BLEU, ROUGE-L and CIDEr-D following coco-caption's bleu_scorer.py, rouge.py and cider_scorer.py.
#include "eval/caption_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unordered_map>
#include <unordered_set>

namespace vlm {
namespace {

constexpr int kMaxN = 4;

// n-gram -> count, one map per n (index n - 1); an n-gram is its words joined by '\x1f'.
using NgramCounts = std::array<std::unordered_map<std::string, double>, kMaxN>;

NgramCounts count_ngrams(const CaptionTokens& words) {
  NgramCounts counts;
  for (int n = 1; n <= kMaxN; ++n) {
    for (size_t i = 0; i + static_cast<size_t>(n) <= words.size(); ++i) {
      std::string key = words[i];
      for (int k = 1; k < n; ++k) key.append(1, '\x1f').append(words[i + static_cast<size_t>(k)]);
      counts[static_cast<size_t>(n - 1)][key] += 1;
    }
  }
  return counts;
}

std::array<double, 4> corpus_bleu(const std::vector<CaptionTokens>& candidates,
                                  const std::vector<std::vector<CaptionTokens>>& references) {
  constexpr double kTiny = 1e-15, kSmall = 1e-9;
  std::array<double, kMaxN> guess{}, correct{};
  double test_len = 0, ref_len = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    NgramCounts max_ref;
    const long tl = static_cast<long>(candidates[i].size());
    long closest = -1;
    for (const CaptionTokens& ref : references[i]) {
      const long rl = static_cast<long>(ref.size());
      // min over (|rl - tl|, rl): the nearest length, the shorter one on a tie.
      if (closest < 0 || std::labs(rl - tl) < std::labs(closest - tl) ||
          (std::labs(rl - tl) == std::labs(closest - tl) && rl < closest))
        closest = rl;
      NgramCounts c = count_ngrams(ref);
      for (int n = 0; n < kMaxN; ++n)
        for (const auto& [g, k] : c[static_cast<size_t>(n)]) {
          double& m = max_ref[static_cast<size_t>(n)][g];
          m = std::max(m, k);
        }
    }
    test_len += static_cast<double>(tl);
    ref_len += static_cast<double>(closest);
    NgramCounts c = count_ngrams(candidates[i]);
    for (int n = 0; n < kMaxN; ++n) {
      guess[static_cast<size_t>(n)] += static_cast<double>(std::max(0L, tl - n));
      for (const auto& [g, k] : c[static_cast<size_t>(n)]) {
        auto it = max_ref[static_cast<size_t>(n)].find(g);
        correct[static_cast<size_t>(n)] += std::min(it == max_ref[static_cast<size_t>(n)].end() ? 0.0 : it->second, k);
      }
    }
  }
  std::array<double, 4> bleu{};
  double product = 1;
  for (int n = 0; n < kMaxN; ++n) {
    product *= (correct[static_cast<size_t>(n)] + kTiny) / (guess[static_cast<size_t>(n)] + kSmall);
    bleu[static_cast<size_t>(n)] = std::pow(product, 1.0 / (n + 1));
  }
  const double ratio = (test_len + kTiny) / (ref_len + kSmall);
  if (ratio < 1)
    for (double& b : bleu) b *= std::exp(1 - 1 / ratio);
  return bleu;
}

size_t lcs_length(const CaptionTokens& a, const CaptionTokens& b) {
  std::vector<size_t> prev(b.size() + 1, 0), cur(b.size() + 1, 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = a[i - 1] == b[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

double rouge_l(const CaptionTokens& candidate_in, const std::vector<CaptionTokens>& references) {
  constexpr double kBeta = 1.2;
  // rouge.py splits on " ": an empty caption is one empty token.
  auto as_split = [](const CaptionTokens& t) { return t.empty() ? CaptionTokens{""} : t; };
  const CaptionTokens candidate = as_split(candidate_in);
  double prec_max = 0, rec_max = 0;
  for (const CaptionTokens& ref_in : references) {
    const CaptionTokens ref = as_split(ref_in);
    const double lcs = static_cast<double>(lcs_length(ref, candidate));
    prec_max = std::max(prec_max, lcs / static_cast<double>(candidate.size()));
    rec_max = std::max(rec_max, lcs / static_cast<double>(ref.size()));
  }
  if (prec_max == 0 || rec_max == 0) return 0;
  return (1 + kBeta * kBeta) * prec_max * rec_max / (rec_max + kBeta * kBeta * prec_max);
}

struct TfIdfVector {
  NgramCounts weights;
  std::array<double, kMaxN> norm{};
  double length = 0;  // cider_scorer.py counts bigrams here
};

std::vector<double> cider_d(const std::vector<CaptionTokens>& candidates,
                            const std::vector<std::vector<CaptionTokens>>& references) {
  constexpr double kSigma = 6.0;
  std::vector<std::vector<NgramCounts>> ref_counts(references.size());
  std::unordered_map<std::string, double> doc_freq;  // keys carry no n: n-grams of different n never collide
  for (size_t i = 0; i < references.size(); ++i) {
    std::unordered_set<std::string> seen;
    for (const CaptionTokens& r : references[i]) {
      ref_counts[i].push_back(count_ngrams(r));
      for (const auto& m : ref_counts[i].back())
        for (const auto& kv : m) seen.insert(kv.first);
    }
    for (const std::string& g : seen) doc_freq[g] += 1;
  }
  const double log_images = std::log(static_cast<double>(references.size()));
  auto to_vector = [&](const NgramCounts& counts) {
    TfIdfVector v;
    for (int n = 0; n < kMaxN; ++n) {
      for (const auto& [g, tf] : counts[static_cast<size_t>(n)]) {
        auto it = doc_freq.find(g);
        const double df = std::log(std::max(1.0, it == doc_freq.end() ? 0.0 : it->second));
        const double w = tf * (log_images - df);
        v.weights[static_cast<size_t>(n)][g] = w;
        v.norm[static_cast<size_t>(n)] += w * w;
        if (n == 1) v.length += tf;
      }
      v.norm[static_cast<size_t>(n)] = std::sqrt(v.norm[static_cast<size_t>(n)]);
    }
    return v;
  };
  std::vector<double> scores;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const TfIdfVector hyp = to_vector(count_ngrams(candidates[i]));
    std::array<double, kMaxN> sum{};
    for (const NgramCounts& rc : ref_counts[i]) {
      const TfIdfVector ref = to_vector(rc);
      const double delta = hyp.length - ref.length;
      for (int n = 0; n < kMaxN; ++n) {
        const auto& rw = ref.weights[static_cast<size_t>(n)];
        double val = 0;
        for (const auto& [g, h] : hyp.weights[static_cast<size_t>(n)]) {
          auto it = rw.find(g);
          const double r = it == rw.end() ? 0.0 : it->second;
          val += std::min(h, r) * r;
        }
        if (hyp.norm[static_cast<size_t>(n)] != 0 && ref.norm[static_cast<size_t>(n)] != 0)
          val /= hyp.norm[static_cast<size_t>(n)] * ref.norm[static_cast<size_t>(n)];
        val *= std::exp(-(delta * delta) / (2 * kSigma * kSigma));
        sum[static_cast<size_t>(n)] += val;
      }
    }
    double mean = 0;
    for (double s : sum) mean += s;
    mean /= kMaxN;
    scores.push_back(mean / static_cast<double>(ref_counts[i].size()) * 10.0);
  }
  return scores;
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

}  // namespace

Expected<CaptionScores> score_captions(const std::vector<CaptionTokens>& candidates,
                                       const std::vector<std::vector<CaptionTokens>>& references) {
  if (candidates.size() != references.size())
    return invalid_argument("caption metrics: " + std::to_string(candidates.size()) + " candidates for " +
                            std::to_string(references.size()) + " reference sets");
  if (candidates.empty()) return invalid_argument("caption metrics: no caption to score");
  for (size_t i = 0; i < references.size(); ++i)
    if (references[i].empty())
      return invalid_argument("caption metrics: image " + std::to_string(i) + " has no reference");
  CaptionScores s;
  s.bleu = corpus_bleu(candidates, references);
  for (size_t i = 0; i < candidates.size(); ++i) s.rouge_l_per_image.push_back(rouge_l(candidates[i], references[i]));
  s.cider_d_per_image = cider_d(candidates, references);
  s.rouge_l = mean_of(s.rouge_l_per_image);
  s.cider_d = mean_of(s.cider_d_per_image);
  return s;
}

}  // namespace vlm

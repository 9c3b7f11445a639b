// Penalties, top-k / top-p / min-p filtering and the draw.
#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

namespace vlm::infer {

Status SamplingParams::validate() const {
  auto bad = [](const std::string& what) { return invalid_argument(what); };
  if (max_tokens <= 0) return bad("max_tokens must be >= 1, got " + std::to_string(max_tokens));
  if (!(temperature >= 0.f) || !std::isfinite(temperature))
    return bad("temperature must be >= 0, got " + std::to_string(temperature));
  if (top_k < 0) return bad("top_k must be >= 0, got " + std::to_string(top_k));
  if (!(top_p > 0.f && top_p <= 1.f)) return bad("top_p must be in (0, 1], got " + std::to_string(top_p));
  if (!(min_p >= 0.f && min_p <= 1.f)) return bad("min_p must be in [0, 1], got " + std::to_string(min_p));
  if (!(repetition_penalty > 0.f) || !std::isfinite(repetition_penalty))
    return bad("repetition_penalty must be > 0, got " + std::to_string(repetition_penalty));
  if (!std::isfinite(frequency_penalty) || !std::isfinite(presence_penalty))
    return bad("frequency_penalty and presence_penalty must be finite");
  if (n < 1 || n > 1024) return bad("n must be in [1, 1024], got " + std::to_string(n));
  if (beam_width < 1 || beam_width > 64) return bad("beam_width must be in [1, 64], got " + std::to_string(beam_width));
  if (beam_width > 1 && n > beam_width)
    return bad("n = " + std::to_string(n) + " exceeds beam_width = " + std::to_string(beam_width));
  if (!std::isfinite(length_penalty)) return bad("length_penalty must be finite");
  if (logprobs < -1 || logprobs > 100) return bad("logprobs must be in [-1, 100], got " + std::to_string(logprobs));
  for (const auto& s : stop)
    if (s.empty()) return bad("stop strings must not be empty");
  return Status();
}

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void apply_penalties(float* logits, int64_t V, const SamplingParams& p, const std::vector<int32_t>& prompt,
                     const std::vector<int32_t>& output) {
  if (p.repetition_penalty != 1.f) {
    std::vector<uint8_t> seen(static_cast<size_t>(V), 0);
    for (const auto* v : {&prompt, &output})
      for (int32_t t : *v)
        if (t >= 0 && t < V) seen[static_cast<size_t>(t)] = 1;
    for (int64_t t = 0; t < V; ++t)
      if (seen[static_cast<size_t>(t)])
        logits[t] = logits[t] > 0 ? logits[t] / p.repetition_penalty : logits[t] * p.repetition_penalty;
  }
  if (p.frequency_penalty != 0.f || p.presence_penalty != 0.f) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t t : output)
      if (t >= 0 && t < V) ++counts[t];
    for (const auto& [t, c] : counts) logits[t] -= p.frequency_penalty * c + p.presence_penalty;
  }
}

int32_t argmax(const float* x, int64_t V) { return static_cast<int32_t>(std::max_element(x, x + V) - x); }

}  // namespace

SampledToken sample_token(float* logits, int64_t V, const SamplingParams& p, const std::vector<int32_t>& prompt,
                          const std::vector<int32_t>& output, int32_t banned, Philox& rng) {
  if (banned >= 0 && banned < V) logits[banned] = kNegInf;
  // log-softmax of the model's distribution, for the returned log-probabilities.
  const bool want_logprobs = p.logprobs >= 0;
  float log_z = 0.f;
  if (want_logprobs) {
    const float max_logit = *std::max_element(logits, logits + V);
    double z = 0;
    for (int64_t t = 0; t < V; ++t) z += std::exp(static_cast<double>(logits[t] - max_logit));
    log_z = max_logit + static_cast<float>(std::log(z));
  }
  std::vector<float> model_logits;
  if (want_logprobs &&
      (p.repetition_penalty != 1.f || p.frequency_penalty != 0.f || p.presence_penalty != 0.f || p.temperature > 0.f))
    model_logits.assign(logits, logits + V);

  SampledToken out;
  if (p.logprobs > 0) {
    std::vector<int32_t> idx(static_cast<size_t>(V));
    std::iota(idx.begin(), idx.end(), 0);
    const int64_t k = std::min<int64_t>(p.logprobs, V);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (int64_t i = 0; i < k; ++i)
      out.top.emplace_back(idx[static_cast<size_t>(i)], logits[idx[static_cast<size_t>(i)]] - log_z);
  }

  apply_penalties(logits, V, p, prompt, output);
  if (banned >= 0 && banned < V) logits[banned] = kNegInf;
  if (p.temperature == 0.f) {
    out.id = argmax(logits, V);
  } else {
    // Probabilities at the temperature over the candidates the filters keep (ranked, most likely first, for min-p
    // and top-p).
    std::vector<int32_t> cand(static_cast<size_t>(V));
    std::iota(cand.begin(), cand.end(), 0);
    auto more_likely = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    if (p.top_k > 0 && p.top_k < V) {
      std::nth_element(cand.begin(), cand.begin() + (p.top_k - 1), cand.end(), more_likely);
      cand.resize(static_cast<size_t>(p.top_k));
    }
    // min-p and top-p cut the ranked list; without them the draw needs no order, and sorting the whole vocabulary
    // (~4 ms for 49k tokens) would dominate a decode step.
    const bool ranked = p.min_p > 0.f || p.top_p < 1.f;
    if (ranked) std::sort(cand.begin(), cand.end(), more_likely);
    const float top_logit = ranked ? logits[cand.front()]
                                   : logits[*std::min_element(cand.begin(), cand.end(), more_likely)];
    std::vector<double> prob(cand.size());
    double sum = 0;
    for (size_t i = 0; i < cand.size(); ++i) {
      prob[i] = std::exp(static_cast<double>(logits[cand[i]] - top_logit) / p.temperature);
      sum += prob[i];
    }
    size_t keep = cand.size();
    if (p.min_p > 0.f)  // ranked: prob[0] is the largest; keep while prob >= min_p * prob[0]
      while (keep > 1 && prob[keep - 1] < static_cast<double>(p.min_p) * prob[0]) --keep;
    if (p.top_p < 1.f) {
      double kept_sum = 0;
      for (size_t i = 0; i < keep; ++i) kept_sum += prob[i];
      double acc = 0;
      for (size_t i = 0; i < keep; ++i) {
        acc += prob[i];
        if (acc >= static_cast<double>(p.top_p) * kept_sum) {
          keep = i + 1;
          break;
        }
      }
    }
    sum = 0;
    for (size_t i = 0; i < keep; ++i) sum += prob[i];
    const double u = static_cast<double>(rng.uniform()) * sum;
    double acc = 0;
    out.id = cand[keep - 1];
    for (size_t i = 0; i < keep; ++i) {
      acc += prob[i];
      if (u < acc) {
        out.id = cand[i];
        break;
      }
    }
  }
  if (want_logprobs) {
    const float chosen = model_logits.empty() ? logits[out.id] : model_logits[static_cast<size_t>(out.id)];
    out.logprob = chosen - log_z;
  }
  return out;
}

}  // namespace vlm::infer

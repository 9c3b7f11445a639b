// Beam search in the engine (engine_live.h describes the algorithm).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "infer/engine.h"
#include "infer/engine_live.h"

namespace vlm::infer {

void Engine::beam_report(Live& live, Sequence& s, float* logits) {
  BeamState& b = *live.beams;
  // A stale row: the beam was dropped, or grew (selection ran) since this row was scheduled, or it already reported
  // and was recomputed after a preemption.
  if (s.computed != static_cast<int64_t>(s.tokens.size()) || b.reported.count(&s) ||
      std::find(b.live.begin(), b.live.end(), &s) == b.live.end())
    return;
  const int64_t V = model_.config().text.vocab_size;
  if (options_.image_token_id >= 0 && options_.image_token_id < V)
    logits[options_.image_token_id] = -std::numeric_limits<float>::infinity();
  const float max_logit = *std::max_element(logits, logits + V);
  double z = 0;
  for (int64_t t = 0; t < V; ++t) z += std::exp(static_cast<double>(logits[t] - max_logit));
  const double log_z = max_logit + std::log(z);
  const int64_t k = std::min<int64_t>(2 * live.request.sampling.beam_width, V);
  std::vector<int32_t> idx(static_cast<size_t>(V));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t c) { return logits[a] > logits[c] || (logits[a] == logits[c] && a < c); });
  for (int64_t i = 0; i < k; ++i) {
    const int32_t t = idx[static_cast<size_t>(i)];
    b.pending.push_back({&s, t, s.beam_score + (static_cast<double>(logits[t]) - log_z)});
  }
  b.reported.insert(&s);
  s.parked = true;
  if (b.reported.size() == b.live.size()) beam_select(live);
}

void Engine::beam_select(Live& live) {
  BeamState& b = *live.beams;
  const SamplingParams& sp = live.request.sampling;
  const int width = sp.beam_width;
  // Best first; ties by the parent's rank among the live beams, then by token id (deterministic).
  auto rank = [&](const Sequence* p) { return std::find(b.live.begin(), b.live.end(), p) - b.live.begin(); };
  std::stable_sort(b.pending.begin(), b.pending.end(),
                   [&](const BeamState::Candidate& x, const BeamState::Candidate& y) {
                     if (x.score != y.score) return x.score > y.score;
                     if (x.parent != y.parent) return rank(x.parent) < rank(y.parent);
                     return x.token < y.token;
                   });
  std::vector<BeamState::Candidate> chosen;
  for (size_t i = 0; i < b.pending.size() && static_cast<int>(chosen.size()) < width; ++i) {
    const BeamState::Candidate& c = b.pending[i];
    const int64_t len = c.parent->output_len() + 1;
    const bool stop = std::find(sp.stop_ids.begin(), sp.stop_ids.end(), c.token) != sp.stop_ids.end();
    const bool at_limit = len >= sp.max_tokens || c.parent->prompt_len + len >= max_context_;
    if (stop || at_limit) {
      if (static_cast<int>(i) < width) {  // an ending only counts among the best `width` candidates
        BeamState::Hypothesis h;
        h.score = c.score;
        h.normalized = c.score / std::pow(static_cast<double>(len), static_cast<double>(sp.length_penalty));
        h.tokens = c.parent->output();
        h.tokens.push_back(c.token);
        h.finish_reason = stop ? "stop" : "length";
        b.done.push_back(std::move(h));
      }
      continue;
    }
    chosen.push_back(c);
  }
  b.pending.clear();
  b.reported.clear();
  for (Sequence* p : b.live) p->parked = false;
  const bool finished = static_cast<int>(b.done.size()) >= width || chosen.empty();
  std::vector<Sequence*> next;
  if (!finished) {
    for (Sequence* p : b.live) {
      std::vector<const BeamState::Candidate*> mine;
      for (const auto& c : chosen)
        if (c.parent == p) mine.push_back(&c);
      if (mine.empty()) continue;
      // Forks first (they copy the parent before it grows), sharing its blocks.
      for (size_t j = 1; j < mine.size(); ++j) {
        auto child = std::make_unique<Sequence>(*p);
        child->child = static_cast<int>(live.seqs.size());
        child->order = p->order + static_cast<int64_t>(live.seqs.size());
        child->slots = 1;
        for (int32_t blk : child->blocks) pool_->retain(blk);
        if (scheduler_->is_running(p)) {
          scheduler_->add_running(child.get());
        } else {
          scheduler_->add(child.get());
        }
        child->tokens.push_back(mine[j]->token);
        child->beam_score = mine[j]->score;
        ++live.unfinished;
        next.push_back(child.get());
        live.seqs.push_back(std::move(child));
      }
      p->tokens.push_back(mine[0]->token);
      p->beam_score = mine[0]->score;
      p->slots = 1;
      next.push_back(p);
    }
  }
  for (Sequence* p : b.live)  // beams not carried on (all of them when the search ends)
    if (std::find(next.begin(), next.end(), p) == next.end()) finish_sequence(live, *p);
  b.live = std::move(next);
  counters_.generated_tokens += static_cast<int64_t>(b.live.size());
}

void Engine::beam_completions(Live& live) {
  BeamState& b = *live.beams;
  std::stable_sort(b.done.begin(), b.done.end(), [](const BeamState::Hypothesis& x, const BeamState::Hypothesis& y) {
    return x.normalized > y.normalized;
  });
  const SamplingParams& sp = live.request.sampling;
  for (size_t i = 0; i < b.done.size() && static_cast<int>(i) < sp.n; ++i) {
    Completion c;
    c.tokens = b.done[i].tokens;
    c.score = b.done[i].score;
    c.finish_reason = b.done[i].finish_reason;
    if (options_.detokenize) {
      std::vector<int32_t> ids = c.tokens;
      if (c.finish_reason == "stop") ids.pop_back();
      c.text = options_.detokenize(ids);
    }
    live.out.completions.push_back(std::move(c));
  }
}

}  // namespace vlm::infer

// The engine's per-request state (internal to engine.cpp and engine_beam.cpp): the request's sequences, its answer
// so far, and for beam search the beams of the current length and the finished hypotheses.
#pragma once

#include <memory>
#include <set>
#include <vector>

#include "infer/engine.h"

namespace vlm::infer {

// Beam search: every live beam reports its best 2 * width continuations once its last row is computed (a beam that
// reported waits, computing nothing, until all have); then the best `width` continuations that do not end become the
// next beams (a beam chosen twice forks, sharing its blocks; one not chosen is dropped) and those that end (a stop
// id, max_tokens or the context limit) join the finished hypotheses, ranked by score / length^length_penalty.
// Generation stops once `width` hypotheses are finished (early stopping, as Hugging Face's early_stopping=True).
struct BeamState {
  struct Candidate {
    Sequence* parent = nullptr;
    int32_t token = -1;
    double score = 0;  // the parent's summed log-probability + this token's
  };
  struct Hypothesis {
    double normalized = 0, score = 0;
    std::vector<int32_t> tokens;
    std::string finish_reason;
  };
  std::vector<Sequence*> live;  // beams of the current length
  std::set<const Sequence*> reported;
  std::vector<Candidate> pending;
  std::vector<Hypothesis> done;
};

struct Engine::Live {
  int64_t number = 0;
  Request request;
  std::shared_ptr<PromptImages> images;
  Tensor image_embeddings;  // [images * per_image, hidden] on the device, once its prompt is first scheduled
  std::vector<std::unique_ptr<Sequence>> seqs;
  bool forked = false;
  bool admitted = false;  // scheduled at least once (cached_prompt_tokens is then known)
  int unfinished = 1;
  double t0 = 0;
  RequestOutput out;
  std::unique_ptr<BeamState> beams;  // beam search (sampling.beam_width > 1)
};

}  // namespace vlm::infer

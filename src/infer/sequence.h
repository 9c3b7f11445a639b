// One sequence the engine generates: a request's prompt and one of its completions, with the KV blocks that hold
// the tokens computed so far. A request with n > 1 starts as one sequence and forks after its prompt.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/philox.h"
#include "infer/block_pool.h"
#include "infer/request.h"

namespace vlm::infer {

// Where a prompt's images are, for prefix keys and for splicing image embeddings into the step's rows.
struct PromptImages {
  std::vector<int32_t> rows;           // per prompt position: -1 (text) or image * per_image + row
  std::vector<ImageContentHash> keys;  // one per image
  int per_image = 1;
};

struct Sequence {
  int64_t order = 0;            // FCFS rank: admission and preemption follow it (request number, then completion)
  int64_t request = 0;          // the engine's number of the request
  int child = 0;                // which completion of the request
  std::vector<int32_t> tokens;  // prompt, then output
  int64_t prompt_len = 0;
  std::shared_ptr<const PromptImages> images;
  std::vector<int32_t> blocks;          // block table: token i lives in blocks[i / block_size]
  int64_t computed = 0;                 // leading tokens whose K/V are in the blocks
  std::vector<BlockHash> block_hashes;  // prefix keys of the first block_hashes.size() blocks (prefix cache)
  Philox rng;
  Completion completion;
  int64_t preemptions = 0;
  // Running slots this sequence accounts for against max_num_seqs: n before a request forks (its completions will
  // run beside it), 1 after.
  int slots = 1;
  double beam_score = 0;  // beam search: summed log-probability of the output so far
  // Beam search: reported its continuations and waits for its siblings; nothing to compute until the selection,
  // so a parked sequence that was preempted is not admitted again before it.
  bool parked = false;

  int64_t output_len() const { return static_cast<int64_t>(tokens.size()) - prompt_len; }
  std::vector<int32_t> output() const { return {tokens.begin() + prompt_len, tokens.end()}; }
  std::vector<int32_t> prompt() const { return {tokens.begin(), tokens.begin() + prompt_len}; }
  int32_t image_row(int64_t pos) const {
    return images && pos < static_cast<int64_t>(images->rows.size()) ? images->rows[static_cast<size_t>(pos)] : -1;
  }
};

}  // namespace vlm::infer

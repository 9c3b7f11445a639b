// The inference engine: requests in, completions out, one batched forward per step. Each step the scheduler picks
// the rows (decodes and prompt chunks of many sequences), the engine splices cached image embeddings into their
// embeddings, runs the decoder over the paged KV cache (TextDecoder::forward_paged), samples the sequences whose
// last row was computed, forks n > 1 requests after their prompt and retires finished sequences, releasing their
// blocks. Requests that cannot run (empty prompt, prompt over the context, bad sampling settings, image count or
// shape not matching the placeholders) are answered with an error naming the request and never touch the others.
// Runs on the model's device (CPU or CUDA). Not thread-safe: one caller drives step().
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "infer/block_pool.h"
#include "infer/decode_graphs.h"
#include "infer/image_cache.h"
#include "infer/kv_cache.h"
#include "infer/request.h"
#include "infer/scheduler.h"
#include "infer/sequence.h"
#include "model/vlm.h"

namespace vlm::infer {

// One generated token of a running request (EngineOptions::on_token).
struct TokenEvent {
  int64_t request = -1;  // Engine::add_request's number
  int completion = 0;    // which of the request's n completions
  int32_t token = -1;
  float logprob = 0.f;                                          // when sampling.logprobs >= 0
  const std::vector<std::pair<int32_t, float>>* top = nullptr;  // when sampling.logprobs > 0
  bool stop_id = false;  // the token is one of sampling.stop_ids (it ends the completion and is not text)
};

struct EngineOptions {
  int block_size = 16;    // tokens per KV block
  int64_t kv_memory = 0;  // KV cache bytes; 0: kv_memory_fraction of free device memory (CPU: 1 GiB)
  double kv_memory_fraction = 0.9;
  int max_num_seqs = 256;          // sequences running at once
  int max_tokens_per_step = 2048;  // rows per forward: decodes plus prefill chunks
  int max_context = 0;             // tokens per sequence (prompt + output); 0: the model's max_seq_len
  bool prefix_cache = true;
  int64_t image_cache_bytes = int64_t{256} << 20;
  int32_t image_token_id = -1;  // the placeholder id: never generated
  uint64_t seed = 0;            // seeds requests that carry none (with the request's number)
  // Turns output ids into text: needed for stop strings and Completion::text (optional otherwise).
  std::function<std::string(const std::vector<int32_t>&)> detokenize;
  bool check_invariants = false;  // verify scheduler and pool invariants after every step (tests)
  // On a CUDA device, steps made only of decodes replay a CUDA graph per batch and context bucket (DecodeGraphs)
  // instead of launching each kernel; the same kernels and results, rows padded up to the bucket.
  bool cuda_graphs = true;
  // With cuda_graphs on a CUDA device: the constructor captures the graph of every batch bucket up to max_num_seqs
  // and every context bucket up to max_context (capture_decode_graphs), so no request waits for a capture. Off:
  // each graph is captured by the first step that needs it (one eager step and a capture, milliseconds).
  bool capture_graphs_at_start = false;
  // Threads that sample rows from host logits (temperature, top-k/p, penalties, logprobs); 0: the machine's cores,
  // at most 16. Results do not depend on it.
  int sampler_threads = 0;
  // Called on the stepping thread with every token a sampled (not beam) completion generates, as it is appended:
  // what a streaming caller forwards before the request finishes.
  std::function<void(const TokenEvent&)> on_token;
};

struct EngineStats {
  int64_t steps = 0;
  int64_t rows = 0;           // rows computed (prompt and output tokens, recomputation included)
  int64_t prompt_tokens = 0;  // of admitted requests
  int64_t generated_tokens = 0;
  int64_t prefix_hit_tokens = 0;  // prompt (or recomputed) tokens whose KV came from the prefix cache
  int64_t preemptions = 0;
  int64_t peak_running = 0;  // most sequences computed in one step
  int64_t image_cache_hits = 0, image_cache_misses = 0;
  int64_t kv_bytes = 0;  // allocated KV cache
  int64_t block_size = 0;
  BlockPoolStats blocks;
  int64_t waste_slots = 0;                     // slots of held blocks that hold no token right now
  int64_t waiting_seqs = 0, running_seqs = 0;  // in the scheduler now
  int64_t graph_steps = 0;                     // steps replayed from a CUDA graph
  int64_t graphs = 0;                          // CUDA graphs captured
  double graph_capture_s = 0;                  // host seconds spent capturing them (up front or on first use)
  int64_t decode_steps = 0;  // steps whose rows were one decode row per sequence (no prompt chunk, no image row)
};

// Whether the steps between two stats() of one engine ended with a step of decode rows only and nothing waiting:
// every sequence then is past its prompt, so the following steps decode only (until requests arrive or are
// preempted). What a measurement of decode steps alone waits for; with chunked prefill, counting generated tokens
// is not enough (early requests generate while later prompts are still being computed).
bool decoding_only(const EngineStats& before, const EngineStats& after);

// What Engine::capture_decode_graphs did.
struct DecodeGraphCapture {
  int64_t captured = 0;  // graphs captured by the call
  int64_t graphs = 0;    // graphs the engine holds after it
  double seconds = 0;    // the call's wall time, device work included
};

class Engine {
 public:
  Engine(VlmModel& model, const EngineOptions& options);
  ~Engine();

  // Queues a request and returns its number. A request that cannot run is answered by the next step() with an
  // error status.
  int64_t add_request(Request request);
  // Drops a queued or running request (a client that went away): its sequences leave the scheduler and their
  // KV blocks return to the pool now; no answer is given for it. False when the number is not pending.
  bool cancel(int64_t request);
  // What add_request would reject the request for (Status() when it can run). Lets a caller answer before queuing.
  Status validate(const Request& r) const;
  bool has_unfinished() const { return !live_.empty() || !done_.empty(); }
  // Runs one scheduling step; returns the requests that finished (or were rejected) in it.
  std::vector<RequestOutput> step();
  // Adds every request, steps until all are answered and returns the answers in the order given. `on_finish`
  // (optional) is called with each answer as it completes. For a caller that drives the engine through it alone:
  // answers to requests added before the call are dropped.
  std::vector<RequestOutput> generate(std::vector<Request> requests,
                                      const std::function<void(const RequestOutput&)>& on_finish = {});

  // Captures up front the CUDA graphs of the decode steps a run can take: every batch bucket holding one of
  // `batch_sizes` (each 1..max_num_seqs) by every context bucket of contexts min_context_len..max_context_len
  // (within 1..max_context). Graphs that exist are kept, not captured again. Each capture runs the step once on
  // padding rows, which write no KV, so it may be called between steps with requests running. Cost: one eager
  // decode step plus the capture and instantiation of a few hundred kernels per graph (milliseconds each; the count
  // is returned). A no-op (nothing captured) on the CPU or with cuda_graphs off; bad sizes are invalid_argument.
  Expected<DecodeGraphCapture> capture_decode_graphs(const std::vector<int>& batch_sizes, int min_context_len,
                                                     int max_context_len);
  EngineStats stats() const;
  const EngineOptions& options() const { return options_; }
  int64_t max_context() const { return max_context_; }
  int64_t num_blocks() const { return pool_->num_blocks(); }
  // KV blocks held right now (O(1), unlike stats()).
  int64_t blocks_in_use() const { return pool_->num_blocks() - pool_->num_free(); }

 private:
  struct Live;
  void ensure_image_embeddings(Live& live);
  // Samples the next token of `seq` from `logits` (one row, overwritten); returns true when the sequence finished.
  bool sample_and_append(Live& live, Sequence& seq, float* logits);
  // Appends the chosen token `t` to `seq`: stop ids and strings, length; returns true when the sequence finished.
  bool append_token(Live& live, Sequence& seq, const SampledToken& t);
  // Whether `seq`'s next token is the plain argmax of its logits (greedy, no penalties, log-probabilities, beams or
  // fork pending), which the device picks without the logits leaving it.
  // Whether the request's next token can be picked on the device: greedy, or a temperature without filters,
  // penalties or log-probabilities (ops::gumbel_argmax_rows), and not a beam or an unforked n > 1 prompt.
  bool device_pick(const Live& live) const;
  // The ids of the step's rows picked on the device (rows not on_device get an unused argmax), each row's Gumbel
  // noise keyed by one draw of its sequence's stream.
  Tensor sample_on_device(const Tensor& logits, const std::vector<ScheduledChunk*>& sampled,
                          const std::vector<char>& on_device);
  int sampler_threads() const;  // workers of sampler_pool_
  void finish_sequence(Live& live, Sequence& seq);
  // Beam search (engine_beam.cpp): a beam's continuations from its logits row; the choice of the next beams once
  // every live beam reported; the answer's completions from the finished hypotheses.
  void beam_report(Live& live, Sequence& seq, float* logits);
  void beam_select(Live& live);
  void beam_completions(Live& live);

  VlmModel& model_;
  EngineOptions options_;
  int64_t max_context_ = 0;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<DecodeGraphs> graphs_;  // CUDA, options_.cuda_graphs
  std::unique_ptr<ThreadPool> sampler_pool_;  // made on the first step that samples several rows on the host
  ImageEmbeddingCache image_cache_;
  std::map<int64_t, std::unique_ptr<Live>> live_;
  std::vector<RequestOutput> done_;
  int64_t next_request_ = 0;
  EngineStats counters_;
};

}  // namespace vlm::infer

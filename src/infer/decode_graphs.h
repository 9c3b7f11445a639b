// DecodeGraphs: the engine's decode steps replayed from CUDA graphs. A decode step of a small model is a few hundred
// small kernels (about ten per layer), so launching them costs more than running them; captured once per bucket
// and replayed, a step is one graph launch. A graph is keyed by a batch bucket (rows padded up to it) and a context
// bucket (the bound the paged attention kernel splits the context by); each is captured on first use, or up front
// (capture(): what the engine's start-up warm-up calls, so no step of a timed or served run pays for it). The inputs
// (tokens, positions, KV slots, context lengths, block tables) travel in one upload into the bucket's input
// buffer, which the graph reads in place; the outputs (f32 logits and the greedy ids) stay in buffers per batch
// bucket. Padding rows write no KV (slot -1) and attend to one slot of block 0; their outputs are ignored.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/ops.h"
#include "model/text_decoder.h"

namespace vlm::infer {

// One decode step's rows, one per sequence, on the host.
struct DecodeRows {
  std::vector<int32_t> tokens, positions, slots, context_lens;  // [B] each
  std::vector<const std::vector<int32_t>*> blocks;              // [B] each sequence's KV blocks, in order
  int max_context_len = 0;                                      // the largest of context_lens
};

// The smallest batch bucket holding `batch` rows (1, 2, 4, 8, then steps of 8 to 64, of 16 to 128, of 32 beyond),
// never above max_batch; 0 when batch > max_batch.
int decode_batch_bucket(int batch, int max_batch);
// The context bound a step with contexts up to `max_context_len` is captured for: the next power of two from 256,
// a multiple of block_size, at most max_context rounded up to a block; 0 when max_context_len exceeds that.
int decode_context_bucket(int max_context_len, int block_size, int max_context);
// Every batch bucket of batches 1..max_batch, ascending.
std::vector<int> decode_batch_buckets(int max_batch);
// One context per context bucket that contexts min_context_len..max_context_len fall in, ascending: the smallest
// of the range in each (buckets are not fixed points of decode_context_bucket when block_size is not a power of
// two, so a bucket is named by a context it holds). Empty when the range is empty or leaves the context.
std::vector<int> decode_context_bucket_starts(int min_context_len, int max_context_len, int block_size,
                                              int max_context);

class DecodeGraphs {
 public:
  // The decoder and caches must outlive this object; graphs exist on CUDA devices only (ops::OpGraph::supported).
  DecodeGraphs(const TextDecoder& text, PagedKvCaches& caches, Device device, int block_size, int max_context,
               int max_batch, int32_t banned_id);
  ~DecodeGraphs();

  // Whether a step of `batch` rows with contexts up to `max_context_len` has a bucket.
  bool covers(int batch, int max_context_len) const;
  struct Outputs {
    Tensor logits;  // f32 [B, vocab] on the device: the step's rows of the bucket's logits
    Tensor ids;     // i32 [B] on the device: each row's argmax, banned_id never chosen (ops::argmax_rows)
  };
  // Uploads the rows, replays the bucket's graph (capturing it first when new) and returns views of its outputs,
  // valid until the next run.
  Outputs run(const DecodeRows& rows);
  // Captures the graph that steps of `batch` rows with contexts up to `max_context_len` replay, unless it exists
  // (true when it was new). Like a capture on first use it runs the step once eagerly on padding rows, which write
  // no KV and read slot 0 of block 0 only: the cache's contents do not change. Needs a bucket (covers()).
  bool capture(int batch, int max_context_len);
  size_t graphs() const { return graphs_.size(); }
  // Host seconds spent capturing (the eager run, the capture and the instantiation of every graph so far).
  double capture_seconds() const { return capture_seconds_; }

 private:
  struct BatchBuffers {
    Tensor logits, ids, logit_rows;  // f32 [Bk, V], i32 [Bk], i32 [Bk] = 0..Bk-1
  };
  struct Graph {
    Tensor input;  // i32 device: tokens, positions, slots, context_lens [Bk] each, cu_seqlens [Bk+1], tables [Bk, W]
    std::unique_ptr<ops::OpGraph> graph;
  };
  // The (batch, context) bucket of steps of `batch` rows with contexts up to max_context_len; aborts without one.
  std::pair<int, int> buckets(int batch, int max_context_len) const;
  Graph& graph_for(int batch_bucket, int context_bucket);
  // The step's ops on the graph's input buffer: embeddings, the decoder over the paged cache, argmax.
  void step_ops(const Tensor& input, int batch_bucket, int context_bucket, BatchBuffers& out) const;
  // Fills host_ with the rows (padded to the bucket) in the input buffer's layout.
  void pack(const DecodeRows* rows, int batch_bucket, int context_bucket);

  const TextDecoder& text_;
  PagedKvCaches& caches_;
  Device device_;
  int block_size_, max_context_, max_batch_;
  int32_t banned_id_;
  std::unique_ptr<ops::GraphPool> pool_;  // declared before the graphs: destroyed after them
  std::map<int, BatchBuffers> batches_;
  std::map<std::pair<int, int>, Graph> graphs_;
  std::vector<int32_t> host_;
  double capture_seconds_ = 0;
};

}  // namespace vlm::infer

// The training-batch loader: webdataset samples -> decoded, resized, normalized images + tokenized chats ->
// one packed batch (sequences back to back, delimited by cu_seqlens, loss only on answer tokens).
//
// Reading follows a DataPlan (data_plan.h): each rank reads its own equal share of every epoch, optionally shuffled
// within windows; a batch is `batch_size` consecutive slots of one epoch (the partial batch at an epoch's end is
// dropped), so every rank yields the same number of batches per epoch whatever the shard count. Images are decoded
// by a thread pool into indexed slots and batches are built ahead on a background thread.
// Deterministic: the batch sequence depends only on (shards, options, seed, rank, world) and the start state — not
// on decode_threads or prefetching. state() after any batch, given to restore() on a fresh loader (any thread
// count), continues with exactly the batches the uninterrupted loader would have produced.
// Bad samples (undecodable image, missing fields, bad JSON, broken shards) are skipped and counted; their slot
// stays empty, so a batch may hold fewer samples, never more slots.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/prompt.h"

namespace vlm {

struct VlmDataOptions {
  std::vector<std::string> shards;
  std::string task = "vqa";  // vqa | caption | mixed
  int max_turns = 8;         // vqa: question/answer turns per sequence (shuffled per sample)
  std::string caption_prompt = "describe the image.";
  int image_size = 64;
  std::string resize = "bicubic";
  float mean[3] = {0.5f, 0.5f, 0.5f};
  float std[3] = {0.5f, 0.5f, 0.5f};
  int image_tokens = 16;     // placeholders per image
  int max_seq_len = 512;     // longer sequences drop their last turns (counted)
  int epochs = 1;             // 0 = forever
  bool shuffle_shards = true;  // reshuffle the shard order every epoch
  uint64_t shuffle_window = 0; // shuffle samples within windows of this many (0 = read order)
  uint64_t seed = 0;
  int rank = 0, world = 1;     // this process's share of every epoch
  int decode_threads = 0;      // image decode workers besides the caller (0 = none)
  int prefetch_batches = 0;    // batches built ahead on a background thread (0 = build on demand)
  ChatTemplate chat;
};

// Host-side packed batch. The model's inputs are built from it (see train/).
struct PackedBatch {
  Tensor images;                      // f32 [N, 3, S, S]
  std::vector<int32_t> tokens;        // [T]
  std::vector<int32_t> positions;     // [T]
  std::vector<int32_t> cu_seqlens;    // [B+1]
  std::vector<int32_t> image_rows;    // [N * image_tokens]
  std::vector<int32_t> loss_rows;     // rows whose next token is a target
  std::vector<int32_t> loss_targets;  // that next token
  int max_seqlen = 0;
  int n_samples = 0;
};

struct LoaderCounters {
  uint64_t slots = 0;               // samples this rank was assigned so far
  uint64_t samples_ok = 0;
  uint64_t samples_skipped = 0;     // any reason below
  uint64_t bad_images = 0;
  uint64_t bad_text = 0;            // missing/invalid json or txt
  uint64_t bad_members = 0;         // malformed tar groups and samples of broken or unreadable shards
  uint64_t truncated_sequences = 0; // turns dropped to fit max_seq_len
  uint64_t shards_failed = 0;
  uint64_t epochs_completed = 0;
};

// One image-text sample turned into model inputs (also used by eval).
struct PreparedSample {
  std::string key;
  std::vector<float> pixels;  // [3, S, S]
  std::vector<Turn> turns;
};

class VlmBatchLoader {
 public:
  static Expected<std::unique_ptr<VlmBatchLoader>> open(const VlmDataOptions& options, const Tokenizer& tokenizer);
  ~VlmBatchLoader();

  // The next batch: `batch_size` slots (fewer samples when some were bad). out_of_range when all epochs are done.
  // The batch size must stay the same for the loader's life (prefetching builds batches ahead).
  Expected<PackedBatch> next_batch(int batch_size);
  // Batches per epoch for this rank (identical on every rank).
  uint64_t batches_per_epoch(int batch_size) const;
  // JSON text describing the exact position; restore() on a loader opened with the same options continues there.
  std::string state() const;
  Status restore(const std::string& state);
  LoaderCounters counters() const;

 private:
  struct Impl;
  explicit VlmBatchLoader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Decodes and prepares one webdataset sample's image (resize to size x size, normalize) and its text turns for
// `task`. The per-sample random choices come from Philox(seed, sample ordinal). Errors name shard and key.
// On failure, `failed_part` (if given) says whether the text or the image was at fault.
struct WebDatasetSample;
enum class SamplePart { text, image };
Expected<PreparedSample> prepare_sample(const WebDatasetSample& sample, const VlmDataOptions& options,
                                        uint64_t sample_ordinal, SamplePart* failed_part = nullptr);

// Packs prepared samples into one batch.
Expected<PackedBatch> pack_samples(const std::vector<PreparedSample>& samples, const Tokenizer& tokenizer,
                                   const VlmDataOptions& options, LoaderCounters* counters);

}  // namespace vlm

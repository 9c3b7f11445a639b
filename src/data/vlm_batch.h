// The training-batch loader: webdataset samples -> decoded, resized, normalized images + tokenized chats ->
// one packed batch (sequences back to back, delimited by cu_seqlens, loss only on answer tokens).
// Deterministic: the batch sequence depends only on (shards, options, seed) and the start state; state() after any
// batch, given to restore() on a fresh loader, continues with exactly the batches the uninterrupted loader would
// have produced. Bad samples (undecodable image, missing fields, bad JSON) are skipped and counted.
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
  int epochs = 1;
  bool shuffle_shards = true;
  uint64_t seed = 0;
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
  uint64_t samples_ok = 0;
  uint64_t samples_skipped = 0;     // any reason below
  uint64_t bad_images = 0;
  uint64_t bad_text = 0;            // missing/invalid json or txt
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

  // Next batch of `batch_size` samples. Error only when no sample at all is left (all epochs done) or every
  // sample fails.
  Expected<PackedBatch> next_batch(int batch_size);
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

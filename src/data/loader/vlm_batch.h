// The training-batch loader: webdataset samples -> decoded, resized, normalized images + tokenized chats ->
// one packed batch (sequences back to back, delimited by cu_seqlens, loss only on answer tokens).
//
// Reading follows a DataPlan (data_plan.h): each rank reads its own equal share of every epoch, optionally shuffled
// within windows; a batch is `batch_size` consecutive slots of one epoch (the partial batch at an epoch's end is
// dropped), so every rank yields the same number of batches per epoch whatever the shard count. A thread pool
// decodes each slot's image straight into its plane of the batch tensor (a reused buffer, batch_buffer_pool.h) and
// tokenizes its chat; batches are built ahead on a background thread.
// Deterministic: the batch sequence depends only on (shards, options, seed, rank, world) and the start state — not
// on decode_threads or prefetching. state() after any batch, given to restore() on a fresh loader (any thread
// count), continues with exactly the batches the uninterrupted loader would have produced.
// Bad samples (undecodable image, missing fields, bad JSON, broken shards) are skipped and counted; their slot
// stays empty, so a batch may hold fewer samples, never more slots. With `filters` set, samples are checked before
// any pixel is decoded (image header size / aspect, caption, img2dataset metadata such as similarity and punsafe);
// rejected ones leave their slot empty too and are counted per reason.
// Images go through image_pipeline (one call per image: header, bomb check, optionally DCT-scaled decode, resize
// mode, normalize into the sample's pixels).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/image/image_pipeline.h"
#include "data/loader/filters.h"
#include "data/loader/idefics3_layout.h"
#include "data/loader/prompt.h"

namespace vlm {

struct VlmDataOptions {
  std::vector<std::string> shards;
  std::string task = "vqa";  // vqa | caption | mixed
  int max_turns = 8;         // vqa: question/answer turns per sequence (shuffled per sample)
  std::string caption_prompt = "describe the image.";
  int image_size = 64;
  std::string resize = "bicubic";             // resize filter: bicubic | bilinear
  std::string resize_mode = "center_crop";    // center_crop | border_pad | random_resized_crop (image_pipeline.h)
  uint64_t max_pixels = 64ull << 20;          // source width * height above this: skipped from the header (bombs)
  // JPEG decoded at 1/2, 1/4 or 1/8 scale when the output needs no more (Pillow's draft()); off by default so the
  // pixels equal a full decode + resize (on, they equal Pillow's draft() + resize: faster for large photos).
  bool dct_scaling = false;
  std::optional<FilterConfig> filters;        // pre-decode sample filters (none when empty)
  // Online exact dedup: a sample whose encoded image bytes equal an earlier sample's of the same epoch on this rank
  // is dropped (counted in samples_duplicate). Per rank and per epoch (epochs repeat the data by design; duplicates
  // across ranks are what `vlm data dedup` is for). The epoch's hashes are part of state() (16 bytes per sample
  // seen), so a resumed run drops exactly what the uninterrupted run would have.
  bool dedup_exact = false;
  float mean[3] = {0.5f, 0.5f, 0.5f};
  float std[3] = {0.5f, 0.5f, 0.5f};
  int image_tokens = 16;     // placeholders per image
  int max_seq_len = 512;     // longer sequences drop their last turns (counted)
  // A sample whose one remaining turn is still longer than max_seq_len: a caption turn is cut to fit (counted in
  // truncated_captions) when this is set; otherwise, and always for a question/answer turn, the sample is skipped
  // (too_long). Never an error: one long caption must not end a run.
  bool truncate_long_captions = true;
  // A .txt caption that is not valid UTF-8: reject skips the sample (bad_utf8), repair replaces each invalid
  // sequence with U+FFFD (repaired_utf8). JSON text is validated by the JSON parser (bad_text).
  InvalidUtf8 invalid_utf8 = InvalidUtf8::reject;
  int epochs = 1;             // 0 = forever
  bool shuffle_shards = true;  // reshuffle the shard order every epoch
  uint64_t shuffle_window = 0; // shuffle samples within windows of this many (0 = read order)
  uint64_t seed = 0;
  int rank = 0, world = 1;     // this process's share of every epoch
  int decode_threads = 0;      // image decode workers besides the caller (0 = none)
  int prefetch_batches = 0;    // batches built ahead on a background thread (0 = build on demand)
  ChatTemplate chat;
  // SmolVLM / Idefics3 models (idefics3_prompt.h): each image becomes its tiles plus the global image (frames of
  // idefics3->max_image_size = image_size) and its placeholder the processor's layout with image_seq_len =
  // image_tokens image tokens per frame; resize, resize_mode, mean, std and dct_scaling do not apply (the processor
  // has no augmentation). A sample whose tiled prompt does not fit max_seq_len follows the rules above (later turns
  // dropped, a caption cut, else skipped as too_long). Needs the tokenizer's Idefics3 layout tokens.
  std::optional<Idefics3Options> idefics3;
};

// Host-side packed batch. The model's inputs are built from it (see train/).
struct PackedBatch {
  Tensor images;                      // f32 [N, 3, S, S]: one per sample, or with Idefics3 each sample's frames
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
  uint64_t samples_skipped = 0;     // bad samples: bad_images + bad_text + bad_members + too_long + bad_utf8
                                    // (filtered and duplicate samples are not counted here)
  uint64_t samples_filtered = 0;    // rejected by VlmDataOptions::filters (slots = ok + skipped + filtered + dup)
  uint64_t samples_duplicate = 0;   // dropped by dedup_exact (same image bytes earlier in the epoch)
  uint64_t bad_images = 0;
  uint64_t bad_text = 0;            // missing/invalid json or txt
  uint64_t bad_members = 0;         // malformed tar groups and samples of broken or unreadable shards
  uint64_t truncated_sequences = 0; // turns dropped to fit max_seq_len
  uint64_t too_long = 0;            // skipped: one turn alone longer than max_seq_len
  uint64_t truncated_captions = 0;  // caption turns cut to fit max_seq_len (kept)
  uint64_t bad_utf8 = 0;            // skipped: a .txt caption that is not UTF-8 (invalid_utf8 = reject)
  uint64_t repaired_utf8 = 0;       // kept with invalid UTF-8 replaced (invalid_utf8 = repair)
  uint64_t shards_failed = 0;
  uint64_t unsafe_members = 0;     // tar members skipped for an absolute or '..' name (never read)
  uint64_t epochs_completed = 0;
  FilterCounters filter;            // per reason, over every sample the filters checked (pass included)
};

// Where the loader's time went over the batches handed out so far: wall seconds, measured on the thread that did
// the work (not part of state(): it depends on the machine). `vlm bench data --loader` prints them.
struct LoaderTiming {
  uint64_t batches = 0;
  double wait_s = 0.0;    // next_batch() blocked until its batch was ready: the consumer's stall (without
                          // prefetching, the whole build)
  double read_s = 0.0;    // reading the batch's samples from the shards (one thread)
  double decode_s = 0.0;  // filters and image pipeline over the batch (decode_threads workers + the building thread)
  double pack_s = 0.0;    // tokenizing and packing into the batch (one thread)
  double ahead_s = 0.0;   // the prefetch thread idle because prefetch_batches batches were ready (loader ahead)
};

// One image-text sample turned into model inputs (also used by eval).
struct PreparedSample {
  std::string key;
  std::vector<float> pixels;  // [3, S, S], or with Idefics3 [frames, 3, S, S] (the tiles, then the global image)
  std::vector<Turn> turns;
  std::optional<Idefics3Layout> idefics3;  // the image's tile layout (options.idefics3 only)
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
  LoaderTiming timing() const;

 private:
  struct Impl;
  explicit VlmBatchLoader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Decodes and prepares one webdataset sample's image (image_pipeline to size x size in resize_mode, normalize; with
// options.idefics3 its tiles and global image) and its text turns for `task`, after the filters when
// options.filters is set (the caption is then the filters' cleaned one). The per-sample random choices (turn order,
// random_resized_crop window) come from Philox streams of (seed, sample ordinal). Errors name shard and key. On
// failure, `failed_part` (if given) says whether the text or the image was at fault or the filters rejected the
// sample, and `filter` (if given) receives the filters' verdict.
struct WebDatasetSample;
// tokens: the loader's packing (a turn over max_seq_len); utf8: a caption that is not UTF-8.
enum class SamplePart { text, image, filtered, tokens, utf8 };
Expected<PreparedSample> prepare_sample(const WebDatasetSample& sample, const VlmDataOptions& options,
                                        uint64_t sample_ordinal, SamplePart* failed_part = nullptr,
                                        FilterReason* filter = nullptr);

// The image pipeline options of `options` (invalid_argument naming the field for a bad resize filter or mode).
Expected<ImagePipelineOptions> image_pipeline_options(const VlmDataOptions& options);

// Packs prepared samples into one batch (a sample that cannot fit max_seq_len is an error here, naming its key).
Expected<PackedBatch> pack_samples(const std::vector<PreparedSample>& samples, const Tokenizer& tokenizer,
                                   const VlmDataOptions& options, LoaderCounters* counters);

}  // namespace vlm

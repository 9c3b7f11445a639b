// VlmBatchLoader: stream -> filter -> prepare (choose turns; image_pipeline: decode, resize, normalize into the
// batch's plane) -> tokenize (both on the decode threads) -> pack (token arrays, in slot order).
#include "data/loader/vlm_batch.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>

#include "core/logging.h"
#include "core/philox.h"
#include "core/thread_pool.h"
#include "data/io/content_hash.h"
#include "data/io/webdataset.h"
#include "data/loader/batch_buffer_pool.h"
#include "data/loader/idefics3_prompt.h"
#include "data/loader/partitioned_stream.h"
#include "data/loader/sample_stream.h"

namespace vlm {
namespace {

// Stream for the per-sample random choices; distinct from the shard-order stream (which uses subsequence=epoch).
constexpr uint64_t kSampleRngSalt = 0x5eed5a3b1e5ull;
// Stream for random_resized_crop windows (separate, so the turn order does not depend on the resize mode).
constexpr uint64_t kCropRngSalt = 0xc20b5a1ce0ull;

// The answer trained on: "answer", else the most frequent of the human "answers" (strings or {"answer": string},
// as VQA annotations give them; the first on a tie); nullopt when neither is usable.
std::optional<std::string> qa_answer(const nlohmann::json& qa) {
  if (qa.contains("answer"))
    return qa["answer"].is_string() ? std::optional<std::string>(qa["answer"].get<std::string>()) : std::nullopt;
  if (!qa.contains("answers") || !qa["answers"].is_array() || qa["answers"].empty()) return std::nullopt;
  std::vector<std::string> answers;
  for (const auto& a : qa["answers"]) {
    if (a.is_string()) answers.push_back(a.get<std::string>());
    else if (a.is_object() && a.contains("answer") && a["answer"].is_string())
      answers.push_back(a["answer"].get<std::string>());
    else return std::nullopt;
  }
  std::string best;
  long best_count = 0;
  for (const auto& a : answers) {
    const long n = std::count(answers.begin(), answers.end(), a);
    if (n > best_count) best = a, best_count = n;
  }
  return best;
}

Expected<std::vector<Turn>> qa_turns(const nlohmann::json& j, const std::string& where) {
  if (!j.contains("qa") || !j["qa"].is_array()) return parse_error(where + ": json has no \"qa\" list");
  std::vector<Turn> turns;
  for (const auto& qa : j["qa"]) {
    std::optional<std::string> answer = qa.is_object() ? qa_answer(qa) : std::nullopt;
    if (!qa.is_object() || !qa.contains("question") || !qa["question"].is_string() || !answer)
      return parse_error(where + ": a \"qa\" entry needs string \"question\" and \"answer\" (or a list of "
                         "\"answers\")");
    turns.push_back({qa["question"].get<std::string>(), std::move(*answer)});
  }
  if (turns.empty()) return parse_error(where + ": \"qa\" is empty");
  return turns;
}

std::string caption_of(const WebDatasetSample& s, const nlohmann::json* j) {
  std::string c = s.text("txt");
  if (c.empty() && j && j->contains("caption") && (*j)["caption"].is_string()) c = (*j)["caption"].get<std::string>();
  while (!c.empty() && (c.back() == '\n' || c.back() == '\r' || c.back() == ' ')) c.pop_back();
  return c;
}

}  // namespace

Expected<ImagePipelineOptions> image_pipeline_options(const VlmDataOptions& o) {
  ImagePipelineOptions p;
  p.size = o.image_size;
  if (o.resize != "bicubic" && o.resize != "bilinear")
    return invalid_argument(str("data: resize filter '", o.resize, "' (expected bicubic or bilinear)"));
  p.filter = o.resize == "bilinear" ? ResizeFilter::bilinear : ResizeFilter::bicubic;
  auto mode = parse_image_resize_mode(o.resize_mode);
  if (!mode.ok()) return mode.status().with_context("data: resize_mode");
  p.mode = *mode;
  std::copy(o.mean, o.mean + 3, p.mean);
  std::copy(o.std, o.std + 3, p.std);
  p.dct_scaling = o.dct_scaling;
  p.max_pixels = o.max_pixels;
  VLM_RETURN_IF_ERROR(p.validate());
  return p;
}

namespace {

// The caption checked for UTF-8 under o.invalid_utf8: an error naming the byte (reject), or repaired (`repaired`
// set). JSON captions are valid already (the parser checks); .txt ones are raw bytes.
Expected<std::string> checked_caption(std::string cap, const VlmDataOptions& o, const std::string& where,
                                      bool* repaired) {
  const size_t bad = first_invalid_utf8(cap);
  if (bad == std::string::npos) return cap;
  if (o.invalid_utf8 == InvalidUtf8::reject)
    return parse_error(str(where, ": caption is not valid UTF-8 (byte ", bad, " of ", cap.size(),
                           "; data.invalid_utf8 = \"repair\" keeps it with U+FFFD)"));
  if (repaired) *repaired = true;
  return repair_utf8(cap);
}

// prepare_sample with the pixels written to `pixels` (3 * S * S floats), or with o.idefics3 the frames to `tiled`;
// returns the turns. `utf8_repaired` (if given) is set when the caption's invalid UTF-8 was replaced.
Expected<std::vector<Turn>> prepare_sample_into(const WebDatasetSample& sample, const VlmDataOptions& o,
                                                uint64_t sample_ordinal, float* pixels, Idefics3Pixels* tiled,
                                                SamplePart* failed_part, FilterReason* filter,
                                                bool* utf8_repaired = nullptr) {
  if (failed_part) *failed_part = SamplePart::text;
  const std::string where = sample.shard + ": " + sample.key;
  std::vector<Turn> turns;

  // Filters first: they read only the header, the caption and the json.
  std::optional<std::string> clean_caption;
  if (o.filters) {
    FilterResult verdict = filter_sample(sample, *o.filters);
    if (filter) *filter = verdict.reason;
    if (!verdict.passed()) {
      if (failed_part) *failed_part = SamplePart::filtered;
      return invalid_argument(str(where, ": filtered (", filter_reason_name(verdict.reason), "): ", verdict.detail));
    }
    if (!verdict.caption.empty()) clean_caption = std::move(verdict.caption);
  }

  // Text first: it is cheaper to reject a sample before decoding its image.
  nlohmann::json j;
  const bool has_json = sample.has("json");
  if (has_json) {
    const auto* bytes = sample.get("json");
    j = nlohmann::json::parse(bytes->begin(), bytes->end(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) return parse_error(where + ".json: not a JSON object");
  }
  Philox rng(o.seed ^ kSampleRngSalt, sample_ordinal);
  // The caption as training reads it: the filters' cleaned one as is, else checked for UTF-8 (failing as utf8).
  auto caption = [&](std::string cap) -> Expected<std::string> {
    if (clean_caption) return cap;
    Expected<std::string> checked = checked_caption(std::move(cap), o, where, utf8_repaired);
    if (!checked.ok() && failed_part) *failed_part = SamplePart::utf8;
    return checked;
  };
  if (o.task == "vqa" || o.task == "mixed") {
    if (!has_json) return parse_error(where + ": no .json with \"qa\" pairs");
    VLM_ASSIGN_OR_RETURN(turns, qa_turns(j, where + ".json"));
    if (o.task == "mixed") {
      VLM_ASSIGN_OR_RETURN(std::string cap, caption(clean_caption ? *clean_caption : caption_of(sample, &j)));
      if (!cap.empty()) turns.push_back({o.caption_prompt, cap, true});
    }
    for (size_t i = turns.size(); i > 1; --i) std::swap(turns[i - 1], turns[rng.uniform_int(i)]);
    if (static_cast<int>(turns.size()) > o.max_turns) turns.resize(static_cast<size_t>(o.max_turns));
  } else if (o.task == "caption") {
    std::string raw = clean_caption ? *clean_caption : caption_of(sample, has_json ? &j : nullptr);
    if (raw.empty()) return parse_error(where + ": no caption (.txt or json \"caption\")");
    VLM_ASSIGN_OR_RETURN(std::string cap, caption(std::move(raw)));
    turns.push_back({o.caption_prompt, cap, true});
  } else {
    return invalid_argument("unknown task '" + o.task + "'");
  }

  if (failed_part) *failed_part = SamplePart::image;
  if (o.idefics3) {
    VLM_ASSIGN_OR_RETURN(*tiled, idefics3_sample_pixels(sample, *o.idefics3, o.max_pixels));
    return turns;
  }
  VLM_ASSIGN_OR_RETURN(ImagePipelineOptions pipe, image_pipeline_options(o));
  Philox crop_rng(o.seed ^ kCropRngSalt, sample_ordinal);
  VLM_RETURN_IF_ERROR(image_pipeline_sample(sample, pipe, &crop_rng, pixels));
  return turns;
}

// How a sample was fitted to max_seq_len.
struct SampleFit {
  uint64_t dropped_turns = 0;  // its last turns, dropped while more than one was left
  bool caption_cut = false;    // its caption turn was cut to fit
};

// Bytes of a caption tokenized at most per token kept: bounds the work on a huge caption (a byte-level BPE token
// is rarely longer than a word).
constexpr size_t kCaptionBytesPerToken = 64;

// `text` cut to at most `n` bytes, at a UTF-8 character boundary.
std::string utf8_prefix(const std::string& text, size_t n) {
  if (text.size() <= n) return text;
  size_t end = n;
  for (int k = 0; k < 3 && end > 0 && (static_cast<uint8_t>(text[end]) & 0xC0) == 0x80; ++k) --end;
  return text.substr(0, end);
}

// One sample's chat tokens fitted to max_seq_len: its last turns dropped while more than one is left, then a
// caption turn cut to fit (o.truncate_long_captions). out_of_range naming `where` when it still does not fit: the
// loader skips such a sample (too_long). The image is o.image_tokens image ids, or `placeholder` when given (an
// Idefics3 tile layout).
Expected<TokenizedChat> tokenize_sample(const std::string& where, std::vector<Turn> turns, const Tokenizer& tokenizer,
                                        const VlmDataOptions& o, SampleFit* fit,
                                        const std::vector<int32_t>* placeholder = nullptr) {
  auto chat_of = [&](const std::vector<Turn>& t, bool generation_prompt) {
    return placeholder ? tokenize_chat_with_images(tokenizer, o.chat, t, {*placeholder}, generation_prompt)
                       : tokenize_chat(tokenizer, o.chat, t, 1, o.image_tokens, generation_prompt);
  };
  // With tiles the image alone can be most of the sequence: say so, and how to make it shorter.
  const std::string image_note =
      placeholder ? str(" (its tiled image prompt is ", placeholder->size(),
                        " tokens: a lower data.longest_edge or data.image_splitting = \"off\" shortens it)")
                  : std::string();
  const size_t max_len = static_cast<size_t>(std::max(0, o.max_seq_len));
  bool caption_precut = false;
  if (o.truncate_long_captions)
    for (Turn& t : turns)
      if (t.caption && t.assistant.size() > max_len * kCaptionBytesPerToken) {
        t.assistant = utf8_prefix(t.assistant, max_len * kCaptionBytesPerToken);
        caption_precut = true;
      }
  TokenizedChat chat;
  for (;;) {
    VLM_ASSIGN_OR_RETURN(chat, chat_of(turns, false));
    if (chat.tokens.size() <= max_len || turns.size() <= 1) break;
    turns.pop_back();
    ++fit->dropped_turns;
  }
  const Turn& t = turns[0];
  if (chat.tokens.size() <= max_len) {
    fit->caption_cut = caption_precut && std::any_of(turns.begin(), turns.end(), [](const Turn& u) { return u.caption; });
    return chat;
  }
  if (t.caption && o.truncate_long_captions) {
    // The chat up to the answer, the caption's first tokens, the end-of-turn marker: tokenize_chat tokenizes each
    // piece on its own, so this is its sequence with the caption's tokens cut.
    VLM_ASSIGN_OR_RETURN(TokenizedChat head, chat_of(turns, true));
    const std::vector<int32_t> tail =
        o.chat.assistant_suffix.empty() ? std::vector<int32_t>() : tokenizer.encode(o.chat.assistant_suffix);
    if (head.tokens.size() + tail.size() >= max_len)
      return out_of_range(str(where, ": the caption turn's image and prompt alone need ",
                              head.tokens.size() + tail.size(), " tokens, max_seq_len is ", o.max_seq_len,
                              image_note, "; skipped (too_long)"));
    const size_t budget = max_len - head.tokens.size() - tail.size();
    std::vector<int32_t> ids = tokenizer.encode(utf8_prefix(t.assistant, budget * kCaptionBytesPerToken));
    if (ids.size() > budget) ids.resize(budget);
    ids.insert(ids.end(), tail.begin(), tail.end());
    head.tokens.insert(head.tokens.end(), ids.begin(), ids.end());
    head.is_target.insert(head.is_target.end(), ids.size(), 1);  // the caption's tokens and its end are targets
    fit->caption_cut = true;
    return head;
  }
  return out_of_range(str(where, ": ", t.caption ? "the caption turn" : "one question/answer turn", " needs ",
                          chat.tokens.size(), " tokens, more than max_seq_len ", o.max_seq_len, image_note,
                          "; skipped (too_long)"));
}

// Appends one tokenized sample to the batch's token arrays.
void append_chat(PackedBatch& b, const TokenizedChat& chat, int32_t image_id) {
  const int32_t base = static_cast<int32_t>(b.tokens.size());
  for (size_t t = 0; t < chat.tokens.size(); ++t) {
    if (chat.tokens[t] == image_id) b.image_rows.push_back(base + static_cast<int32_t>(t));
    b.tokens.push_back(chat.tokens[t]);
    b.positions.push_back(static_cast<int32_t>(t));
    if (t + 1 < chat.tokens.size() && chat.is_target[t + 1]) {
      b.loss_rows.push_back(base + static_cast<int32_t>(t));
      b.loss_targets.push_back(chat.tokens[t + 1]);
    }
  }
  b.cu_seqlens.push_back(static_cast<int32_t>(b.tokens.size()));
  b.max_seqlen = std::max(b.max_seqlen, static_cast<int>(chat.tokens.size()));
}

}  // namespace

Expected<PreparedSample> prepare_sample(const WebDatasetSample& sample, const VlmDataOptions& o,
                                        uint64_t sample_ordinal, SamplePart* failed_part, FilterReason* filter) {
  PreparedSample out;
  out.key = sample.key;
  if (o.idefics3) {
    Idefics3Pixels tiled;
    VLM_ASSIGN_OR_RETURN(out.turns, prepare_sample_into(sample, o, sample_ordinal, nullptr, &tiled, failed_part,
                                                        filter));
    out.pixels.assign(tiled.frames.data<float>(), tiled.frames.data<float>() + tiled.frames.numel());
    out.idefics3 = std::move(tiled.layout);
    return out;
  }
  out.pixels.resize(static_cast<size_t>(3) * o.image_size * o.image_size);
  VLM_ASSIGN_OR_RETURN(out.turns, prepare_sample_into(sample, o, sample_ordinal, out.pixels.data(), nullptr,
                                                      failed_part, filter));
  return out;
}

Expected<PackedBatch> pack_samples(const std::vector<PreparedSample>& samples, const Tokenizer& tokenizer,
                                   const VlmDataOptions& o, LoaderCounters* counters) {
  PackedBatch b;
  const int64_t n = static_cast<int64_t>(samples.size());
  const int64_t plane = static_cast<int64_t>(3) * o.image_size * o.image_size;
  int64_t frames = 0;
  for (const PreparedSample& s : samples) {
    if (s.pixels.size() % static_cast<size_t>(plane) != 0 || s.idefics3.has_value() != o.idefics3.has_value())
      return invalid_argument(str("pack_samples: sample '", s.key, "' was not prepared with these options"));
    frames += static_cast<int64_t>(s.pixels.size()) / plane;
  }
  if (o.idefics3 && !has_idefics3_tokens(tokenizer))
    return invalid_argument("pack_samples: Idefics3 tiling needs the tokenizer's layout tokens");
  b.images = Tensor::empty({frames, 3, o.image_size, o.image_size}, DType::f32);
  b.cu_seqlens.push_back(0);
  const int32_t image_id = *tokenizer.token_to_id(o.chat.image_token);
  uint64_t truncated = 0, truncated_captions = 0;
  float* dst = b.images.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const PreparedSample& s = samples[static_cast<size_t>(i)];
    dst = std::copy(s.pixels.begin(), s.pixels.end(), dst);
    SampleFit fit;
    std::optional<std::vector<int32_t>> placeholder;
    if (s.idefics3) placeholder = idefics3_placeholder(tokenizer, *s.idefics3, *o.idefics3, o.chat.image_token);
    VLM_ASSIGN_OR_RETURN(TokenizedChat chat, tokenize_sample(s.key, s.turns, tokenizer, o, &fit,
                                                             placeholder ? &*placeholder : nullptr));
    truncated += fit.dropped_turns;
    truncated_captions += fit.caption_cut;
    append_chat(b, chat, image_id);
  }
  if (counters) {
    counters->truncated_sequences += truncated;
    counters->truncated_captions += truncated_captions;
  }
  b.n_samples = static_cast<int>(n);
  return b;
}

namespace {

nlohmann::json counters_json(const LoaderCounters& c) {
  return {{"slots", c.slots},           {"samples_ok", c.samples_ok},
          {"samples_skipped", c.samples_skipped}, {"bad_images", c.bad_images},
          {"bad_text", c.bad_text},     {"bad_members", c.bad_members},
          {"truncated_sequences", c.truncated_sequences}, {"shards_failed", c.shards_failed},
          {"unsafe_members", c.unsafe_members},
          {"epochs_completed", c.epochs_completed}, {"samples_filtered", c.samples_filtered},
          {"samples_duplicate", c.samples_duplicate}, {"too_long", c.too_long},
          {"truncated_captions", c.truncated_captions}, {"bad_utf8", c.bad_utf8},
          {"repaired_utf8", c.repaired_utf8},
          {"filter", nlohmann::json::parse(c.filter.to_json())}};
}

LoaderCounters counters_from_json(const nlohmann::json& j) {
  LoaderCounters c;
  c.slots = j.value("slots", uint64_t{0});
  c.samples_ok = j.value("samples_ok", uint64_t{0});
  c.samples_skipped = j.value("samples_skipped", uint64_t{0});
  c.bad_images = j.value("bad_images", uint64_t{0});
  c.bad_text = j.value("bad_text", uint64_t{0});
  c.bad_members = j.value("bad_members", uint64_t{0});
  c.truncated_sequences = j.value("truncated_sequences", uint64_t{0});
  c.shards_failed = j.value("shards_failed", uint64_t{0});
  c.unsafe_members = j.value("unsafe_members", uint64_t{0});
  c.epochs_completed = j.value("epochs_completed", uint64_t{0});
  c.samples_filtered = j.value("samples_filtered", uint64_t{0});
  c.samples_duplicate = j.value("samples_duplicate", uint64_t{0});
  c.too_long = j.value("too_long", uint64_t{0});
  c.truncated_captions = j.value("truncated_captions", uint64_t{0});
  c.bad_utf8 = j.value("bad_utf8", uint64_t{0});
  c.repaired_utf8 = j.value("repaired_utf8", uint64_t{0});
  if (j.contains("filter") && j["filter"].is_object())
    for (int r = 0; r < kFilterReasonCount; ++r)
      c.filter.counts[static_cast<size_t>(r)] = j["filter"].value(filter_reason_name(static_cast<FilterReason>(r)),
                                                                  uint64_t{0});
  return c;
}

// A produced batch with the loader state right after it (what state() reports once the batch is consumed).
struct ReadyBatch {
  Expected<PackedBatch> batch = out_of_range("not built");
  SlotPosition position;
  LoaderCounters counters;
  // Online dedup: the epoch of the hashes below, and the image hashes this batch added to that epoch's seen set
  // (the consumer's copy of the set follows the batches it hands out, so state() never sees the producer's future).
  uint64_t dedup_epoch = 0;
  std::vector<ImageContentHash> dedup_added;
  LoaderTiming timing;  // this batch's build (read, decode, pack) and the producer's idle time before it
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The image bytes a sample's hash is taken of (the first image field, as prepare_sample picks it); null if none.
const std::vector<uint8_t>* image_bytes_of(const WebDatasetSample& s) {
  for (const char* f : {"jpg", "jpeg", "png", "webp"})
    if (const auto* b = s.get(f)) return b;
  return nullptr;
}

// Per-epoch seen set of image hashes with its insertion log (the log is what state() saves).
struct EpochSeenSet {
  uint64_t epoch = 0;
  std::vector<ImageContentHash> log;
  std::unordered_set<ImageContentHash, ImageContentHashHasher> set;
  void reset(uint64_t e) {
    epoch = e;
    log.clear();
    set.clear();
  }
  bool insert(const ImageContentHash& h) {
    if (!set.insert(h).second) return false;
    log.push_back(h);
    return true;
  }
  nlohmann::json to_json() const {
    std::string hex;
    hex.reserve(log.size() * 32);
    char buf[40];
    for (const auto& h : log) {
      std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(h.hi),
                    static_cast<unsigned long long>(h.lo));
      hex += buf;
    }
    return {{"epoch", epoch}, {"hashes", hex}};
  }
  Status from_json(const nlohmann::json& j) {
    if (!j.is_object() || !j.contains("hashes") || !j["hashes"].is_string())
      return parse_error("loader state: \"dedup\" needs \"epoch\" and a \"hashes\" string");
    const std::string& hex = j["hashes"].get_ref<const std::string&>();
    if (hex.size() % 32 != 0) return parse_error("loader state: dedup hashes are not a multiple of 32 hex digits");
    reset(j.value("epoch", uint64_t{0}));
    for (size_t i = 0; i < hex.size(); i += 32) {
      ImageContentHash h;
      char* end = nullptr;
      const std::string hi = hex.substr(i, 16), lo = hex.substr(i + 16, 16);
      h.hi = std::strtoull(hi.c_str(), &end, 16);
      if (end != hi.c_str() + 16) return parse_error("loader state: bad dedup hash '" + hex.substr(i, 32) + "'");
      h.lo = std::strtoull(lo.c_str(), &end, 16);
      if (end != lo.c_str() + 16) return parse_error("loader state: bad dedup hash '" + hex.substr(i, 32) + "'");
      insert(h);
    }
    return Status();
  }
};

}  // namespace

struct VlmBatchLoader::Impl {
  VlmDataOptions options;
  Tokenizer tokenizer;
  std::optional<DataPlan> plan;
  std::unique_ptr<PartitionedSampleStream> stream;
  std::unique_ptr<ThreadPool> pool;
  LoaderCounters counters;            // of the batches built so far (producer side)
  SlotPosition consumed_position;     // after the last batch handed out
  LoaderCounters consumed_counters;
  LoaderTiming consumed_timing;       // of the batches handed out
  int batch_size = 0;
  uint64_t shards_broken_at_open = 0;  // found while counting samples (their good samples are still read)
  EpochSeenSet seen;                   // online dedup, producer side (as of the last batch built)
  EpochSeenSet consumed_seen;          // as of the last batch handed out (what state() saves)
  BatchBufferPool buffers{8};          // the batches' image tensors: handed out, built, prefetched, spare

  // Prefetching: a producer thread fills `ready` up to options.prefetch_batches.
  std::thread producer;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<ReadyBatch> ready;
  bool stop = false;

  ~Impl() { stop_producer(); }

  Status open_stream(const SlotPosition& start) {
    PartitionedSampleStream::Options so;
    so.epochs = static_cast<uint64_t>(std::max(0, options.epochs));
    so.shuffle_window = options.shuffle_window;
    so.start = start;
    VLM_ASSIGN_OR_RETURN(stream, PartitionedSampleStream::create(*plan, so));
    return Status();
  }

  ReadyBatch build(int n) {
    ReadyBatch out;
    auto t0 = std::chrono::steady_clock::now();
    if (stream->slots_per_epoch() < static_cast<uint64_t>(n)) {
      out.batch = invalid_argument(str("each rank reads ", stream->slots_per_epoch(), " samples per epoch, fewer than ",
                                       "the batch size ", n, ": use more data, fewer ranks or a smaller batch"));
      return out;
    }
    if (stream->slots_left_in_epoch() > 0 && stream->slots_left_in_epoch() < static_cast<uint64_t>(n)) {
      stream->finish_epoch();  // drop the partial batch: every rank yields the same number of batches
    }
    std::vector<Slot> slots(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      auto more = stream->next(slots[static_cast<size_t>(i)]);
      if (!more.ok()) {
        out.batch = more.status();
        return out;
      }
      if (!*more) {
        out.batch = out_of_range("the training data is exhausted (all epochs read)");
        return out;
      }
    }
    if (slots[0].index == 0 && slots[0].epoch > 0) ++counters.epochs_completed;
    // Online exact dedup, in slot order (before the parallel decode), so the kept sample never depends on threads.
    std::vector<bool> duplicate(slots.size(), false);
    if (options.dedup_exact) {
      for (size_t i = 0; i < slots.size(); ++i) {
        if (!slots[i].ok) continue;
        if (slots[i].epoch != seen.epoch) seen.reset(slots[i].epoch);
        const std::vector<uint8_t>* img = image_bytes_of(slots[i].sample);
        if (!img) continue;  // prepare_sample reports the missing image
        const ImageContentHash h = content_hash(img->data(), img->size());
        if (seen.insert(h)) {
          out.dedup_added.push_back(h);
        } else {
          duplicate[i] = true;
        }
      }
      out.dedup_epoch = seen.epoch;
    }
    out.timing.read_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    // Decode in parallel, each slot's pixels straight into its plane of a reused batch buffer, and tokenize there
    // too: results are indexed by slot, so the batch never depends on the thread count. Idefics3 frames (a count
    // known only after decoding) go to per-slot tensors first and are gathered into the batch buffer when packing.
    const int64_t plane = static_cast<int64_t>(3) * options.image_size * options.image_size;
    const bool tiling = options.idefics3.has_value();
    Tensor images = tiling ? Tensor() : buffers.get_f32({n, 3, options.image_size, options.image_size});
    std::vector<Idefics3Pixels> tiled(tiling ? slots.size() : 0);
    std::vector<std::optional<Expected<TokenizedChat>>> prepared(slots.size());
    std::vector<SamplePart> failed(slots.size(), SamplePart::text);
    std::vector<std::optional<FilterReason>> verdicts(slots.size());
    std::vector<SampleFit> fits(slots.size());
    std::vector<uint8_t> repaired(slots.size(), 0);
    auto work = [&](size_t i) {
      if (!slots[i].ok || duplicate[i]) return;
      FilterReason verdict = FilterReason::pass;
      bool utf8_repaired = false;
      auto turns = prepare_sample_into(slots[i].sample, options, slots[i].global_index,
                                       tiling ? nullptr : images.data<float>() + static_cast<int64_t>(i) * plane,
                                       tiling ? &tiled[i] : nullptr, &failed[i], &verdict, &utf8_repaired);
      if (options.filters) verdicts[i] = verdict;
      repaired[i] = utf8_repaired;
      if (!turns.ok()) {
        prepared[i] = turns.status();
        return;
      }
      const WebDatasetSample& s = slots[i].sample;
      std::vector<int32_t> placeholder;
      if (tiling)
        placeholder = idefics3_placeholder(tokenizer, tiled[i].layout, *options.idefics3, options.chat.image_token);
      prepared[i] = tokenize_sample(s.shard + ": " + s.key, std::move(*turns), tokenizer, options, &fits[i],
                                    tiling ? &placeholder : nullptr);
      if (!prepared[i]->ok()) failed[i] = SamplePart::tokens;
    };
    if (pool) {
      pool->parallel_for(slots.size(), work);
    } else {
      for (size_t i = 0; i < slots.size(); ++i) work(i);
    }
    out.timing.decode_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    // Pack in slot order: good samples' planes move down over the gaps, their tokens are appended.
    PackedBatch batch;
    batch.cu_seqlens.push_back(0);
    const int32_t image_id = *tokenizer.token_to_id(options.chat.image_token);
    int64_t n_good = 0;
    std::vector<size_t> good;  // tiling: the slots whose frames the batch holds
    for (size_t i = 0; i < slots.size(); ++i) {
      ++counters.slots;
      if (!slots[i].ok) {
        ++counters.samples_skipped;
        ++counters.bad_members;
        continue;
      }
      if (duplicate[i]) {
        ++counters.samples_duplicate;
        continue;
      }
      if (verdicts[i]) counters.filter.add(*verdicts[i]);
      if (!prepared[i]->ok() && failed[i] == SamplePart::filtered) {
        ++counters.samples_filtered;  // expected data cleaning: counted, not logged
        continue;
      }
      if (!prepared[i]->ok()) {
        VLM_WARN("skipping sample: ", prepared[i]->status().message());
        ++counters.samples_skipped;
        switch (failed[i]) {
          case SamplePart::image: ++counters.bad_images; break;
          case SamplePart::tokens: ++counters.too_long; break;
          case SamplePart::utf8: ++counters.bad_utf8; break;
          default: ++counters.bad_text; break;
        }
        continue;
      }
      ++counters.samples_ok;
      counters.truncated_sequences += fits[i].dropped_turns;
      counters.truncated_captions += fits[i].caption_cut;
      counters.repaired_utf8 += repaired[i];
      if (tiling) {
        good.push_back(i);
      } else if (n_good != static_cast<int64_t>(i)) {
        float* base = images.data<float>();
        std::memmove(base + n_good * plane, base + static_cast<int64_t>(i) * plane, sizeof(float) * plane);
      }
      append_chat(batch, **prepared[i], image_id);
      ++n_good;
    }
    counters.shards_failed = shards_broken_at_open + stream->counters().shards_failed;
    counters.unsafe_members = stream->counters().unsafe_members;
    int64_t n_images = n_good;  // rows of the batch's image tensor
    if (tiling) {
      int64_t frames = 0;
      for (size_t i : good) frames += tiled[i].frames.dim(0);
      const int64_t S = options.image_size;
      images = buffers.get_f32({std::max<int64_t>(frames, 1), 3, S, S});
      float* dst = images.data<float>();
      for (size_t i : good) {
        const Tensor& f = tiled[i].frames;
        dst = std::copy(f.data<float>(), f.data<float>() + f.numel(), dst);
      }
      n_images = frames;
    }
    batch.images = images.slice(0, 0, n_images);
    batch.n_samples = static_cast<int>(n_good);
    out.batch = std::move(batch);
    out.position = stream->position();
    out.counters = counters;
    out.timing.pack_s = seconds_since(t0);
    return out;
  }

  void start_producer() {
    if (options.prefetch_batches <= 0) return;
    stop = false;
    producer = std::thread([this] {
      for (;;) {
        const auto t0 = std::chrono::steady_clock::now();
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return stop || static_cast<int>(ready.size()) < options.prefetch_batches; });
          if (stop) return;
        }
        const double ahead = seconds_since(t0);
        ReadyBatch b = build(batch_size);
        b.timing.ahead_s = ahead;
        const bool last = !b.batch.ok();
        {
          std::lock_guard<std::mutex> lock(mu);
          ready.push_back(std::move(b));
        }
        cv.notify_all();
        if (last) return;  // an error or the end: hand it out once, build nothing more
      }
    });
  }

  void stop_producer() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    if (producer.joinable()) producer.join();
    ready.clear();
  }

  ReadyBatch take(int n) {
    const auto t0 = std::chrono::steady_clock::now();
    ReadyBatch b = take_ready(n);
    b.timing.wait_s = seconds_since(t0);
    return b;
  }

  ReadyBatch take_ready(int n) {
    if (options.prefetch_batches <= 0) return build(n);
    if (!producer.joinable()) {
      batch_size = n;
      start_producer();
    }
    VLM_CHECK(n == batch_size, "VlmBatchLoader: batch size changed from ", batch_size, " to ", n,
              " while prefetching");
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return !ready.empty(); });
    ReadyBatch b = std::move(ready.front());
    ready.pop_front();
    lock.unlock();
    cv.notify_all();
    return b;
  }
};

VlmBatchLoader::VlmBatchLoader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VlmBatchLoader::~VlmBatchLoader() = default;

Expected<std::unique_ptr<VlmBatchLoader>> VlmBatchLoader::open(const VlmDataOptions& options,
                                                               const Tokenizer& tokenizer) {
  if (!tokenizer.token_to_id(options.chat.image_token))
    return invalid_argument("the tokenizer has no '" + options.chat.image_token + "' token");
  VLM_RETURN_IF_ERROR(image_pipeline_options(options).status());
  if (options.filters) VLM_RETURN_IF_ERROR(options.filters->validate());
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (const auto& t = options.idefics3) {
    // As at inference (idefics3_prompt.h): without the layout tokens the model's images go in untiled.
    if (!has_idefics3_tokens(tokenizer)) {
      VLM_WARN("the model's image processor is Idefics3's but the tokenizer lacks <fake_token_around_image> and "
               "<global-img>: images are not tiled (use the model folder's tokenizer to tile them)");
      impl->options.idefics3.reset();
    } else {
      VLM_RETURN_IF_ERROR(check_idefics3_for_model(*t, options.image_size, options.image_tokens, tokenizer));
    }
  }
  impl->tokenizer = tokenizer;
  const double t0 = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  std::vector<std::string> problems;
  VLM_ASSIGN_OR_RETURN(std::vector<uint64_t> counts, count_shard_samples(options.shards, &problems));
  impl->shards_broken_at_open = problems.size();
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count() - t0;
  if (dt > 2.0) VLM_INFO("counted the samples of ", options.shards.size(), " shards in ", dt, " s");
  VLM_ASSIGN_OR_RETURN(DataPlan plan, DataPlan::create(options.shards, std::move(counts), options.seed,
                                                       options.shuffle_shards, options.rank, options.world));
  impl->plan = std::move(plan);
  if (options.decode_threads > 0) impl->pool = std::make_unique<ThreadPool>(options.decode_threads);
  VLM_RETURN_IF_ERROR(impl->open_stream(SlotPosition{}));
  return std::unique_ptr<VlmBatchLoader>(new VlmBatchLoader(std::move(impl)));
}

Expected<PackedBatch> VlmBatchLoader::next_batch(int batch_size) {
  ReadyBatch b = impl_->take(batch_size);
  if (b.batch.ok()) {
    LoaderTiming& t = impl_->consumed_timing;
    ++t.batches;
    t.wait_s += b.timing.wait_s;
    t.read_s += b.timing.read_s;
    t.decode_s += b.timing.decode_s;
    t.pack_s += b.timing.pack_s;
    t.ahead_s += b.timing.ahead_s;
    impl_->consumed_position = b.position;
    impl_->consumed_counters = b.counters;
    if (impl_->options.dedup_exact) {
      EpochSeenSet& cs = impl_->consumed_seen;
      if (b.dedup_epoch != cs.epoch) cs.reset(b.dedup_epoch);
      for (const auto& h : b.dedup_added) cs.insert(h);
    }
  }
  return std::move(b.batch);
}

uint64_t VlmBatchLoader::batches_per_epoch(int batch_size) const {
  return impl_->plan->samples_per_rank() / static_cast<uint64_t>(std::max(1, batch_size));
}

std::string VlmBatchLoader::state() const {
  nlohmann::json j;
  j["slot"] = impl_->consumed_position.to_json();
  j["rank"] = impl_->options.rank;
  j["world"] = impl_->options.world;
  j["counters"] = counters_json(impl_->consumed_counters);
  if (impl_->options.dedup_exact) j["dedup"] = impl_->consumed_seen.to_json();
  return j.dump();
}

Status VlmBatchLoader::restore(const std::string& state) {
  auto j = nlohmann::json::parse(state, nullptr, false);
  if (j.is_discarded() || !j.contains("slot"))
    return parse_error("loader state is not valid (needs \"slot\"): " + state.substr(0, 200));
  if (j.value("world", 1) != impl_->options.world || j.value("rank", 0) != impl_->options.rank)
    return invalid_argument(str("loader state was saved by rank ", j.value("rank", 0), " of ", j.value("world", 1),
                                "; this loader is rank ", impl_->options.rank, " of ", impl_->options.world,
                                " (resharding the data position is not supported)"));
  VLM_ASSIGN_OR_RETURN(SlotPosition pos, SlotPosition::from_json(j["slot"]));
  impl_->stop_producer();
  VLM_RETURN_IF_ERROR(impl_->open_stream(pos));
  impl_->consumed_position = pos;
  impl_->seen.reset(0);
  impl_->consumed_seen.reset(0);
  if (impl_->options.dedup_exact && j.contains("dedup")) {
    VLM_RETURN_IF_ERROR(impl_->seen.from_json(j["dedup"]));
    VLM_RETURN_IF_ERROR(impl_->consumed_seen.from_json(j["dedup"]));
  }
  impl_->counters = impl_->consumed_counters = j.contains("counters") ? counters_from_json(j["counters"])
                                                                      : LoaderCounters{};
  return Status();
}

LoaderCounters VlmBatchLoader::counters() const { return impl_->consumed_counters; }
LoaderTiming VlmBatchLoader::timing() const { return impl_->consumed_timing; }

}  // namespace vlm

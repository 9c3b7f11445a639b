// VlmBatchLoader: stream -> prepare (decode, resize, normalize, choose turns) -> tokenize -> pack.
#include "data/vlm_batch.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "core/philox.h"
#include "data/sample_stream.h"
#include "data/transforms.h"

namespace vlm {
namespace {

// Stream for the per-sample random choices; distinct from the shard-order stream (which uses subsequence=epoch).
constexpr uint64_t kSampleRngSalt = 0x5eed5a3b1e5ull;

Expected<std::vector<Turn>> qa_turns(const nlohmann::json& j, const std::string& where) {
  if (!j.contains("qa") || !j["qa"].is_array()) return parse_error(where + ": json has no \"qa\" list");
  std::vector<Turn> turns;
  for (const auto& qa : j["qa"]) {
    if (!qa.is_object() || !qa.contains("question") || !qa.contains("answer") || !qa["question"].is_string() ||
        !qa["answer"].is_string())
      return parse_error(where + ": a \"qa\" entry needs string \"question\" and \"answer\"");
    turns.push_back({qa["question"].get<std::string>(), qa["answer"].get<std::string>()});
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

Expected<PreparedSample> prepare_sample(const WebDatasetSample& sample, const VlmDataOptions& o,
                                        uint64_t sample_ordinal, SamplePart* failed_part) {
  if (failed_part) *failed_part = SamplePart::text;
  const std::string where = sample.shard + ": " + sample.key;
  PreparedSample out;
  out.key = sample.key;

  // Text first: it is cheaper to reject a sample before decoding its image.
  nlohmann::json j;
  const bool has_json = sample.has("json");
  if (has_json) {
    const auto* bytes = sample.get("json");
    j = nlohmann::json::parse(bytes->begin(), bytes->end(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) return parse_error(where + ".json: not a JSON object");
  }
  Philox rng(o.seed ^ kSampleRngSalt, sample_ordinal);
  if (o.task == "vqa" || o.task == "mixed") {
    if (!has_json) return parse_error(where + ": no .json with \"qa\" pairs");
    VLM_ASSIGN_OR_RETURN(out.turns, qa_turns(j, where + ".json"));
    if (o.task == "mixed") {
      std::string cap = caption_of(sample, &j);
      if (!cap.empty()) out.turns.push_back({o.caption_prompt, cap});
    }
    for (size_t i = out.turns.size(); i > 1; --i) std::swap(out.turns[i - 1], out.turns[rng.uniform_int(i)]);
    if (static_cast<int>(out.turns.size()) > o.max_turns) out.turns.resize(static_cast<size_t>(o.max_turns));
  } else if (o.task == "caption") {
    std::string cap = caption_of(sample, has_json ? &j : nullptr);
    if (cap.empty()) return parse_error(where + ": no caption (.txt or json \"caption\")");
    out.turns.push_back({o.caption_prompt, cap});
  } else {
    return invalid_argument("unknown task '" + o.task + "'");
  }

  if (failed_part) *failed_part = SamplePart::image;
  VLM_ASSIGN_OR_RETURN(Image image, decode_sample_image(sample));
  const ResizeFilter filter = o.resize == "bilinear" ? ResizeFilter::bilinear : ResizeFilter::bicubic;
  if (image.width != o.image_size || image.height != o.image_size)
    image = resize_shorter_then_center_crop(image, o.image_size, filter);
  out.pixels.resize(static_cast<size_t>(3) * o.image_size * o.image_size);
  to_chw_normalized(image, o.mean, o.std, out.pixels.data());
  return out;
}

Expected<PackedBatch> pack_samples(const std::vector<PreparedSample>& samples, const Tokenizer& tokenizer,
                                   const VlmDataOptions& o, LoaderCounters* counters) {
  PackedBatch b;
  const int64_t n = static_cast<int64_t>(samples.size());
  const int64_t plane = static_cast<int64_t>(3) * o.image_size * o.image_size;
  b.images = Tensor::empty({n, 3, o.image_size, o.image_size}, DType::f32);
  b.cu_seqlens.push_back(0);
  for (int64_t i = 0; i < n; ++i) {
    const PreparedSample& s = samples[static_cast<size_t>(i)];
    std::copy(s.pixels.begin(), s.pixels.end(), b.images.data<float>() + i * plane);
    std::vector<Turn> turns = s.turns;
    TokenizedChat chat;
    for (;;) {
      VLM_ASSIGN_OR_RETURN(chat, tokenize_chat(tokenizer, o.chat, turns, 1, o.image_tokens, false));
      if (static_cast<int>(chat.tokens.size()) <= o.max_seq_len || turns.size() <= 1) break;
      turns.pop_back();
      if (counters) ++counters->truncated_sequences;
    }
    if (static_cast<int>(chat.tokens.size()) > o.max_seq_len)
      return invalid_argument(s.key + ": one turn needs " + std::to_string(chat.tokens.size()) +
                              " tokens, more than max_seq_len " + std::to_string(o.max_seq_len));
    const int32_t base = static_cast<int32_t>(b.tokens.size());
    const int32_t image_id = *tokenizer.token_to_id(o.chat.image_token);
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
  b.n_samples = static_cast<int>(n);
  return b;
}

struct VlmBatchLoader::Impl {
  VlmDataOptions options;
  Tokenizer tokenizer;
  std::unique_ptr<ShardSampleStream> stream;
  uint64_t ordinal = 0;  // samples taken from the stream (the per-sample RNG index)
  LoaderCounters counters;

  Status open_stream(const StreamPosition& start) {
    ShardStreamOptions so;
    so.epochs = static_cast<uint64_t>(options.epochs);
    so.shuffle_shards = options.shuffle_shards;
    so.seed = options.seed;
    so.start = start;
    VLM_ASSIGN_OR_RETURN(stream, ShardSampleStream::create(options.shards, so));
    return Status();
  }
};

VlmBatchLoader::VlmBatchLoader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VlmBatchLoader::~VlmBatchLoader() = default;

Expected<std::unique_ptr<VlmBatchLoader>> VlmBatchLoader::open(const VlmDataOptions& options,
                                                               const Tokenizer& tokenizer) {
  if (!tokenizer.token_to_id(options.chat.image_token))
    return invalid_argument("the tokenizer has no '" + options.chat.image_token + "' token");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->tokenizer = tokenizer;
  VLM_RETURN_IF_ERROR(impl->open_stream(StreamPosition{}));
  return std::unique_ptr<VlmBatchLoader>(new VlmBatchLoader(std::move(impl)));
}

Expected<PackedBatch> VlmBatchLoader::next_batch(int batch_size) {
  Impl& m = *impl_;
  std::vector<PreparedSample> prepared;
  WebDatasetSample sample;
  while (static_cast<int>(prepared.size()) < batch_size) {
    VLM_ASSIGN_OR_RETURN(bool more, m.stream->next(sample));
    if (!more) break;
    const uint64_t ordinal = m.ordinal++;
    SamplePart failed = SamplePart::text;
    auto p = prepare_sample(sample, m.options, ordinal, &failed);
    if (!p.ok()) {
      VLM_WARN("skipping sample: ", p.status().message());
      ++m.counters.samples_skipped;
      ++(failed == SamplePart::image ? m.counters.bad_images : m.counters.bad_text);
      continue;
    }
    ++m.counters.samples_ok;
    prepared.push_back(std::move(*p));
  }
  if (prepared.empty()) return out_of_range("the training data is exhausted (all epochs read)");
  return pack_samples(prepared, m.tokenizer, m.options, &m.counters);
}

std::string VlmBatchLoader::state() const {
  nlohmann::json j;
  j["stream"] = impl_->stream->position().to_json();
  j["ordinal"] = impl_->ordinal;
  const LoaderCounters& c = impl_->counters;
  j["counters"] = {{"samples_ok", c.samples_ok},     {"samples_skipped", c.samples_skipped},
                   {"bad_images", c.bad_images},     {"bad_text", c.bad_text},
                   {"truncated_sequences", c.truncated_sequences}};
  return j.dump();
}

Status VlmBatchLoader::restore(const std::string& state) {
  auto j = nlohmann::json::parse(state, nullptr, false);
  if (j.is_discarded() || !j.contains("stream") || !j.contains("ordinal"))
    return parse_error("loader state is not valid (needs stream and ordinal): " + state.substr(0, 200));
  VLM_ASSIGN_OR_RETURN(StreamPosition pos, StreamPosition::from_json(j["stream"]));
  VLM_RETURN_IF_ERROR(impl_->open_stream(pos));
  impl_->ordinal = j["ordinal"].get<uint64_t>();
  if (j.contains("counters")) {
    const auto& c = j["counters"];
    LoaderCounters& lc = impl_->counters;
    lc.samples_ok = c.value("samples_ok", uint64_t{0});
    lc.samples_skipped = c.value("samples_skipped", uint64_t{0});
    lc.bad_images = c.value("bad_images", uint64_t{0});
    lc.bad_text = c.value("bad_text", uint64_t{0});
    lc.truncated_sequences = c.value("truncated_sequences", uint64_t{0});
  }
  return Status();
}

LoaderCounters VlmBatchLoader::counters() const {
  LoaderCounters c = impl_->counters;
  const StreamCounters s = impl_->stream->counters();
  c.samples_skipped += s.samples_skipped;
  c.shards_failed = s.shards_failed;
  return c;
}

}  // namespace vlm

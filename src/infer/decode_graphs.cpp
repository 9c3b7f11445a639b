// DecodeGraphs (see decode_graphs.h): buckets, the input layout, capture on first use and replay.
#include "infer/decode_graphs.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/logging.h"

namespace vlm::infer {

int decode_batch_bucket(int batch, int max_batch) {
  if (batch < 1 || batch > max_batch) return 0;
  int b = 1;
  while (b < batch) {
    if (b < 8) {
      b *= 2;
    } else if (b < 64) {
      b += 8;
    } else if (b < 128) {
      b += 16;
    } else {
      b += 32;
    }
  }
  return std::min(b, max_batch);
}

int decode_context_bucket(int max_context_len, int block_size, int max_context) {
  const int cap = (max_context + block_size - 1) / block_size * block_size;
  if (max_context_len < 1 || max_context_len > cap) return 0;
  int c = 256;
  while (c < max_context_len) c *= 2;
  c = (c + block_size - 1) / block_size * block_size;
  return std::min(c, cap);
}

std::vector<int> decode_batch_buckets(int max_batch) {
  std::vector<int> out;
  for (int b = 1; b <= max_batch; b = out.back() + 1) out.push_back(decode_batch_bucket(b, max_batch));
  return out;
}

std::vector<int> decode_context_bucket_starts(int min_context_len, int max_context_len, int block_size,
                                              int max_context) {
  std::vector<int> out;
  if (min_context_len < 1 || min_context_len > max_context_len ||
      decode_context_bucket(max_context_len, block_size, max_context) == 0)
    return out;
  for (int c = min_context_len; c <= max_context_len; c = decode_context_bucket(c, block_size, max_context) + 1)
    out.push_back(c);
  return out;
}

namespace {
// Offsets of the input buffer's parts for a batch bucket of Bk rows and W table columns.
struct InputLayout {
  int64_t bk, w;
  int64_t tokens() const { return 0; }
  int64_t positions() const { return bk; }
  int64_t slots() const { return 2 * bk; }
  int64_t context_lens() const { return 3 * bk; }
  int64_t cu() const { return 4 * bk; }
  int64_t tables() const { return 5 * bk + 1; }
  int64_t size() const { return 5 * bk + 1 + bk * w; }
};
}  // namespace

DecodeGraphs::DecodeGraphs(const TextDecoder& text, PagedKvCaches& caches, Device device, int block_size,
                           int max_context, int max_batch, int32_t banned_id)
    : text_(text),
      caches_(caches),
      device_(device),
      block_size_(block_size),
      max_context_(max_context),
      max_batch_(max_batch),
      banned_id_(banned_id),
      pool_(std::make_unique<ops::GraphPool>(device)) {}

DecodeGraphs::~DecodeGraphs() {
  graphs_.clear();  // the graphs go before their pool
  batches_.clear();
  pool_.reset();
}

bool DecodeGraphs::covers(int batch, int max_context_len) const {
  return decode_batch_bucket(batch, max_batch_) > 0 &&
         decode_context_bucket(max_context_len, block_size_, max_context_) > 0;
}

void DecodeGraphs::pack(const DecodeRows* rows, int bk, int ck) {
  const InputLayout L{bk, ck / block_size_};
  host_.assign(static_cast<size_t>(L.size()), 0);
  const int n = rows ? static_cast<int>(rows->tokens.size()) : 0;
  for (int i = 0; i < bk; ++i) {
    const bool real = i < n;
    host_[L.tokens() + i] = real ? rows->tokens[i] : 0;
    host_[L.positions() + i] = real ? rows->positions[i] : 0;
    host_[L.slots() + i] = real ? rows->slots[i] : -1;  // padding writes no KV
    host_[L.context_lens() + i] = real ? rows->context_lens[i] : 1;  // and reads slot 0 of block 0
    host_[L.cu() + i + 1] = i + 1;
    if (!real) continue;
    const std::vector<int32_t>& blocks = *rows->blocks[i];
    const size_t used = std::min(blocks.size(), static_cast<size_t>(L.w));  // only ceil(L / block) are read
    std::copy(blocks.begin(), blocks.begin() + static_cast<std::ptrdiff_t>(used),
              host_.begin() + L.tables() + static_cast<int64_t>(i) * L.w);
  }
}

void DecodeGraphs::step_ops(const Tensor& input, int bk, int ck, BatchBuffers& out) const {
  const InputLayout L{bk, ck / block_size_};
  PagedStep ps;
  ps.positions = input.slice(0, L.positions(), L.positions() + bk);
  ps.slot_mapping = input.slice(0, L.slots(), L.slots() + bk);
  ps.context_lens = input.slice(0, L.context_lens(), L.context_lens() + bk);
  ps.cu_seqlens_q = input.slice(0, L.cu(), L.cu() + bk + 1);
  ps.block_tables = input.slice(0, L.tables(), L.size()).view({bk, L.w});
  ps.max_seqlen_q = 1;
  ps.max_context_len = ck;
  const Tensor x0 = text_.embed(input.slice(0, L.tokens(), L.tokens() + bk));
  text_.forward_paged(x0, ps, caches_, out.logit_rows, &out.logits);
  ops::argmax_rows(out.ids, out.logits, banned_id_);
}

DecodeGraphs::Graph& DecodeGraphs::graph_for(int bk, int ck) {
  auto found = graphs_.find({bk, ck});
  if (found != graphs_.end()) return found->second;
  BatchBuffers& buf = batches_[bk];
  if (!buf.logits.defined()) {
    buf.logits = Tensor::empty({bk, text_.config().vocab_size}, DType::f32, device_);
    buf.ids = Tensor::empty({bk}, DType::i32, device_);
    std::vector<int32_t> rows(static_cast<size_t>(bk));
    for (int i = 0; i < bk; ++i) rows[static_cast<size_t>(i)] = i;
    buf.logit_rows = Tensor::from_vector(rows, {bk}).to(device_);
  }
  const auto t0 = std::chrono::steady_clock::now();
  Graph& g = graphs_[{bk, ck}];
  const InputLayout L{bk, ck / block_size_};
  g.input = Tensor::empty({L.size()}, DType::i32, device_);
  pack(nullptr, bk, ck);  // every row padding: a valid step for the warm-up
  g.input.copy_from(Tensor::from_vector(host_, {L.size()}));
  // One eager run first: GEMM algorithm choices, lazily loaded kernels and the index-error record are set up
  // outside the capture.
  step_ops(g.input, bk, ck, buf);
  g.graph = std::make_unique<ops::OpGraph>(*pool_, [&] { step_ops(g.input, bk, ck, buf); });
  capture_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  VLM_DEBUG("decode graph for ", bk, " rows, context ", ck, ": ", g.graph->nodes(), " nodes");
  return g;
}

std::pair<int, int> DecodeGraphs::buckets(int batch, int max_context_len) const {
  const int bk = decode_batch_bucket(batch, max_batch_);
  const int ck = decode_context_bucket(max_context_len, block_size_, max_context_);
  VLM_CHECK(bk > 0 && ck > 0, "DecodeGraphs: no bucket for ", batch, " rows with contexts up to ", max_context_len);
  return {bk, ck};
}

bool DecodeGraphs::capture(int batch, int max_context_len) {
  const auto [bk, ck] = buckets(batch, max_context_len);
  const size_t before = graphs_.size();
  graph_for(bk, ck);
  return graphs_.size() > before;
}

DecodeGraphs::Outputs DecodeGraphs::run(const DecodeRows& rows) {
  const int b = static_cast<int>(rows.tokens.size());
  const auto [bk, ck] = buckets(b, rows.max_context_len);
  VLM_CHECK(rows.positions.size() == rows.tokens.size() && rows.slots.size() == rows.tokens.size() &&
                rows.context_lens.size() == rows.tokens.size() && rows.blocks.size() == rows.tokens.size(),
            "DecodeGraphs: the rows' fields differ in length");
  Graph& g = graph_for(bk, ck);
  pack(&rows, bk, ck);
  g.input.copy_from(Tensor::from_vector(host_, {static_cast<int64_t>(host_.size())}));
  g.graph->replay();
  BatchBuffers& buf = batches_.at(bk);
  return {buf.logits.slice(0, 0, b), buf.ids.slice(0, 0, b)};
}

}  // namespace vlm::infer

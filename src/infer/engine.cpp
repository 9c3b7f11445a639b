// Engine: request validation, the step (batch assembly, forward, sampling, forks, retirement) and accounting.
#include "infer/engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

#include "core/logging.h"
#include "infer/engine_live.h"
#include "kernels/ops.h"

namespace vlm::infer {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
Tensor i32_tensor(const std::vector<int32_t>& v, Device device) {
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(device);
}
}  // namespace

Engine::Engine(VlmModel& model, const EngineOptions& options)
    : model_(model), options_(options), image_cache_(options.image_cache_bytes) {
  const TextConfig& text = model.config().text;
  max_context_ = options.max_context > 0 ? options.max_context : text.max_seq_len;
  const KvCacheShape shape = kv_cache_shape(text, options.block_size, model.compute_dtype());
  const int64_t budget = kv_cache_budget(model.device(), options.kv_memory, options.kv_memory_fraction);
  const int64_t blocks = budget / shape.bytes_per_block();
  VLM_CHECK(blocks >= 1, "the KV cache budget of ", budget, " bytes holds no block of ", shape.bytes_per_block(),
            " bytes (raise --kv-memory)");
  kv_ = std::make_unique<KvCache>(shape, blocks, model.device());
  pool_ = std::make_unique<BlockPool>(blocks);
  SchedulerOptions so;
  so.block_size = options.block_size;
  so.max_num_seqs = options.max_num_seqs;
  so.max_tokens_per_step = options.max_tokens_per_step;
  so.prefix_cache = options.prefix_cache;
  scheduler_ = std::make_unique<Scheduler>(*pool_, so);
  counters_.kv_bytes = kv_->bytes();
  counters_.block_size = options.block_size;
  if (options.cuda_graphs && ops::OpGraph::supported(model.device()))
    graphs_ = std::make_unique<DecodeGraphs>(model.text_decoder(), kv_->caches(), model.device(), options.block_size,
                                             static_cast<int>(max_context_), options.max_num_seqs,
                                             options.image_token_id);
  if (graphs_ && options.capture_graphs_at_start) {
    const Expected<DecodeGraphCapture> c = capture_decode_graphs(
        decode_batch_buckets(options.max_num_seqs), 1, static_cast<int>(max_context_));
    VLM_CHECK(c.ok(), c.status().to_string());  // the sizes come from the options themselves
    VLM_DEBUG("captured ", c->captured, " decode graphs in ", c->seconds, " s");
  }
}

bool decoding_only(const EngineStats& before, const EngineStats& after) {
  return after.steps == before.steps + 1 && after.decode_steps == before.decode_steps + 1 && after.waiting_seqs == 0;
}

Engine::~Engine() = default;

Status Engine::validate(const Request& r) const {
  const ModelConfig& mc = model_.config();
  const std::string who = "request '" + r.id + "': ";
  if (Status s = r.sampling.validate(); !s.ok()) return invalid_argument(who + s.message());
  if (r.prompt.empty()) return invalid_argument(who + "the prompt is empty");
  if (std::max(r.sampling.n, r.sampling.beam_width) > options_.max_num_seqs)
    return invalid_argument(who + "n = " + std::to_string(r.sampling.n) + " completions (beam width " +
                            std::to_string(r.sampling.beam_width) + ") exceed the " +
                            std::to_string(options_.max_num_seqs) + " sequences that run at once");
  const int64_t len = static_cast<int64_t>(r.prompt.size());
  if (len >= max_context_)
    return invalid_argument(who + "the prompt has " + std::to_string(len) + " tokens; the context holds " +
                            std::to_string(max_context_) + " (prompt and output)");
  int64_t placeholders = 0;
  for (size_t i = 0; i < r.prompt.size(); ++i) {
    const int32_t t = r.prompt[i];
    if (t < 0 || t >= mc.text.vocab_size)
      return invalid_argument(who + "token " + std::to_string(i) + " is " + std::to_string(t) +
                              ", outside the vocabulary of " + std::to_string(mc.text.vocab_size));
    placeholders += t == options_.image_token_id;
  }
  const int per_image = mc.image_tokens();
  if (placeholders != static_cast<int64_t>(r.images.size()) * per_image)
    return invalid_argument(who + "the prompt has " + std::to_string(placeholders) + " image placeholders for " +
                            std::to_string(r.images.size()) + " images of " + std::to_string(per_image) + " tokens");
  const Shape want{mc.vision.channels, mc.vision.image_size, mc.vision.image_size};
  for (size_t i = 0; i < r.images.size(); ++i) {
    const Tensor& p = r.images[i].pixels;
    if (!p.defined() || p.shape() != want || p.dtype() != DType::f32)
      return invalid_argument(who + "image " + std::to_string(i) + " is " + (p.defined() ? p.describe() : "missing") +
                              "; the model takes f32" + want.to_string());
  }
  const int64_t longest = std::min<int64_t>(len + r.sampling.max_tokens, max_context_);
  const int64_t blocks = (longest + options_.block_size - 1) / options_.block_size;
  if (blocks > pool_->num_blocks())
    return invalid_argument(who + "a sequence of " + std::to_string(longest) + " tokens needs " +
                            std::to_string(blocks) + " KV blocks; the cache has " +
                            std::to_string(pool_->num_blocks()) + " (raise --kv-memory)");
  return Status();
}

int64_t Engine::add_request(Request r) {
  const int64_t number = next_request_++;
  if (Status s = validate(r); !s.ok()) {
    RequestOutput out;
    out.request = number;
    out.id = r.id;
    out.status = s;
    out.prompt_tokens = static_cast<int64_t>(r.prompt.size());
    done_.push_back(std::move(out));
    return number;
  }
  auto live = std::make_unique<Live>();
  live->number = number;
  live->t0 = now_seconds();
  live->out.request = number;
  live->out.id = r.id;
  live->out.prompt_tokens = static_cast<int64_t>(r.prompt.size());
  auto images = std::make_shared<PromptImages>();
  images->per_image = model_.config().image_tokens();
  if (!r.images.empty()) {
    images->rows.assign(r.prompt.size(), -1);
    int32_t row = 0;
    for (size_t i = 0; i < r.prompt.size(); ++i)
      if (r.prompt[i] == options_.image_token_id) images->rows[i] = row++;
    for (const ImageInput& im : r.images) images->keys.push_back(im.key);
  }
  live->images = images;
  auto seq = std::make_unique<Sequence>();
  const uint64_t seed = r.sampling.seed ? *r.sampling.seed : options_.seed ^ fmix64(static_cast<uint64_t>(number) + 1);
  seq->order = number * 1024;
  seq->request = number;
  seq->tokens = r.prompt;
  seq->prompt_len = static_cast<int64_t>(r.prompt.size());
  seq->images = images;
  seq->rng = Philox(seed, 0);
  seq->slots = std::max(r.sampling.n, r.sampling.beam_width);
  if (r.sampling.beam_width > 1) {
    live->beams = std::make_unique<BeamState>();
    live->beams->live.push_back(seq.get());
  }
  live->request = std::move(r);
  counters_.prompt_tokens += seq->prompt_len;
  scheduler_->add(seq.get());
  live->seqs.push_back(std::move(seq));
  live_.emplace(number, std::move(live));
  return number;
}

void Engine::ensure_image_embeddings(Live& live) {
  if (live.image_embeddings.defined() || live.request.images.empty()) return;
  const ModelConfig& mc = model_.config();
  const int per_image = mc.image_tokens();
  const size_t n = live.request.images.size();
  std::vector<Tensor> parts(n);
  std::vector<size_t> missing;
  for (size_t i = 0; i < n; ++i) {
    if (auto hit = image_cache_.get(live.request.images[i].key)) {
      parts[i] = *hit;
    } else {
      missing.push_back(i);
    }
  }
  if (!missing.empty()) {  // encode the missing images in one batch
    const Tensor& first = live.request.images[missing[0]].pixels;
    Tensor batch =
        Tensor::empty({static_cast<int64_t>(missing.size()), first.dim(0), first.dim(1), first.dim(2)}, DType::f32);
    for (size_t j = 0; j < missing.size(); ++j) {
      Tensor dst = batch.slice(0, static_cast<int64_t>(j), static_cast<int64_t>(j) + 1).view(first.shape());
      dst.copy_from(live.request.images[missing[j]].pixels.to(Device::cpu()));
    }
    const Tensor encoded = model_.encode_images(batch.to(model_.device()));  // [m * per_image, hidden]
    for (size_t j = 0; j < missing.size(); ++j) {
      const int64_t r0 = static_cast<int64_t>(j) * per_image;
      Tensor own = encoded.slice(0, r0, r0 + per_image).clone();
      image_cache_.put(live.request.images[missing[j]].key, own);
      parts[missing[j]] = own;
    }
  }
  live.image_embeddings =
      Tensor::empty({static_cast<int64_t>(n) * per_image, mc.text.hidden}, model_.compute_dtype(), model_.device());
  for (size_t i = 0; i < n; ++i) {
    Tensor dst =
        live.image_embeddings.slice(0, static_cast<int64_t>(i) * per_image, static_cast<int64_t>(i + 1) * per_image);
    dst.copy_from(parts[i]);
  }
  for (ImageInput& im : live.request.images) im.pixels = Tensor();  // encoded: the pixels are no longer needed
}

bool Engine::sample_and_append(Live& live, Sequence& seq, float* logits) {
  const SamplingParams& sp = live.request.sampling;
  const std::vector<int32_t> output = seq.output();
  const std::vector<int32_t> prompt = seq.prompt();
  return append_token(
      live, seq,
      sample_token(logits, model_.config().text.vocab_size, sp, prompt, output, options_.image_token_id, seq.rng));
}

int Engine::sampler_threads() const {
  if (options_.sampler_threads > 0) return options_.sampler_threads - 1;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cores - 1, 0, 15);  // workers besides the stepping thread
}

bool Engine::device_pick(const Live& live) const {
  const SamplingParams& sp = live.request.sampling;
  const bool unfiltered = sp.temperature == 0.f || (sp.top_k == 0 && sp.top_p >= 1.f && sp.min_p == 0.f);
  return !live.beams && unfiltered && sp.repetition_penalty == 1.f && sp.frequency_penalty == 0.f &&
         sp.presence_penalty == 0.f && sp.logprobs < 0 && (sp.n == 1 || live.forked);
}

Tensor Engine::sample_on_device(const Tensor& logits, const std::vector<ScheduledChunk*>& sampled,
                                const std::vector<char>& on_device) {
  const int64_t rows = static_cast<int64_t>(sampled.size());
  std::vector<float> inv_temperature(sampled.size(), 0.f);
  std::vector<int64_t> keys(sampled.size(), 0);
  for (size_t r = 0; r < sampled.size(); ++r) {
    Sequence& s = *sampled[r]->seq;
    const float t = live_.at(s.request)->request.sampling.temperature;
    if (!on_device[r] || t == 0.f) continue;
    inv_temperature[r] = 1.f / t;
    keys[r] = static_cast<int64_t>(s.rng.next_u64());  // one draw of the sequence's stream per token
  }
  const Device dev = logits.device();
  Tensor ids = Tensor::empty({rows}, DType::i32, dev);
  ops::gumbel_argmax_rows(ids, logits, Tensor::from_vector(inv_temperature, {rows}).to(dev),
                          Tensor::from_vector(keys, {rows}).to(dev), options_.image_token_id);
  return ids.to(Device::cpu());
}

bool Engine::append_token(Live& live, Sequence& seq, const SampledToken& t) {
  const SamplingParams& sp = live.request.sampling;
  seq.tokens.push_back(t.id);
  Completion& c = seq.completion;
  c.tokens.push_back(t.id);
  if (sp.logprobs >= 0) c.logprobs.push_back(t.logprob);
  if (sp.logprobs > 0) c.top_logprobs.push_back(t.top);
  c.token_times.push_back(now_seconds() - live.t0);
  ++counters_.generated_tokens;
  const bool is_stop_id = std::find(sp.stop_ids.begin(), sp.stop_ids.end(), t.id) != sp.stop_ids.end();
  if (options_.on_token) {
    TokenEvent e;
    e.request = live.number;
    e.completion = seq.child;
    e.token = t.id;
    e.logprob = t.logprob;
    e.top = sp.logprobs > 0 ? &c.top_logprobs.back() : nullptr;
    e.stop_id = is_stop_id;
    options_.on_token(e);
  }
  bool cut = false;
  if (is_stop_id) {
    c.finish_reason = "stop";
  } else if (!sp.stop.empty() && options_.detokenize) {
    const std::string text = options_.detokenize(c.tokens);
    size_t at = std::string::npos;
    for (const std::string& stop : sp.stop) at = std::min(at, text.find(stop));
    if (at != std::string::npos) {
      c.text = text.substr(0, at);
      c.finish_reason = "stop";
      cut = true;
    }
  }
  if (c.finish_reason.empty() &&
      (seq.output_len() >= sp.max_tokens || static_cast<int64_t>(seq.tokens.size()) >= max_context_))
    c.finish_reason = "length";
  if (c.finish_reason.empty()) return false;
  if (!cut && options_.detokenize) {  // the text leaves out a stop id that ended generation
    std::vector<int32_t> ids = c.tokens;
    if (c.finish_reason == "stop") ids.pop_back();
    c.text = options_.detokenize(ids);
  }
  return true;
}

void Engine::finish_sequence(Live& live, Sequence& seq) {
  scheduler_->remove(&seq);
  --live.unfinished;
}

std::vector<RequestOutput> Engine::step() {
  std::vector<RequestOutput> finished = std::move(done_);
  done_.clear();
  StepPlan plan = scheduler_->schedule();
  if (plan.empty()) {
    if (!scheduler_->idle() && scheduler_->running().empty()) {
      // Nothing fits even with every block free: answer the head request with an error instead of spinning.
      Sequence* head = scheduler_->waiting().front();
      auto it = live_.find(head->request);
      for (auto& s : it->second->seqs) scheduler_->remove(s.get());
      it->second->out.status = internal_error("request '" + it->second->out.id + "' cannot be scheduled: " +
                                              std::to_string(pool_->num_free()) + " free KV blocks");
      it->second->out.completions.clear();
      finished.push_back(std::move(it->second->out));
      live_.erase(it);
    }
    return finished;
  }
  for (const auto& [src, dst] : plan.copies) kv_->copy_block(src, dst);
  counters_.peak_running = std::max<int64_t>(counters_.peak_running, static_cast<int64_t>(plan.chunks.size()));

  // The step's rows: chunk after chunk, each its sequence's next positions.
  const Device dev = model_.device();
  const int bs = options_.block_size;
  std::vector<int32_t> tokens, positions, slots, context_lens, cu{0}, logit_rows;
  std::vector<ScheduledChunk*> sampled;
  int max_q = 0, max_ctx = 0;
  size_t max_blocks = 1;
  std::map<int64_t, std::pair<std::vector<int32_t>, std::vector<int32_t>>> image_rows;  // request -> (dst, src)
  for (ScheduledChunk& c : plan.chunks) {
    Sequence& s = *c.seq;
    Live& live = *live_.at(s.request);
    if (!live.admitted) {
      live.admitted = true;
      live.out.cached_prompt_tokens = c.start;  // what the prefix cache supplied
    }
    for (int64_t p = c.start; p < c.start + c.count; ++p) {
      const int32_t img = s.image_row(p);
      if (img >= 0) {
        ensure_image_embeddings(live);
        image_rows[s.request].first.push_back(static_cast<int32_t>(tokens.size()));
        image_rows[s.request].second.push_back(img);
      }
      tokens.push_back(s.tokens[static_cast<size_t>(p)]);
      positions.push_back(static_cast<int32_t>(p));
      slots.push_back(s.blocks[static_cast<size_t>(p / bs)] * bs + static_cast<int32_t>(p % bs));
    }
    cu.push_back(static_cast<int32_t>(tokens.size()));
    context_lens.push_back(static_cast<int32_t>(c.start + c.count));
    max_q = std::max(max_q, static_cast<int>(c.count));
    max_ctx = std::max(max_ctx, static_cast<int>(c.start + c.count));
    max_blocks = std::max(max_blocks, s.blocks.size());
    if (c.start + c.count == static_cast<int64_t>(s.tokens.size())) {
      logit_rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
      sampled.push_back(&c);
    }
  }
  // Rows that are greedy or sample at a plain temperature are picked on the device (argmax, or the Gumbel-max sample
  // keyed by the sequence's own stream, so a row's token does not depend on what shares the batch): R ids come back
  // instead of R x vocab logits. The logits come to the host only for the rows that need more (filters, penalties,
  // log-probabilities, beams, forks).
  std::vector<char> on_device(sampled.size(), 0);
  bool all_on_device = true, any_random = false;
  for (size_t r = 0; r < sampled.size(); ++r) {
    const Live& live = *live_.at(sampled[r]->seq->request);
    on_device[r] = device_pick(live);
    all_on_device = all_on_device && on_device[r];
    any_random = any_random || (on_device[r] && live.request.sampling.temperature > 0.f);
  }
  Tensor logits, picked, device_logits, device_argmax;
  const bool decode_only = max_q == 1 && image_rows.empty() && sampled.size() == plan.chunks.size();
  counters_.decode_steps += decode_only;
  if (graphs_ && decode_only && graphs_->covers(static_cast<int>(sampled.size()), max_ctx)) {
    DecodeRows rows{tokens, positions, slots, context_lens, {}, max_ctx};
    for (const ScheduledChunk& c : plan.chunks) rows.blocks.push_back(&c.seq->blocks);
    const DecodeGraphs::Outputs out = graphs_->run(rows);
    ++counters_.graph_steps;
    device_logits = out.logits;
    device_argmax = out.ids;
  } else {
    std::vector<int32_t> tables(plan.chunks.size() * max_blocks, 0);
    for (size_t i = 0; i < plan.chunks.size(); ++i)
      std::copy(plan.chunks[i].seq->blocks.begin(), plan.chunks[i].seq->blocks.end(),
                tables.begin() + static_cast<std::ptrdiff_t>(i * max_blocks));
    PagedStep ps;
    ps.positions = i32_tensor(positions, dev);
    ps.slot_mapping = i32_tensor(slots, dev);
    ps.block_tables =
        Tensor::from_vector(tables, {static_cast<int64_t>(plan.chunks.size()), static_cast<int64_t>(max_blocks)})
            .to(dev);
    ps.context_lens = i32_tensor(context_lens, dev);
    ps.cu_seqlens_q = i32_tensor(cu, dev);
    ps.max_seqlen_q = max_q;
    ps.max_context_len = max_ctx;
    const TextDecoder& text = model_.text_decoder();
    Tensor x0 = text.embed(i32_tensor(tokens, dev));
    for (const auto& [request, rows] : image_rows) {
      const Tensor& emb = live_.at(request)->image_embeddings;
      Tensor part = Tensor::empty({static_cast<int64_t>(rows.second.size()), emb.dim(1)}, emb.dtype(), dev);
      ops::gather_rows(part, emb, i32_tensor(rows.second, dev));
      ops::scatter_rows(x0, part, i32_tensor(rows.first, dev));
    }
    device_logits = text.forward_paged(x0, ps, kv_->caches(), i32_tensor(logit_rows, dev));
  }
  if (!sampled.empty()) {
    if (!all_on_device) logits = device_logits.to(Device::cpu());
    if (any_random) {
      picked = sample_on_device(device_logits, sampled, on_device);
    } else if (std::any_of(on_device.begin(), on_device.end(), [](char d) { return d != 0; })) {
      if (!device_argmax.defined()) {
        device_argmax = Tensor::empty({static_cast<int64_t>(sampled.size())}, DType::i32, dev);
        ops::argmax_rows(device_argmax, device_logits, options_.image_token_id);
      }
      picked = device_argmax.to(Device::cpu());
    }
  }
  scheduler_->commit(plan);
  ++counters_.steps;
  counters_.rows += static_cast<int64_t>(tokens.size());

  const int64_t V = model_.config().text.vocab_size;
  // Sampling from host logits (a softmax over the vocabulary per row) runs on the pool, one row per task: each row
  // reads only its own logits, sequence and generator, so the tokens do not depend on the threads. Rows that fork or
  // search beams are handled in order below.
  std::vector<std::optional<SampledToken>> drawn(sampled.size());
  if (!all_on_device) {
    std::vector<size_t> plain;
    for (size_t r = 0; r < sampled.size(); ++r) {
      const Live& live = *live_.at(sampled[r]->seq->request);
      if (!on_device[r] && !live.beams && (live.request.sampling.n == 1 || live.forked)) plain.push_back(r);
    }
    const auto draw = [&](size_t i) {
      const size_t r = plain[i];
      Sequence& s = *sampled[r]->seq;
      const SamplingParams& sp = live_.at(s.request)->request.sampling;
      drawn[r] = sample_token(logits.data<float>() + static_cast<int64_t>(r) * V, V, sp, s.prompt(), s.output(),
                              options_.image_token_id, s.rng);
    };
    if (plain.size() > 1) {
      if (!sampler_pool_) sampler_pool_ = std::make_unique<ThreadPool>(sampler_threads());
      sampler_pool_->parallel_for(plain.size(), draw);
    } else {
      for (size_t i = 0; i < plain.size(); ++i) draw(i);
    }
  }
  std::vector<float> row_copy;
  for (size_t r = 0; r < sampled.size(); ++r) {
    Sequence& s = *sampled[r]->seq;
    Live& live = *live_.at(s.request);
    if (drawn[r]) {
      if (append_token(live, s, *drawn[r])) finish_sequence(live, s);
      continue;
    }
    if (on_device[r]) {
      SampledToken t;
      t.id = picked.data<int32_t>()[r];
      if (append_token(live, s, t)) finish_sequence(live, s);
      continue;
    }
    float* row = logits.data<float>() + static_cast<int64_t>(r) * V;
    if (live.beams) {
      beam_report(live, s, row);
      continue;
    }
    const int n = live.request.sampling.n;
    if (n > 1 && !live.forked) {
      // The prompt is computed: the other completions fork here, sharing its blocks, and sample from its logits.
      live.forked = true;
      s.slots = 1;
      row_copy.assign(row, row + V);
      const uint64_t seed = live.request.sampling.seed ? *live.request.sampling.seed
                                                       : options_.seed ^ fmix64(static_cast<uint64_t>(live.number) + 1);
      for (int k = 1; k < n; ++k) {
        auto child = std::make_unique<Sequence>(s);
        child->child = k;
        child->order = s.order + k;
        child->rng = Philox(seed, static_cast<uint64_t>(k));
        child->slots = 1;
        for (int32_t b : child->blocks) pool_->retain(b);
        scheduler_->add_running(child.get());
        ++live.unfinished;
        std::vector<float> logits_k(row_copy);
        if (sample_and_append(live, *child, logits_k.data())) finish_sequence(live, *child);
        live.seqs.push_back(std::move(child));
      }
    }
    if (sample_and_append(live, s, row)) finish_sequence(live, s);
  }
  // Answer the requests whose sequences all finished.
  for (auto it = live_.begin(); it != live_.end();) {
    Live& live = *it->second;
    if (live.unfinished > 0) {
      ++it;
      continue;
    }
    live.out.status = Status();
    if (live.beams) {
      beam_completions(live);
    } else {
      for (auto& s : live.seqs) live.out.completions.push_back(std::move(s->completion));
    }
    finished.push_back(std::move(live.out));
    it = live_.erase(it);
  }
  if (options_.check_invariants) scheduler_->check_invariants();
  return finished;
}

std::vector<RequestOutput> Engine::generate(std::vector<Request> requests,
                                            const std::function<void(const RequestOutput&)>& on_finish) {
  std::vector<RequestOutput> out(requests.size());
  std::map<int64_t, size_t> slot_of;
  for (size_t i = 0; i < requests.size(); ++i) slot_of[add_request(std::move(requests[i]))] = i;
  while (has_unfinished())
    for (RequestOutput& r : step()) {
      auto it = slot_of.find(r.request);
      if (it == slot_of.end()) continue;  // added before this call by someone else
      if (on_finish) on_finish(r);
      out[it->second] = std::move(r);
    }
  return out;
}

bool Engine::cancel(int64_t request) {
  auto it = live_.find(request);
  if (it == live_.end()) {
    const size_t before = done_.size();
    done_.erase(
        std::remove_if(done_.begin(), done_.end(), [&](const RequestOutput& o) { return o.request == request; }),
        done_.end());
    return done_.size() != before;
  }
  for (auto& s : it->second->seqs) scheduler_->remove(s.get());  // finished ones hold nothing: a no-op
  live_.erase(it);
  if (options_.check_invariants) scheduler_->check_invariants();
  return true;
}

Expected<DecodeGraphCapture> Engine::capture_decode_graphs(const std::vector<int>& batch_sizes, int min_context_len,
                                                           int max_context_len) {
  for (int b : batch_sizes)
    if (b < 1 || b > options_.max_num_seqs)
      return invalid_argument("capture_decode_graphs: a batch of " + std::to_string(b) +
                              " rows is outside 1.." + std::to_string(options_.max_num_seqs) + " (max_num_seqs)");
  if (min_context_len < 1 || min_context_len > max_context_len || max_context_len > max_context_)
    return invalid_argument("capture_decode_graphs: the contexts " + std::to_string(min_context_len) + ".." +
                            std::to_string(max_context_len) + " are not a range within 1.." +
                            std::to_string(max_context_));
  DecodeGraphCapture out;
  if (!graphs_) return out;
  const double t0 = now_seconds();
  std::vector<int> buckets;
  for (int b : batch_sizes) buckets.push_back(decode_batch_bucket(b, options_.max_num_seqs));
  std::sort(buckets.begin(), buckets.end());
  buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
  const std::vector<int> contexts = decode_context_bucket_starts(min_context_len, max_context_len,
                                                                 options_.block_size, static_cast<int>(max_context_));
  for (int b : buckets)
    for (int c : contexts) out.captured += graphs_->capture(b, c);
  // Waits for the warm-up steps, so the time covers their device work, and returns any index error recorded so far
  // (the engine's steps check none: one here is the padding's or an earlier step's).
  if (Status s = ops::check_index_errors(model_.device()); !s.ok()) return s;
  out.seconds = now_seconds() - t0;
  out.graphs = static_cast<int64_t>(graphs_->graphs());
  return out;
}

EngineStats Engine::stats() const {
  EngineStats s = counters_;
  const SchedulerStats ss = scheduler_->stats();
  s.preemptions = ss.preemptions;
  s.prefix_hit_tokens = ss.prefix_hit_tokens;
  s.waste_slots = ss.waste_slots;
  s.waiting_seqs = static_cast<int64_t>(scheduler_->waiting().size());
  s.running_seqs = static_cast<int64_t>(scheduler_->running().size());
  s.blocks = pool_->stats();
  s.image_cache_hits = image_cache_.hits();
  s.image_cache_misses = image_cache_.misses();
  if (graphs_) {
    s.graphs = static_cast<int64_t>(graphs_->graphs());
    s.graph_capture_s = graphs_->capture_seconds();
  }
  return s;
}

}  // namespace vlm::infer

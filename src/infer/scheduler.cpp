// Scheduler: budgeted steps over running and waiting sequences, block reservation, preemption, prefix matching.
#include "infer/scheduler.h"

#include <algorithm>
#include <unordered_map>

#include "core/status.h"
#include "infer/prefix_hash.h"

namespace vlm::infer {

Scheduler::Scheduler(BlockPool& pool, const SchedulerOptions& options) : pool_(pool), options_(options) {
  VLM_CHECK(options.block_size > 0 && options.max_num_seqs > 0 && options.max_tokens_per_step > 0,
            "Scheduler: block_size, max_num_seqs and max_tokens_per_step must be positive");
}

void Scheduler::add(Sequence* seq) {
  auto at = std::upper_bound(waiting_.begin(), waiting_.end(), seq,
                             [](const Sequence* a, const Sequence* b) { return a->order < b->order; });
  waiting_.insert(at, seq);
}

void Scheduler::add_running(Sequence* seq) { running_.push_back(seq); }

BlockHash Scheduler::hash_of_block(const Sequence& s, int64_t index) const {
  const int bs = options_.block_size;
  const BlockHash parent = index == 0 ? root_block_hash() : s.block_hashes[static_cast<size_t>(index - 1)];
  int32_t rows[1024];
  std::vector<int32_t> heap_rows;
  int32_t* r = rows;
  if (bs > 1024) {
    heap_rows.resize(static_cast<size_t>(bs));
    r = heap_rows.data();
  }
  for (int i = 0; i < bs; ++i) r[i] = s.image_row(index * bs + i);
  static const std::vector<ImageContentHash> kNoImages;
  return block_hash(parent, s.tokens.data() + index * bs, r, bs, s.images ? s.images->keys : kNoImages,
                    s.images ? s.images->per_image : 1);
}

void Scheduler::match_prefix(Sequence& s) {
  // At least the last token is computed: its logits are what the sequence samples from.
  const int64_t max_blocks = (static_cast<int64_t>(s.tokens.size()) - 1) / options_.block_size;
  while (static_cast<int64_t>(s.blocks.size()) < max_blocks) {
    const int64_t i = static_cast<int64_t>(s.blocks.size());
    const BlockHash h = hash_of_block(s, i);
    auto block = pool_.lookup(h);
    if (!block) break;
    s.blocks.push_back(*block);
    s.block_hashes.push_back(h);
    s.computed += options_.block_size;
  }
}

bool Scheduler::reserve(Sequence& s, int64_t count, StepPlan& plan) {
  const int bs = options_.block_size;
  const int64_t need = (s.computed + count + bs - 1) / bs;
  const bool cow = s.computed % bs != 0 && pool_.ref_count(s.blocks.back()) > 1;
  const int64_t fresh = std::max<int64_t>(0, need - static_cast<int64_t>(s.blocks.size())) + (cow ? 1 : 0);
  if (fresh > pool_.num_free()) return false;
  if (cow) {  // the last block is partly filled and shared with a fork: this sequence writes into its own copy
    const int32_t copy = *pool_.allocate();
    plan.copies.emplace_back(s.blocks.back(), copy);
    pool_.release(s.blocks.back());
    s.blocks.back() = copy;
  }
  while (static_cast<int64_t>(s.blocks.size()) < need) s.blocks.push_back(*pool_.allocate());
  return true;
}

void Scheduler::release_blocks(Sequence& s) {
  // Tail first: a released prefix is evicted from its end, so its head stays findable longest.
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) pool_.release(*it);
  s.blocks.clear();
  s.block_hashes.clear();
  s.computed = 0;
}

void Scheduler::preempt(Sequence* s, StepPlan& plan) {
  running_.erase(std::find(running_.begin(), running_.end(), s));
  release_blocks(*s);
  ++s->preemptions;
  ++preemptions_;
  plan.preempted.push_back(s);
  add(s);
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int64_t budget = options_.max_tokens_per_step;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* s = running_[i];
    const int64_t count = std::min<int64_t>(static_cast<int64_t>(s->tokens.size()) - s->computed, budget);
    if (count == 0) {  // a beam waiting for its siblings to report
      ++i;
      continue;
    }
    bool self_preempted = false;
    while (!reserve(*s, count, plan)) {
      Sequence* victim = running_.back();
      preempt(victim, plan);
      if (victim == s) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    plan.chunks.push_back({s, s->computed, count});
    budget -= count;
    ++i;
  }
  if (!plan.preempted.empty()) return plan;  // blocks are short: admit nothing new this step
  int64_t slots = running_slots();
  while (budget > 0) {
    auto next = std::find_if(waiting_.begin(), waiting_.end(), [](const Sequence* w) { return !w->parked; });
    if (next == waiting_.end() || slots + (*next)->slots > options_.max_num_seqs) break;
    Sequence* s = *next;
    if (options_.prefix_cache && s->computed == 0) match_prefix(*s);
    const int64_t hits = s->computed;
    const int64_t count = std::min<int64_t>(static_cast<int64_t>(s->tokens.size()) - s->computed, budget);
    bool admitted = true;
    while (!reserve(*s, count, plan)) {
      // Only when nothing else moves this step (the running beams all wait for this one): make room for it.
      if (plan.chunks.empty() && !running_.empty()) {
        preempt(running_.back(), plan);
        continue;
      }
      release_blocks(*s);  // the hit blocks stay cached
      admitted = false;
      break;
    }
    if (!admitted) break;
    prefix_hit_tokens_ += hits;
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s));
    running_.push_back(s);
    slots = running_slots();
    plan.chunks.push_back({s, s->computed, count});
    budget -= count;
  }
  return plan;
}

void Scheduler::commit(const StepPlan& plan) {
  const int bs = options_.block_size;
  for (const ScheduledChunk& c : plan.chunks) {
    Sequence& s = *c.seq;
    VLM_CHECK(s.computed == c.start, "commit: sequence ", s.request, " moved since it was scheduled");
    s.computed += c.count;
    if (!options_.prefix_cache) continue;
    while (static_cast<int64_t>(s.block_hashes.size() + 1) * bs <= s.computed) {
      const int64_t i = static_cast<int64_t>(s.block_hashes.size());
      const BlockHash h = hash_of_block(s, i);
      s.block_hashes.push_back(h);
      pool_.register_hash(s.blocks[static_cast<size_t>(i)], h);
    }
  }
}

bool Scheduler::is_running(const Sequence* s) const {
  return std::find(running_.begin(), running_.end(), s) != running_.end();
}

void Scheduler::remove(Sequence* s) {
  auto r = std::find(running_.begin(), running_.end(), s);
  if (r != running_.end()) running_.erase(r);
  auto w = std::find(waiting_.begin(), waiting_.end(), s);
  if (w != waiting_.end()) waiting_.erase(w);
  release_blocks(*s);
}

int64_t Scheduler::running_slots() const {
  int64_t n = 0;
  for (const Sequence* s : running_) n += s->slots;
  return n;
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats st;
  st.preemptions = preemptions_;
  st.prefix_hit_tokens = prefix_hit_tokens_;
  // Called every step by a server: only each sequence's trailing, partly filled blocks are visited (the blocks before
  // them are full). Holders of one block agree on its fill: prefix sharing shares full blocks only, and forks copy a
  // shared partial block before either writes into it.
  std::unordered_map<int32_t, int64_t> partial;  // block -> computed slots
  for (const Sequence* s : running_)
    for (size_t j = s->blocks.size(); j-- > 0;) {
      const int64_t f =
          std::clamp<int64_t>(s->computed - static_cast<int64_t>(j) * options_.block_size, 0, options_.block_size);
      if (f == options_.block_size) break;
      partial.emplace(s->blocks[j], f);
    }
  st.held_blocks = pool_.num_blocks() - pool_.num_free();
  for (const auto& [b, f] : partial) st.waste_slots += options_.block_size - f;
  return st;
}

void Scheduler::check_invariants() const {
  pool_.check_invariants();
  const int bs = options_.block_size;
  VLM_CHECK(running_slots() <= options_.max_num_seqs, running_slots(), " running slots for at most ",
            options_.max_num_seqs);
  std::unordered_map<int32_t, int32_t> holders;
  for (const Sequence* s : running_) {
    VLM_CHECK(static_cast<int64_t>(s->blocks.size()) * bs >= s->computed, "sequence ", s->request, " computed ",
              s->computed, " tokens in ", s->blocks.size(), " blocks");
    VLM_CHECK(s->computed <= static_cast<int64_t>(s->tokens.size()), "running sequence ", s->request,
              " computed past its tokens");
    for (int32_t b : s->blocks) ++holders[b];
  }
  for (const Sequence* s : waiting_)
    VLM_CHECK(s->blocks.empty() && s->computed == 0, "waiting sequence ", s->request, " holds blocks");
  for (int32_t b = 0; b < static_cast<int32_t>(pool_.num_blocks()); ++b) {
    auto it = holders.find(b);
    const int32_t n = it == holders.end() ? 0 : it->second;
    VLM_CHECK(pool_.ref_count(b) == n, "block ", b, " has count ", pool_.ref_count(b), " but ", n, " holders");
  }
  // stats() visits trailing blocks only; every held block's fill, taken the long way, must give the same waste.
  std::unordered_map<int32_t, int64_t> fill;
  for (const Sequence* s : running_)
    for (size_t j = 0; j < s->blocks.size(); ++j) {
      const int64_t f = std::clamp<int64_t>(s->computed - static_cast<int64_t>(j) * bs, 0, bs);
      auto [it, fresh] = fill.emplace(s->blocks[j], f);
      VLM_CHECK(fresh || it->second == f, "block ", s->blocks[j], " holds ", it->second,
                " computed slots for one holder and ", f, " for another");
    }
  int64_t waste = 0;
  for (const auto& [b, f] : fill) waste += bs - f;
  const int64_t counted = stats().waste_slots;
  VLM_CHECK(waste == counted, "stats() counts ", counted, " unused slots; the blocks hold ", waste);
}

}  // namespace vlm::infer

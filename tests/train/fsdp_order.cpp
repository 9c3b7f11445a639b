// FSDP's collective order on its schedule trace (see fsdp_order.h).
#include "fsdp_order.h"

#include <map>
#include <set>

#include "data/tokenizer/tokenizer.h"
#include "train/device_batch.h"
#include "train/trainer.h"

namespace vlm::testing {

namespace {

using Type = dist::ScheduleEvent::Type;

bool is(const dist::ScheduleEvent& e, Type type, const char* tag) { return e.type == type && e.tag == tag; }

std::string at(size_t i, const dist::ScheduleEvent& e) { return str("event ", i, " (", describe(e), ")"); }

// One micro-batch: events [b, e) between its "begin" and "end" notes.
std::string check_micro_batch(const std::vector<dist::ScheduleEvent>& ev, size_t b, size_t e, const Fsdp& fsdp,
                              bool prefetch, bool last) {
  const bool sharded = fsdp.sharded();
  std::map<int, int> open;                   // uses not yet done, by unit
  std::map<int, size_t> issued, joined;      // the latest gather issue / join of each unit
  std::map<int, size_t> freed;               // the latest free
  std::map<int, int> reductions;             // reductions issued, by unit
  std::vector<size_t> reduce_issues;         // in order
  std::map<int, size_t> reduce_issue_at;
  size_t previous_use = SIZE_MAX;
  int previous_unit = -1;
  for (size_t i = b; i < e; ++i) {
    const dist::ScheduleEvent& x = ev[i];
    const int u = x.key;
    if (is(x, Type::issued, "gather")) {
      if (issued.count(u) && (!joined.count(u) || joined[u] < issued[u]))
        return at(i, x) + ": issued again before the previous gather was joined";
      issued[u] = i;
    } else if (is(x, Type::joined, "gather")) {
      joined[u] = i;
    } else if (is(x, Type::note, "use")) {
      if (sharded) {
        if (!joined.count(u) || !issued.count(u) || joined[u] < issued[u])
          return at(i, x) + ": used before its gather was joined";
        if (freed.count(u) && freed[u] > issued[u]) return at(i, x) + ": used after its weights were freed";
        if (prefetch && previous_use != SIZE_MAX && previous_unit != u && issued[u] > previous_use)
          return at(i, x) + str(": its gather was issued after unit ", previous_unit,
                                "'s use began (no prefetch)");
      }
      ++open[u];
      previous_use = i;
      previous_unit = u;
    } else if (is(x, Type::note, "done")) {
      if (--open[u] < 0) return at(i, x) + ": done more often than used";
    } else if (is(x, Type::note, "free")) {
      if (open[u] > 0) return at(i, x) + ": freed while in use";
      if (issued.count(u) && (!joined.count(u) || joined[u] < issued[u]))
        return at(i, x) + ": freed while its gather is in flight";
      freed[u] = i;
    } else if (is(x, Type::issued, "reduce")) {
      ++reductions[u];
      reduce_issue_at[u] = i;
      reduce_issues.push_back(i);
    } else if (is(x, Type::joined, "reduce")) {
      if (!reduce_issue_at.count(u)) return at(i, x) + ": joined but never issued";
      if (prefetch) {  // overlap: the next reduction was issued before this one was joined (but for the last)
        bool flush = true;  // the micro-batch's final joins: nothing but joins follow until its end
        for (size_t k = i + 1; k < e; ++k) flush = flush && ev[k].type == Type::joined;
        if (reduce_issues.back() == reduce_issue_at[u] && !flush)
          return at(i, x) + ": joined before the next unit's reduction was issued";
      }
    }
  }
  for (const auto& [u, i] : issued)
    if (!joined.count(u) || joined[u] < i) return str("micro-batch ends with unit ", u, "'s gather in flight");
  for (const auto& [u, n] : open)
    if (n != 0) return str("micro-batch ends with unit ", u, " in use");
  // Reductions: every trainable unit once (no_shard: in the step's last micro-batch only).
  const bool expect = sharded || last;
  for (size_t u = 0; u < fsdp.units().size(); ++u) {
    const int want = expect && fsdp.units()[u].trainable ? 1 : 0;
    const int got = reductions.count(static_cast<int>(u)) ? reductions[static_cast<int>(u)] : 0;
    if (got != want)
      return str("unit ", fsdp.units()[u].name, ": ", got, " reduction(s) in a micro-batch, expected ", want);
  }
  std::set<int> joined_reductions;
  for (size_t i = b; i < e; ++i)
    if (is(ev[i], Type::joined, "reduce")) joined_reductions.insert(ev[i].key);
  for (const auto& [u, n] : reductions)
    if (!joined_reductions.count(u)) return str("unit ", u, "'s reduction was not joined before the micro-batch ended");
  return "";
}

}  // namespace

std::string check_fsdp_order(const std::vector<dist::ScheduleEvent>& ev, const Fsdp& fsdp, bool prefetch) {
  size_t begin = SIZE_MAX;
  int micro_batches = 0;
  for (size_t i = 0; i < ev.size(); ++i) {
    if (is(ev[i], Type::note, "begin")) {
      if (begin != SIZE_MAX) return at(i, ev[i]) + ": a micro-batch began inside another";
      begin = i;
    } else if (is(ev[i], Type::note, "end")) {
      if (begin == SIZE_MAX) return at(i, ev[i]) + ": ends no micro-batch";
      const std::string e = check_micro_batch(ev, begin + 1, i, fsdp, prefetch, ev[begin].key == 1);
      if (!e.empty()) return str("micro-batch ", micro_batches, ": ", e);
      ++micro_batches;
      begin = SIZE_MAX;
    }
  }
  if (micro_batches == 0) return "no whole micro-batch in the trace";
  return "";
}

std::string traced_micro_batches(const RunConfig& config, Fsdp& fsdp, int micro_batches, int rank, int world) {
  Expected<Tokenizer> tokenizer = Tokenizer::load(config.data.tokenizer);
  if (!tokenizer.ok()) return tokenizer.status().message();
  Expected<VlmDataOptions> opts = make_data_options(config, config.data.train_shards, false);
  if (!opts.ok()) return opts.status().message();
  opts->rank = rank;
  opts->world = world;
  Expected<std::unique_ptr<VlmBatchLoader>> loader = VlmBatchLoader::open(*opts, *tokenizer);
  if (!loader.ok()) return loader.status().message();
  fsdp.collectives().clear_events();
  fsdp.collectives().trace(true);
  fsdp.zero_grads();
  for (int m = 0; m < micro_batches; ++m) {
    Expected<PackedBatch> b = (*loader)->next_batch(config.train.batch_size);
    if (!b.ok()) return b.status().message();
    fsdp.begin_micro_batch(m + 1 == micro_batches);
    if (b->n_samples > 0) fsdp.model().forward_backward(to_model_inputs(*b, fsdp.model().device()), 1e-3f);
    const Status s = fsdp.end_micro_batch();
    if (!s.ok()) return s.message();
  }
  fsdp.collectives().trace(false);
  return check_fsdp_order(fsdp.collectives().events(), fsdp, fsdp.options().prefetch);
}

}  // namespace vlm::testing

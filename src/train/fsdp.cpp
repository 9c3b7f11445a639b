// Fsdp: unit layout, the event-driven gather / free / reduce state machine, and the shard views AdamW updates
// (see fsdp.h).
#include "train/fsdp.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "kernels/ops.h"

#ifdef VLM_HAVE_CUDA
#include "kernels/cuda/cuda_context.h"
#endif

namespace vlm {

Expected<FsdpStrategy> parse_fsdp_strategy(const std::string& name) {
  if (name == "no_shard") return FsdpStrategy::no_shard;
  if (name == "shard_grad_op") return FsdpStrategy::shard_grad_op;
  if (name == "full_shard") return FsdpStrategy::full_shard;
  if (name == "hybrid_shard") return FsdpStrategy::hybrid_shard;
  return invalid_argument("'" + name + "' is not one of no_shard, shard_grad_op, full_shard, hybrid_shard");
}

const char* fsdp_strategy_name(FsdpStrategy strategy) {
  switch (strategy) {
    case FsdpStrategy::no_shard:
      return "no_shard";
    case FsdpStrategy::shard_grad_op:
      return "shard_grad_op";
    case FsdpStrategy::full_shard:
      return "full_shard";
    case FsdpStrategy::hybrid_shard:
      return "hybrid_shard";
  }
  return "?";
}

Fsdp::Fsdp(VlmModel& model, dist::Communicator& comm, const FsdpOptions& options)
    : model_(model), comm_(comm), options_(options), shard_comm_(&comm) {}

Fsdp::~Fsdp() {
  if (model_.params().unit_hooks() == this) model_.params().set_unit_hooks(nullptr);
}

Expected<std::unique_ptr<Fsdp>> Fsdp::create(VlmModel& model, dist::Communicator& comm, const FsdpOptions& options) {
  if (options.reduce_dtype != DType::f32 && options.reduce_dtype != DType::bf16)
    return invalid_argument(str("fsdp: gradients are reduced in f32 or bf16, not ", dtype_name(options.reduce_dtype)));
  std::unique_ptr<Fsdp> f(new Fsdp(model, comm, options));
  if (options.strategy == FsdpStrategy::hybrid_shard) {
    // Shard groups of G consecutive ranks (a node's GPUs), replica groups of the ranks at the same place in theirs.
    const int G = options.shard_group_size, W = comm.size();
    if (G < 1 || W % G != 0)
      return invalid_argument(str("fsdp: hybrid_shard needs a shard group size that divides the world size ", W,
                                  ", got ", G, " (train.fsdp_shard_group_size; 0 = the ranks of a node)"));
    VLM_ASSIGN_OR_RETURN(f->shard_group_, comm.split(comm.rank() / G, comm.rank()));
    VLM_ASSIGN_OR_RETURN(f->replica_group_, comm.split(comm.rank() % G, comm.rank()));
    f->shard_comm_ = f->shard_group_.get();
  }
  VLM_RETURN_IF_ERROR(f->build());
  model.params().set_unit_hooks(f.get());
  return f;
}

Status Fsdp::build() {
  ParameterStore& store = model_.params();
  const int64_t W = shard_world();
  const std::vector<std::string>& names = store.unit_names();
  units_.resize(names.size());
  state_.resize(names.size());
  for (size_t u = 0; u < names.size(); ++u) units_[u].name = names[u];
  for (Param& p : store.all()) {
    if (p.unit < 0 || p.unit >= static_cast<int>(units_.size()))
      return internal_error(str("fsdp: parameter ", p.name, " belongs to no sharding unit"));
    units_[static_cast<size_t>(p.unit)].params.push_back(&p);
  }
  for (FsdpUnitLayout& u : units_) {
    // Flat layout: parameters in the store's order, a pack's parts together where its first part lies.
    std::map<const Param*, int64_t> offset;
    int64_t at = 0;
    for (Param* p : u.params) {
      if (p->pack == nullptr) {
        offset[p] = at;
        at += p->value.numel();
      } else if (!offset.count(p)) {
        u.packs.push_back(p->pack);
        u.pack_offsets.push_back(at);
        for (Param* part : p->pack->parts) {
          if (part->unit != p->unit)
            return internal_error(str("fsdp: pack of ", p->name, " spans units ", u.name, " and ",
                                      units_[static_cast<size_t>(part->unit)].name));
          offset[part] = at + part->pack_offset;
        }
        at += p->pack->numel();
      }
    }
    bool any = false, all = true;
    for (Param* p : u.params) {
      u.param_offsets.push_back(offset[p]);
      u.shapes.push_back(p->value.shape());
      any = any || p->trainable;
      all = all && p->trainable;
    }
    if (any != all)
      return invalid_argument(str("fsdp: unit ", u.name, " mixes trainable and frozen parameters; freeze whole parts"));
    u.trainable = all && !u.params.empty();
    u.numel = at;
    u.padded = (at + W - 1) / W * W;
    u.shard = u.padded / W;
  }
  schedule_ = model_.unit_schedule();
  if (!sharded()) return Status();

  const bool bf16 = store.compute_dtype() == DType::bf16;
  const int64_t r = shard_rank();
  for (size_t ui = 0; ui < units_.size(); ++ui) {
    FsdpUnitLayout& u = units_[ui];
    UnitState& s = state_[ui];
    const Device dev = model_.device();
    s.shard_value = Tensor::zeros({u.shard}, DType::f32, dev);
    if (u.trainable) s.shard_grad = Tensor::zeros({u.shard}, DType::f32, dev);
    const int64_t lo = r * u.shard, hi = lo + u.shard;
    for (size_t i = 0; i < u.params.size(); ++i) {
      Param* p = u.params[i];
      const int64_t a = u.param_offsets[i], n = p->value.numel();
      const int64_t from = std::max(a, lo), to = std::min(a + n, hi);
      if (from >= to) continue;
      Tensor dst = s.shard_value.slice(0, from - lo, to - lo);
      dst.copy_from(p->value.view({n}).slice(0, from - a, to - a));
    }
    if (bf16) {
      s.shard_compute = Tensor::empty({u.shard}, DType::bf16, dev);
      ops::cast(s.shard_compute, s.shard_value);
    }
  }
  // This rank's pieces of the parameters, in the store's order: what AdamW updates.
  for (Param& p : store.all()) {
    const FsdpUnitLayout& u = units_[static_cast<size_t>(p.unit)];
    const UnitState& s = state_[static_cast<size_t>(p.unit)];
    const size_t i = static_cast<size_t>(std::find(u.params.begin(), u.params.end(), &p) - u.params.begin());
    const int64_t a = u.param_offsets[i], n = p.value.numel(), lo = r * u.shard, hi = lo + u.shard;
    const int64_t from = std::max(a, lo), to = std::min(a + n, hi);
    if (from >= to) continue;
    Param seg{p.name, p.group, s.shard_value.slice(0, from - lo, to - lo), Tensor(), p.decay, p.trainable, Tensor()};
    if (s.shard_grad.defined()) seg.grad = s.shard_grad.slice(0, from - lo, to - lo);
    if (s.shard_compute.defined()) seg.compute = s.shard_compute.slice(0, from - lo, to - lo);
    seg.unit = p.unit;
    segments_.push_back(std::move(seg));
    segment_info_.push_back({p.unit, &p, from - a});
  }
  // The full buffers go: from now on a unit's weights exist in full only while gathered.
  for (Param& p : store.all()) {
    p.value = Tensor();
    p.grad = Tensor();
    p.compute = Tensor();
    if (p.pack) p.pack->value = p.pack->grad = p.pack->compute = Tensor();
  }
  return Status();
}

std::vector<Param*> Fsdp::optimizer_params() {
  std::vector<Param*> out;
  if (!sharded()) {
    for (Param& p : model_.params().all()) out.push_back(&p);
  } else {
    for (Param& p : segments_) out.push_back(&p);
  }
  return out;
}

std::vector<ShardPiece> Fsdp::pieces_of(const Param& full) const {
  const FsdpUnitLayout& u = units_[static_cast<size_t>(full.unit)];
  const size_t i = static_cast<size_t>(std::find(u.params.begin(), u.params.end(), &full) - u.params.begin());
  const int64_t a = u.param_offsets[i], n = u.shapes[i].numel();
  if (!sharded()) return {{0, 0, n}};
  std::vector<ShardPiece> out;
  for (int r = 0; r < shard_world(); ++r) {
    const int64_t lo = r * u.shard, hi = lo + u.shard;
    const int64_t from = std::max(a, lo), to = std::min(a + n, hi);
    if (from < to) out.push_back({r, from - a, to - from});
  }
  return out;
}

int64_t Fsdp::segment_begin(const Param& segment) const {
  for (size_t i = 0; i < segments_.size(); ++i)
    if (&segments_[i] == &segment) return segment_info_[i].begin;
  return 0;  // no_shard: the whole parameter
}

const Param& Fsdp::segment_param(const Param& segment) const {
  for (size_t i = 0; i < segments_.size(); ++i)
    if (&segments_[i] == &segment) return *segment_info_[i].full;
  return segment;
}

void Fsdp::sync_compute() {
  if (!sharded()) {
    model_.params().sync_compute();
    return;
  }
  for (UnitState& s : state_)
    if (s.shard_compute.defined()) ops::cast(s.shard_compute, s.shard_value);
}

void Fsdp::record(Status s) {
  if (error_.ok() && !s.ok()) error_ = std::move(s);
}

void Fsdp::track(uint64_t& current, uint64_t& peak, int64_t delta) {
  current = static_cast<uint64_t>(static_cast<int64_t>(current) + delta);
  peak = std::max(peak, current);
}

StreamHandle Fsdp::compute_stream() const {
#ifdef VLM_HAVE_CUDA
  if (model_.device().is_cuda()) return ops::cuda::current_stream(model_.device());
#endif
  return nullptr;
}

void Fsdp::zero_grads() {
  if (!sharded()) {
    model_.params().zero_grads();
    return;
  }
  std::vector<Tensor> grads;
  for (UnitState& s : state_) {
    if (s.shard_grad.defined()) grads.push_back(s.shard_grad);
    s.grad_written = false;
  }
  ops::zero_multi(grads);
}

void Fsdp::begin_micro_batch(bool last_of_step) {
  last_micro_batch_ = last_of_step;
  cursor_ = 0;
  collectives_.set_compute(compute_stream());
  collectives_.note("begin", last_of_step ? 1 : 0);
}

Status Fsdp::end_micro_batch() {
  while (cursor_ < schedule_.size()) {
    const UnitEvent e = schedule_[cursor_++];
    e.acquire ? run_acquire(e.unit, e.use) : run_release(e.unit, e.use);
  }
  cursor_ = 0;
  for (size_t u = 0; u < state_.size(); ++u) {
    VLM_CHECK(state_[u].weight_refs == 0 && state_[u].grad_refs == 0, "fsdp: unit ", units_[u].name,
              " is still in use at the end of a micro-batch");
    if (state_[u].resident) free_weights(static_cast<int>(u));  // shard_grad_op: units without a backward
  }
  // The reductions still in flight: the optimizer (or the next micro-batch's accumulation) reads their results.
  record(collectives_.join_all());
  collectives_.note("end", 0);
  return error_;
}

// The model's next event must be `event`: the events before it that this rank's batch skipped run first.
void Fsdp::advance_to(const UnitEvent& event) {
  while (cursor_ < schedule_.size() && !(schedule_[cursor_] == event)) {
    const UnitEvent e = schedule_[cursor_++];
    e.acquire ? run_acquire(e.unit, e.use) : run_release(e.unit, e.use);
  }
  VLM_CHECK(cursor_ < schedule_.size(), "fsdp: unit ", units_[static_cast<size_t>(event.unit)].name, " ",
            event.acquire ? "acquired" : "released", " for ", unit_use_name(event.use),
            " out of the model's schedule (VlmModel::unit_schedule and forward_backward disagree)");
  ++cursor_;
}

void Fsdp::acquire(int unit, UnitUse use) {
  advance_to({unit, use, true});
  run_acquire(unit, use);
}

void Fsdp::release(int unit, UnitUse use) {
  advance_to({unit, use, false});
  run_release(unit, use);
}

void Fsdp::run_acquire(int unit, UnitUse use) {
  UnitState& s = state_[static_cast<size_t>(unit)];
  if (use != UnitUse::gradients) {
    ++s.weight_refs;
    if (sharded()) {
      if (!s.resident) gather(unit, false);
      if (options_.prefetch) {  // the next unit whose weights the schedule reads, gathered while this one computes
        for (size_t i = cursor_; i < schedule_.size(); ++i) {
          const UnitEvent& e = schedule_[i];
          if (!e.acquire || e.use == UnitUse::gradients || e.unit == unit) continue;
          if (!state_[static_cast<size_t>(e.unit)].resident) gather(e.unit, false);
          break;
        }
      }
      // The compute stream waits for this unit's gather (issued now, or ahead by the previous unit's prefetch).
      record(collectives_.join("gather", unit).with_context("fsdp: gathering unit " + units_[static_cast<size_t>(unit)].name));
    }
    collectives_.note("use", unit);
  }
  if (use != UnitUse::forward && units_[static_cast<size_t>(unit)].trainable && s.grad_refs++ == 0) alloc_grads(unit);
}

void Fsdp::run_release(int unit, UnitUse use) {
  UnitState& s = state_[static_cast<size_t>(unit)];
  if (use != UnitUse::forward && units_[static_cast<size_t>(unit)].trainable && --s.grad_refs == 0) reduce_grads(unit);
  if (use == UnitUse::gradients) {
    // The unit's backward is over (the embedding's): weights kept since the forward (shard_grad_op) go too.
    if (sharded() && s.weight_refs == 0) free_weights(unit);
    return;
  }
  collectives_.note("done", unit);
  --s.weight_refs;
  if (!sharded() || s.weight_refs > 0) return;
  // shard_grad_op keeps the weights from the forward until the unit's backward (or the micro-batch) ends.
  if (options_.strategy != FsdpStrategy::shard_grad_op || use == UnitUse::backward) free_weights(unit);
}

void Fsdp::point_weights(int unit, const Tensor& full) {
  const FsdpUnitLayout& u = units_[static_cast<size_t>(unit)];
  const bool bf16 = full.defined() && full.dtype() == DType::bf16;
  for (size_t i = 0; i < u.params.size(); ++i) {
    Param* p = u.params[i];
    if (!full.defined()) {
      p->value = p->compute = Tensor();
      continue;
    }
    const int64_t a = u.param_offsets[i];
    Tensor view = full.slice(0, a, a + u.shapes[i].numel()).view(u.shapes[i]);
    p->value = view;  // bf16 mode: only its shape is read; the ops read the compute copy
    p->compute = bf16 ? view : Tensor();
  }
  for (size_t i = 0; i < u.packs.size(); ++i) {
    ParamPack* pack = u.packs[i];
    if (!full.defined()) {
      pack->value = pack->compute = Tensor();
      continue;
    }
    int64_t n = 0;
    for (const Param* part : pack->parts)
      n += u.shapes[static_cast<size_t>(std::find(u.params.begin(), u.params.end(), part) - u.params.begin())].numel();
    Tensor view = full.slice(0, u.pack_offsets[i], u.pack_offsets[i] + n);
    pack->value = view;
    pack->compute = bf16 ? view : Tensor();
  }
}

void Fsdp::point_grads(int unit, const Tensor& full) {
  const FsdpUnitLayout& u = units_[static_cast<size_t>(unit)];
  for (size_t i = 0; i < u.params.size(); ++i) {
    const int64_t a = u.param_offsets[i];
    u.params[i]->grad = full.defined() ? full.slice(0, a, a + u.shapes[i].numel()).view(u.shapes[i]) : Tensor();
  }
  for (size_t i = 0; i < u.packs.size(); ++i) {
    int64_t n = 0;
    for (const Param* part : u.packs[i]->parts) n += part->grad.defined() ? part->grad.numel() : 0;
    u.packs[i]->grad = full.defined() ? full.slice(0, u.pack_offsets[i], u.pack_offsets[i] + n) : Tensor();
  }
}

void Fsdp::gather(int unit, bool exact) {
  const FsdpUnitLayout& u = units_[static_cast<size_t>(unit)];
  UnitState& s = state_[static_cast<size_t>(unit)];
  const Tensor& shard = s.shard_compute.defined() ? s.shard_compute : s.shard_value;
  const StreamHandle compute = collectives_.compute();
  // On the compute stream, which reads it: once freed, the allocator hands it out again in that stream's order.
  s.full_weights = Tensor::empty({u.padded}, shard.dtype(), shard.device(), compute);
  s.resident = true;
  track(gathered_, gathered_peak_, static_cast<int64_t>(s.full_weights.nbytes()));
  point_weights(unit, s.full_weights);
  if (error_.ok()) {
    std::vector<Expected<dist::WorkHandle>> issued;
    std::function<void()> then;
    if (options_.gather_fp8 && !exact) {
      // fp8 on the wire: this rank's f32 master shard as E4M3 codes and one f32 scale per 128 elements, gathered,
      // then every rank's part dequantized into the compute-dtype buffer once the compute stream joined them.
      const int64_t S = u.shard, blocks = ops::fp8_block_count(S), W = shard_world();
      const Device dev = shard.device();
      Tensor codes = Tensor::empty({S}, DType::u8, dev, compute), scales = Tensor::empty({blocks}, DType::f32, dev,
                                                                                          compute);
      Tensor all_codes = Tensor::empty({W * S}, DType::u8, dev, compute);
      Tensor all_scales = Tensor::empty({W * blocks}, DType::f32, dev, compute);
      ops::quantize_fp8_blocks(codes, scales, s.shard_value);
      const int64_t staged =
          static_cast<int64_t>(codes.nbytes() + scales.nbytes() + all_codes.nbytes() + all_scales.nbytes());
      track(staging_, staging_peak_, staged);
      issued.push_back(shard_comm_->all_gather_async(all_codes, codes, compute));
      issued.push_back(shard_comm_->all_gather_async(all_scales, scales, compute));
      then = [this, full = s.full_weights, codes, scales, all_codes, all_scales, S, blocks, W, staged]() mutable {
        for (int64_t r = 0; r < W; ++r) {
          Tensor part = full.slice(0, r * S, (r + 1) * S);
          ops::dequantize_fp8_blocks(part, all_codes.slice(0, r * S, (r + 1) * S),
                                     all_scales.slice(0, r * blocks, (r + 1) * blocks));
        }
        codes = scales = all_codes = all_scales = Tensor();
        track(staging_, staging_peak_, -staged);
      };
    } else {
      issued.push_back(shard_comm_->all_gather_async(s.full_weights, shard, compute));
    }
    std::vector<dist::WorkHandle> works;
    Status failed;
    for (Expected<dist::WorkHandle>& w : issued) {
      if (w.ok()) {
        works.push_back(std::move(*w));
      } else if (failed.ok()) {
        failed = w.status();
      }
    }
    if (failed.ok()) {
      collectives_.add("gather", unit, std::move(works), std::move(then));
      return;
    }
    record(failed.with_context("fsdp: gathering unit " + u.name));
  }
  s.full_weights.zero_(compute);  // a collective failed: compute on zeros until the step reports the error
}

void Fsdp::free_weights(int unit) {
  UnitState& s = state_[static_cast<size_t>(unit)];
  if (!s.resident) return;
  // A gather still in flight (prefetched for a use that never came) writes the buffer until joined.
  record(collectives_.join("gather", unit));
  collectives_.note("free", unit);
  track(gathered_, gathered_peak_, -static_cast<int64_t>(s.full_weights.nbytes()));
  point_weights(unit, Tensor());
  s.full_weights = Tensor();
  s.resident = false;
}

void Fsdp::alloc_grads(int unit) {
  if (!sharded()) return;  // no_shard: the model's own gradients accumulate over the step's micro-batches
  const FsdpUnitLayout& u = units_[static_cast<size_t>(unit)];
  UnitState& s = state_[static_cast<size_t>(unit)];
  s.full_grads = Tensor::empty({u.padded}, DType::f32, s.shard_value.device(), collectives_.compute());
  s.full_grads.zero_(collectives_.compute());
  track(grad_buffers_, grad_buffers_peak_, static_cast<int64_t>(s.full_grads.nbytes()));
  point_grads(unit, s.full_grads);
}

void Fsdp::file_reduction(int unit, std::vector<Expected<dist::WorkHandle>> issued, std::function<void()> then) {
  std::vector<dist::WorkHandle> works;
  for (Expected<dist::WorkHandle>& w : issued) {
    if (w.ok()) {
      works.push_back(std::move(*w));
    } else {
      record(w.status().with_context("fsdp: reducing the gradients of unit " + units_[static_cast<size_t>(unit)].name));
    }
  }
  collectives_.add("reduce", unit, std::move(works), std::move(then));
  // One reduction stays in flight over the next unit's backward (the earlier ones are joined now); without overlap
  // the compute stream waits for it at once.
  record(collectives_.join_all("reduce", options_.prefetch ? 1 : 0));
}

void Fsdp::reduce_grads(int unit) {
  const FsdpUnitLayout& u = units_[static_cast<size_t>(unit)];
  UnitState& s = state_[static_cast<size_t>(unit)];
  const StreamHandle compute = collectives_.compute();
  if (!sharded()) {
    // DDP: the step's gradients summed over the ranks once its last micro-batch's backward of this unit ended.
    if (!last_micro_batch_ || !error_.ok()) return;
    std::vector<Expected<dist::WorkHandle>> issued;
    for (ParamPack* pack : u.packs) issued.push_back(comm_.all_reduce_async(pack->grad, dist::ReduceOp::sum, compute));
    for (Param* p : u.params)
      if (p->pack == nullptr) issued.push_back(comm_.all_reduce_async(p->grad, dist::ReduceOp::sum, compute));
    file_reduction(unit, std::move(issued), {});
    return;
  }
  // Gradients on the wire: the full f32 buffer itself, or its bf16 copy (the f32 buffer then goes at once). The
  // shard lands in the f32 gradient shard directly (the step's first f32 reduction), else in a staging buffer that
  // is added (or, bf16, converted) into it once the compute stream joined the collective.
  const bool bf16 = options_.reduce_dtype == DType::bf16;
  const bool first = !s.grad_written;
  s.grad_written = true;
  const Device dev = s.full_grads.device();
  Tensor wire = s.full_grads;
  int64_t grad_bytes = static_cast<int64_t>(s.full_grads.nbytes()), staged = 0;
  if (bf16) {
    wire = Tensor::empty({u.padded}, DType::bf16, dev, compute);
    ops::cast(wire, s.full_grads);
    track(grad_buffers_, grad_buffers_peak_, -grad_bytes);
    grad_bytes = 0;
    staged += static_cast<int64_t>(wire.nbytes());
  }
  Tensor mine = s.shard_grad;
  if (bf16 || !first) {
    mine = Tensor::empty({u.shard}, wire.dtype(), dev, compute);
    staged += static_cast<int64_t>(mine.nbytes());
  }
  track(staging_, staging_peak_, staged);
  point_grads(unit, Tensor());
  s.full_grads = Tensor();
  if (!error_.ok()) {  // a collective failed: nothing more is sent, the step reports the error
    track(staging_, staging_peak_, -staged);
    track(grad_buffers_, grad_buffers_peak_, -grad_bytes);
    return;
  }
  std::vector<Expected<dist::WorkHandle>> issued;
  issued.push_back(shard_comm_->reduce_scatter_async(mine, wire, dist::ReduceOp::sum, compute));
  if (replica_group_ && replica_group_->size() > 1 && issued.back().ok()) {
    // hybrid_shard: the group's sum of this shard, summed over the replicas (the groups), on the replica
    // communicator's stream once the reduce-scatter is done.
    dist::Communicator& replicas = *replica_group_;
    record((*issued.back())->wait_on(replicas.stream()));
    issued.push_back(replicas.all_reduce_async(mine, dist::ReduceOp::sum, replicas.stream()));
  }
  Tensor shard_grad = s.shard_grad;
  // `wire` rides along so that it lives until the join (the Work holds it too; this keeps the accounting honest).
  file_reduction(unit, std::move(issued), [this, shard_grad, mine, wire, first, bf16, staged, grad_bytes]() mutable {
    const StreamHandle cs = collectives_.compute();
    if (mine.raw_data() != shard_grad.raw_data()) {
      if (first) {
        ops::cast(shard_grad, mine);  // bf16 -> f32 (exact), or an f32 copy
      } else if (bf16) {
        Tensor f32 = Tensor::empty({mine.numel()}, DType::f32, mine.device(), cs);
        track(staging_, staging_peak_, static_cast<int64_t>(f32.nbytes()));
        ops::cast(f32, mine);
        ops::add_inplace(shard_grad, f32);
        track(staging_, staging_peak_, -static_cast<int64_t>(f32.nbytes()));
      } else {
        ops::add_inplace(shard_grad, mine);
      }
    }
    wire = mine = Tensor();
    track(staging_, staging_peak_, -staged);
    track(grad_buffers_, grad_buffers_peak_, -grad_bytes);
  });
}

Status Fsdp::reduce_norm(Tensor& norm_sq) {
  if (!sharded()) return Status();
  // On the device beside the optimizer's other work: the compute stream waits for the sum, the host does not.
  // Over the shard group: every group holds the whole model's gradients (replicas hold the same).
  VLM_ASSIGN_OR_RETURN(dist::WorkHandle w,
                       shard_comm_->all_reduce_async(norm_sq, dist::ReduceOp::sum, compute_stream()));
  return w->wait_on(compute_stream()).with_context("fsdp: gradient norm");
}

Status Fsdp::begin_full_weights() {
  model_.params().set_unit_hooks(nullptr);
  if (!sharded()) return Status();
  collectives_.set_compute(compute_stream());
  for (size_t u = 0; u < units_.size(); ++u)
    if (!state_[u].resident) gather(static_cast<int>(u), /*exact=*/true);  // evaluation reads the masters' copies
  record(collectives_.join_all("gather"));
  return error_;
}

void Fsdp::end_full_weights() {
  model_.params().set_unit_hooks(this);
  if (!sharded()) return;
  for (size_t u = 0; u < units_.size(); ++u) free_weights(static_cast<int>(u));
}

Status Fsdp::param_sums_of_squares(std::vector<double>& weights, std::vector<double>& grads) {
  const std::deque<Param>& all = model_.params().all();
  std::map<const Param*, size_t> index;
  for (const Param& p : all) index.emplace(&p, index.size());
  const int64_t n = static_cast<int64_t>(all.size());
  Tensor sums = Tensor::zeros({2 * n}, DType::f64);
  double* v = sums.data<double>();
  if (!sharded()) {
    for (const Param& p : all) {
      if (!p.trainable) continue;
      v[index[&p]] = ops::sum_of_squares({p.value});
      v[n + static_cast<int64_t>(index[&p])] = ops::sum_of_squares({p.grad});
    }
  } else {
    for (size_t i = 0; i < segments_.size(); ++i) {
      if (!segments_[i].trainable) continue;
      const size_t k = index[segment_info_[i].full];
      v[k] += ops::sum_of_squares({segments_[i].value});
      v[n + static_cast<int64_t>(k)] += ops::sum_of_squares({segments_[i].grad});
    }
    VLM_RETURN_IF_ERROR(
        shard_comm_->all_reduce(sums, dist::ReduceOp::sum).with_context("fsdp: parameter norms"));
  }
  weights.assign(v, v + n);
  grads.assign(v + n, v + 2 * n);
  return Status();
}

std::string FsdpMemory::to_json() const {
  nlohmann::json j;
  j["parameters"] = parameters;
  j["compute_copies"] = compute_copies;
  j["gradients"] = gradients;
  j["optimizer"] = optimizer;
  j["gathered_weights_peak"] = gathered_peak;
  j["gradient_buffers_peak"] = grad_buffers_peak;
  j["communication_buffers_peak"] = comm_buffers_peak;
  j["total"] = total();
  return j.dump();
}

FsdpMemory Fsdp::memory(uint64_t optimizer_bytes) const {
  FsdpMemory m;
  m.optimizer = optimizer_bytes;
  if (!sharded()) {
    for (const Param& p : model_.params().all()) {
      m.parameters += p.value.nbytes();
      m.compute_copies += p.compute.defined() ? p.compute.nbytes() : 0;
    }
    m.gradients = model_.params().grad_bytes();
    return m;
  }
  for (const UnitState& s : state_) {
    m.parameters += s.shard_value.nbytes();
    m.compute_copies += s.shard_compute.defined() ? s.shard_compute.nbytes() : 0;
    m.gradients += s.shard_grad.defined() ? s.shard_grad.nbytes() : 0;
  }
  m.gathered_peak = gathered_peak_;
  m.grad_buffers_peak = grad_buffers_peak_;
  m.comm_buffers_peak = staging_peak_;
  return m;
}

FsdpMemory Fsdp::memory_formula(int grad_accum) const {
  FsdpMemory m;
  const bool bf16 = model_.params().compute_dtype() == DType::bf16;
  if (!sharded()) {
    for (const FsdpUnitLayout& u : units_) {
      const uint64_t n = static_cast<uint64_t>(u.numel);
      m.parameters += 4 * n;
      m.compute_copies += bf16 ? 2 * n : 0;
      m.gradients += 4 * n;
      m.optimizer += u.trainable ? 8 * n : 0;
    }
    return m;
  }
  uint64_t largest = 0, largest_trainable = 0, largest_shard = 0, sum_padded = 0;
  for (const FsdpUnitLayout& u : units_) {
    const uint64_t p = static_cast<uint64_t>(u.padded), s = static_cast<uint64_t>(u.shard);
    m.parameters += 4 * s;
    m.compute_copies += bf16 ? 2 * s : 0;
    if (u.trainable) {
      m.gradients += 4 * s;
      m.optimizer += 8 * s;
      largest_trainable = std::max(largest_trainable, p);
      largest_shard = std::max(largest_shard, s);
    }
    largest = std::max(largest, p);
    sum_padded += p;
  }
  const uint64_t b = bf16 ? 2 : 4;
  if (options_.strategy == FsdpStrategy::shard_grad_op) {
    m.gathered_peak = b * sum_padded;
  } else if (!options_.prefetch) {
    m.gathered_peak = b * largest;
  } else {
    // Consecutive units whose weights the schedule reads (the forward, then the backward).
    std::vector<int> order;
    for (const UnitEvent& e : schedule_)
      if (e.acquire && e.use != UnitUse::gradients && (order.empty() || order.back() != e.unit))
        order.push_back(e.unit);
    for (size_t i = 0; i + 1 < order.size(); ++i)
      m.gathered_peak = std::max<uint64_t>(m.gathered_peak,
                                           b * static_cast<uint64_t>(units_[static_cast<size_t>(order[i])].padded +
                                                                     units_[static_cast<size_t>(order[i + 1])].padded));
  }
  // Reductions in the order the backward ends them; with overlap (prefetch) one stays in flight while the next
  // unit's backward fills its buffers, so the peaks are over consecutive pairs.
  std::vector<int> reduce_order, refs(units_.size(), 0);
  for (const UnitEvent& e : schedule_) {
    if (e.use == UnitUse::forward || !units_[static_cast<size_t>(e.unit)].trainable) continue;
    int& r = refs[static_cast<size_t>(e.unit)];
    r += e.acquire ? 1 : -1;
    if (!e.acquire && r == 0) reduce_order.push_back(e.unit);
  }
  auto window_max = [&](auto bytes_of) {
    uint64_t best = 0;
    for (size_t i = 0; i < reduce_order.size(); ++i) {
      uint64_t b = bytes_of(units_[static_cast<size_t>(reduce_order[i])]);
      if (options_.prefetch && i + 1 < reduce_order.size())
        b += bytes_of(units_[static_cast<size_t>(reduce_order[i + 1])]);
      best = std::max(best, b);
    }
    return best;
  };
  const auto P = [](const FsdpUnitLayout& u) { return static_cast<uint64_t>(u.padded); };
  const auto S = [](const FsdpUnitLayout& u) { return static_cast<uint64_t>(u.shard); };
  if (options_.reduce_dtype == DType::bf16) {
    // The f32 buffer goes once cast to the bf16 wire copy; the wire copy and the bf16 shard stay until joined.
    m.grad_buffers_peak = 4 * largest_trainable;
    m.comm_buffers_peak = window_max([&](const FsdpUnitLayout& u) { return 2 * P(u) + 2 * S(u); }) +
                          (grad_accum > 1 ? 4 * largest_shard : 0);
  } else {
    m.grad_buffers_peak = window_max([&](const FsdpUnitLayout& u) { return 4 * P(u); });
    if (grad_accum > 1) m.comm_buffers_peak = window_max([&](const FsdpUnitLayout& u) { return 4 * S(u); });
  }
  if (options_.gather_fp8) {
    // fp8 gathers in flight (two with prefetch): this rank's codes and scales and every rank's.
    uint64_t wire = 0;
    for (const FsdpUnitLayout& u : units_)
      wire = std::max(wire, (S(u) + 4 * static_cast<uint64_t>(ops::fp8_block_count(u.shard))) *
                                (static_cast<uint64_t>(shard_world()) + 1));
    m.comm_buffers_peak += (options_.prefetch ? 2 : 1) * wire;
  }
  return m;
}

std::string Fsdp::layout_json() const {
  nlohmann::json j;
  j["strategy"] = fsdp_strategy_name(options_.strategy);
  j["world_size"] = world();
  j["shard_group_size"] = shard_world();
  j["prefetch"] = options_.prefetch;
  j["reduce_dtype"] = dtype_name(options_.reduce_dtype);
  j["allgather_dtype"] = options_.gather_fp8 ? "fp8_e4m3" : "compute";
  j["units"] = nlohmann::json::array();
  for (const FsdpUnitLayout& u : units_)
    j["units"].push_back({{"name", u.name}, {"numel", u.numel}, {"padded", u.padded}, {"trainable", u.trainable}});
  return j.dump();
}

void Fsdp::reset_peaks() {
  gathered_peak_ = gathered_;
  grad_buffers_peak_ = grad_buffers_;
  staging_peak_ = staging_;
}

}  // namespace vlm

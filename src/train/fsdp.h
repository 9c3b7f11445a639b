// Fully sharded data parallelism (FSDP / ZeRO) over the ranks of a launch. The model's parameters are grouped into
// units (a transformer block, the embeddings, the LM head, the projector, the vision stem: ParameterStore units);
// each unit is one flat buffer, its parameters laid back to back (a pack's parts together), padded to a multiple of
// the world size and split evenly: rank r keeps elements [r * S, (r + 1) * S) of the f32 master weights, of the
// gradient and of AdamW's moments. The model brackets every use of a unit (UnitHooks), and this class
//   - all-gathers the unit's full weights before its forward, with the next unit's gather issued first (prefetch):
//     on a GPU the gathers run on NCCL's stream while the compute stream computes the current unit, and the compute
//     stream waits (an event, the host does not) for a unit's gather right before its use;
//   - frees them after the use (full_shard), or keeps them from the forward until the unit's backward ends
//     (shard_grad_op);
//   - gives the unit full-size zeroed gradient buffers for its backward and reduce-scatters (sums) them into this
//     rank's f32 gradient shard as soon as the unit's backward ends (fp32, or bf16 on the wire accumulated in fp32);
//     the reduction runs beside the next unit's backward and is joined into the compute stream when that one ends
//     (all of them before the optimizer reads the shards);
//   - no_shard is data parallelism (DDP): full replicas, every unit's gradients all-reduced as its backward of the
//     step's last micro-batch ends, overlapped the same way.
// Every collective goes through dist::CollectiveSchedule, the same code on the CPU (MPI, a world of one) and the GPU
// (NCCL), whose trace the CPU tests check (gathers joined before each use, freed after, one reduction per unit per
// micro-batch, joined before the step ends).
// AdamW then updates the shards alone (optimizer_params), the gradient norm's sum of squares all-reduced first (on
// the device) so clipping uses the global norm. Every rank must issue the same collectives in the same order even
// when its batch skips a part (no images, no target tokens, no samples): the model's schedule
// (VlmModel::unit_schedule) is followed event by event and the events a rank skipped are replayed without compute
// (gathers, and reductions of zeros).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "dist/collective_schedule.h"
#include "dist/communicator.h"
#include "model/vlm.h"

namespace vlm {

enum class FsdpStrategy { no_shard, shard_grad_op, full_shard, hybrid_shard };
// "no_shard" | "shard_grad_op" | "full_shard" | "hybrid_shard"; anything else is an invalid_argument listing them.
Expected<FsdpStrategy> parse_fsdp_strategy(const std::string& name);
const char* fsdp_strategy_name(FsdpStrategy strategy);

struct FsdpOptions {
  FsdpStrategy strategy = FsdpStrategy::no_shard;
  bool prefetch = true;             // gather the next unit before this one's compute
  DType reduce_dtype = DType::f32;  // gradients on the wire: f32, or bf16 (summed in f32, accumulated in f32)
  int shard_group_size = 0;         // hybrid_shard: ranks a shard group (consecutive ranks; divides the world size)
  // Weights on the wire as fp8 E4M3 with an f32 scale per 128 elements (ops::quantize_fp8_blocks of the f32 master
  // shard), dequantized to the compute dtype after the gather; the masters, gradients and optimizer stay f32.
  bool gather_fp8 = false;
};

// Bytes this rank holds for training, by category (memory.json): measured from the buffers it holds (the peaks:
// the largest totals of transient buffers alive at once since reset_peaks()), or predicted by the formula.
struct FsdpMemory {
  uint64_t parameters = 0;         // f32 master weights kept (this rank's shards; all of them under no_shard)
  uint64_t compute_copies = 0;     // bf16 copies of them (bf16 mode)
  uint64_t gradients = 0;          // f32 gradients kept (shards; all under no_shard)
  uint64_t optimizer = 0;          // AdamW's m and v of the trainable elements kept
  uint64_t gathered_peak = 0;      // full unit weights gathered at once (the compute copies FSDP makes)
  uint64_t grad_buffers_peak = 0;  // full unit gradients alive at once (before their reduce-scatter)
  uint64_t comm_buffers_peak = 0;  // reduce-scatter staging (bf16 wire buffers, the accumulation scratch)
  uint64_t total() const {
    return parameters + compute_copies + gradients + optimizer + gathered_peak + grad_buffers_peak + comm_buffers_peak;
  }
  std::string to_json() const;  // {"parameters": ..., ..., "total": ...}
};

// One unit's flat layout: where each parameter (and pack) lies in its flat buffer.
struct FsdpUnitLayout {
  std::string name;
  std::vector<Param*> params;          // in the store's order
  std::vector<int64_t> param_offsets;  // each parameter's first element in the flat buffer
  std::vector<Shape> shapes;
  std::vector<ParamPack*> packs;
  std::vector<int64_t> pack_offsets;
  int64_t numel = 0, padded = 0, shard = 0;  // elements; padded to a multiple of the world size; per rank
  bool trainable = true;
};

// A piece of a parameter held by one rank: elements [begin, begin + numel) of its flattened values.
struct ShardPiece {
  int rank = 0;
  int64_t begin = 0, numel = 0;
};

class Fsdp final : public UnitHooks {
 public:
  // Takes over `model`'s parameters (initialized or loaded on every rank alike): keeps this rank's shards and, for
  // the sharded strategies, frees the full buffers. The hooks stay installed until destruction.
  static Expected<std::unique_ptr<Fsdp>> create(VlmModel& model, dist::Communicator& comm, const FsdpOptions& options);
  ~Fsdp() override;

  FsdpStrategy strategy() const { return options_.strategy; }
  const FsdpOptions& options() const { return options_; }
  bool sharded() const { return options_.strategy != FsdpStrategy::no_shard; }
  int rank() const { return comm_.rank(); }
  int world() const { return comm_.size(); }
  // The ranks the units are split over and this rank's place among them: the world, or (hybrid_shard) its shard
  // group; replica() is the group's index (0: the group that writes sharded checkpoints).
  int shard_rank() const { return shard_comm_->rank(); }
  int shard_world() const { return shard_comm_->size(); }
  int replica() const { return rank() / shard_world(); }
  const std::vector<FsdpUnitLayout>& units() const { return units_; }
  VlmModel& model() { return model_; }
  dist::Communicator& comm() { return comm_; }
  // Refreshes the bf16 compute copies from the f32 masters this rank holds (after loading them).
  void sync_compute();

  // The parameters AdamW updates: this rank's pieces of the trainable parameters (1-D, named as the parameter), or
  // the model's own parameters under no_shard.
  std::vector<Param*> optimizer_params();
  // Each parameter's pieces over the ranks (empty pieces left out), as this layout splits them.
  std::vector<ShardPiece> pieces_of(const Param& full) const;
  // The piece of parameter `segment` (an optimizer_params() entry) this rank holds: its first element.
  int64_t segment_begin(const Param& segment) const;
  // The full parameter a segment belongs to.
  const Param& segment_param(const Param& segment) const;

  // Step structure. zero_grads at the step's start; begin/end around every micro-batch, also one this rank has no
  // samples for (end then replays the whole schedule); end returns the first collective error.
  void zero_grads();
  void begin_micro_batch(bool last_of_step);
  Status end_micro_batch();
  // The all-reduce of the gradient norm's sum of squares (f64 [1]) for AdamW (no-op under no_shard).
  Status reduce_norm(Tensor& norm_sq);
  Status status() const { return error_; }

  // Every unit's full weights on every rank (a collective), the hooks off: for evaluation and anything else that
  // reads the whole model; end_full_weights() frees them again.
  Status begin_full_weights();
  void end_full_weights();

  // Per-parameter sums of squares of the trainable weights and gradients over all ranks (a collective), in the
  // store's order, for the norms histograms.
  Status param_sums_of_squares(std::vector<double>& weights, std::vector<double>& grads);
  // Measured: `optimizer_bytes` is AdamW::state_bytes().
  FsdpMemory memory(uint64_t optimizer_bytes) const;
  // The formula, from the units' sizes alone (docs/fsdp.md): with P_u a unit's padded elements, S_u = P_u / W, b the
  // gathered dtype's bytes: parameters 4 sum S_u, gradients 4 sum_trainable S_u, optimizer 8 sum_trainable S_u,
  // gathered peak b max(P_u + P_next) over consecutive units of the forward and of the backward (b max P_u without
  // prefetch; b sum P_u under shard_grad_op: the whole forward stays gathered). Reductions overlap the next unit's
  // backward (with prefetch), so their buffers peak over consecutive units u, v of the backward's reduction order
  // (a single unit without prefetch): f32 gradients 4 max(P_u + P_v), staging 4 max(S_u + S_v) with grad_accum > 1;
  // bf16 on the wire: gradient buffers 4 max P_u, staging max(2 P_u + 2 S_u + 2 P_v + 2 S_v) (+ 4 max S_u with
  // grad_accum > 1); gather_fp8 adds (S_u + 4 ceil(S_u / 128)) (W + 1) of the largest unit, twice with prefetch
  // (codes and scales in flight); no_shard: the model's own tensors (4 N each for weights and gradients, 8 N_trainable for the
  // optimizer), nothing gathered or staged.
  FsdpMemory memory_formula(int grad_accum) const;
  // {"strategy", "world_size", "units": [{"name", "numel", "padded", "trainable"}]}
  std::string layout_json() const;
  void reset_peaks();
  // The collectives in flight and, with trace(true), every gather, reduction, use and free in order (tests).
  dist::CollectiveSchedule& collectives() { return collectives_; }

  // UnitHooks.
  void acquire(int unit, UnitUse use) override;
  void release(int unit, UnitUse use) override;

 private:
  struct UnitState {
    Tensor shard_value, shard_grad, shard_compute;  // [shard] this rank's f32 masters, f32 gradients, bf16 copies
    Tensor full_weights, full_grads;                // [padded] while gathered / while its backward runs
    int weight_refs = 0, grad_refs = 0;
    bool resident = false;
    bool grad_written = false;  // this step's first reduction overwrites the shard, later ones add
  };
  struct Segment {
    int unit = 0;
    const Param* full = nullptr;
    int64_t begin = 0;  // within the parameter's flattened values
  };

  Fsdp(VlmModel& model, dist::Communicator& comm, const FsdpOptions& options);
  Status build();
  void advance_to(const UnitEvent& event);
  void run_acquire(int unit, UnitUse use);
  void run_release(int unit, UnitUse use);
  // exact: the compute copies themselves even under gather_fp8 (evaluation, checkpoints' readers).
  void gather(int unit, bool exact);
  void free_weights(int unit);
  void alloc_grads(int unit);
  void reduce_grads(int unit);
  void file_reduction(int unit, std::vector<Expected<dist::WorkHandle>> issued, std::function<void()> then);
  StreamHandle compute_stream() const;
  void point_weights(int unit, const Tensor& full);
  void point_grads(int unit, const Tensor& full);
  void record(Status s);
  void track(uint64_t& current, uint64_t& peak, int64_t delta);

  VlmModel& model_;
  dist::Communicator& comm_;
  std::unique_ptr<dist::Communicator> shard_group_, replica_group_;  // hybrid_shard's sub-communicators
  FsdpOptions options_;
  dist::Communicator* shard_comm_;  // gathers and reduce-scatters: comm_, or the shard group
  std::vector<FsdpUnitLayout> units_;
  std::vector<UnitState> state_;
  std::deque<Param> segments_;  // optimizer_params() of the sharded strategies
  std::vector<Segment> segment_info_;
  std::vector<UnitEvent> schedule_;
  dist::CollectiveSchedule collectives_;
  size_t cursor_ = 0;
  bool last_micro_batch_ = true;
  Status error_;
  uint64_t gathered_ = 0, gathered_peak_ = 0, grad_buffers_ = 0, grad_buffers_peak_ = 0, staging_ = 0,
           staging_peak_ = 0;
};

}  // namespace vlm

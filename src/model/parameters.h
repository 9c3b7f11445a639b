// Named model parameters (Hugging Face tensor names) with their gradients, grouped by model part so the trainer
// can freeze parts and give them their own learning rates. Precision: every parameter keeps f32 master weights and
// an f32 gradient; in bf16 mode (the store's compute dtype is bf16, CUDA only) it also holds a bf16 `compute` copy
// that the forward/backward ops read, refreshed by the optimizer step (adamw with param_bf16) and by sync_compute().
#pragma once

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "core/philox.h"
#include "core/safetensors.h"
#include "core/tensor.h"

namespace vlm {

enum class ParamGroup { vision, projector, text };
const char* param_group_name(ParamGroup group);
Expected<ParamGroup> parse_param_group(const std::string& name);

struct Param {
  std::string name;   // e.g. "model.text_model.layers.0.self_attn.q_proj.weight"
  ParamGroup group;
  Tensor value;       // f32 master weights
  Tensor grad;        // f32, same shape; accumulated by backward passes
  bool decay = true;  // weight decay applies (false for norms, biases and embeddings of positions)
  bool trainable = true;
  Tensor compute;     // bf16 copy of `value` in bf16 mode; undefined in fp32 mode
  struct ParamPack* pack = nullptr;  // when packed: the buffers value/grad/compute are views into
  int64_t pack_offset = 0;           // ... starting at this element
  int unit = -1;                     // the sharding unit it belongs to (ParameterStore::begin_unit); -1: none

  // The weights the ops read: the compute copy when there is one, else the master weights.
  const Tensor& weight() const { return compute.defined() ? compute : value; }
  // compute = value rounded to the compute dtype (no-op in fp32 mode). Call after writing `value` directly.
  void sync_compute();
};

// Parameters stored back to back in one buffer each for value, grad and compute copy, so that layers sharing an
// input run one GEMM over all of them (e.g. the q, k, v projections: W = [W_q; W_k; W_v]). Each part stays its own
// Param (name, checkpoint, optimizer state, freezing); the pack only shares the memory.
struct ParamPack {
  Tensor value, grad, compute;  // 1-D, the parts concatenated in order; compute undefined in fp32 mode
  std::vector<Param*> parts;
  const Tensor& weight() const { return compute.defined() ? compute : value; }
  int64_t numel() const { return value.numel(); }
};

// One part of add_packed(): a parameter and the pack (index into the returned packs) whose buffers hold it.
struct PackPart {
  std::string name;
  Shape shape;
  bool decay = true;
  int pack = 0;
};

struct LoadPolicy;  // model/hf_weights.h

// Sharded training (FSDP, src/train) keeps each unit's weights (a transformer block, the embeddings, ...) gathered
// only while they are used and reduces its gradients as soon as they are complete. The model's parts declare the
// units (ParameterStore::begin_unit) and bracket every use of a unit with UnitScope, which calls the store's hooks
// when a trainer set them and does nothing otherwise.
enum class UnitUse {
  forward,    // reads the weights
  backward,   // reads the weights and accumulates (+=) into the gradients of its trainable parameters
  gradients,  // accumulates into the gradients only (the embedding's backward)
};
const char* unit_use_name(UnitUse use);

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  // Before the use: the unit's Param::value (and compute) hold its full weights, and for backward / gradients its
  // trainable parameters' Param::grad hold full-size buffers to accumulate into.
  virtual void acquire(int unit, UnitUse use) = 0;
  // After it: the weights may be freed, and the gradients (once the last use that writes them ends) reduced.
  virtual void release(int unit, UnitUse use) = 0;
};

class ParameterStore {
 public:
  // f32 (default) or bf16: the dtype of the weights the ops read, and so of every activation of the model. bf16
  // allocates the compute copies of the existing parameters (and of those added later) and fills them.
  void set_compute_dtype(DType dtype);
  DType compute_dtype() const { return compute_dtype_; }
  // Refreshes every compute copy from its master weights (after init or load; both call it themselves).
  void sync_compute();

  // Creates a parameter; pointers stay valid for the store's lifetime.
  Param* add(const std::string& name, ParamGroup group, const Shape& shape, bool decay, Device device);
  // Creates the parts in order (as add() would, one by one) with each part's buffers views into its pack; returns
  // the `num_packs` packs (pointers stay valid for the store's lifetime).
  std::vector<ParamPack*> add_packed(const std::vector<PackPart>& parts, int num_packs, ParamGroup group,
                                     Device device);
  // Parameters added from now on belong to unit `name` (the next unit id, returned).
  int begin_unit(const std::string& name);
  const std::vector<std::string>& unit_names() const { return unit_names_; }
  // Hooks called by UnitScope (null: none). Not owned.
  void set_unit_hooks(UnitHooks* hooks) { hooks_ = hooks; }
  UnitHooks* unit_hooks() const { return hooks_; }

  Param* find(const std::string& name);
  const Param* find(const std::string& name) const;
  std::deque<Param>& all() { return params_; }
  const std::deque<Param>& all() const { return params_; }
  int64_t numel(bool trainable_only = false) const;
  uint64_t grad_bytes() const;  // bytes held by the gradients

  void zero_grads();  // every gradient buffer, in one ops::zero_multi (a few launches on CUDA)
  // Initialization: weights ~ N(0, std^2) from one Philox stream per parameter (seeded by (seed, index)), so the
  // result does not depend on thread count or on which parameters exist after it. Norm weights = 1, biases = 0.
  void init_normal(uint64_t seed, float std);

  // Model weights as safetensors with the parameters' names. Shared (tied) tensors are written once.
  Status save(const std::string& path, const std::map<std::string, std::string>& metadata = {}) const;
  // Loads values by name (then refreshes the compute copies). Missing, extra and mis-shaped tensors are one
  // error listing them (model/hf_weights.h load_parameters), except the missing ones `policy` allows: those keep
  // their current values. What was loaded is logged.
  Status load(const std::string& path, const LoadPolicy& policy);
  Status load(const std::string& path);

 private:
  std::deque<Param> params_;
  std::deque<ParamPack> packs_;
  std::map<std::string, Param*> by_name_;
  DType compute_dtype_ = DType::f32;
  std::vector<std::string> unit_names_;
  UnitHooks* hooks_ = nullptr;
};

// Brackets one use of a unit (see UnitHooks): acquire now, release at the end of the scope (or at release()).
class UnitScope {
 public:
  UnitScope(const ParameterStore& store, int unit, UnitUse use) : hooks_(store.unit_hooks()), unit_(unit), use_(use) {
    if (hooks_) hooks_->acquire(unit_, use_);
  }
  ~UnitScope() { release(); }
  void release() {
    if (hooks_) hooks_->release(unit_, use_);
    hooks_ = nullptr;
  }
  UnitScope(const UnitScope&) = delete;
  UnitScope& operator=(const UnitScope&) = delete;

 private:
  UnitHooks* hooks_;
  int unit_;
  UnitUse use_;
};

}  // namespace vlm

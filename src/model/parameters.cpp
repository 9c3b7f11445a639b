// ParameterStore: creation, init, safetensors save/load.
#include "model/parameters.h"

#include "core/logging.h"
#include "kernels/ops.h"
#include "model/hf_weights.h"

namespace vlm {

const char* param_group_name(ParamGroup group) {
  switch (group) {
    case ParamGroup::vision: return "vision";
    case ParamGroup::projector: return "projector";
    case ParamGroup::text: return "text";
  }
  return "?";
}

Expected<ParamGroup> parse_param_group(const std::string& name) {
  if (name == "vision") return ParamGroup::vision;
  if (name == "projector") return ParamGroup::projector;
  if (name == "text") return ParamGroup::text;
  return invalid_argument("unknown model part '" + name + "' (vision, projector, text)");
}

const char* unit_use_name(UnitUse use) {
  switch (use) {
    case UnitUse::forward: return "forward";
    case UnitUse::backward: return "backward";
    case UnitUse::gradients: return "gradients";
  }
  return "?";
}

int ParameterStore::begin_unit(const std::string& name) {
  unit_names_.push_back(name);
  return static_cast<int>(unit_names_.size()) - 1;
}

void Param::sync_compute() {
  if (compute.defined()) ops::cast(compute, value);
}

namespace {
// The view of a pack buffer that holds part p.
Tensor part_view(const Tensor& buffer, const Param& p) {
  return buffer.slice(0, p.pack_offset, p.pack_offset + p.value.numel()).view(p.value.shape());
}
}  // namespace

void ParameterStore::set_compute_dtype(DType dtype) {
  VLM_CHECK(dtype == DType::f32 || dtype == DType::bf16, "parameters: compute dtype ", dtype_name(dtype),
            " is not supported (f32 or bf16)");
  compute_dtype_ = dtype;
  for (auto& pack : packs_)
    pack.compute = dtype == DType::f32 ? Tensor() : Tensor::empty({pack.numel()}, dtype, pack.value.device());
  for (auto& p : params_) {
    if (p.pack != nullptr) {
      p.compute = p.pack->compute.defined() ? part_view(p.pack->compute, p) : Tensor();
    } else {
      p.compute = dtype == DType::f32 ? Tensor() : Tensor::empty(p.value.shape(), dtype, p.value.device());
    }
  }
  sync_compute();
}

void ParameterStore::sync_compute() {
  for (auto& pack : packs_)
    if (pack.compute.defined()) ops::cast(pack.compute, pack.value);  // one pass over all the parts
  for (auto& p : params_)
    if (p.pack == nullptr) p.sync_compute();
}

std::vector<ParamPack*> ParameterStore::add_packed(const std::vector<PackPart>& parts, int num_packs,
                                                   ParamGroup group, Device device) {
  VLM_CHECK(num_packs > 0, "parameters: add_packed needs at least one pack");
  std::vector<int64_t> sizes(static_cast<size_t>(num_packs), 0);
  for (const PackPart& part : parts) {
    VLM_CHECK(part.pack >= 0 && part.pack < num_packs, "parameter '", part.name, "': pack ", part.pack,
              " out of range (", num_packs, " packs)");
    VLM_CHECK(!by_name_.count(part.name), "parameter '", part.name, "' added twice");
    sizes[static_cast<size_t>(part.pack)] += part.shape.numel();
  }
  std::vector<ParamPack*> packs;
  for (int i = 0; i < num_packs; ++i) {
    ParamPack& pack = packs_.emplace_back();
    const int64_t n = sizes[static_cast<size_t>(i)];
    pack.value = Tensor::zeros({n}, DType::f32, device);
    pack.grad = Tensor::zeros({n}, DType::f32, device);
    if (compute_dtype_ != DType::f32) pack.compute = Tensor::zeros({n}, compute_dtype_, device);
    packs.push_back(&pack);
  }
  std::vector<int64_t> offsets(static_cast<size_t>(num_packs), 0);
  for (const PackPart& part : parts) {
    ParamPack* pack = packs[static_cast<size_t>(part.pack)];
    Param p{part.name, group, Tensor(), Tensor(), part.decay, true, Tensor()};
    p.pack = pack;
    p.unit = unit_names_.empty() ? -1 : static_cast<int>(unit_names_.size()) - 1;
    p.pack_offset = offsets[static_cast<size_t>(part.pack)];
    offsets[static_cast<size_t>(part.pack)] += part.shape.numel();
    p.value = pack->value.slice(0, p.pack_offset, p.pack_offset + part.shape.numel()).view(part.shape);
    p.grad = part_view(pack->grad, p);
    if (pack->compute.defined()) p.compute = part_view(pack->compute, p);
    params_.push_back(std::move(p));
    pack->parts.push_back(&params_.back());
    by_name_[part.name] = &params_.back();
  }
  return packs;
}

Param* ParameterStore::add(const std::string& name, ParamGroup group, const Shape& shape, bool decay, Device device) {
  VLM_CHECK(!by_name_.count(name), "parameter '", name, "' added twice");
  params_.push_back(Param{name, group, Tensor::zeros(shape, DType::f32, device), Tensor::zeros(shape, DType::f32, device),
                          decay, true, Tensor()});
  Param* p = &params_.back();
  p->unit = unit_names_.empty() ? -1 : static_cast<int>(unit_names_.size()) - 1;
  if (compute_dtype_ != DType::f32) p->compute = Tensor::zeros(shape, compute_dtype_, device);
  by_name_[name] = p;
  return p;
}

Param* ParameterStore::find(const std::string& name) {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}
const Param* ParameterStore::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

int64_t ParameterStore::numel(bool trainable_only) const {
  int64_t n = 0;
  for (const auto& p : params_)
    if (!trainable_only || p.trainable) n += p.value.numel();
  return n;
}

uint64_t ParameterStore::grad_bytes() const {
  uint64_t n = 0;
  for (const auto& p : params_) n += p.grad.nbytes();
  return n;
}

void ParameterStore::zero_grads() {
  std::vector<Tensor> grads;  // every gradient buffer once: the packs', then the unpacked parameters'
  for (auto& pack : packs_) grads.push_back(pack.grad);
  for (auto& p : params_)
    if (p.pack == nullptr) grads.push_back(p.grad);
  ops::zero_multi(grads);
}

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool is_norm_weight(const std::string& name) {
  return name.find("norm") != std::string::npos && ends_with(name, ".weight");
}
}  // namespace

void ParameterStore::init_normal(uint64_t seed, float std) {
  uint64_t index = 0;
  for (auto& p : params_) {
    Tensor host = Tensor::empty(p.value.shape(), DType::f32);
    float* x = host.data<float>();
    const int64_t n = host.numel();
    if (ends_with(p.name, ".bias")) {
      for (int64_t i = 0; i < n; ++i) x[i] = 0.f;
    } else if (is_norm_weight(p.name)) {
      for (int64_t i = 0; i < n; ++i) x[i] = 1.f;
    } else {
      Philox rng(seed, index);
      for (int64_t i = 0; i < n; ++i) x[i] = rng.normal() * std;
    }
    p.value.copy_from(host);
    ++index;
  }
  sync_compute();
}

Status ParameterStore::save(const std::string& path, const std::map<std::string, std::string>& metadata) const {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& p : params_) tensors.emplace_back(p.name, p.value);
  return safetensors_save(path, tensors, metadata);
}

Status ParameterStore::load(const std::string& path) { return load(path, LoadPolicy{}); }

Status ParameterStore::load(const std::string& path, const LoadPolicy& policy) {
  VLM_ASSIGN_OR_RETURN(SafetensorsFile file, safetensors_load(path));
  return load_parameters(*this, file.tensors, policy, path);
}

}  // namespace vlm

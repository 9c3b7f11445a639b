// Checkpoint model/optimizer files in the replicated and sharded layouts, and range reads across them
// (see sharded_checkpoint.h).
#include "train/sharded_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace vlm {

namespace {

std::string shard_file(bool optimizer, int rank) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s_shard_%05d.safetensors", optimizer ? "optimizer" : "model", rank);
  return buf;
}

}  // namespace

Status write_model_and_optimizer(const std::string& dir, Fsdp& fsdp, const AdamW& opt) {
  const std::string step = std::to_string(opt.steps_taken());
  if (!fsdp.sharded()) {
    if (fsdp.rank() != 0) return Status();  // replicas: rank 0's copy is everyone's
    VLM_RETURN_IF_ERROR(fsdp.model().params().save(dir + "/model.safetensors", {{"format", "pt"}, {"step", step}}));
    return opt.save(dir + "/optimizer.safetensors");
  }
  // hybrid_shard: the shard groups hold the same shards; the first group's ranks write them, indexed by their place
  // in the group (the checkpoint reads as a full_shard one of the group's size).
  if (fsdp.replica() != 0) return Status();
  const int shard = fsdp.shard_rank();
  std::vector<std::pair<std::string, Tensor>> values;
  for (Param* p : fsdp.optimizer_params()) values.emplace_back(p->name, p->value);
  VLM_RETURN_IF_ERROR(safetensors_save(dir + "/" + shard_file(false, shard), values,
                                       {{"rank", std::to_string(shard)}, {"step", step}}));
  VLM_RETURN_IF_ERROR(opt.save(dir + "/" + shard_file(true, shard)));
  if (shard != 0) return Status();
  // The index: every rank's pieces follow from the layout, so rank 0 writes it without hearing from the others.
  nlohmann::json j;
  j["format"] = "vlm-fsdp-sharded";
  j["world_size"] = fsdp.shard_world();
  j["strategy"] = fsdp_strategy_name(fsdp.strategy());
  j["optimizer_step"] = opt.steps_taken();
  j["files"] = nlohmann::json::array();
  for (int r = 0; r < fsdp.shard_world(); ++r) {
    j["files"].push_back(shard_file(false, r));
    j["files"].push_back(shard_file(true, r));
  }
  nlohmann::json params = nlohmann::json::array();
  for (const FsdpUnitLayout& u : fsdp.units()) {
    for (size_t i = 0; i < u.params.size(); ++i) {
      nlohmann::json e;
      e["name"] = u.params[i]->name;
      e["unit"] = u.name;
      e["shape"] = u.shapes[i].to_vector();
      e["trainable"] = u.params[i]->trainable;
      e["pieces"] = nlohmann::json::array();
      for (const ShardPiece& piece : fsdp.pieces_of(*u.params[i]))
        e["pieces"].push_back({{"rank", piece.rank}, {"begin", piece.begin}, {"numel", piece.numel}});
      params.push_back(e);
    }
  }
  j["params"] = params;
  const std::string text = j.dump(1) + "\n";
  return write_file_atomic(dir + "/" + kFsdpIndexFile, text.data(), text.size());
}

Status save_checkpoint_all_ranks(CheckpointManager& ckpt, int64_t step, Fsdp& fsdp, const AdamW& opt,
                                 const std::function<Status(const std::string& dir)>& lead_files) {
  dist::Communicator& comm = fsdp.comm();
  auto contents = [&](const std::string& dir) -> Status {
    VLM_RETURN_IF_ERROR(write_model_and_optimizer(dir, fsdp, opt));
    return comm.rank() == 0 ? lead_files(dir) : Status();
  };
  if (comm.rank() == 0) {
    return ckpt.save(step, [&](const std::string& dir) -> Status {
      VLM_RETURN_IF_ERROR(comm.barrier().with_context("checkpoint: staging folder created"));
      VLM_RETURN_IF_ERROR(contents(dir));
      return comm.barrier().with_context("checkpoint: every rank's files written");
    });
  }
  VLM_RETURN_IF_ERROR(comm.barrier().with_context("checkpoint: staging folder created"));
  VLM_RETURN_IF_ERROR(contents(ckpt.staging_dir(step)));
  return comm.barrier().with_context("checkpoint: every rank's files written");
}

Expected<CheckpointTensors> CheckpointTensors::open(const std::string& dir) {
  CheckpointTensors t;
  t.dir_ = dir;
  Expected<std::vector<uint8_t>> bytes = read_file_bytes(dir + "/" + kFsdpIndexFile);
  if (!bytes.ok()) {  // replicated layout
    VLM_ASSIGN_OR_RETURN(const SafetensorsFile* model, t.file(false, 0));
    for (const auto& [name, tensor] : model->tensors) {
      t.names_.push_back(name);
      t.shapes_[name] = tensor.shape();
      t.pieces_[name] = {{0, 0, tensor.numel()}};
    }
    VLM_ASSIGN_OR_RETURN(const SafetensorsFile* opt, t.file(true, 0));
    auto it = opt->metadata.find("step");
    if (it == opt->metadata.end()) return parse_error(dir + "/optimizer.safetensors: metadata has no 'step'");
    t.optimizer_step_ = std::stoll(it->second);
    return t;
  }
  const std::string where = dir + "/" + kFsdpIndexFile;
  auto j = nlohmann::json::parse(bytes->begin(), bytes->end(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("params") || !j.contains("world_size"))
    return parse_error(where + ": not a sharded checkpoint index (needs world_size and params)");
  try {
    t.sharded_ = true;
    t.world_size_ = j["world_size"].get<int>();
    t.strategy_ = j.value("strategy", "");
    t.optimizer_step_ = j.value("optimizer_step", int64_t{0});
    if (t.world_size_ < 1) return parse_error(str(where, ": world_size ", t.world_size_));
    for (const auto& e : j["params"]) {
      const std::string name = e["name"].get<std::string>();
      t.names_.push_back(name);
      t.shapes_[name] = Shape(e["shape"].get<std::vector<int64_t>>());
      int64_t covered = 0;
      for (const auto& piece : e["pieces"]) {
        Piece p{piece["rank"].get<int>(), piece["begin"].get<int64_t>(), piece["numel"].get<int64_t>()};
        if (p.rank < 0 || p.rank >= t.world_size_ || p.begin != covered || p.numel <= 0)
          return parse_error(str(where, ": ", name, ": pieces do not tile the parameter (rank ", p.rank, ", begin ",
                                 p.begin, ", numel ", p.numel, ")"));
        covered += p.numel;
        t.pieces_[name].push_back(p);
      }
      if (covered != t.shapes_[name].numel())
        return parse_error(
            str(where, ": ", name, ": pieces hold ", covered, " of ", t.shapes_[name].numel(), " elements"));
    }
  } catch (const nlohmann::json::exception& e) {
    return parse_error(where + ": " + e.what());
  }
  return t;
}

const Shape* CheckpointTensors::shape(const std::string& name) const {
  auto it = shapes_.find(name);
  return it == shapes_.end() ? nullptr : &it->second;
}

Expected<const SafetensorsFile*> CheckpointTensors::file(bool optimizer, int rank) {
  auto& slot = files_[{optimizer, rank}];
  if (!slot) {
    const std::string path = dir_ + "/" +
                             (sharded_    ? shard_file(optimizer, rank)
                              : optimizer ? "optimizer.safetensors"
                                          : "model.safetensors");
    VLM_ASSIGN_OR_RETURN(SafetensorsFile f, safetensors_load(path));
    slot = std::make_shared<SafetensorsFile>(std::move(f));
  }
  return slot.get();
}

Status CheckpointTensors::read(const std::string& name, const std::string& suffix, int64_t begin, Tensor& out) {
  auto it = pieces_.find(name);
  if (it == pieces_.end()) return not_found(str(dir_, ": the checkpoint holds no parameter ", name));
  const int64_t end = begin + out.numel();
  if (begin < 0 || end > shapes_[name].numel())
    return invalid_argument(str(dir_, ": ", name, " has ", shapes_[name].numel(), " elements; elements [", begin, ", ",
                                end, ") asked for"));
  Tensor host = out.device().is_cpu() ? out : Tensor::empty(out.shape(), DType::f32);
  float* dst = host.data<float>();
  const bool optimizer = !suffix.empty();
  for (const Piece& p : it->second) {
    const int64_t from = std::max(begin, p.begin), to = std::min(end, p.begin + p.numel);
    if (from >= to) continue;
    VLM_ASSIGN_OR_RETURN(const SafetensorsFile* f, file(optimizer, p.rank));
    auto t = f->tensors.find(name + suffix);
    if (t == f->tensors.end())
      return not_found(
          str(dir_, ": ", sharded_ ? shard_file(optimizer, p.rank) : "", " holds no tensor ", name, suffix));
    if (t->second.dtype() != DType::f32 || t->second.numel() != p.numel)
      return parse_error(str(dir_, ": ", name, suffix, " of rank ", p.rank, " is ", t->second.describe(),
                             ", expected f32 of ", p.numel, " elements"));
    const float* src = t->second.data<float>();
    std::copy(src + (from - p.begin), src + (to - p.begin), dst + (from - begin));
  }
  if (!out.device().is_cpu()) out.copy_from(host);
  return Status();
}

Status load_model_and_optimizer(const std::string& dir, Fsdp& fsdp, AdamW& opt) {
  VLM_ASSIGN_OR_RETURN(CheckpointTensors ckpt, CheckpointTensors::open(dir));
  // Weights: this rank's pieces (sharded) or every parameter whole (no_shard).
  for (Param* p : fsdp.optimizer_params()) {
    const Param& full = fsdp.segment_param(*p);
    const Shape* shape = ckpt.shape(full.name);
    if (shape == nullptr) return not_found(str(dir, ": the checkpoint holds no parameter ", full.name));
    const int64_t want = fsdp.sharded() ? [&] {
      int64_t n = 1;
      for (const FsdpUnitLayout& u : fsdp.units())
        for (size_t i = 0; i < u.params.size(); ++i)
          if (u.params[i] == &full) n = u.shapes[i].numel();
      return n;
    }() : p->value.numel();
    if (shape->numel() != want)
      return invalid_argument(str(dir, ": ", full.name, " has shape ", shape->to_string(), " in the checkpoint, ", want,
                                  " elements in the model"));
    Tensor flat = p->value.view({p->value.numel()});
    VLM_RETURN_IF_ERROR(ckpt.read(full.name, "", fsdp.segment_begin(*p), flat));
  }
  fsdp.sync_compute();
  return opt.load_from(
      [&](const Param& p, Tensor& m, Tensor& v) -> Status {
        const int64_t begin = fsdp.segment_begin(p);
        Tensor fm = m.view({m.numel()}), fv = v.view({v.numel()});
        VLM_RETURN_IF_ERROR(ckpt.read(p.name, ".exp_avg", begin, fm));
        return ckpt.read(p.name, ".exp_avg_sq", begin, fv);
      },
      ckpt.optimizer_step());
}

Status load_checkpoint_weights(const std::string& dir, ParameterStore& params) {
  VLM_ASSIGN_OR_RETURN(CheckpointTensors ckpt, CheckpointTensors::open(dir));
  for (Param& p : params.all()) {
    const Shape* shape = ckpt.shape(p.name);
    if (shape == nullptr) return not_found(str(dir, ": the checkpoint holds no parameter ", p.name));
    if (*shape != p.value.shape())
      return invalid_argument(str(dir, ": ", p.name, " has shape ", shape->to_string(), " in the checkpoint, ",
                                  p.value.shape().to_string(), " in the model"));
    Tensor flat = p.value.view({p.value.numel()});
    VLM_RETURN_IF_ERROR(ckpt.read(p.name, "", 0, flat));
  }
  params.sync_compute();
  return Status();
}

}  // namespace vlm

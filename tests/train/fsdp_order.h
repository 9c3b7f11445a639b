// The order FSDP's collectives must keep, checked on its CollectiveSchedule trace (the same code path on the CPU and
// the GPU): per micro-batch, every use of a unit's weights comes after its gather was joined and before its free;
// with prefetch, the next unit's gather is issued before the current unit computes; a buffer is freed only when no
// use is open; every trainable unit's gradients are reduced exactly once (no_shard: in the step's last micro-batch
// only), with overlap each reduction stays in flight until the next one is issued, and every collective is joined
// before the micro-batch ends.
#pragma once

#include <string>
#include <vector>

#include "core/device.h"
#include "train/fsdp.h"
#include "train/train_config.h"

namespace vlm::testing {

// An empty string when `events` (Fsdp::collectives().events() over whole micro-batches) keeps that order, else the
// first violation, named.
std::string check_fsdp_order(const std::vector<dist::ScheduleEvent>& events, const Fsdp& fsdp, bool prefetch);

// Runs `micro_batches` micro-batches (the last one ends the step) of this rank's share of `config`'s training data
// through `fsdp`'s model with the trace on, and returns check_fsdp_order of them.
std::string traced_micro_batches(const RunConfig& config, Fsdp& fsdp, int micro_batches, int rank, int world);

}  // namespace vlm::testing

// Test helpers: set one of the attention's process-wide choices (ops::set_attention_deterministic,
// ops::set_attention_flash) for a scope and restore the previous choice on exit, so a test that needs one attention
// path leaves the process default as it found it.
#pragma once

#include "kernels/ops.h"

namespace vlm::testing {

template <bool (*Get)(), void (*Set)(bool)>
class AttentionSwitchScope {
 public:
  explicit AttentionSwitchScope(bool on) : was_(Get()) { Set(on); }
  ~AttentionSwitchScope() { Set(was_); }
  AttentionSwitchScope(const AttentionSwitchScope&) = delete;
  AttentionSwitchScope& operator=(const AttentionSwitchScope&) = delete;

 private:
  bool was_;
};

using AttentionDeterminismScope =
    AttentionSwitchScope<&ops::attention_deterministic, &ops::set_attention_deterministic>;
using AttentionFlashScope = AttentionSwitchScope<&ops::attention_flash, &ops::set_attention_flash>;

}  // namespace vlm::testing

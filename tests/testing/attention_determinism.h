// Test helper: sets ops::set_attention_deterministic for a scope and restores the previous choice on exit, so a
// test that needs the deterministic (or the fast) attention backward leaves the process default as it found it.
#pragma once

#include "kernels/ops.h"

namespace vlm::testing {

class AttentionDeterminismScope {
 public:
  explicit AttentionDeterminismScope(bool on) : was_(ops::attention_deterministic()) {
    ops::set_attention_deterministic(on);
  }
  ~AttentionDeterminismScope() { ops::set_attention_deterministic(was_); }
  AttentionDeterminismScope(const AttentionDeterminismScope&) = delete;
  AttentionDeterminismScope& operator=(const AttentionDeterminismScope&) = delete;

 private:
  bool was_;
};

}  // namespace vlm::testing

// Test helpers: set ops::set_attention_deterministic (or ops::set_attention_flash) for a scope and restore the previous
// choice on exit, so a test that needs one attention path leaves the process default as it found it.
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

class AttentionFlashScope {
 public:
  explicit AttentionFlashScope(bool on) : was_(ops::attention_flash()) { ops::set_attention_flash(on); }
  ~AttentionFlashScope() { ops::set_attention_flash(was_); }
  AttentionFlashScope(const AttentionFlashScope&) = delete;
  AttentionFlashScope& operator=(const AttentionFlashScope&) = delete;

 private:
  bool was_;
};

}  // namespace vlm::testing

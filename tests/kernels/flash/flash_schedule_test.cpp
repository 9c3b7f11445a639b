// The Hopper forward's mixed key steps (kernels/cuda/flash/flash_schedule.h), checked on the host. Causal: over every
// tile of many (q_len, k_len) pairs, the steps run from the diagonal's block down, cover the tile's keys exactly once
// with no partial step, are wide exactly at steps 1 .. 4w (the kernel's loops assume it), and a wide step's keys are
// visible to every row of the tile (the kernel skips their mask). Non-causal rows: the steps run from the top down to
// key 0, narrow first, then wide; only the first may reach past the keys' end (it has the mask), and by under 32 keys
// whenever the row has wide steps.
#include <gtest/gtest.h>

#include <algorithm>

#include "kernels/cuda/flash/flash_schedule.h"

namespace vlm::flash {
namespace {

constexpr int kNarrow = 128, kWide = 160, kTileRows = 128;

TEST(FlashMixedSchedule, StepsCoverEachTileOnceAndWideStepsNeverMask) {
  int tiles_with_wide_steps = 0;
  for (int q_len : {1, 127, 128, 129, 640, 641, 700, 769, 897, 1000, 1280, 1408, 2048, 4000})
    for (int shift : {-256, -128, -100, 0, 1, 50, 128, 256, 300}) {
      const int k_len = q_len + shift;
      if (k_len < 1) continue;
      const int diag = k_len - q_len;
      for (int m0 = 0; m0 < q_len; m0 += kTileRows) {
        SCOPED_TRACE(::testing::Message() << "q_len " << q_len << " k_len " << k_len << " m0 " << m0);
        // As the kernel's tile_at: the keys the tile's last row sees, in narrow blocks.
        const int m_rows = std::min(kTileRows, q_len - m0);
        const int n_end = std::max(0, std::min(k_len, m0 + m_rows + diag));
        const int n_blocks = (n_end + kNarrow - 1) / kNarrow;
        const int steps = mixed_steps(n_blocks, diag, kNarrow), w = mixed_wide_groups(n_blocks, diag, kNarrow);
        if (n_blocks == 0) {
          EXPECT_EQ(steps, 0);
          continue;
        }
        tiles_with_wide_steps += w > 0;
        int next_end = n_blocks * kNarrow;  // steps are contiguous, from the top down
        for (int i = 0; i < steps; ++i) {
          bool wide = false;
          const int n0 = mixed_key_step(n_blocks, diag, i, kNarrow, kWide, &wide);
          EXPECT_EQ(wide, i >= 1 && i <= 4 * w) << "step " << i;
          const int width = wide ? kWide : kNarrow;
          EXPECT_EQ(n0 + width, next_end) << "step " << i;
          next_end = n0;
          if (!wide) continue;
          // Every key of a wide step is before the keys' end and visible to every row of the tile.
          EXPECT_LE(n0 + width, k_len) << "step " << i;
          EXPECT_LE(n0 + width - 1, m0 + diag) << "step " << i << ": the tile's first row must see it all";
        }
        EXPECT_EQ(next_end, 0) << "the steps end at key 0";
      }
    }
  EXPECT_GT(tiles_with_wide_steps, 50);  // the shapes above do exercise the wide steps
}

TEST(FlashMixedSchedule, RowStepsCoverTheKeysWithOnlyTheFirstPartial) {
  int rows_with_wide_steps = 0;
  for (int k_len = 1; k_len <= 20000; k_len += k_len < 1200 ? 1 : 37) {
    SCOPED_TRACE(::testing::Message() << "k_len " << k_len);
    const int lead = row_mixed_lead(k_len, kNarrow, kWide), w = row_mixed_wide(k_len, kNarrow, kWide);
    ASSERT_GE(lead, 1);
    ASSERT_GE(w, 0);
    rows_with_wide_steps += w > 0;
    const int top = lead * kNarrow + w * kWide;
    ASSERT_GE(top, k_len) << "the steps cover every key";
    ASSERT_LT(top - k_len, kNarrow) << "the first step holds a key";
    if (w > 0) {
      EXPECT_LT(top - k_len, 32) << "rows with wide steps waste under 32 keys";
      EXPECT_LE(lead, 5);
    }
    int next_end = top;
    for (int i = 0; i < lead + w; ++i) {
      bool wide = false;
      const int n0 = row_mixed_key_step(k_len, i, kNarrow, kWide, &wide);
      EXPECT_EQ(wide, i >= lead) << "step " << i;
      const int width = wide ? kWide : kNarrow;
      EXPECT_EQ(n0 + width, next_end) << "step " << i;
      if (i > 0) {
        EXPECT_LE(n0 + width, k_len) << "only step 0 may be partial: step " << i;
      }
      next_end = n0;
    }
    EXPECT_EQ(next_end, 0) << "the steps end at key 0";
  }
  EXPECT_EQ(row_mixed_lead(0, kNarrow, kWide), 0);
  // The rows the forward's wide steps are for: one to five narrow steps, then wide ones, nothing partial.
  for (int k_len : {2048, 4096, 8192, 16384}) {
    const int lead = row_mixed_lead(k_len, kNarrow, kWide);
    EXPECT_EQ(lead * kNarrow + row_mixed_wide(k_len, kNarrow, kWide) * kWide, k_len) << k_len;
  }
  EXPECT_EQ(row_mixed_lead(2048, kNarrow, kWide), 1);
  EXPECT_EQ(row_mixed_lead(4096, kNarrow, kWide), 2);
  EXPECT_GT(rows_with_wide_steps, 400);
}

}  // namespace
}  // namespace vlm::flash

// The Hopper forward's mixed causal key steps (kernels/cuda/flash/flash_schedule.h), checked on the host over every
// tile of many (q_len, k_len) pairs: the steps run from the diagonal's block down, cover the tile's keys exactly once
// with no partial step, are wide exactly at steps 1 .. 4w (the kernel's loops assume it), and a wide step's keys are
// visible to every row of the tile (the kernel skips their mask).
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

}  // namespace
}  // namespace vlm::flash

// Key-step schedules of the Hopper forward that the host can check too (tests/kernels/flash/flash_schedule_test.cpp):
// plain header code, compiled for the device inside the kernel and for the host in the CPU tests.
//
// Mixed causal key steps (HopperFwdTile<128, true, true>): a query tile's keys [0, n_blocks * narrow) run from the
// last block (the diagonal's, `narrow` keys) down; below it, b = n_blocks - 1 blocks become b / 5 groups of four wide
// steps (4 x wide = 5 x narrow with wide = 160, narrow = 128, so none is partial) and b % 5 narrow steps. Wide steps
// are taken only where the causal mask ends inside the diagonal's block (diag a multiple of `narrow`), so they
// never mask.
#pragma once

#ifdef __CUDACC__
#define VLM_FLASH_HD __host__ __device__ __forceinline__
#else
#define VLM_FLASH_HD inline
#endif

namespace vlm::flash {

// Groups of four wide steps in a tile of n_blocks narrow blocks whose causal diagonal is offset by diag (k_len - q_len).
VLM_FLASH_HD int mixed_wide_groups(int n_blocks, int diag, int narrow) {
  return n_blocks > 0 && diag % narrow == 0 ? (n_blocks - 1) / 5 : 0;
}

// Key steps of such a tile.
VLM_FLASH_HD int mixed_steps(int n_blocks, int diag, int narrow) {
  return n_blocks - mixed_wide_groups(n_blocks, diag, narrow);
}

// Step i's first key; *wide says whether it spans `wide` keys (else `narrow`).
VLM_FLASH_HD int mixed_key_step(int n_blocks, int diag, int i, int narrow, int wide_keys, bool* wide) {
  const int b = n_blocks - 1, w = mixed_wide_groups(n_blocks, diag, narrow);
  *wide = i >= 1 && i <= 4 * w;
  if (i == 0) return b * narrow;
  return *wide ? b * narrow - wide_keys * i : (b - w - i) * narrow;
}

}  // namespace vlm::flash

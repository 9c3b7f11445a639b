// Key-step schedules of the Hopper forward that the host can check too (tests/kernels/flash/flash_schedule_test.cpp):
// plain header code, compiled for the device inside the kernel and for the host in the CPU tests.
//
// Mixed causal key steps (HopperFwdTile<128, true, true>): a query tile's keys [0, n_blocks * narrow) run from the
// last block (the diagonal's, `narrow` keys) down; below it, b = n_blocks - 1 blocks become b / 5 groups of four wide
// steps (4 x wide = 5 x narrow with wide = 160, narrow = 128, so none is partial) and b % 5 narrow steps. Wide steps
// are taken only where the causal mask ends inside the diagonal's block (diag a multiple of `narrow`), so they
// never mask.
//
// Mixed non-causal key steps (HopperFwdTile<128, false, true>): `lead` narrow steps from the top of the row, then
// wide steps down to key 0, with lead (1 to 5) chosen so that lead * narrow + wide * w is the row's length rounded up
// to 32: no step is partial except perhaps the first (whose mask handles a length that is not a multiple of 32),
// where a row of uniform wide steps wastes up to 128 keys of work on its last, partial one (1.5% at 2k-8k keys).
// Rows too short for that (under 128 * lead keys) take narrow steps only.
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

// Narrow steps at the top of a non-causal row of k_len keys (all of its steps when it has no wide ones).
VLM_FLASH_HD int row_mixed_lead(int k_len, int narrow, int wide_keys) {
  if (k_len <= 0) return 0;
  const int keys = (k_len + 31) / 32 * 32;
  for (int lead = 1; lead * narrow <= keys; ++lead)
    if ((keys - lead * narrow) % wide_keys == 0) return lead;
  return (k_len + narrow - 1) / narrow;
}

// Wide steps of such a row, given its lead (row_mixed_lead).
VLM_FLASH_HD int row_mixed_wide_after(int k_len, int lead, int narrow, int wide_keys) {
  return lead * narrow >= k_len ? 0 : ((k_len + 31) / 32 * 32 - lead * narrow) / wide_keys;
}
VLM_FLASH_HD int row_mixed_wide(int k_len, int narrow, int wide_keys) {
  return row_mixed_wide_after(k_len, row_mixed_lead(k_len, narrow, wide_keys), narrow, wide_keys);
}

// Step i's first key in such a row; *wide says whether it spans `wide_keys` keys (else `narrow`).
VLM_FLASH_HD int row_mixed_key_step(int k_len, int i, int narrow, int wide_keys, bool* wide) {
  const int lead = row_mixed_lead(k_len, narrow, wide_keys), w = row_mixed_wide_after(k_len, lead, narrow, wide_keys);
  *wide = i >= lead;
  return *wide ? (w - 1 - (i - lead)) * wide_keys : w * wide_keys + (lead - 1 - i) * narrow;
}

}  // namespace vlm::flash

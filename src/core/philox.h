// Philox4x32-10 counter-based RNG (Salmon et al. 2011), the generator cuRAND and PyTorch use on GPUs.
// A stream is (seed, subsequence); its state is a 128-bit counter, so it can be saved, restored and split
// deterministically (e.g. one subsequence per rank or per data worker).
#pragma once

#include <array>
#include <cstdint>

namespace vlm {

// The raw 10-round Philox block: 4 random u32 words for (counter, key).
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

struct PhiloxState {
  uint64_t seed = 0;
  uint64_t subsequence = 0;
  uint64_t offset = 0;  // how many u32 words were drawn
};

class Philox {
 public:
  explicit Philox(uint64_t seed = 0, uint64_t subsequence = 0);
  explicit Philox(const PhiloxState& state);

  uint32_t next_u32();
  uint64_t next_u64();
  float uniform();                       // [0, 1)
  float normal();                        // N(0, 1) via Box-Muller
  uint64_t uniform_int(uint64_t n);      // [0, n), unbiased
  PhiloxState state() const { return state_; }

 private:
  PhiloxState state_;
};

}  // namespace vlm

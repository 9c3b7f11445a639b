// `vlm bench decode`: the inference engine serving a batch of requests at once, each a 512-token prompt (the VLM
// shape: one image's tokens, then text) and 128 generated tokens, on random weights: the SmolLM2-135M text shape
// and the nanoVLM-222M VLM shape at batch 1, 32 and 128. Prints generated tokens/s, time to first token,
// inter-token latency p50/p99, KV bytes (allocated, held at the peak, and the slots of held blocks left unused: at the
// peak, and on average over the steps of an untimed rerun), how many sequences ran at once against how many the KV
// budget fits, cache hit rates, the CUDA graphs captured before each timed run (how many, how long: untimed, as the
// peers' compilation is) and the ratio to each PyTorch peer whose figures (bench/peers/decode_*.py, run in the same
// script on the same shapes) come from --peer.
#pragma once

namespace vlm::bench {

// argv[0] is the program or subcommand name. Returns the process exit code.
int bench_decode_main(int argc, char** argv);

}  // namespace vlm::bench

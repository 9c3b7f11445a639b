// `vlm bench attention`: our FlashAttention forward, backward and forward+backward TFLOP/s over the standard sweep
// (head dim 64 and 128, causal and not, seqlen 512..16k, batch * seqlen = 16k tokens, hidden 2048), with the
// PyTorch SDPA peer's figures (cuDNN and FlashAttention-2 backends, from bench/peers/attention_sdpa.py) read from a
// JSON file or measured by running that script, and the ratios printed.
#pragma once

namespace vlm::bench {

// argv[0] is the program or subcommand name. Returns a process exit code (0 = ok, 1 = failure, 2 = bad usage).
int bench_attention_main(int argc, char** argv);

}  // namespace vlm::bench

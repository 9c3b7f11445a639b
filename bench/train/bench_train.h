// `vlm bench train`: one training step of a model preset (default: the nanoVLM-222M shape) on the GPU, on synthetic
// inputs, with samples/s, model TFLOP/s, MFU, peak memory, and the PyTorch peer's figures (bench/peers/
// train_nanovlm.py, run in the same script) read from its JSON lines so the ratio is printed beside ours. Under a
// launch of several ranks, with --fsdp or on the CPU it runs the multi-rank benchmark instead (bench_train_ranks.h).
#pragma once

namespace vlm::bench {

// argv[0] is the program or subcommand name. Returns the process exit code.
int bench_train_main(int argc, char** argv);

}  // namespace vlm::bench

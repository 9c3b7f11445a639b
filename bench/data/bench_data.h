// `vlm bench data`: decode + resize (+ normalize, + tokenize) samples/s per core on JPEG shards of 256-512 px
// photos, ours (image_pipeline) beside Pillow (bench/peers/data_pillow.py, Debian's python3-pil) doing the same
// decode and resize on the same files in the same run, with the ratios; plus a breakdown of our time (decode at full
// and DCT scale, resize + normalize) and our multi-thread scaling. With --loader: the training loader instead
// (bench_loader.h).
#pragma once

namespace vlm::bench {

// argv[0] is the program or subcommand name. Returns a process exit code (0 = ok, 1 = failure, 2 = bad usage).
int bench_data_main(int argc, char** argv);

}  // namespace vlm::bench

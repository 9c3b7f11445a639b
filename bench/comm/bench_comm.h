// `vlm bench comm`: the bus bandwidth of all_gather, reduce_scatter and all_reduce through the Communicator (NCCL on
// GPUs, MPI on CPUs, a world of one alone) at message sizes from --min-bytes to --max-bytes (powers of two), bf16 and
// f32, with nccl-tests' definitions: algbw = bytes / time (bytes: the full buffer, the gathered output or the
// scattered input), busbw = algbw * (n - 1) / n for all_gather and reduce_scatter, algbw * 2 (n - 1) / n for
// all_reduce. The PyTorch peer (bench/peers/comm_peer.py, torch.distributed over NCCL, run in the same script) is read
// from its JSON lines with --peer and the ratio printed beside ours.
#pragma once

namespace vlm::bench {

// argv[0] is the program or subcommand name. Returns the process exit code.
int bench_comm_main(int argc, char** argv);

}  // namespace vlm::bench

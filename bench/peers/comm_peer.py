#!/usr/bin/env python3
"""PyTorch peer of `vlm bench comm`: torch.distributed's NCCL collectives at the same sizes, as a user calls them.

all_gather_into_tensor, reduce_scatter_tensor (sum) and all_reduce (sum) of the same buffers as ours: the full
buffer's bytes from --min-bytes to --max-bytes, doubling, each rank's slice a whole number of elements (the buffer is
world_size slices, a few bytes under the size when the world size does not divide it). Per size: one call on known
values checked (rank r contributes r + 1), --warmup untimed calls, then --iters calls issued back to back and one
torch.cuda.synchronize() (nccl-tests' way); rank 0's time. algbw = bytes / time; busbw = algbw * (n - 1) / n for the
gather and the scatter, algbw * 2 (n - 1) / n for all_reduce (nccl-tests' definitions).

Launch: torchrun --nproc_per_node N bench/peers/comm_peer.py [--min-bytes 1M] [--max-bytes 1G] [--dtypes bf16,f32]
        [--collectives all_gather,reduce_scatter,all_reduce] [--warmup 5] [--iters 20] [--out FILE]
Rank 0 prints the same table as `vlm bench comm` and writes one JSON line per collective, dtype and size to --out:
{"impl": "pytorch", "collective", "dtype", "bytes", "ranks", "time_us", "algbw_gbps", "busbw_gbps"}, which
`vlm bench comm --peer FILE` reads to print the ratio.
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist

DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32, "fp32": torch.float32}


def parse_bytes(text: str) -> int:
    units = {"K": 10, "k": 10, "M": 20, "G": 30}
    t = text.removesuffix("iB").removesuffix("B")
    if t and t[-1] in units:
        return int(t[:-1]) << units[t[-1]]
    return int(t)


def bus_factor(what: str, n: int) -> float:
    return 2.0 * (n - 1) / n if what == "all_reduce" else (n - 1) / n


def call(what: str, full: torch.Tensor, part: torch.Tensor):
    if what == "all_gather":
        dist.all_gather_into_tensor(full, part)
    elif what == "reduce_scatter":
        dist.reduce_scatter_tensor(part, full, op=dist.ReduceOp.SUM)
    else:
        dist.all_reduce(full, op=dist.ReduceOp.SUM)


def check(what: str, full: torch.Tensor, part: torch.Tensor, rank: int, n: int, dtype: str):
    part.fill_(rank + 1)
    full.fill_(rank + 1)
    call(what, full, part)
    torch.cuda.synchronize()
    total = n * (n + 1) // 2
    if what == "all_gather":
        want = torch.arange(1, n + 1, device=full.device, dtype=full.dtype).repeat_interleave(part.numel())
        ok = torch.equal(full, want)
    elif what == "reduce_scatter":
        ok = bool((part == total).all())
    else:
        ok = bool((full == total).all())
        full.zero_()  # repeated sums of zeros stay finite
    if not ok:
        raise SystemExit(f"rank {rank}: {what} of {full.numel()} {dtype} elements gave wrong values")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--min-bytes", default="1M")
    ap.add_argument("--max-bytes", default="1G")
    ap.add_argument("--dtypes", default="bf16,f32")
    ap.add_argument("--collectives", default="all_gather,reduce_scatter,all_reduce")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank, n = dist.get_rank(), dist.get_world_size()
    lead = rank == 0
    out = open(args.out, "w") if lead and args.out else None
    if lead:
        print(f"comm_peer: torch {torch.__version__} NCCL {'.'.join(map(str, torch.cuda.nccl.version()))} on {n} "
              f"rank(s), {args.warmup} warm-up + {args.iters} timed calls per size, rank 0's time")
        print(f"{'collective':<15} {'dtype':<5} {'bytes':>12} {'time us':>11} {'algbw GB/s':>11} {'busbw GB/s':>11}")
    lo, hi = parse_bytes(args.min_bytes), parse_bytes(args.max_bytes)
    for what in args.collectives.split(","):
        for dname in args.dtypes.split(","):
            dtype = DTYPES[dname]
            label = "bf16" if dtype == torch.bfloat16 else "f32"
            elt = torch.tensor([], dtype=dtype).element_size()
            size = lo
            while size <= hi:
                shard = max(1, size // elt // n)
                full = torch.zeros(shard * n, dtype=dtype, device="cuda")
                part = torch.zeros(shard, dtype=dtype, device="cuda")
                check(what, full, part, rank, n, label)
                for _ in range(args.warmup):
                    call(what, full, part)
                torch.cuda.synchronize()
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(args.iters):
                    call(what, full, part)
                torch.cuda.synchronize()
                s = (time.perf_counter() - t0) / args.iters
                nbytes = full.numel() * elt
                algbw = nbytes / s / 1e9
                busbw = algbw * bus_factor(what, n)
                if lead:
                    print(f"{what:<15} {label:<5} {nbytes:>12} {s * 1e6:>11.1f} {algbw:>11.2f} {busbw:>11.2f}",
                          flush=True)
                    if out:
                        out.write(json.dumps({"impl": "pytorch", "backend": "nccl", "collective": what, "dtype": label,
                                              "bytes": nbytes, "ranks": n, "time_us": s * 1e6, "algbw_gbps": algbw,
                                              "busbw_gbps": busbw}) + "\n")
                        out.flush()
                del full, part
                size *= 2
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

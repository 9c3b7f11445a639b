#!/usr/bin/env python3
"""PyTorch scaled_dot_product_attention, the peer of `vlm bench attention`.

Measures the cuDNN and FlashAttention-2 backends (torch.nn.attention.sdpa_kernel) on the shapes of our benchmark:
bf16, [batch, seqlen, heads, head_dim] tensors viewed as [b, h, s, d] (our packed layout), batch * seqlen = tokens,
heads * head_dim = hidden. FLOPs: fwd = 4 * b * h * s^2 * d (halved when causal), bwd = 2.5 * fwd, fwd+bwd = 3.5 * fwd.
Times are medians of --iters rounds after --warmup, with CUDA events; each round times the forward, the backward and
the two together, interleaved, as `vlm bench attention` does, so a slow spell of the GPU lands on all three alike.
"""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def ints(text):
    return [int(x) for x in text.split(",") if x]


def time_interleaved(fns, warmup, iters, repeat=1):
    """Median milliseconds per call of each of fns, timed one after another in every round; each sample runs its
    call `repeat` times back to back (more hides the host time between kernels, as in a training step)."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times = [[] for _ in fns]
    for _ in range(iters):
        for fn, out in zip(fns, times):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(repeat):
                fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / repeat)
    return [statistics.median(t) for t in times]


def measure(backend, d, causal, s, args):
    b, h = max(1, args.tokens // s), args.hidden // d
    hkv = args.kv_heads or h
    gqa = hkv != h
    def make(heads):
        return torch.randn(b, s, heads, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_(True)
    q, k, v = make(h), make(hkv), make(hkv)
    dout = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    attend = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    with sdpa_kernel([BACKENDS[backend]]):
        fwd = attend
        out = fwd()
        bwd = lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
        def fwdbwd():
            o = attend()
            torch.autograd.grad(o, (q, k, v), dout)
        fwd_ms, bwd_ms, fwdbwd_ms = time_interleaved([fwd, bwd, fwdbwd], args.warmup, args.iters, args.repeat)
    flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
    tf = lambda ms, mult: flops * mult / (ms * 1e-3) / 1e12
    return {"backend": backend, "head_dim": d, "causal": causal, "seqlen": s, "batch": b, "heads": h,
            "fwd_ms": fwd_ms, "bwd_ms": bwd_ms, "fwdbwd_ms": fwdbwd_ms,
            "fwd_tflops": tf(fwd_ms, 1.0), "bwd_tflops": tf(bwd_ms, 2.5), "fwdbwd_tflops": tf(fwdbwd_ms, 3.5)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--head-dims", type=ints, default=[64, 128])
    p.add_argument("--seqlens", type=ints, default=[512, 1024, 2048, 4096, 8192, 16384])
    p.add_argument("--causal", choices=["yes", "no", "both"], default="both")
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--kv-heads", type=int, default=0, help="key/value heads (grouped-query); default: as many as q")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeat", type=int, default=1, help="calls back to back per timed sample (time per call)")
    p.add_argument("--backends", default="cudnn,flash")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    causal = {"yes": [True], "no": [False], "both": [False, True]}[args.causal]
    print(f"SDPA peer on {torch.cuda.get_device_name()}: torch {torch.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}", flush=True)
    results = []
    for d in args.head_dims:
        for c in causal:
            for s in args.seqlens:
                for backend in args.backends.split(","):
                    try:
                        r = measure(backend, d, c, s, args)
                    except RuntimeError as e:  # a backend that refuses a shape is reported, not fatal
                        print(f"{backend} d={d} causal={int(c)} s={s}: unavailable ({str(e).splitlines()[0]})")
                        continue
                    results.append(r)
                    print(f"{backend:5s} d={d:3d} causal={int(c)} s={s:5d}  fwd {r['fwd_tflops']:6.1f}  "
                          f"bwd {r['bwd_tflops']:6.1f}  fwd+bwd {r['fwdbwd_tflops']:6.1f} TFLOP/s", flush=True)
                torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "cudnn": torch.backends.cudnn.version(), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

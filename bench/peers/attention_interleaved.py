#!/usr/bin/env python3
"""Our FlashAttention kernels against PyTorch SDPA in one process, the two sides alternating shape by shape.

bench_attention and attention_sdpa.py each time their side in their own process, the peer's whole sweep first: on a
GPU that holds its power cap for part of a sweep, a slow spell then lands on one side's rows only. Here our kernels
run through their C ABI (libvlm_flash_c.so, src/kernels/cuda/flash/flash_c_api.h; python/vlm_flash.py's
ctypes binding) on PyTorch's tensors, and every row is timed in rounds that alternate the sides (peer, ours, ours,
peer, ...), each sample a window of back-to-back calls long enough to hide the host's time per call (about
--window-ms), both sides measured with the same CUDA events. nvidia-smi is sampled meanwhile, and each side's mean
SM clock and power are printed per row, so a difference in clocks shows. Before timing, our outputs and gradients
are compared with the peer's (max abs error).

FLOP convention as bench_attention (flash-attention's benchmark): fwd = 4 b h s^2 d, halved when
causal; bwd = 2.5 fwd; fwd+bwd = 3.5 fwd. batch = --tokens / seqlen, heads = --hidden / d.

  python3 bench/peers/attention_interleaved.py --lib build/.../libvlm_flash_c.so [--head-dims 64,128] [--json F]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import vlm_flash  # noqa: E402  (the ctypes binding of libvlm_flash_c.so)

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


class Smi:
    """nvidia-smi's SM clock and power every 50 ms, stamped with this process's clock on arrival."""

    def __init__(self):
        self.samples = []
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits", "-lms", "50"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.proc = None
            return
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                clock, power = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.samples.append((time.time(), clock, power))

    def mean(self, windows):
        inside = [(c, p) for t, c, p in self.samples if any(t0 <= t <= t1 for t0, t1 in windows)]
        if not inside:
            return None
        return statistics.mean(c for c, _ in inside), statistics.mean(p for _, p in inside)

    def stop(self):
        if self.proc:
            self.proc.terminate()


def timed_window(fn, calls):
    """ms per call over `calls` back-to-back calls, and the wall-clock window they ran in."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t0 = time.time()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls, (t0, time.time())


def measure_row(backend, d, causal, s, args, smi):
    b, h = max(1, args.tokens // s), args.hidden // d
    dev = torch.device("cuda")
    rnd = lambda: torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16)
    q, k, v, dout = rnd(), rnd(), rnd(), rnd()
    # The peer's view: (b, h, s, d) over the same (b, s, h, d) memory.
    qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_(True) for x in (q, k, v))
    dout_t = dout.transpose(1, 2)
    shape, cu = vlm_flash.dense(q, k, causal)  # cu keeps the shape's cu_seqlens alive
    out, lse = torch.empty_like(q), torch.empty(h, b * s, device=dev, dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    ws = vlm_flash.workspace(shape, dev)

    def ours_fwd():
        vlm_flash.fwd(shape, q, k, v, out, lse)

    def ours_bwd():
        vlm_flash.bwd(shape, q, k, v, out, dout, lse, dq, dk, dv, ws)

    def ours_fwdbwd():
        ours_fwd()
        ours_bwd()

    with sdpa_kernel([BACKENDS[backend]]):
        attend = lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        peer_out = attend()
        peer_fwd = attend
        peer_bwd = lambda: torch.autograd.grad(peer_out, (qt, kt, vt), dout_t, retain_graph=True)

        def peer_fwdbwd():
            o = attend()
            torch.autograd.grad(o, (qt, kt, vt), dout_t)

        # Agreement: ours against the peer (both bf16; the tests compare against the float64 reference).
        ours_fwdbwd()
        gq, gk, gv = peer_bwd()
        torch.cuda.synchronize()
        err = {name: (a.float() - bt.transpose(1, 2).float()).abs().max().item()
               for name, a, bt in (("out", out, peer_out), ("dq", dq, gq), ("dk", dk, gk), ("dv", dv, gv))}

        sides = {"peer": {"fwd": peer_fwd, "bwd": peer_bwd, "fwdbwd": peer_fwdbwd},
                 "ours": {"fwd": ours_fwd, "bwd": ours_bwd, "fwdbwd": ours_fwdbwd}}
        row = {"head_dim": d, "causal": causal, "seqlen": s, "batch": b, "heads": h, "backend": backend,
               "max_abs_err": err}
        flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
        for pas, mult in (("fwd", 1.0), ("bwd", 2.5), ("fwdbwd", 3.5)):
            calls = {}
            for side, fns in sides.items():  # warm up, then size the window from one timed call
                for _ in range(2):
                    fns[pas]()
                one, _ = timed_window(fns[pas], 1)
                calls[side] = max(3, int(args.window_ms / max(one, 1e-3)))
            times = {"peer": [], "ours": []}
            windows = {"peer": [], "ours": []}
            for r in range(args.rounds):
                order = ("peer", "ours") if r % 2 == 0 else ("ours", "peer")
                for side in order:
                    ms, win = timed_window(sides[side][pas], calls[side])
                    times[side].append(ms)
                    windows[side].append(win)
            for side in ("peer", "ours"):
                ms = statistics.median(times[side])
                row[f"{side}_{pas}_ms"] = ms
                row[f"{side}_{pas}_tflops"] = flops * mult / (ms * 1e-3) / 1e12
                cp = smi.mean(windows[side])
                if cp:
                    row[f"{side}_{pas}_mhz"], row[f"{side}_{pas}_watts"] = cp
    return row


def ints(s):
    return [int(x) for x in s.split(",")]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lib", required=True, help="path of libvlm_flash_c.so")
    p.add_argument("--head-dims", type=ints, default=[64, 128])
    p.add_argument("--seqlens", type=ints, default=[512, 1024, 2048, 4096, 8192, 16384])
    p.add_argument("--causal", choices=["yes", "no", "both"], default="both")
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--backend", choices=sorted(BACKENDS), default="cudnn")
    p.add_argument("--rounds", type=int, default=4, help="timed windows per side and pass, alternating (default 4)")
    p.add_argument("--window-ms", type=float, default=100.0, help="length of one timed window (default 100)")
    p.add_argument("--json", help="write the rows to this JSON file")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("attention_interleaved: no CUDA device", file=sys.stderr)
        return 2
    vlm_flash.load(args.lib)
    causals = {"yes": [True], "no": [False], "both": [False, True]}[args.causal]
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"peer backend {args.backend}, {args.rounds} alternating rounds of ~{args.window_ms:.0f} ms windows",
          flush=True)
    smi = Smi()
    rows = []
    print("| d | causal | seqlen | pass | ours TFLOP/s | peer TFLOP/s | ours / peer | ours MHz, W | peer MHz, W |")
    print("|---|---|---|---|---|---|---|---|---|")
    try:
        for d in args.head_dims:
            for c in causals:
                for s in args.seqlens:
                    row = measure_row(args.backend, d, c, s, args, smi)
                    rows.append(row)
                    for pas in ("fwd", "bwd", "fwdbwd"):
                        cp = lambda side: (f"{row[f'{side}_{pas}_mhz']:.0f}, {row[f'{side}_{pas}_watts']:.0f}"
                                           if f"{side}_{pas}_mhz" in row else "-")
                        print(f"| {d} | {'yes' if c else 'no'} | {s} | {pas} | {row[f'ours_{pas}_tflops']:.1f} | "
                              f"{row[f'peer_{pas}_tflops']:.1f} | "
                              f"{row[f'ours_{pas}_tflops'] / row[f'peer_{pas}_tflops']:.3f}x | {cp('ours')} | "
                              f"{cp('peer')} |", flush=True)
                    errs = ", ".join(f"{k} {v:.3g}" for k, v in row["max_abs_err"].items())
                    print(f"|   |   | {s} | max abs diff ours vs peer: {errs} |||||", flush=True)
                    torch.cuda.empty_cache()
    finally:
        smi.stop()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "cudnn": torch.backends.cudnn.version(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""PyTorch FSDP2 peer of the multi-rank `vlm bench train`: the same model shapes trained with fully_shard.

The model is train_nanovlm.py's (the nanoVLM-222M shape as `vlm bench train` mirrors it: SigLIP-B/16 at 224 px,
pixel shuffle 2, a Llama-family decoder with tied embeddings), and for --preset vlm-1b the same tower with the
Llama-3.2-1B decoder shape (width 2048, 16 layers, 32 heads / 8 KV heads, SwiGLU 8192, RoPE theta 5e5) over
SmolLM2's 49152-token vocabulary, as the vlm-1b preset. torch.distributed.fsdp.fully_shard wraps every ViT and
decoder block, then the root (embeddings, projector, norms); MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32) with the loss under bf16 autocast (cross-entropy in fp32) as the single-GPU peer; AdamW (fused
where DTensor parameters allow it, else foreach) after global-norm clipping at --grad-clip; random images and tokens,
a different batch on every rank (weak scaling: --batch samples per rank).
--reshard-after-forward false keeps the gathered weights from the forward to the backward (FSDP's shard_grad_op,
what `vlm bench train --fsdp shard_grad_op` does); the default reshards them (full_shard).

Launch: torchrun --nproc_per_node N bench/peers/fsdp2_peer.py [--presets nanovlm-222m,vlm-1b] [--batch 16]
        [--text-tokens 128] [--steps 20] [--warmup 5] [--grad-clip 1.0] [--reshard-after-forward true] [--out FILE]
Rank 0 prints and appends to --out one JSON line per preset, with the keys of `vlm bench train --fsdp ... --json`:
{"impl": "pytorch-fsdp2", "preset", "world_size", "fsdp", "batch_per_rank", "seq_len", "samples_per_s",
"tokens_per_s" (totals over the ranks), "step_ms" (the slowest rank's), "peak_gb_max", "ranks": [{"rank",
"samples_per_s", "tokens_per_s", "step_ms", "peak_gb"}], ...}; tokens are every position of the sequences (image and
text), samples/s a rank's batch over its step time, peak_gb torch.cuda.max_memory_allocated over the timed steps.
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_nanovlm import PEAK_TFLOPS, NanoVlm, Shape, make_step, model_flops_per_sample, timed_steps  # noqa: E402

try:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
except ImportError:  # torch < 2.6
    from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard


class Vlm1bShape(Shape):
    """The vlm-1b preset: nanoVLM's SigLIP-B/16 tower, the Llama-3.2-1B decoder shape, SmolLM2's vocabulary."""
    lm_layers = 16
    lm_width = 2048
    lm_heads = 32
    lm_kv_heads = 8
    lm_mlp = 8192
    rope_theta = 500000.0


SHAPES = {"nanovlm-222m": Shape, "vlm-1b": Vlm1bShape}


def run(preset: str, args, rank: int, world: int) -> dict:
    s = SHAPES[preset]()
    s.text_tokens = args.text_tokens
    dev = torch.device("cuda", torch.cuda.current_device())
    torch.manual_seed(0)  # the same initial weights on every rank, as fully_shard expects
    with torch.device(dev):  # built on the GPU: a 1B model's init on the CPU takes long
        model = NanoVlm(s)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    reshard = args.reshard_after_forward
    for blk in list(model.vit) + list(model.lm):
        fully_shard(blk, mp_policy=mp, reshard_after_forward=reshard)
    fully_shard(model, mp_policy=mp, reshard_after_forward=reshard)
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, fused=True)
        fused = True
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, foreach=True)
        fused = False
    g = torch.Generator(device=dev).manual_seed(1234 + rank)  # each rank its own samples
    images = torch.randn(args.batch, 3, s.image, s.image, device=dev, generator=g)
    ids = torch.randint(0, s.vocab, (args.batch, s.text_tokens), device=dev, generator=g)
    targets = torch.randint(0, s.vocab, (args.batch, s.text_tokens), device=dev, generator=g)
    fwd = torch.compile(model) if args.compile else model

    step = make_step(fwd, model, opt, images, ids, targets, args.grad_clip)

    warmup_s, step_ms, loss = timed_steps(step, args.warmup, args.steps, dist.barrier)
    mine = {"rank": rank, "step_ms": step_ms, "peak_gb": torch.cuda.max_memory_allocated() / 1e9,
            "loss": loss.float().item()}
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    seq = s.image_tokens + s.text_tokens
    flops = model_flops_per_sample(s)
    ranks = []
    for r in everyone:
        sps = args.batch / (r["step_ms"] / 1e3)
        ranks.append({"rank": r["rank"], "samples_per_s": sps, "tokens_per_s": sps * seq, "step_ms": r["step_ms"],
                      "tflops": sps * flops / 1e12, "loss": r["loss"], "peak_gb": r["peak_gb"]})
    total = sum(r["samples_per_s"] for r in ranks)
    n_params = sum(p.numel() for p in model.parameters())  # DTensors report the full (unsharded) size
    out = {
        "impl": "pytorch-fsdp2",
        "preset": preset,
        "world_size": world,
        "fsdp": "full_shard" if reshard else "shard_grad_op",
        "precision": "bf16",
        "compile": args.compile,
        "fused_adamw": fused,
        "grad_clip": args.grad_clip,
        "batch_per_rank": args.batch,
        "seq_len": seq,
        "parameters": n_params,
        "samples_per_s": total,
        "tokens_per_s": total * seq,
        "step_ms": max(r["step_ms"] for r in ranks),
        "peak_gb_max": max(r["peak_gb"] for r in ranks),
        "mfu": total * flops / 1e12 / (world * PEAK_TFLOPS),
        "gflop_per_sample": flops / 1e9,
        "warmup_s": warmup_s,
        "ranks": ranks,
        "torch": torch.__version__,
    }
    del opt, model
    torch.cuda.empty_cache()
    return out


def parse_bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {text}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--presets", default="nanovlm-222m,vlm-1b")
    ap.add_argument("--batch", type=int, default=16, help="samples per rank")
    ap.add_argument("--text-tokens", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--reshard-after-forward", type=parse_bool, default=True)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (default: eager)")
    ap.add_argument("--out", default="", help="append the JSON lines to this file (rank 0)")
    args = ap.parse_args()
    for p in args.presets.split(","):
        if p not in SHAPES:
            ap.error(f"unknown preset {p} (known: {', '.join(SHAPES)})")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.backends.cuda.matmul.allow_tf32 = True
    for preset in args.presets.split(","):
        r = run(preset, args, rank, world)
        if rank == 0:
            line = json.dumps(r)
            print(line, flush=True)
            print(f"fsdp2_peer {preset}: {world} rank(s), {r['samples_per_s']:.1f} samples/s, "
                  f"{r['tokens_per_s']:.0f} tokens/s total, step {r['step_ms']:.1f} ms, peak {r['peak_gb_max']:.2f} GB "
                  f"per GPU", flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(line + "\n")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

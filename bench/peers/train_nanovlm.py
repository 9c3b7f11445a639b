#!/usr/bin/env python3
"""PyTorch peer of `vlm bench train`: one training step of the nanoVLM-222M shape, as a user would write it.

SigLIP-B/16 at 224 px (196 patches, 12 layers, width 768, 12 heads, GELU-tanh MLP 3072, LayerNorm) -> pixel
shuffle 2 (49 tokens of 3072) -> linear to 576 -> SmolLM2-135M shape (30 layers, width 576, 9 heads / 3 KV heads,
RoPE theta 1e5, RMSNorm, SwiGLU 1536, vocab 49152, tied embeddings). Each sample is 49 image tokens followed by 128
text tokens; the LM head and the cross-entropy run on the text positions only. fp32 parameters, bf16 autocast,
fused AdamW after global-norm gradient clipping at --grad-clip (default 1.0, as `vlm bench train` and the trainer
clip; 0 turns it off), SDPA (cuDNN / FlashAttention backends as PyTorch picks them), eager or torch.compile.

Model FLOPs per sample (matmuls + attention; training = 3x forward) are computed by model_flops_per_sample() with the
same formula as the C++ benchmark, so the TFLOP/s and MFU figures compare directly.

Prints one JSON line per mode: {"mode", "samples_per_s", "step_ms", "tflops", "mfu", "peak_gb", "warmup_s", ...}.
Usage: python3 bench/peers/train_nanovlm.py [--modes eager,compile] [--batch 64] [--steps 20] [--warmup 5]
       [--grad-clip 1.0]
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PEAK_TFLOPS = 989.0  # H100/H200 SXM dense bf16


class Shape:
    image = 224
    patch = 16
    vit_layers = 12
    vit_width = 768
    vit_heads = 12
    vit_mlp = 3072
    shuffle = 2
    lm_layers = 30
    lm_width = 576
    lm_heads = 9
    lm_kv_heads = 3
    lm_mlp = 1536
    vocab = 49152
    text_tokens = 128
    rope_theta = 100000.0

    @property
    def patches(self):
        return (self.image // self.patch) ** 2

    @property
    def image_tokens(self):
        return self.patches // (self.shuffle * self.shuffle)


def model_flops_per_sample(s: Shape) -> float:
    """Training FLOPs of one sample: 3 x (2 x matmul MACs + attention), causal attention counted as half."""
    p, t = s.patches, s.image_tokens + s.text_tokens
    hd = s.lm_width // s.lm_heads
    vit_layer = 4 * s.vit_width**2 + 2 * s.vit_width * s.vit_mlp
    patch_embed = 3 * s.patch * s.patch * s.vit_width
    vit = 2 * p * (s.vit_layers * vit_layer + patch_embed) + s.vit_layers * 4 * p * p * s.vit_width
    proj = 2 * s.image_tokens * (s.vit_width * s.shuffle**2) * s.lm_width
    lm_layer = 2 * s.lm_width**2 + 2 * s.lm_width * s.lm_kv_heads * hd + 3 * s.lm_width * s.lm_mlp
    lm = 2 * t * s.lm_layers * lm_layer + s.lm_layers * 4 * t * t * s.lm_width / 2
    head = 2 * s.text_tokens * s.lm_width * s.vocab
    return 3.0 * (vit + proj + lm + head)


class VitBlock(nn.Module):
    def __init__(self, s: Shape):
        super().__init__()
        self.heads = s.vit_heads
        self.ln1 = nn.LayerNorm(s.vit_width, eps=1e-6)
        self.qkv = nn.Linear(s.vit_width, 3 * s.vit_width)
        self.out = nn.Linear(s.vit_width, s.vit_width)
        self.ln2 = nn.LayerNorm(s.vit_width, eps=1e-6)
        self.fc1 = nn.Linear(s.vit_width, s.vit_mlp)
        self.fc2 = nn.Linear(s.vit_mlp, s.vit_width)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, c)
        x = x + self.out(a)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class LmBlock(nn.Module):
    def __init__(self, s: Shape):
        super().__init__()
        self.h, self.kv, self.hd = s.lm_heads, s.lm_kv_heads, s.lm_width // s.lm_heads
        self.n1 = nn.RMSNorm(s.lm_width, eps=1e-5)
        self.q = nn.Linear(s.lm_width, s.lm_width, bias=False)
        self.k = nn.Linear(s.lm_width, self.kv * self.hd, bias=False)
        self.v = nn.Linear(s.lm_width, self.kv * self.hd, bias=False)
        self.o = nn.Linear(s.lm_width, s.lm_width, bias=False)
        self.n2 = nn.RMSNorm(s.lm_width, eps=1e-5)
        self.gate = nn.Linear(s.lm_width, s.lm_mlp, bias=False)
        self.up = nn.Linear(s.lm_width, s.lm_mlp, bias=False)
        self.down = nn.Linear(s.lm_mlp, s.lm_width, bias=False)

    @staticmethod
    def rope(x, cos, sin):
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    def forward(self, x, cos, sin):
        b, t, c = x.shape
        h = self.n1(x)
        q = self.rope(self.q(h).view(b, t, self.h, self.hd).transpose(1, 2), cos, sin)
        k = self.rope(self.k(h).view(b, t, self.kv, self.hd).transpose(1, 2), cos, sin)
        v = self.v(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, c))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class NanoVlm(nn.Module):
    def __init__(self, s: Shape):
        super().__init__()
        self.s = s
        self.patch = nn.Conv2d(3, s.vit_width, s.patch, s.patch)
        self.pos = nn.Parameter(torch.randn(1, s.patches, s.vit_width) * 0.02)
        self.vit = nn.ModuleList(VitBlock(s) for _ in range(s.vit_layers))
        self.vit_ln = nn.LayerNorm(s.vit_width, eps=1e-6)
        self.proj = nn.Linear(s.vit_width * s.shuffle**2, s.lm_width, bias=False)
        self.embed = nn.Embedding(s.vocab, s.lm_width)
        nn.init.normal_(self.embed.weight, std=0.02)  # SmolLM2's initializer range (tied with the LM head)
        self.lm = nn.ModuleList(LmBlock(s) for _ in range(s.lm_layers))
        self.norm = nn.RMSNorm(s.lm_width, eps=1e-5)
        hd = s.lm_width // s.lm_heads
        inv = 1.0 / (s.rope_theta ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(s.image_tokens + s.text_tokens).float(), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def pixel_shuffle(self, x):
        b, n, c = x.shape
        g, r = int(math.isqrt(n)), self.s.shuffle
        x = x.view(b, g // r, r, g // r, r, c).permute(0, 1, 3, 2, 4, 5)
        return x.reshape(b, (g // r) ** 2, r * r * c)

    def forward(self, images, ids, targets):
        x = self.patch(images).flatten(2).transpose(1, 2) + self.pos
        for blk in self.vit:
            x = blk(x)
        img = self.proj(self.pixel_shuffle(self.vit_ln(x)))
        h = torch.cat((img, self.embed(ids)), dim=1)
        for blk in self.lm:
            h = blk(h, self.cos, self.sin)
        text = self.norm(h[:, self.s.image_tokens :])
        logits = F.linear(text, self.embed.weight)
        return F.cross_entropy(logits.view(-1, self.s.vocab), targets.view(-1))  # autocast runs it in fp32


def make_step(fwd, model, opt, images, ids, targets, grad_clip: float):
    """One training step of the peers: forward under bf16 autocast, backward, clipping, AdamW."""

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(images, ids, targets)
        loss.backward()
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def timed_steps(step, warmup: int, steps: int, before_timing=None):
    """Runs `warmup` untimed steps, resets the peak-memory counter, calls `before_timing` (e.g. a barrier), then
    times `steps` steps with CUDA events: (warm-up seconds, ms per timed step, the last step's loss)."""
    t0 = time.perf_counter()
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    warmup_s = time.perf_counter() - t0
    torch.cuda.reset_peak_memory_stats()
    if before_timing:
        before_timing()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        loss = step().detach()
    end.record()
    torch.cuda.synchronize()
    return warmup_s, start.elapsed_time(end) / steps, loss


def run(mode: str, args) -> dict:
    torch.manual_seed(0)
    s = Shape()
    dev = torch.device("cuda")
    model = NanoVlm(s).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, fused=True)
    images = torch.randn(args.batch, 3, s.image, s.image, device=dev)
    ids = torch.randint(0, s.vocab, (args.batch, s.text_tokens), device=dev)
    targets = torch.randint(0, s.vocab, (args.batch, s.text_tokens), device=dev)
    fwd = torch.compile(model) if mode == "compile" else model

    step = make_step(fwd, model, opt, images, ids, targets, args.grad_clip)

    warmup_s, step_ms, loss = timed_steps(step, args.warmup, args.steps)
    sps = args.batch / (step_ms / 1e3)
    tflops = sps * model_flops_per_sample(s) / 1e12
    return {
        "peer": "pytorch",
        "mode": mode,
        "batch": args.batch,
        "grad_clip": args.grad_clip,
        "samples_per_s": round(sps, 1),
        "step_ms": round(step_ms, 2),
        "tflops": round(tflops, 1),
        "mfu": round(tflops / PEAK_TFLOPS, 4),
        "peak_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2),
        "warmup_s": round(warmup_s, 1),
        "loss": round(loss.item(), 4),
        "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
        "gflop_per_sample": round(model_flops_per_sample(s) / 1e9, 2),
        "torch": torch.__version__,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--grad-clip", type=float, default=1.0,
                    help="global gradient-norm clipping before each AdamW step, as vlm bench train (0: off)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"peer": "pytorch", "error": "no CUDA device"}))
        return 1
    torch.backends.cuda.matmul.allow_tf32 = True
    for mode in args.modes.split(","):
        print(json.dumps(run(mode.strip(), args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

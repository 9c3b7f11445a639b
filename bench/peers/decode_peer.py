#!/usr/bin/env python3
"""PyTorch peer of `vlm bench decode`: batched generation with Hugging Face transformers, as a user would run it.

Shapes (random weights from --seed, bf16, SDPA attention):
  smollm2-135m  LlamaForCausalLM: hidden 576, 30 layers, 9 heads / 3 KV heads (head dim 64), SwiGLU 1536, RMSNorm,
                RoPE theta 1e5, vocab 49152, tied embeddings.
  nanovlm-222m  Idefics3ForConditionalGeneration: SigLIP-B/16 at 224 px (12 layers, width 768, 12 heads, MLP 3072)
                -> pixel shuffle 2 (49 image tokens) -> linear projector -> the smollm2-135m decoder. One image per
                sequence; its 49 image tokens count toward the prompt.
Each sequence: a prompt of --prompt-tokens (default 512) random token ids, then exactly --new-tokens (default 128)
greedy tokens (EOS ignored: min_new_tokens = max_new_tokens, no eos id).
Modes:
  generate        model.generate with the default dynamic KV cache, eager PyTorch.
  static_compile  model.generate with cache_implementation="static": transformers compiles the decode step with
                  torch.compile (mode "reduce-overhead": CUDA graphs) over a preallocated KV cache; the strongest
                  stock PyTorch form. Its compilation and graph capture happen in the warm-up runs (warmup_s).
Timing: --warmup untimed runs, then --repeats timed runs of the same shape (the best is reported, the others listed).
A streamer stamps the host time at which each step's tokens reach it (generate synchronizes there), so:
  tok_per_s     generated tokens (batch x new tokens) / wall time of the whole generate call;
  ttft_ms       call start -> first generated token (the prefill, the vision encoder included);
  itl_p50_ms / itl_p99_ms  percentiles of the time between consecutive decode steps;
  peak_gb       torch.cuda.max_memory_allocated over the timed run (weights included).
Output: one JSON object per line (to --out, default stdout) per (shape, mode, batch): the fields above plus peer,
shape, mode, batch, prompt_tokens, new_tokens, image_tokens, repeats, versions and device; a configuration that
fails prints {"error": ...} instead and the run goes on; one past --max-seconds prints {"skipped": ...}.
--save-weights DIR writes each shape's random model (safetensors + config.json, Hugging Face names) under DIR/<shape>,
so the engine can be benchmarked on the very same weights.

Usage: python3 bench/peers/decode_peer.py [--shapes smollm2-135m,nanovlm-222m] [--modes generate,static_compile]
       [--batches 1,32,128] [--prompt-tokens 512] [--new-tokens 128] [--warmup 2] [--repeats 2]
       [--max-seconds 1800] [--seed 0] [--out peer.jsonl] [--save-weights DIR]
"""
import argparse
import json
import math
import os
import sys
import time
import traceback

import torch

SHAPES = ("smollm2-135m", "nanovlm-222m")
MODES = ("generate", "static_compile")
IMAGE_SIZE, PATCH, SHUFFLE = 224, 16, 2
IMAGE_TOKENS = (IMAGE_SIZE // PATCH) ** 2 // (SHUFFLE * SHUFFLE)  # 49
VOCAB = 49152
IMAGE_TOKEN_ID = VOCAB - 1  # the VLM's image placeholder; prompts draw their text ids below it


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def text_config_kwargs():
    return dict(
        vocab_size=VOCAB,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        hidden_act="silu",
        max_position_embeddings=8192,
        rms_norm_eps=1e-5,
        rope_theta=100000.0,  # transformers 4.x
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},  # transformers 5.x
        tie_word_embeddings=True,
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=0,
        eos_token_id=None,
        pad_token_id=0,
    )


def set_rope_theta(config, theta):
    """transformers 5 keeps RoPE settings in rope_parameters; 4.x in rope_theta. Set whichever exists."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict):
        params["rope_theta"] = theta
    if hasattr(config, "rope_theta"):
        config.rope_theta = theta


def from_config(cls, config):
    """The model with random weights, asking for SDPA attention in whichever way this transformers accepts."""
    for kwargs in ({"attn_implementation": "sdpa"}, {}):
        try:
            return cls._from_config(config, **kwargs)
        except TypeError:
            continue
    return cls(config)


def build_model(shape, seed):
    import transformers

    torch.manual_seed(seed)
    if shape == "smollm2-135m":
        config = transformers.LlamaConfig(**text_config_kwargs())
        set_rope_theta(config, 100000.0)
        model = from_config(transformers.LlamaForCausalLM, config)
    else:
        text = transformers.LlamaConfig(**text_config_kwargs())
        set_rope_theta(text, 100000.0)
        vision = transformers.Idefics3VisionConfig(
            hidden_size=768,
            intermediate_size=3072,
            num_hidden_layers=12,
            num_attention_heads=12,
            num_channels=3,
            image_size=IMAGE_SIZE,
            patch_size=PATCH,
            hidden_act="gelu_pytorch_tanh",
            layer_norm_eps=1e-6,
        )
        config = transformers.Idefics3Config(
            vision_config=vision.to_dict(),
            text_config=text.to_dict(),
            scale_factor=SHUFFLE,
            image_token_id=IMAGE_TOKEN_ID,
            tie_word_embeddings=True,
            pad_token_id=0,
        )
        model = from_config(transformers.Idefics3ForConditionalGeneration, config)
    model = model.to(device="cuda", dtype=torch.bfloat16).eval()
    gc = model.generation_config
    gc.eos_token_id = None
    gc.pad_token_id = 0
    gc.bos_token_id = 0
    return model


def make_inputs(shape, batch, prompt_tokens, seed):
    g = torch.Generator().manual_seed(seed + batch)
    if shape == "smollm2-135m":
        ids = torch.randint(1, IMAGE_TOKEN_ID, (batch, prompt_tokens), generator=g)
        return {"input_ids": ids.cuda(), "attention_mask": torch.ones_like(ids).cuda()}
    text = prompt_tokens - IMAGE_TOKENS
    if text < 1:
        raise ValueError(f"--prompt-tokens {prompt_tokens} leaves no room for text after {IMAGE_TOKENS} image tokens")
    image = torch.full((batch, IMAGE_TOKENS), IMAGE_TOKEN_ID)
    ids = torch.cat([image, torch.randint(1, IMAGE_TOKEN_ID, (batch, text), generator=g)], dim=1)
    pixels = torch.randn(batch, 1, 3, IMAGE_SIZE, IMAGE_SIZE, generator=g).clamp_(-1, 1)
    return {
        "input_ids": ids.cuda(),
        "attention_mask": torch.ones_like(ids).cuda(),
        "pixel_values": pixels.to(device="cuda", dtype=torch.bfloat16),
    }


class StepClock:
    """A generate() streamer: the host time at which each step's tokens arrive (the first put is the prompt)."""

    def __init__(self):
        self.stamps = []
        self.prompt_seen = False

    def put(self, value):
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.stamps.append(time.perf_counter())

    def end(self):
        pass


def percentile(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def generate_kwargs(mode, new_tokens):
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0)
    if mode == "static_compile":
        kw["cache_implementation"] = "static"
        try:  # explicit CUDA-graph compilation where this transformers has CompileConfig (it is also its default)
            from transformers import CompileConfig

            kw["compile_config"] = CompileConfig(fullgraph=True, dynamic=False, mode="reduce-overhead")
        except ImportError:
            pass
    return kw


def run_once(model, inputs, kw):
    clock = StepClock()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(**inputs, **kw, streamer=clock)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    sequences = out.sequences if hasattr(out, "sequences") else out
    return t0, t1, clock.stamps, sequences


def measure(model, shape, mode, batch, args):
    inputs = make_inputs(shape, batch, args.prompt_tokens, args.seed)
    kw = generate_kwargs(mode, args.new_tokens)
    t_warm = time.perf_counter()
    for _ in range(args.warmup):
        run_once(model, inputs, kw)
    warmup_s = time.perf_counter() - t_warm
    runs = []
    for _ in range(args.repeats):
        torch.cuda.reset_peak_memory_stats()
        t0, t1, stamps, seqs = run_once(model, inputs, kw)
        new = seqs.shape[1] - inputs["input_ids"].shape[1]
        if new != args.new_tokens or seqs.shape[0] != batch:
            raise RuntimeError(f"generate returned {tuple(seqs.shape)}: expected {batch} x {args.new_tokens} new")
        gaps = [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:])]
        runs.append(
            {
                "tok_per_s": batch * new / (t1 - t0),
                "total_s": t1 - t0,
                "ttft_ms": (stamps[0] - t0) * 1e3 if stamps else float("nan"),
                "itl_p50_ms": percentile(gaps, 0.50),
                "itl_p99_ms": percentile(gaps, 0.99),
                "peak_gb": torch.cuda.max_memory_allocated() / 1e9,
            }
        )
    best = max(runs, key=lambda r: r["tok_per_s"])
    return dict(best, warmup_s=warmup_s, all_tok_per_s=[r["tok_per_s"] for r in runs])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--batches", default="1,32,128")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=2, help="untimed runs first (compile + CUDA graph capture)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-seconds", type=float, default=1800, help="skip configurations once this much has passed")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="-", help="JSON lines file (appended to), or - for stdout")
    ap.add_argument("--save-weights", default="", help="write each shape's random model under DIR/<shape>")
    args = ap.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    modes = [m for m in args.modes.split(",") if m]
    batches = [int(b) for b in args.batches.split(",") if b]
    for s in shapes:
        if s not in SHAPES:
            ap.error(f"unknown shape {s!r} (known: {', '.join(SHAPES)})")
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode {m!r} (known: {', '.join(MODES)})")
    if not torch.cuda.is_available():
        ap.error("needs a CUDA device")
    if args.new_tokens < 1 or args.prompt_tokens < 1 or args.repeats < 1 or args.warmup < 0:
        ap.error("--new-tokens, --prompt-tokens and --repeats must be >= 1, --warmup >= 0")

    import transformers

    torch.backends.cuda.matmul.allow_tf32 = True
    out = sys.stdout if args.out == "-" else open(args.out, "a")
    common = {
        "peer": "pytorch",
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name(),
        "seed": args.seed,
    }
    start = time.perf_counter()
    for shape in shapes:
        try:
            model = build_model(shape, args.seed)
        except Exception as e:  # noqa: BLE001: report and go on with the next shape
            traceback.print_exc()
            for mode in modes:
                for batch in batches:
                    rec = dict(common, shape=shape, mode=mode, batch=batch, error=f"building the model: {e!r}")
                    print(json.dumps(rec), file=out, flush=True)
            continue
        if args.save_weights:
            path = os.path.join(args.save_weights, shape)
            model.save_pretrained(path)
            log(f"{shape}: weights written to {path}")
        params = sum(p.numel() for p in model.parameters())
        for mode in modes:
            for batch in batches:
                rec = dict(common, shape=shape, mode=mode, batch=batch, params=params,
                           image_tokens=IMAGE_TOKENS if shape == "nanovlm-222m" else 0, warmup=args.warmup,
                           repeats=args.repeats)
                elapsed = time.perf_counter() - start
                if elapsed > args.max_seconds:
                    rec["skipped"] = f"--max-seconds {args.max_seconds:g} reached after {elapsed:.0f} s"
                else:
                    log(f"{shape} {mode} batch {batch} ...")
                    try:
                        rec.update(measure(model, shape, mode, batch, args))
                    except Exception as e:  # noqa: BLE001: one failing configuration must not end the run
                        traceback.print_exc()
                        rec["error"] = repr(e)[:2000]
                    torch.cuda.empty_cache()
                print(json.dumps(rec), file=out, flush=True)
                if "tok_per_s" in rec:
                    log(f"  {rec['tok_per_s']:.1f} tok/s, TTFT {rec['ttft_ms']:.1f} ms, ITL p50 "
                        f"{rec['itl_p50_ms']:.2f} ms p99 {rec['itl_p99_ms']:.2f} ms, peak {rec['peak_gb']:.2f} GB")
        del model
        torch.cuda.empty_cache()
    if out is not sys.stdout:
        out.close()


if __name__ == "__main__":
    main()

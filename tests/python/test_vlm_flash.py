#!/usr/bin/env python3
"""python/vlm_flash.py (our kernels through libvlm_flash_c.so) against PyTorch on a GPU: forward and gradients of
grouped-query, causal and non-causal, square and bottom-right-aligned rectangular problems, each within a few times
the error of PyTorch's own bf16 SDPA against an fp32 reference; NaN fails. Skips without torch, a CUDA device or the
library (VLM_FLASH_LIB or --lib).

    python3 tests/python/test_vlm_flash.py --lib build-cuda/src/kernels/cuda/flash/libvlm_flash_c.so
"""
import argparse
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the build machine has no torch
    torch = None

LIB = os.environ.get("VLM_FLASH_LIB")


def reference(q, k, v, causal, dtype):
    """softmax(q k^T / sqrt(d)) v in `dtype` with a bottom-right causal mask, over (b, s, h, d) inputs."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    qt, kt, vt = (x.to(dtype).transpose(1, 2) for x in (q, k, v))
    kt, vt = kt.repeat_interleave(hq // hkv, dim=1), vt.repeat_interleave(hq // hkv, dim=1)
    mask = None
    if causal:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        mask = j <= i + (sk - sq)
    return F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask).transpose(1, 2)


@unittest.skipIf(torch is None or not torch.cuda.is_available(), "needs torch and a CUDA device")
class VlmFlashAgainstTorch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not LIB:
            raise unittest.SkipTest("no library: set VLM_FLASH_LIB or pass --lib")
        import vlm_flash
        cls.vf = vlm_flash
        vlm_flash.load(LIB)

    def check(self, b, sq, sk, hq, hkv, d, causal):
        g = torch.Generator(device="cuda").manual_seed(sq * 131 + sk)
        make = lambda s, h: torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=g)
        q, k, v = make(sq, hq), make(sk, hkv), make(sk, hkv)
        dout = make(sq, hq)
        results = {}
        for name, fn, leaf in (("ours", lambda a, b_, c: self.vf.attention(a, b_, c, causal=causal), torch.bfloat16),
                               ("bf16", lambda a, b_, c: reference(a, b_, c, causal, torch.bfloat16), torch.bfloat16),
                               ("fp32", lambda a, b_, c: reference(a, b_, c, causal, torch.float32), torch.float32)):
            # fp32 leaves for the reference, so that its gradients are not rounded back to bf16
            xs = [x.detach().to(leaf).requires_grad_(True) for x in (q, k, v)]
            out = fn(*xs)
            out.backward(dout.to(out.dtype))
            results[name] = [out.detach().float()] + [x.grad.float() for x in xs]
        for i, what in enumerate(("out", "dq", "dk", "dv")):
            ours, naive, exact = (results[n][i] for n in ("ours", "bf16", "fp32"))
            self.assertFalse(torch.isnan(ours).any().item(), f"{what}: NaN")
            err = (ours - exact).abs().max().item()
            bound = 3 * (naive - exact).abs().max().item() + 1e-3 * exact.abs().max().item() + 1e-4
            self.assertLessEqual(err, bound, f"{what}: max error {err:.3g} over the bound {bound:.3g} "
                                             f"(b={b} s_q={sq} s_k={sk} h={hq}/{hkv} d={d} causal={causal})")

    def test_gqa_causal_d64(self):
        self.check(2, 177, 177, 9, 3, 64, True)

    def test_noncausal_d128(self):
        self.check(2, 300, 300, 4, 4, 128, False)

    def test_rectangular_causal_bottom_right(self):
        self.check(3, 65, 200, 4, 2, 64, True)

    def test_rejects_float32_naming_the_argument(self):
        q = torch.randn(1, 8, 2, 64, device="cuda")
        with self.assertRaisesRegex(ValueError, "q must be a 4-d bf16"):
            self.vf.attention(q, q.bfloat16(), q.bfloat16())

    def test_rejects_heads_that_do_not_divide(self):
        q = torch.randn(1, 8, 6, 64, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, 8, 4, 64, device="cuda", dtype=torch.bfloat16)
        with self.assertRaisesRegex(ValueError, "do not divide"):
            self.vf.attention(q, k, k)


if __name__ == "__main__":
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--lib")
    known, rest = p.parse_known_args()
    LIB = known.lib or LIB
    unittest.main(argv=[sys.argv[0]] + rest)

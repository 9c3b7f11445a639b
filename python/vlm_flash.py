"""Our FlashAttention kernels from PyTorch: a differentiable attention over (batch, seqlen, heads, head_dim) bf16
CUDA tensors, through the C ABI of libvlm_flash_c.so (src/kernels/cuda/flash/flash_c_api.h) and ctypes.

    import vlm_flash                                    # python/ on sys.path
    vlm_flash.load("build-cuda/src/kernels/cuda/flash/libvlm_flash_c.so")   # or set VLM_FLASH_LIB
    out = vlm_flash.attention(q, k, v, causal=True)     # q [b, s_q, h_q, d], k, v [b, s_k, h_kv, d]; h_kv | h_q

The same sequence length within a batch (dense); causal masks are bottom-right aligned when s_q != s_k; scale
defaults to 1/sqrt(d). Inputs are made contiguous; gradients come back in the inputs' shapes. Runs on the current
CUDA stream. The low-level calls (dense, workspace, fwd, bwd) are public for benchmarks that time the
kernels without autograd (bench/peers/attention_interleaved.py).
"""
import ctypes
import os

import torch

__all__ = ["load", "attention", "Dense", "dense", "workspace", "fwd", "bwd", "bwd_workspace_bytes"]


class Dense(ctypes.Structure):
    """VlmFlashDense of flash_c_api.h."""
    _fields_ = [("batch", ctypes.c_int), ("seqlen_q", ctypes.c_int), ("seqlen_k", ctypes.c_int),
                ("heads_q", ctypes.c_int), ("heads_kv", ctypes.c_int), ("head_dim", ctypes.c_int),
                ("causal", ctypes.c_int), ("scale", ctypes.c_float),
                ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p)]


_lib = None


def load(path=None):
    """Loads libvlm_flash_c.so from `path`, else $VLM_FLASH_LIB; returns the ctypes library."""
    global _lib
    path = path or os.environ.get("VLM_FLASH_LIB")
    if not path:
        raise RuntimeError("vlm_flash: no library; pass its path to vlm_flash.load() or set VLM_FLASH_LIB")
    lib = ctypes.CDLL(path)
    vp, sp = ctypes.c_void_p, ctypes.POINTER(Dense)
    lib.vlm_flash_fwd_dense.argtypes = [sp, vp, vp, vp, vp, vp, vp]
    lib.vlm_flash_bwd_workspace_bytes.argtypes = [sp]
    lib.vlm_flash_bwd_workspace_bytes.restype = ctypes.c_size_t
    lib.vlm_flash_bwd_dense.argtypes = [sp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, ctypes.c_size_t, vp]
    lib.vlm_flash_last_error.restype = ctypes.c_char_p
    _lib = lib
    return lib


def _library():
    return _lib if _lib is not None else load()


def _check(rc):
    if rc != 0:
        raise RuntimeError(_library().vlm_flash_last_error().decode())


def _stream():
    return torch.cuda.current_stream().cuda_stream


def dense(q, k, causal=False, scale=None):
    """The Dense shape of contiguous (b, s_q, h_q, d) q and (b, s_k, h_kv, d) k, and the cu_seqlens tensors its
    pointers refer to: keep them alive as long as the shape."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    cu_q = torch.arange(0, b + 1, dtype=torch.int32, device=q.device) * sq
    cu_k = cu_q if sk == sq else torch.arange(0, b + 1, dtype=torch.int32, device=q.device) * sk
    shape = Dense(b, sq, sk, hq, hkv, d, int(causal), float(scale or 0.0), cu_q.data_ptr(), cu_k.data_ptr())
    return shape, (cu_q, cu_k)


def workspace(shape, device):
    """A backward workspace for this shape (at least 256 bytes, so that its pointer is a real allocation)."""
    return torch.empty(max(bwd_workspace_bytes(shape), 256), device=device, dtype=torch.uint8)


def fwd(shape, q, k, v, out, lse):
    """out [b*s_q, h_q, d] and lse [h_q, b*s_q] (f32) written from contiguous q, k, v."""
    _check(_library().vlm_flash_fwd_dense(ctypes.byref(shape), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                          out.data_ptr(), lse.data_ptr(), _stream()))


def bwd_workspace_bytes(shape):
    return _library().vlm_flash_bwd_workspace_bytes(ctypes.byref(shape))


def bwd(shape, q, k, v, out, dout, lse, dq, dk, dv, workspace):
    """dq, dk, dv overwritten; workspace a uint8 CUDA tensor of at least bwd_workspace_bytes(shape) bytes."""
    _check(_library().vlm_flash_bwd_dense(ctypes.byref(shape), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                          out.data_ptr(), dout.data_ptr(), lse.data_ptr(), dq.data_ptr(),
                                          dk.data_ptr(), dv.data_ptr(), workspace.data_ptr(), workspace.numel(),
                                          _stream()))


def _validate(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not t.is_cuda or t.dtype != torch.bfloat16 or t.dim() != 4:
            raise ValueError(f"vlm_flash.attention: {name} must be a 4-d bf16 CUDA tensor (batch, seqlen, heads, "
                             f"head_dim), got {t.dtype} {tuple(t.shape)} on {t.device}")
    if k.shape != v.shape:
        raise ValueError(f"vlm_flash.attention: k {tuple(k.shape)} and v {tuple(v.shape)} differ")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"vlm_flash.attention: q {tuple(q.shape)} and k {tuple(k.shape)} differ in batch or head_dim")
    if q.shape[2] % k.shape[2] != 0:
        raise ValueError(f"vlm_flash.attention: {k.shape[2]} kv heads do not divide {q.shape[2]} q heads")


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale):
        _validate(q, k, v)
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        shape, cu = dense(q, k, causal, scale)
        out = torch.empty_like(q)
        lse = torch.empty(shape.heads_q, shape.batch * shape.seqlen_q, device=q.device, dtype=torch.float32)
        fwd(shape, q, k, v, out, lse)
        ctx.save_for_backward(q, k, v, out, lse, *cu)
        ctx.shape = shape
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse, _, _ = ctx.saved_tensors
        shape = ctx.shape  # its cu_seqlens pointers stay valid: their tensors are saved with it
        dout = dout.contiguous()
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        bwd(shape, q, k, v, out, dout, lse, dq, dk, dv, workspace(shape, q.device))
        return dq, dk, dv, None, None


def attention(q, k, v, causal=False, scale=None):
    """softmax(q k^T * scale) v per head over (batch, seqlen, heads, head_dim) bf16 CUDA tensors; differentiable."""
    return _Attention.apply(q, k, v, causal, scale)

// Building blocks with explicit forward/backward: Linear, LayerNorm, RMSNorm and multi-head self-attention
// (GQA, optional RoPE, causal or not) over packed variable-length sequences. They read each parameter's weight()
// (the compute copy in bf16 mode) and allocate activations in the dtype of their input.
// Gradient contract for every backward here: returns the input gradient (fresh tensor, "overwrite"), and
// ACCUMULATES (+=) into the grads of its parameters when they are trainable (frozen ones are left untouched).
#pragma once

#include <string>
#include <vector>

#include "model/parameters.h"

namespace vlm {

// Where the packed sequences start and end, shared by every attention layer of one forward pass.
struct SeqInfo {
  Tensor cu_seqlens;   // i32 [B+1]
  int max_seqlen = 0;
  Tensor positions;    // i32 [T], position of each token within its sequence (for RoPE); may be undefined
  // Whether ops::check_cu_seqlens passed cu_seqlens for T rows and max_seqlen: the attention layers then skip the
  // check (checked_seq_info sets it).
  bool cu_seqlens_checked = false;
};

// seq with its cu_seqlens checked once for `rows` rows (ops::check_cu_seqlens), for all of a pass's layers.
SeqInfo checked_seq_info(SeqInfo seq, int64_t rows);

struct Linear {
  Param* w = nullptr;  // [out, in]
  Param* b = nullptr;  // [out] or null
  static Linear create(ParameterStore& store, const std::string& prefix, ParamGroup group, int in, int out,
                       bool bias, Device device);
  int in_features() const { return static_cast<int>(w->value.dim(1)); }
  int out_features() const { return static_cast<int>(w->value.dim(0)); }
  Tensor forward(const Tensor& x) const;  // x [T, in] -> [T, out]
  // residual [T, out] + forward(x) in one op (ops::linear_add_forward): a block's closing residual add. Its backward
  // is backward() with the same dy, which is also the residual's gradient.
  Tensor forward_add(const Tensor& x, const Tensor& residual) const;
  // Returns dx [T, in] when need_dx (else an undefined tensor).
  Tensor backward(const Tensor& dy, const Tensor& x, bool need_dx) const;
};

// Linear layers reading the same input, with their weights (and biases) packed (ParamPack): one GEMM gives all
// their outputs side by side, y[T, sum out_i] = x @ [W_0; W_1; ...]^T + [b_0; b_1; ...]. The parameters keep their
// own (Hugging Face) names "{prefix_i}.weight" / "{prefix_i}.bias", so checkpoints do not change; they are created
// in the order a Linear per prefix would create them.
struct PackedLinear {
  ParamPack* w = nullptr;  // parts [out_i, in]
  ParamPack* b = nullptr;  // parts [out_i], or null
  int in = 0, out = 0;     // out = sum of the out_i
  static PackedLinear create(ParameterStore& store, const std::vector<std::string>& prefixes, ParamGroup group,
                             int in, const std::vector<int>& outs, bool bias, Device device);
  Tensor forward(const Tensor& x) const;  // x [T, in] -> [T, out]
  // dy [T, out]; returns dx [T, in] when need_dx (else an undefined tensor).
  Tensor backward(const Tensor& dy, const Tensor& x, bool need_dx) const;
};

struct LayerNorm {
  Param* w = nullptr;
  Param* b = nullptr;
  float eps = 1e-6f;
  struct Saved {
    Tensor mean, rstd;
  };
  static LayerNorm create(ParameterStore& store, const std::string& prefix, ParamGroup group, int dim, float eps,
                          Device device);
  Tensor forward(const Tensor& x, Saved& saved) const;
  Tensor backward(const Tensor& dy, const Tensor& x, const Saved& saved) const;
  // The residual add fused in: h = x + residual (written to h, allocated here), returns layernorm(h).
  Tensor forward_add(Tensor& h, const Tensor& x, const Tensor& residual, Saved& saved) const;
  // Returns backward(dy at h) + dh_next: the gradient of h, and so of both addends.
  Tensor backward_add(const Tensor& dy, const Tensor& dh_next, const Tensor& h, const Saved& saved) const;
};

struct RMSNorm {
  Param* w = nullptr;
  float eps = 1e-5f;
  struct Saved {
    Tensor rstd;
  };
  static RMSNorm create(ParameterStore& store, const std::string& prefix, ParamGroup group, int dim, float eps,
                        Device device);
  Tensor forward(const Tensor& x, Saved& saved) const;
  Tensor backward(const Tensor& dy, const Tensor& x, const Saved& saved) const;
  // As LayerNorm's: h = x + residual, returns rmsnorm(h); and backward(dy at h) + dh_next.
  Tensor forward_add(Tensor& h, const Tensor& x, const Tensor& residual, Saved& saved) const;
  Tensor backward_add(const Tensor& dy, const Tensor& dh_next, const Tensor& h, const Saved& saved) const;
};

struct AttentionShape {
  int heads = 1;
  int kv_heads = 1;
  int head_dim = 1;
  bool causal = false;
  bool rope = false;
  float rope_theta = 10000.f;
};

// q/k/v/o projections around ops::attention. Names follow HF: {prefix}.q_proj, k_proj, v_proj, and the output
// projection named by `out_name` ("o_proj" for Llama, "out_proj" for SigLIP). q, k and v are one packed projection
// (one GEMM). On CUDA attention reads them where the projection wrote them (row-strided views), RoPE rotating the q
// and k heads in place, and writes dq, dk, dv straight into the packed gradient; on the CPU, whose ops take contiguous
// tensors only, ops::qkv_split_forward copies them into heads with RoPE.
struct SelfAttention {
  PackedLinear qkv;  // parts q_proj [H*D, hidden], k_proj, v_proj [Hkv*D, hidden]
  Linear o;
  AttentionShape shape;
  struct Saved {
    Tensor q, k, v, out, lse;  // q/k after RoPE; [T, H, D] (on CUDA row-strided views of the projection)
  };
  // On CUDA attention reads q, k, v as column slices of the packed projection, RoPE rotating q and k there, and
  // writes dq, dk, dv into the packed gradient: no split copies (the CPU ops take contiguous tensors only).
  bool reads_packed_qkv(const Tensor& x) const;
  static SelfAttention create(ParameterStore& store, const std::string& prefix, const std::string& out_name,
                              ParamGroup group, int hidden, const AttentionShape& shape, bool qkv_bias, bool out_bias,
                              Device device);
  Tensor forward(const Tensor& x, const SeqInfo& seq, Saved& saved) const;  // x [T, hidden]
  Tensor backward(const Tensor& dy, const Tensor& x, const SeqInfo& seq, const Saved& saved) const;
};

// A new tensor with the dtype and device of `like`: activations and their gradients, which share the compute
// dtype of the weights (f32, or bf16 in bf16 mode).
Tensor new_like(const Shape& shape, const Tensor& like);
// A new f32 tensor on the device of `like`: statistics (norm mean/rstd, attention lse, losses) in every mode.
Tensor new_f32_like(const Shape& shape, const Tensor& like);

}  // namespace vlm

#!/usr/bin/env python3
# Generates the wgmma wrappers pasted into hopper_ptx.cuh (operand lists are long; by hand they invite typos):
#   python3 gen_wgmma.py > /tmp/wgmma.inc, then replace the block between the GENERATED markers.
def regs(n, start=0):
    return ", ".join(f"%{i}" for i in range(start, start + n))

def outs(n):
    return ", ".join(f'"+f"(d[{i}])' for i in range(n))

ss_widths = (64, 128, 160, 192)  # every SS width; RS (tnsp_b) only where n <= 128
out = []
for n in ss_widths:
    nacc = n // 2
    # SS: A and B from shared memory, both K-major; scale_d runtime (0: D = A*B, 1: D += A*B).
    out.append(f"""// D[64 x {n}] (+)= A[64 x 16] * B[16 x {n}], A and B K-major in shared memory (descriptors).
__device__ __forceinline__ void wgmma_m64n{n}k16_ss(float (&d)[{nacc}], uint64_t desc_a, uint64_t desc_b, int scale_d) {{
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nacc + 2}, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 "
      "{{{regs(nacc)}}}, %{nacc}, %{nacc + 1}, p, 1, 1, 0, 0;\\n}}\\n"
      : {outs(nacc)}
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}}
""")
    if n in (160, 192):
        continue  # SS only: the forward's wide key steps (S = Q K^T at d=128 and d=64)
    # RS: A from registers, B MN-major (transposed) in shared memory; scale_d as above.
    out.append(f"""// D[64 x {n}] += A[64 x 16] * B[16 x {n}], A in registers (the m16n8k16 A fragment per warp), B N-major.
__device__ __forceinline__ void wgmma_m64n{n}k16_rs_tnsp_b(float (&d)[{nacc}], const uint32_t (&a)[4], uint64_t desc_b,
                                                          int scale_d) {{
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nacc + 5}, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 "
      "{{{regs(nacc)}}}, {{{regs(4, nacc)}}}, %{nacc + 4}, p, 1, 1, 1;\\n}}\\n"
      : {outs(nacc)}
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}}
""")
# SS with both operands transposed (A M-major, B N-major): dQ = dS K with dS^T stored keys x queries.
for n in (64,):
    nacc = n // 2
    out.append(f"""// D[64 x {n}] (+)= A[64 x 16] * B[16 x {n}], A M-major and B N-major in shared memory.
__device__ __forceinline__ void wgmma_m64n{n}k16_ss_tnsp_ab(float (&d)[{nacc}], uint64_t desc_a, uint64_t desc_b,
                                                           int scale_d) {{
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nacc + 2}, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 "
      "{{{regs(nacc)}}}, %{nacc}, %{nacc + 1}, p, 1, 1, 1, 1;\\n}}\\n"
      : {outs(nacc)}
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}}
""")
# wgmma_ss<N>: the SS product by its width, for kernels templated on their tile sizes.
branches = "\n".join(f"  {'if' if i == 0 else 'else if'} constexpr (kN == {n}) wgmma_m64n{n}k16_ss(d, desc_a, desc_b, scale_d);"
                     for i, n in enumerate(ss_widths))
out.append(f"""// D[64 x kN] (+)= A[64 x 16] * B[16 x kN], both K-major in shared memory, for the widths generated above.
template <int kN>
__device__ __forceinline__ void wgmma_ss(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {{
  static_assert({" || ".join(f"kN == {n}" for n in ss_widths)}, "a width gen_wgmma.py generates");
{branches}
}}""")
print("\n".join(out))

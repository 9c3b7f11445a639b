#!/usr/bin/env bash
# dev/gpu/sass_stats.py: per-function counts from cuobjdump -sass text (predicated instructions, opcode modifiers,
# demangled names cut at the parameter list), --grep, and the errors for a file without functions and for a cubin
# where cuobjdump is absent.
set -uo pipefail
stats=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cat >"$dir/k.sass" <<'SASS'
	code for sm_90a
		Function : _ZN3vlm5flash12_GLOBAL__N_16kernelILi64ELb1EEEvPf
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                       /* 0x00000a00ff017b82 */
        /*0010*/                   R2UR UR55, R2 ;                              /* 0x00000000023772ca */
        /*0020*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT ;   /* 0x026000000818 */
        /*0030*/              @!P0 R2UR UR8, R2 ;                               /* 0x00000000020882ca */
        /*0040*/              @P1  BRA 0x80 ;                                   /* 0x0000000000001947 */
        /*0050*/                   EXIT ;                                       /* 0x000000000000794d */
		..........
		Function : cublas_like_kernel
        /*0000*/                   HGMMA.64x64x16.F32.BF16 R88, R120, gdesc[UR8].tnspB, R88 ;  /* 0x41 */
        /*0010*/                   EXIT ;                                       /* 0x000000000000794d */
SASS

out=$(python3 "$stats" --ops R2UR,HGMMA,BRA "$dir/k.sass") || fail "exit status $?: $out"
grep -qF "vlm::flash::(anonymous namespace)::kernel<64, true>" <<<"$out" && fail "namespaces not cut: $out"
grep -qF "kernel<64, true>: 6 instructions; R2UR 2, HGMMA 1, BRA 1" <<<"$out" || fail "first function: $out"
grep -qF "cublas_like_kernel: 2 instructions; R2UR 0, HGMMA 1, BRA 0" <<<"$out" || fail "second function: $out"

out=$(python3 "$stats" --grep cublas --top 1 "$dir/k.sass") || fail "--grep: exit status $?"
grep -q "kernel<64" <<<"$out" && fail "--grep kept a function it should drop: $out"
grep -qE "^    (HGMMA|EXIT) 1$" <<<"$out" || fail "--top 1: $out"

echo "no functions here" >"$dir/empty.sass"
python3 "$stats" "$dir/empty.sass" >/dev/null 2>&1 && fail "a file without functions passed"

touch "$dir/k.cubin"
py=$(python3 -c "import sys; print(sys.executable)")
msg=$(PATH=/nonexistent "$py" "$stats" "$dir/k.cubin" 2>&1) && fail "a cubin without cuobjdump passed"
grep -q "no cuobjdump" <<<"$msg" || fail "cubin error message: $msg"
echo "sass_stats_test: ok"

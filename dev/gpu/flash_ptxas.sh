#!/usr/bin/env bash
# ptxas's verdict on the Hopper attention kernels, on the build machine (no GPU needed): compiles each source to PTX
# and a sm_90a cubin with the build's flags and prints, per kernel, registers, spill bytes and any ptxas warning
# (C7517 / C7520: wgmma serialization, see docs/flash.md), plus each cubin's size. The cubins stay in OUT, for
# dev/gpu/sass_stats.py on the GPU machine (which has cuobjdump; this one does not).
#   dev/gpu/flash_ptxas.sh [SOURCE.cu ...]     (default: flash_hopper_fwd.cu and flash_hopper_bwd.cu)
# Environment: OUT (default /tmp/flash_ptxas), NVCC (default nvcc), EXTRA (more nvcc flags, e.g. -DFOO=1).
# Exit status 1 when ptxas warns (spills are marked in the table: the d=128 causal mixed-step forward spills ~100
# bytes in its producer, known and measured; any other spill is new).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/flash_ptxas}
NVCC=${NVCC:-nvcc}
mkdir -p "$OUT"
srcs=("$@")
[ ${#srcs[@]} -eq 0 ] && srcs=("$root/src/kernels/cuda/flash/flash_hopper_fwd.cu" "$root/src/kernels/cuda/flash/flash_hopper_bwd.cu")
read -r -a extra <<<"${EXTRA:-}"
status=0
for src in "${srcs[@]}"; do
  [ -f "$src" ] || { echo "flash_ptxas: no source $src" >&2; exit 2; }
  name=$(basename "$src" .cu)
  if ! "$NVCC" -ptx -I"$root/src" -DVLM_FLASH_HOPPER=1 -DVLM_HAVE_CUDA=1 -gencode=arch=compute_90a,code=sm_90a \
      --expt-relaxed-constexpr -O3 -std=c++17 "${extra[@]}" "$src" -o "$OUT/$name.ptx"; then
    echo "flash_ptxas: nvcc failed on $src" >&2
    exit 2
  fi
  if ! ptxas -arch=sm_90a -v "$OUT/$name.ptx" -o "$OUT/$name.cubin" >"$OUT/$name.ptxas.log" 2>&1; then
    cat "$OUT/$name.ptxas.log" >&2
    exit 2
  fi
  echo "== $name: $(stat -c %s "$OUT/$name.cubin") bytes of cubin ($OUT/$name.cubin)"
  # ptxas -v prints, per entry: "Compiling entry function 'NAME'", then the stack/spill line and the register line.
  # Names are demangled and cut to the function and its template arguments.
  c++filt <"$OUT/$name.ptxas.log" | awk '
    /Compiling entry function/ {
      fn = $0; sub(/.*Compiling entry function ./, "", fn); sub(/. for .sm_90a.*/, "", fn)
      sub(/^void /, "", fn); gsub(/vlm::flash::(\(anonymous namespace\)::)?/, "", fn); sub(/\(.*$/, "", fn)
      next
    }
    /spill stores/ { match($0, /[0-9]+ bytes spill stores/); st = substr($0, RSTART, RLENGTH) + 0
                     match($0, /[0-9]+ bytes spill loads/); ld = substr($0, RSTART, RLENGTH) + 0; next }
    /Used [0-9]+ registers/ { match($0, /Used [0-9]+ registers/); regs = substr($0, RSTART + 5, RLENGTH - 15) + 0
                              printf "  %-62s %4d registers  spills %4d / %4d bytes%s\n", fn, regs, st, ld,
                                     (st || ld) ? "  <- spills" : ""; next }
    /[Ww]arning/ { print "  WARNING: " $0 }
  '
  grep -qiE "warning" "$OUT/$name.ptxas.log" && status=1
done
exit $status

#!/usr/bin/env bash
# Packs binaries built here for the GPU machine: dev/gpu/gpu_pack.sh DEST BINARY... copies each binary (stripped)
# into DEST and the shared libraries they need that the GPU machine lacks into DEST/lib. Left out: glibc and the C++
# runtime, the driver and CUDA libraries (cudart, cuBLAS(Lt): the GPU machine's own CUDA 13 provides them), and
# OpenBLAS, libgomp, libgfortran, libquadmath, Open MPI, libpng and zlib, which the GPU machine has. What remains
# (libturbojpeg, libwebp, libsharpyuv, libcurl and its TLS stack, ...) must stay small: the tree plus what is
# carried is limited to 64 MiB: with PACK_XZ=1 the folder is replaced by DEST.tar.xz (about a fifth of the size;
# unpack there with python3 -c "import tarfile; tarfile.open('DEST.tar.xz').extractall('/tmp')", since the GPU
# machine may lack xz). Run there with LD_LIBRARY_PATH=DEST/lib:/usr/local/cuda/lib64.
# CUPTI is loaded with dlopen (the kernel trace of `vlm bench train`, kernels/cuda/kernel_trace.h), so ldd does not
# list it: when a binary names libcupti.so, this machine's libcupti.so.13 (about 4 MB) goes into DEST/lib too, since
# the GPU machine may lack it.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: dev/gpu/gpu_pack.sh DEST BINARY..." >&2; exit 2; }
dest=$1
shift
mkdir -p "$dest/lib"
keep_out='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|'
keep_out+='libcublasLt|libnvidia|libnccl|libcudnn|libopenblas|libblas|liblapack|libgomp|libgfortran|libquadmath|'
keep_out+='libmpi|libopen-pal|libopen-rte|libpmix|libhwloc|libevent|libz|libpng)[-._]'
# This machine's libcupti.so.13: the dynamic loader's cache, then the CUDA toolkit's usual folders.
find_cupti() {
  local c
  for c in "$(ldconfig -p 2>/dev/null | awk '$1 == "libcupti.so.13" {print $NF; exit}')" \
    /usr/local/cuda/lib64/libcupti.so.13 /usr/local/cuda-13.0/lib/libcupti.so.13 \
    /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13; do
    [ -n "$c" ] && [ -f "$c" ] && { echo "$c"; return 0; }
  done
  return 1
}
for exe in "$@"; do
  [ -x "$exe" ] || { echo "gpu_pack: $exe is not an executable (build it first)" >&2; exit 2; }
  cp "$exe" "$dest/"
  strip "$dest/$(basename "$exe")"
  ldd "$exe" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
    [[ $name =~ $keep_out ]] && continue
    [ -f "$dest/lib/$name" ] || cp -L "$path" "$dest/lib/$name"
  done
  if [ ! -f "$dest/lib/libcupti.so.13" ] && grep -q "libcupti.so" "$exe"; then
    if cupti=$(find_cupti); then
      cp -L "$cupti" "$dest/lib/libcupti.so.13"
    else
      echo "gpu_pack: $exe loads CUPTI, but no libcupti.so.13 was found here (its kernel trace will say so)" >&2
    fi
  fi
done
echo "packed into $dest: $(du -sh "$dest" | cut -f1)"
{ du -sh "$dest"/* "$dest"/lib/* 2>/dev/null || true; } | sed "s/^/  /"  # lib/ may be empty
if [ "${PACK_XZ:-0}" = 1 ]; then
  tar -cf - -C "$(dirname "$dest")" "$(basename "$dest")" | xz -6 -T0 >"$dest.tar.xz"
  rm -rf "$dest"
  echo "compressed to $dest.tar.xz: $(du -sh "$dest.tar.xz" | cut -f1)"
fi

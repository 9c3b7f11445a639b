#!/usr/bin/env bash
# Installs the Debian packages vlm.cpp builds against, when any is missing. Safe to run repeatedly.
set -euo pipefail
packages=(build-essential cmake pkg-config git
          libopenblas-dev libopenblas-openmp-dev libturbojpeg0-dev libpng-dev libwebp-dev
          libtomlplusplus-dev nlohmann-json3-dev libgtest-dev libbenchmark-dev zlib1g-dev python3-pil
          libcurl4-openssl-dev libopenmpi-dev openmpi-bin)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "[deps] all ${#packages[@]} packages present"
  exit 0
fi
echo "[deps] installing: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

#!/usr/bin/env bash
# Configures and builds one CMake preset: scripts/build.sh [cpu|cuda|debug] [extra cmake --build args].
# VLM_JOBS: parallel compile jobs (default: all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-cpu}"
shift || true
jobs="${VLM_JOBS:-$(nproc)}"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$jobs" "$@"

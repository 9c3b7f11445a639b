#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan) and runs each for SECONDS (default 600),
# all at once, one core each; new corpus entries and any crash land in fuzz-out/<target>/.
# usage: scripts/fuzz.sh [SECONDS] [target ...]     targets: tar image tokenizer_json chat_template safetensors
#                                                       api_request (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-600}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(tar image tokenizer_json chat_template safetensors api_request)
scripts/install_deps.sh
for p in clang libomp-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || {
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$p"; }
done
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVLM_FUZZ=ON -DVLM_CUDA=OFF >/dev/null
cmake --build build-fuzz -j "${VLM_JOBS:-$(nproc)}" --target "${targets[@]/#/fuzz_}"
mkdir -p fuzz-out
declare -A seeds=([tar]="tests/data/fixtures/tar" [image]="tests/fuzz/corpus/image tests/data/fixtures/pipeline"
                  [tokenizer_json]="tests/fuzz/corpus/tokenizer_json" [chat_template]="tests/fuzz/corpus/chat_template" [safetensors]="tests/fuzz/corpus/safetensors"
                  [api_request]="tests/fuzz/corpus/api_request")
pids=()
for t in "${targets[@]}"; do
  mkdir -p "fuzz-out/$t/corpus"
  # libFuzzer writes new inputs into the first corpus folder only: a scratch copy, the repo's seeds stay untouched.
  # shellcheck disable=SC2086
  build-fuzz/tests/fuzz/fuzz_$t -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=1048576 -timeout=10 \
    -artifact_prefix="fuzz-out/$t/" -print_final_stats=1 "fuzz-out/$t/corpus" ${seeds[$t]} \
    > "fuzz-out/$t/log.txt" 2>&1 &
  pids+=($!)
  echo "[fuzz] $t running for ${seconds}s (log fuzz-out/$t/log.txt)"
done
status=0
for i in "${!pids[@]}"; do
  t="${targets[$i]}"
  if wait "${pids[$i]}"; then
    echo "[fuzz] $t: no crash; $(grep -E 'stat::number_of_executed_units' "fuzz-out/$t/log.txt" | tail -1)"
  else
    echo "[fuzz] $t: FAILED, see fuzz-out/$t/log.txt"; tail -30 "fuzz-out/$t/log.txt"; status=1
  fi
done
exit $status

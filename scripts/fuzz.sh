#!/usr/bin/env bash
# Fuzzes remat's file readers (shards, text, checkpoints in fp32 and bf16,
# llama2.c's checkpoints, a checkpoint directory's DONE and state headers)
# and the planner's JSON parser
# with libFuzzer:
# configures build-fuzz with clang-14 and -DREMAT_FUZZ=ON (ASan and UBSan),
# builds the targets of tests/fuzz, and runs each for SECONDS (default 60),
# one after the other, starting from its seed corpus tests/fuzz/corpus/<t>/.
# Fails if any target crashes, leaks, trips a sanitizer or a property, times
# out or runs out of memory; the input that did it is kept as
# build-fuzz/artifacts/<t>/crash-* (or leak-, timeout-, oom-). To keep it as
# a regression test, fix the bug and copy the input into the seed corpus:
# the fuzz_<t>_replay unit tests replay every file there.
#
# usage: scripts/fuzz.sh [SECONDS]     (CC overrides clang-14)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
cc=${CC:-clang-14}
jobs=$(nproc)
dir=build-fuzz

cmake -S . -B "$dir" -DCMAKE_C_COMPILER="$cc" -DREMAT_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$dir" -j"$jobs" >/dev/null

# max_len per target: checkpoints and shards need a 1 KiB header and a body
declare -A max_len=([checkpoint]=8192 [ckpt5]=8192 [llama2c]=8192 [shard]=8192 [text]=1024 [plan_json]=4096 [ckptdir]=4096)
failed=()
for t in checkpoint ckpt5 llama2c shard text plan_json ckptdir; do
  work=$dir/corpus/$t
  art=$dir/artifacts/$t/
  mkdir -p "$work" "$art"
  log=$dir/fuzz_$t.log
  dict=()
  if [[ -f tests/fuzz/$t.dict ]]; then dict=(-dict="tests/fuzz/$t.dict"); fi
  # the first directory receives new inputs; the seeds stay as they are
  if "$dir/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
      -max_len="${max_len[$t]}" -artifact_prefix="$art" -print_final_stats=1 "${dict[@]}" \
      "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    echo "fuzz: $t: ${runs:-?} runs in ${secs}s, $cov, no crash"
  else
    echo "fuzz: $t: FAILED; input kept in $art, log $log:"
    grep -E 'ERROR|runtime error|property failed|SUMMARY' "$log" | head -5 | sed 's/^/    /'
    failed+=("$t")
  fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}"
  exit 1
fi

#!/usr/bin/env bash
# Under the guard backend (--backend guard: the CPU's kernels over an arena
# the host cannot touch except through the backend's operations and the
# windows it lends), every kind of run gives the CPU backend's bits: one
# process under keep, middle and full recompute in fp32 and bf16, pipelines
# under every schedule, replicas under every ZeRO stage, the grid, a resume,
# --save and `remat sample`. Compared per run: every step's loss, gradient
# norm and planned and measured peaks (every rank's), and the saved
# weights, byte for byte. A stray host touch would end the guarded run with
# a fault naming the offset and the calling functions.
# usage: guard.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1

common=(--config 4,64,4,256,64 --batch 4 --seq 32 --steps 3 --dropout 0.1 --threads 1
        --peak-gflops 10 --quiet)

# What a run's log says of each step, timings aside.
facts() {
  grep -o '"\(step\|loss\|grad_norm\|planned_peak_bytes\|measured_peak_bytes\)": [^,]*\|"rank_\(planned\|measured\)_peak_bytes": \[[^]]*\]' "$1"
}

# same NAME NP ARGS...: the run on NP ranks (0: no mpirun) under each
# backend; the logs' facts and the saved weights must be equal.
same() {
  local name=$1 np=$2
  shift 2
  local b
  for b in cpu guard; do
    rm -f "$name.$b.jsonl" "$name.$b.bin"
    if [[ $np == 0 ]]; then
      timeout -k 5 300 "$remat" train "$@" --backend "$b" --log "$name.$b.jsonl" \
        --save "$name.$b.bin" >"$name.$b.out" 2>&1
    else
      timeout -k 5 300 mpirun --oversubscribe -np "$np" "$remat" train "$@" --backend "$b" \
        --log "$name.$b.jsonl" --save "$name.$b.bin" >"$name.$b.out" 2>&1
    fi
    if [[ $? -ne 0 ]]; then
      bad "$name: the $b run failed: $(grep -m3 -i 'guard\|error\| at ' "$name.$b.out")"
      return
    fi
  done
  if ! diff <(facts "$name.cpu.jsonl") <(facts "$name.guard.jsonl") >"$name.diff"; then
    bad "$name: the guarded run's losses, norms or peaks differ: $(head -3 "$name.diff")"
  elif ! cmp -s "$name.cpu.bin" "$name.guard.bin"; then
    bad "$name: the guarded run saved other weights"
  elif [[ $(facts "$name.guard.jsonl" | grep -c '"loss"') -ne 3 ]]; then
    bad "$name: the log does not hold 3 steps"
  else
    ok "$name: guard = cpu, 3 steps and the saved weights, bit for bit"
  fi
}

precisions=(fp32)
if bf16_here; then precisions+=(bf16); else ok "bf16 cases skipped: this CPU has no bf16 instructions"; fi
for p in "${precisions[@]}"; do
  same "one-$p-keep" 0 "${common[@]}" --precision "$p"
  same "one-$p-full" 0 "${common[@]}" --precision "$p" --ckpt-ratio 1
  same "one-$p-mixed" 0 "${common[@]}" --precision "$p" --ckpt-layers middle:0-1,full:3
done
same one-eval 0 "${common[@]}" --precision fp32 --eval-every 2 --eval-batches 2

if command -v mpirun >/dev/null; then
  for s in 1f1b gpipe zb-h1; do
    same "pipe-$s" 2 "${common[@]}" --precision fp32 --stages 2 --grad-accum 4 --schedule "$s" \
      --ckpt-layers 1,middle:2
  done
  same pipe-interleaved 2 "${common[@]}" --precision fp32 --stages 2 --grad-accum 4 \
    --schedule interleaved --layers 1,1,1,1
  same pipe-zbv 2 "${common[@]}" --precision fp32 --stages 2 --grad-accum 4 --schedule zbv
  if bf16_here; then same pipe-bf16 2 "${common[@]}" --precision bf16 --stages 2 --grad-accum 2; fi
  for z in 0 1 2 3; do
    same "zero$z" 2 "${common[@]}" --precision fp32 --data-parallel 2 --grad-accum 2 --zero "$z"
  done
  if bf16_here; then same zero3-bf16 2 "${common[@]}" --precision bf16 --data-parallel 2 --zero 3; fi
  same grid 4 "${common[@]}" --precision fp32 --stages 2 --data-parallel 2 --grad-accum 2 --zero 1
fi

# A resume under the guard: checkpoints at step 2, resumed to step 3, equal
# to the CPU's uninterrupted run.
rm -rf gck
timeout -k 5 300 "$remat" train "${common[@]}" --precision fp32 --steps 2 --backend guard \
  --checkpoint-dir gck --checkpoint-every 2 >resume1.out 2>&1 &&
  timeout -k 5 300 "$remat" train "${common[@]}" --precision fp32 --resume gck --backend guard \
    --save resumed.bin >resume2.out 2>&1
rc=$?
if [[ $rc -ne 0 ]]; then
  bad "resume under guard failed: $(grep -m3 -i 'guard\|error' resume1.out resume2.out)"
else
  check "resume under guard: step 3's weights = the CPU's uninterrupted run's" \
    cmp -s resumed.bin one-fp32-keep.cpu.bin
fi

# remat sample from the saved model: the same text under both.
for b in cpu guard; do
  timeout -k 5 120 "$remat" sample --model one-fp32-keep.cpu.bin --bytes --tokens 40 \
    --temperature 0.8 --backend "$b" >"sample.$b.txt" 2>"sample.$b.err"
done
if [[ ! -s sample.cpu.txt ]]; then
  bad "sample under cpu wrote nothing: $(head -c 300 sample.cpu.err)"
else
  check "remat sample: guard = cpu, the same text" cmp -s sample.cpu.txt sample.guard.txt
fi

summary

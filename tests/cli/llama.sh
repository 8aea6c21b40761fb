#!/usr/bin/env bash
# The Llama family trained exactly, as GPT-2 is: one process's losses and
# gradient norms are the same bits under keep, full and middle recompute,
# with --mem choosing the policies, for an untied head with fewer key/value
# heads than heads and for a tied head with one key/value head; a 2-stage
# pipeline (1f1b, gpipe), 2 replicas under ZeRO 1 and 3, a 2 x 2 grid and a
# resumed run give one process's bits; so do the zero-bubble schedules
# (zb-h1, zbv; 2 stages, and 4 of 2 chunks under zbv), with dropout and a
# kept, a middle and a recomputed block too; every rank's arena planned =
# measured, and each stage's figure is the planner's; the planner answers
# for Llama 3 8B on 8 stages.
# usage: llama.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1

untied=(--config llama:4,64,4,2,160,256,64 --batch 2 --seq 32 --precision fp32)
tied=(--config llama:4,64,4,1,160,256,64,500000,1 --batch 2 --seq 32 --precision fp32)
common=(--steps 3 --threads 1 --peak-gflops 10 --quiet)

# the logs' checks (lib.sh), for runs of 3 steps
bits() { log_bits "$1" "$2" 3; }
planned() { log_planned "$1"; }
ranks() { log_ranks "$1" "$2"; }

for kind in untied tied; do
  declare -n shape=$kind
  "$remat" train "${shape[@]}" "${common[@]}" --log "$kind-keep.jsonl" >/dev/null 2>&1
  check "$kind: one process trains and planned = measured" planned "$kind-keep.jsonl"
  for p in "full:--ckpt-ratio 1" "middle:--ckpt-layers middle:0-3" "mixed:--ckpt-layers 1,middle:2"; do
    name=${p%%:*}
    # shellcheck disable=SC2086
    "$remat" train "${shape[@]}" "${common[@]}" ${p#*:} --log "$kind-$name.jsonl" >/dev/null 2>&1
    check "$kind: $name recompute gives keep's bits" bits "$kind-keep.jsonl" "$kind-$name.jsonl"
    check "$kind: $name recompute, planned = measured" planned "$kind-$name.jsonl"
  done
  # a byte less than keeping every block needs
  mem=$(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['rank_planned_peak_bytes'][0] - 1)" "$kind-keep.jsonl")
  "$remat" train "${shape[@]}" "${common[@]}" --mem "$mem" --log "$kind-mem.jsonl" \
    >"$kind-mem.out" 2>&1
  check "$kind: --mem below keep's arena picks recompute and gives keep's bits" \
    bits "$kind-keep.jsonl" "$kind-mem.jsonl"
  check "$kind: --mem below keep's arena recomputes something" \
    python3 -c "import json,sys; x=json.loads(open(sys.argv[1]).readline()); sys.exit(not x['recomputed_blocks'] + x['middle_blocks'] > 0)" "$kind-mem.jsonl"

  "$remat" train "${shape[@]}" "${common[@]}" --grad-accum 2 --log "$kind-accum.jsonl" \
    --save "$kind-accum.bin" >/dev/null 2>&1
  mpi 2 "$remat" train "${shape[@]}" "${common[@]}" --stages 2 --grad-accum 2 \
    --log "$kind-pipe.jsonl" >/dev/null 2>&1
  check "$kind: 2 stages, 1f1b, give one process's bits" bits "$kind-accum.jsonl" "$kind-pipe.jsonl"
  check "$kind: 2 stages, planned = measured on each" ranks "$kind-pipe.jsonl" 2
  mpi 2 "$remat" train "${shape[@]}" "${common[@]}" --stages 2 --grad-accum 2 --schedule gpipe \
    --log "$kind-gpipe.jsonl" >/dev/null 2>&1
  check "$kind: 2 stages, gpipe, give one process's bits" bits "$kind-accum.jsonl" "$kind-gpipe.jsonl"
  for z in 1 3; do
    mpi 2 "$remat" train "${shape[@]}" "${common[@]}" --data-parallel 2 --zero $z \
      --log "$kind-dp$z.jsonl" --save "$kind-dp$z.bin" >/dev/null 2>&1
    check "$kind: 2 replicas, ZeRO $z, give one process's bits" bits "$kind-accum.jsonl" "$kind-dp$z.jsonl"
    check "$kind: 2 replicas, ZeRO $z, planned = measured on each" ranks "$kind-dp$z.jsonl" 2
    check "$kind: 2 replicas, ZeRO $z, save one process's bytes" cmp -s "$kind-accum.bin" "$kind-dp$z.bin"
  done
done

# a 2 x 2 grid: 2 pipelines of 2 stages, against 4 micro-batches in one process
"$remat" train "${untied[@]}" "${common[@]}" --grad-accum 4 --log grid1.jsonl >/dev/null 2>&1
mpi 4 "$remat" train "${untied[@]}" "${common[@]}" --stages 2 --data-parallel 2 --grad-accum 2 \
  --log grid4.jsonl >/dev/null 2>&1
check "untied: a 2 x 2 grid gives one process's bits" bits grid1.jsonl grid4.jsonl
check "untied: a 2 x 2 grid, planned = measured on each rank" ranks grid4.jsonl 4

# the planner's stage figures are the ranks' arenas: 4 stages of 1 block each
"$remat" plan "${untied[@]}" --stages 4 --microbatches 4 --mem 1GiB --format json -o plan4.json \
  >/dev/null 2>&1
mpi 4 "$remat" train "${untied[@]}" "${common[@]}" --stages 4 --grad-accum 4 --plan plan4.json \
  --log pipe4.jsonl >/dev/null 2>&1
check "untied: 4 stages, planned = measured on each rank" ranks pipe4.jsonl 4
check "untied: 4 stages, the planner's per-stage bytes are the ranks' arenas" python3 - <<'PY'
import json, sys
plan = json.load(open("plan4.json"))
run = json.loads(open("pipe4.jsonl").readline())
stages = [s.get("stream_peak_bytes") or s["memory_bytes"] for s in plan["stages"]]
sys.exit(not (stages == run["rank_planned_peak_bytes"]))
PY

# resume: 3 steps, then 3 more from the checkpoint, against 6 at once
"$remat" train "${untied[@]}" --steps 6 --threads 1 --peak-gflops 10 --quiet \
  --log six.jsonl >/dev/null 2>&1
"$remat" train "${untied[@]}" --steps 3 --threads 1 --peak-gflops 10 --quiet \
  --checkpoint-dir ck --checkpoint-every 3 >/dev/null 2>&1
"$remat" train "${untied[@]}" --steps 6 --threads 1 --peak-gflops 10 --quiet \
  --resume ck --log resumed.jsonl >/dev/null 2>&1
check "untied: a resumed run gives the uninterrupted run's bits" python3 - <<'PY'
import json, sys
a = [(x["loss"], x["grad_norm"]) for x in map(json.loads, open("six.jsonl"))]
b = [(x["loss"], x["grad_norm"]) for x in map(json.loads, open("resumed.jsonl"))]
sys.exit(not (len(a) == 6 and a[3:] == b[-3:]))
PY

# the planner answers for Llama 3 8B: 8 stages, 16 micro-batches, 80 GiB
# in bf16 where this CPU has its instructions (the bytes of oneDNN's scratchpad
# are this CPU's), else in fp32
prec8b=bf16
"$remat" train --config tiny --steps 0 --precision bf16 --quiet >/dev/null 2>&1 || prec8b=fp32
start=$(date +%s.%N)
"$remat" plan --config llama3-8b --stages 8 --microbatches 16 --batch 1 --seq 8192 \
  --mem 80GiB --precision $prec8b >plan8b.out 2>&1
end=$(date +%s.%N)
check "llama3-8b on 8 stages is planned" grep -q "^problem: Llama L=32 C=4096 NH=32 NKV=8 H=14336 V=128256" plan8b.out
check "llama3-8b on 8 stages answers in under 10 s" python3 -c "import sys; sys.exit(not float(sys.argv[2]) - float(sys.argv[1]) < 10)" "$start" "$end"

# zero-bubble schedules: a kept block's B fills its W record and its W
# reads it later; a middle or recomputed block runs its whole backward in B
for sched in zb-h1 zbv; do
  mpi 2 "$remat" train "${untied[@]}" "${common[@]}" --stages 2 --grad-accum 2 --schedule $sched \
    --log "zb-$sched.jsonl" >/dev/null 2>&1
  check "untied: 2 stages, $sched, give one process's bits" bits untied-accum.jsonl "zb-$sched.jsonl"
  check "untied: 2 stages, $sched, planned = measured on each" ranks "zb-$sched.jsonl" 2
done
# with dropout, a kept, a recomputed and a middle block on the stages
mixed=(--dropout 0.1 --ckpt-layers 1,middle:2 --grad-accum 2)
"$remat" train "${untied[@]}" "${common[@]}" "${mixed[@]}" --log zb-one.jsonl >/dev/null 2>&1
for c in "zb-h1 2,2" "zbv 1,1,1,1"; do
  read -r sched layers <<<"$c"
  mpi 2 "$remat" train "${untied[@]}" "${common[@]}" "${mixed[@]}" --stages 2 --schedule $sched \
    --layers "$layers" --log "zbm-$sched.jsonl" >/dev/null 2>&1
  check "untied, dropout, keep, middle and full: 2 stages, $sched, give one process's bits" \
    bits zb-one.jsonl "zbm-$sched.jsonl"
  check "untied, dropout, keep, middle and full: 2 stages, $sched, planned = measured on each" \
    ranks "zbm-$sched.jsonl" 2
done
# 4 stages of 2 chunks under zbv (6 blocks): the planner's per-stage bytes are the ranks' arenas
six=(--config llama:6,64,4,2,160,256,64 --batch 2 --seq 32 --precision fp32)
"$remat" plan "${six[@]}" --stages 4 --microbatches 4 --schedule zbv --mem 1GiB --format json \
  -o planv.json >/dev/null 2>&1
"$remat" train "${six[@]}" "${common[@]}" --grad-accum 4 --log six1.jsonl >/dev/null 2>&1
mpi 4 "$remat" train "${six[@]}" "${common[@]}" --stages 4 --grad-accum 4 --schedule zbv \
  --plan planv.json --log six4.jsonl >/dev/null 2>&1
check "6 blocks: 4 stages, zbv, give one process's bits" bits six1.jsonl six4.jsonl
check "6 blocks: 4 stages, zbv, planned = measured on each rank" ranks six4.jsonl 4
check "6 blocks: 4 stages, zbv, the planner's pooled per-stage bytes are the ranks' arenas, below the bound" python3 - <<'PY'
import json, sys
plan = json.load(open("planv.json"))
run = json.loads(open("six4.jsonl").readline())
held = [s["stream_peak_bytes"] for s in plan["stages"]]
bound = [s["memory_bytes"] for s in plan["stages"]]
# everything kept: the pools of slots and W records are at most them side
# by side, and below on the stages with blocks to keep (the last three)
sys.exit(not (held == run["rank_planned_peak_bytes"] and all(h <= b for h, b in zip(held, bound))
              and all(h < b for h, b in zip(held[1:], bound[1:]))))
PY
summary

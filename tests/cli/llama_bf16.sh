#!/usr/bin/env bash
# The Llama family in bf16 trained exactly, as GPT-2 in bf16 is: one
# process's losses and gradient norms are the same bits under keep, full and
# middle recompute; a 2-stage pipeline and 2 replicas under ZeRO 1 and 3
# give one process's bits with the same micro-batches, and so do 2 stages
# under zb-h1 and zbv (with dropout and a kept, a middle and a recomputed
# block too); every arena planned = measured; for a tied head with one
# key/value head too; and the bf16 loss stays within 0.05 of the fp32 loss
# over 10 steps.
# usage: llama_bf16.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1

if ! bf16_here; then
  ok "skipped: this CPU has no bf16 instructions (AVX512-BF16 or AMX)"
  summary llama_bf16
  exit $?
fi

small=(--config llama-small --batch 2 --seq 64 --precision bf16)
tied=(--config llama:4,64,4,1,160,256,64,500000,1 --batch 2 --seq 32 --precision bf16)
common=(--steps 4 --threads 1 --peak-gflops 10 --quiet)

# the logs' checks (lib.sh), for runs of 4 steps
bits() { log_bits "$1" "$2" 4; }
planned() { log_planned "$1"; }
ranks() { log_ranks "$1" "$2"; }

for kind in small tied; do
  declare -n shape=$kind
  "$remat" train "${shape[@]}" "${common[@]}" --log "$kind-keep.jsonl" >/dev/null 2>&1
  check "$kind: one process trains in bf16, planned = measured" planned "$kind-keep.jsonl"
  for p in "full:--ckpt-ratio 1" "middle:--ckpt-layers middle:0-3"; do
    name=${p%%:*}
    # shellcheck disable=SC2086
    "$remat" train "${shape[@]}" "${common[@]}" ${p#*:} --log "$kind-$name.jsonl" >/dev/null 2>&1
    check "$kind: $name recompute gives keep's bits" bits "$kind-keep.jsonl" "$kind-$name.jsonl"
    check "$kind: $name recompute, planned = measured" planned "$kind-$name.jsonl"
  done

  "$remat" train "${shape[@]}" "${common[@]}" --grad-accum 2 --log "$kind-accum.jsonl" \
    >/dev/null 2>&1
  check "$kind: 2 micro-batches, planned = measured" planned "$kind-accum.jsonl"
  mpi 2 "$remat" train "${shape[@]}" "${common[@]}" --stages 2 --grad-accum 2 \
    --log "$kind-pipe.jsonl" >/dev/null 2>&1
  check "$kind: 2 stages give one process's bits" bits "$kind-accum.jsonl" "$kind-pipe.jsonl"
  check "$kind: 2 stages, planned = measured on each" ranks "$kind-pipe.jsonl" 2
  for z in 1 3; do
    mpi 2 "$remat" train "${shape[@]}" "${common[@]}" --data-parallel 2 --zero $z \
      --log "$kind-dp$z.jsonl" >/dev/null 2>&1
    check "$kind: 2 replicas, ZeRO $z, give one process's bits" \
      bits "$kind-accum.jsonl" "$kind-dp$z.jsonl"
    check "$kind: 2 replicas, ZeRO $z, planned = measured on each" ranks "$kind-dp$z.jsonl" 2
  done
done

# bf16 against fp32: the same run's losses stay close over 10 steps
ten=(--config llama-small --batch 2 --seq 64 --steps 10 --threads 1 --peak-gflops 10 --quiet)
"$remat" train "${ten[@]}" --precision fp32 --log fp32.jsonl >/dev/null 2>&1
"$remat" train "${ten[@]}" --precision bf16 --log bf16.jsonl >/dev/null 2>&1
check "bf16's loss within 0.05 of fp32's over 10 steps" python3 - <<'PY'
import json, sys
a = [x["loss"] for x in map(json.loads, open("fp32.jsonl"))]
b = [x["loss"] for x in map(json.loads, open("bf16.jsonl"))]
d = max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) == 10 else float("inf")
print("    max |bf16 - fp32| loss over 10 steps: %.6f" % d)
sys.exit(not d < 0.05)
PY

# zero-bubble schedules: a kept block's B fills its W record (the
# products' douts in bf16) and its W reads it later
for sched in zb-h1 zbv; do
  mpi 2 "$remat" train "${small[@]}" "${common[@]}" --stages 2 --grad-accum 2 --schedule $sched \
    --log "zb-$sched.jsonl" >/dev/null 2>&1
  check "small: 2 stages, $sched, give one process's bits" bits small-accum.jsonl "zb-$sched.jsonl"
  check "small: 2 stages, $sched, planned = measured on each" ranks "zb-$sched.jsonl" 2
done
# with dropout, a kept, a recomputed and a middle block on the stages
mixed=(--dropout 0.1 --ckpt-layers 1,middle:2 --grad-accum 2)
"$remat" train "${tied[@]}" "${common[@]}" "${mixed[@]}" --log zb-one.jsonl >/dev/null 2>&1
for c in "zb-h1 2,2" "zbv 1,1,1,1"; do
  read -r sched layers <<<"$c"
  mpi 2 "$remat" train "${tied[@]}" "${common[@]}" "${mixed[@]}" --stages 2 --schedule $sched \
    --layers "$layers" --log "zbm-$sched.jsonl" >/dev/null 2>&1
  check "tied, dropout, keep, middle and full: 2 stages, $sched, give one process's bits" \
    bits zb-one.jsonl "zbm-$sched.jsonl"
  check "tied, dropout, keep, middle and full: 2 stages, $sched, planned = measured on each" \
    ranks "zbm-$sched.jsonl" 2
done
summary

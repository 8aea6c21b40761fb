#!/usr/bin/env bash
# Recompute per micro-batch (--ckpt-layers full@K:LIST): a block recomputes in
# full in only the last K of its stage's in-flight slots. 2-stage pipelines
# (and a 3-stage one) under 1F1B and ZB-H1 give one process's and all-kept's
# losses, gradient norms and saved weights bit for bit, every rank's arena
# planned = measured; GPT-2 and a Llama, fp32 and (where the CPU has it)
# bf16; under the guard backend too. Stage 0's activations (its trace's
# arena counter, which counts each slot's own bytes, from its least to its
# most, the planned peak) lie strictly between all kept and all full. One
# process takes full@1 as full. K above a stage's in-flight count and
# malformed lists are one-line errors.
# usage: slots.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1

# the model of pipeline.sh: 6 blocks, B=4, T=32, 5 micro-batches (stage 0
# of 2 holds 2 in flight under 1F1B and ZB-H1, of 3 holds 3)
gpt=(--config 6,64,4,256,64 --batch 4 --seq 32)
llama=(--config llama:4,64,4,2,160,256,64 --batch 2 --seq 32)
run=(--grad-accum 5 --steps 3 --dropout 0.1 --warmup 1 --cosine --threads 1 --peak-gflops 10
     --quiet)

# one NAME SHAPE PRECISION: one process, all kept
one() {
  local -n shape=$2
  "$remat" train "${shape[@]}" "${run[@]}" --precision "$3" --log "$1.jsonl" --save "$1.bin" \
    >"$1.out" 2>&1
}
# pipe NAME SHAPE PRECISION P SCHEDULE LAYERS LIST [ARGS...]: P stages, LIST the --ckpt-layers
# (- for none)
pipe() {
  local name=$1 prec=$3 P=$4 sched=$5 layers=$6 list=$7
  local -n shape=$2
  local ck=()
  [[ $list != - ]] && ck=(--ckpt-layers "$list")
  mpi "$P" "$remat" train "${shape[@]}" "${run[@]}" --precision "$prec" --stages "$P" \
    --schedule "$sched" --layers "$layers" "${ck[@]}" "${@:8}" --log "$name.jsonl" \
    --save "$name.bin" >"$name.out" 2>&1
}
# same NAME REF TEXT: NAME's run gives REF's bits and saved weights, planned = measured
same() {
  if same_run "$2.jsonl" "$2.bin" "$1.jsonl" "$1.bin" 3; then ok "$3"
  else bad "$3"; tail -3 "$1.out"; fi
}

# --- GPT-2, fp32: 1F1B and ZB-H1, all kept against full in some slots
one g1 gpt fp32
for sched in 1f1b zb-h1; do
  pipe "gk-$sched" gpt fp32 2 "$sched" 3,3 - --trace "gk-$sched.json"
  same "gk-$sched" g1 "GPT-2 fp32, 2 stages $sched, all kept = one process"
  lists=(full@1:0-2 "full@1:0-1,middle:2,full@1:4")
  for k in 0 1; do
    pipe "gp$k-$sched" gpt fp32 2 "$sched" 3,3 "${lists[k]}" --trace "gp$k-$sched.json"
    same "gp$k-$sched" g1 "GPT-2 fp32, 2 stages $sched, ${lists[k]} = one process = all kept"
    check "$sched, ${lists[k]}: stage 0's line shows its two slots and 'full in 1 of 2 slots'" \
      grep -q "^stage 0 .*2 in flight (1 x .*; full in 1 of 2 slots: 0" "gp$k-$sched.out"
  done
done
# the guard backend: nothing but the backend's operations touches the
# arena, whose slots now differ in size; the CPU's bits
pipe gg gpt fp32 2 zb-h1 3,3 "full@1:0-1,middle:2,full@1:4" --backend guard
same gg gp1-zb-h1 "the guard backend, zb-h1, full@1:0-1,middle:2,full@1:4 = the CPU's bits"
pipe gf gpt fp32 2 1f1b 3,3 0-2 --trace gf.json
same gf g1 "GPT-2 fp32, 2 stages 1f1b, blocks 0-2 full = one process"
pipe g3 gpt fp32 3 zb-h1 2,2,2 full@1:0-3
same g3 g1 "GPT-2 fp32, 3 stages zb-h1, full@1:0-3 (stage 0 of 3 slots, 1 of 2) = one process"

# Stage 0's activations from its trace: the arena counter's least (no slot
# taken) and most (both slots, the planned peak); under full@1:0-2 it moves
# through each slot's own bytes (4 values: none, either, both).
check "stage 0's activations: all full < full@1:0-2 < all kept (trace counters, 1f1b)" \
  python3 - <<'PY'
import json
def stage0(name):
    ev = json.load(open(name + ".json"))["traceEvents"]
    v = [list(e["args"].values())[0] for e in ev if e["ph"] == "C" and e["pid"] == 0]
    peak = json.loads(open(name + ".jsonl").readline())["rank_planned_peak_bytes"][0]
    return max(v) - min(v), max(v) == peak, len(set(v))
kept, part, full = stage0("gk-1f1b"), stage0("gp0-1f1b"), stage0("gf")
print("    activations: all kept %d, full@1:0-2 %d, all full %d; counter values %d, %d, %d"
      % (kept[0], part[0], full[0], kept[2], part[2], full[2]))
ok = full[0] < part[0] < kept[0] and kept[1] and part[1] and full[1] and part[2] == 4
raise SystemExit(0 if ok else 1)
PY

# --- a Llama, fp32
one l1 llama fp32
pipe lk llama fp32 2 zb-h1 2,2 -
same lk l1 "Llama fp32, 2 stages zb-h1, all kept = one process"
for sched in 1f1b zb-h1; do
  pipe "lp-$sched" llama fp32 2 "$sched" 2,2 "full@1:0-1,middle:2"
  same "lp-$sched" l1 "Llama fp32, 2 stages $sched, full@1:0-1,middle:2 = one process = all kept"
done

# --- bf16, where the CPU has it (as bf16.sh decides)
"$remat" train --config tiny --steps 1 --precision bf16 --quiet --peak-gflops 10 >probe.out 2>&1
if grep -q "needs AVX512-BF16" probe.out; then
  echo "skip: bf16: $(head -1 probe.out)"
else
  one b1 gpt bf16
  for sched in 1f1b zb-h1; do
    pipe "bp-$sched" gpt bf16 2 "$sched" 3,3 "full@1:0-2,middle:3"
    same "bp-$sched" b1 "GPT-2 bf16, 2 stages $sched, full@1:0-2,middle:3 = one process"
  done
  one lb1 llama bf16
  pipe lbp llama bf16 2 zb-h1 2,2 full@1:0-1
  same lbp lb1 "Llama bf16, 2 stages zb-h1, full@1:0-1 = one process"
fi

# --- one process: full@1 is full (its one slot), the same arena and bits
"$remat" train "${gpt[@]}" "${run[@]}" --precision fp32 --ckpt-layers full@1:0-5 --log s1.jsonl \
  --save s1.bin >s1.out 2>&1
"$remat" train "${gpt[@]}" "${run[@]}" --precision fp32 --ckpt-layers 0-5 --log sf.jsonl \
  --save sf.bin >sf.out 2>&1
if same_run g1.jsonl g1.bin s1.jsonl s1.bin 3 && python3 - <<'PY'
import json
a, b = (json.loads(open(f).readline())["planned_peak_bytes"] for f in ("s1.jsonl", "sf.jsonl"))
raise SystemExit(0 if a == b else 1)
PY
then ok "one process: full@1:0-5 = full 0-5's arena, keep's bits"
else bad "one process full@1"; tail -3 s1.out; fi

# --- the planner's choice: remat plan --per-microbatch, run by --plan and
# planned by remat train itself
plan=(plan "${gpt[@]}" --stages 2 --microbatches 5 --mem 4.8MiB --precision fp32)
"$remat" "${plan[@]}" --per-microbatch --format json -o pm.json >pm.plan 2>&1
"$remat" "${plan[@]}" --per-microbatch >pm.table 2>&1
check "remat plan --per-microbatch: stage 0 recomputes layers 2 and 3 in 1 of its 2 slots" \
  python3 -c 'import json; s = json.load(open("pm.json"))["stages"]
raise SystemExit(0 if s[0]["full_slots"] == [[2, 1], [3, 1]] and "full_slots" not in s[1] else 1)'
check "the table says '2-3 in 1/2 slots'" grep -q "2-3 in 1/2 slots" pm.table
mpi 2 "$remat" train "${gpt[@]}" "${run[@]}" --precision fp32 --stages 2 --plan pm.json \
  --log pp.jsonl --save pp.bin >pp.out 2>&1
same pp g1 "remat train --plan with full_slots = one process, planned = measured"
check "--plan: each rank's arena is the plan's memory_bytes" python3 - <<'PY'
import json
plan = [s.get("stream_peak_bytes") or s["memory_bytes"] for s in json.load(open("pm.json"))["stages"]]
log = json.loads(open("pp.jsonl").readline())["rank_planned_peak_bytes"]
print("    plan", plan, "ranks", log)
raise SystemExit(0 if plan == log else 1)
PY
mpi 2 "$remat" train "${gpt[@]}" "${run[@]}" --precision fp32 --stages 2 --mem 4.8MiB \
  --per-microbatch --log pt.jsonl --save pt.bin >pt.out 2>&1
same pt g1 "remat train --stages 2 --mem --per-microbatch = one process, planned = measured"
check "remat train --per-microbatch places what remat plan does" python3 - <<'PY'
import json
a = json.loads(open("pp.jsonl").readline())["rank_planned_peak_bytes"]
b = json.loads(open("pt.jsonl").readline())["rank_planned_peak_bytes"]
raise SystemExit(0 if a == b else 1)
PY
check "--per-microbatch: the run shows stage 0's slots" \
  grep -q "^stage 0 .*full in 1 of 2 slots: 1-2" pt.out
"$remat" "${plan[@]}" --per-microbatch --format colossalai >pm.colossal 2>&1
check "the ColossalAI export recomputes them for every micro-batch and says so" \
  grep -q "for only some of their stage's micro-batches" pm.colossal
"$remat" "${plan[@]}" --per-microbatch --format megatron >pm.megatron 2>&1
check "the Megatron export says so too" \
  grep -q "for only some of their stage's micro-batches" pm.megatron
expect_error "--per-microbatch under zbv" "one chunk per stage" \
  plan "${gpt[@]}" --stages 2 --microbatches 5 --mem 8MiB --schedule zbv --per-microbatch
expect_error "--per-microbatch in the LP export" "not per micro-batch" \
  "${plan[@]}" --per-microbatch --format lp
python3 - <<'PY'
import json
d = json.load(open("pm.json"))
d["stages"][0]["full_slots"] = [[2, 2]]
json.dump(d, open("bad.json", "w"))
PY
expect_fail_mpi "a plan's full_slots of all a stage's slots" "full_slots" 2 \
  "${gpt[@]}" "${run[@]}" --precision fp32 --stages 2 --plan bad.json

# --- refusals
expect_error "one process holds one slot" \
  "block 1 recomputes in full in 2 slots.*one process holds 1" \
  train --config tiny --steps 1 --ckpt-layers full@2:1
expect_error "K of 0" "full@K" train --config tiny --steps 1 --ckpt-layers full@0:1
expect_error "a block named twice" "names block 1 twice" \
  train --config tiny --steps 1 --ckpt-layers full@1:0-1,middle:1
expect_error "no list after full@K:" "full@K" train --config tiny --steps 1 --ckpt-layers full@1:
expect_fail_mpi "K above stage 0's 2 in flight" \
  "block 1 recomputes in full in 3 slots (full@3) but its stage 0 holds 2 micro-batches in" 2 \
  "${gpt[@]}" "${run[@]}" --stages 2 --layers 3,3 --ckpt-layers full@3:1
expect_fail_mpi "K above the last stage's 1 in flight" \
  "block 4 recomputes in full in 2 slots (full@2) but its stage 1 holds 1 micro-batch in" 2 \
  "${gpt[@]}" "${run[@]}" --stages 2 --layers 3,3 --ckpt-layers full@2:4
expect_fail_mpi "full@K with stages the planner places" "give --layers too" 2 \
  "${gpt[@]}" "${run[@]}" --stages 2 --ckpt-layers full@1:1

summary

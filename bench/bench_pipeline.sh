#!/usr/bin/env bash
# bench_pipeline.sh: pipeline stages over MPI, measured against the plan.
#
# 1. Prediction: the iteration time the plan's schedule simulation predicts
#    (FLOP-based stage times at this machine's sgemm rate) beside the one
#    measured, and each rank's arena planned against measured.
# 2. Placement: at one memory budget, remat's exact plan (layers and
#    recomputed blocks per stage) against an even split that recomputes the
#    same number of blocks on every stage (all Megatron's
#    --recompute-num-layers can express), the fewest that fit.
# 3. Schedules: on P=2 ranks of one thread each (no more ranks than this
#    machine's cores, so the times are real), the best plan under 1F1B,
#    ZB-H1, interleaved 1F1B (2 chunks per rank) and ZB-V at one budget,
#    alternated; each one's measured and predicted iteration time (placed
#    and predicted by --calibrate's measured layer times) and bubble, and
#    every rank's arena (ZB-H1 holds a micro-batch until its W; interleaved
#    more micro-batches of smaller chunks) and ZB-V.
#
# P ranks on a 2-core machine are oversubscribed: times are for comparing
# the two placements and the prediction, run alternately, not for speed.
# One line per case, key=value.
#
# usage: bench/bench_pipeline.sh [REMAT] [STEPS]   (default ./build/app/remat, 6)
#        SECTIONS="3 4" bench/bench_pipeline.sh ...   only those sections
set -euo pipefail
remat=${1:-./build/app/remat}
steps=${2:-6}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cfg="12,256,8,8192,256"
P=4
M=8
common=(--config "$cfg" --batch 4 --seq 128 --grad-accum "$M" --steps "$steps" --threads 1 --quiet
        --precision fp32)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sections=" ${SECTIONS:-1 2 3 4} "
want() { [[ $sections == *" $1 "* ]]; }

run() { # run NAME args... : prints one line from the run's summary and log
  local name=$1
  shift
  mpirun --oversubscribe -np $P "$remat" train "${common[@]}" "$@" --log "$tmp/$name.jsonl" \
    --peak-gflops "$peak_gflops" >"$tmp/$name.out" 2>&1
  python3 - "$name" "$tmp/$name.out" "$tmp/$name.jsonl" <<'PY'
import json, re, sys
name, out, log = sys.argv[1:4]
text = open(out).read()
m = re.search(r"iteration ([0-9.]+) s measured, ([0-9.]+) s predicted .*bubble ([0-9.]+)%", text)
rows = [json.loads(l) for l in open(log)]
steps = sorted(r["step_s"] for r in rows[1:]) or [rows[-1]["step_s"]]
planned, measured = rows[-1]["rank_planned_peak_bytes"], rows[-1]["rank_measured_peak_bytes"]
rec = re.findall(r"^ +\d+ +\d+ +\d+ +(\d+) ", text, re.M)
print("bench=pipeline case=%s step_s_median=%.4f predicted_s=%s predicted_bubble_pct=%s "
      "recomputed_per_stage=%s max_rank_arena_bytes=%d planned_eq_measured=%s loss_last=%.6f"
      % (name, steps[len(steps) // 2], m.group(2) if m else "?", m.group(3) if m else "?",
         ",".join(rec), max(measured), planned == measured, rows[-1]["loss"]))
PY
}

# One sgemm rate for both, measured once, so predictions compare.
peak_gflops=$("$remat" train --config tiny --steps 1 --quiet --threads 1 --precision fp32 2>/dev/null |
              sed -n 's/^peak *sgemm \([0-9.]*\) GFLOP.*/\1/p')
echo "bench=pipeline_sgemm threads=1 gflops=$peak_gflops"
if want 1 || want 2; then
# The budget: 5% above the least any placement needs.
least=$( ("$remat" plan --config "$cfg" --batch 4 --seq 128 --stages $P --microbatches $M \
  --mem 1 --format json 2>/dev/null || true) | python3 -c 'import json,sys; print(json.load(sys.stdin)["min_budget_bytes"])')
budget=$((least * 105 / 100))
echo "bench=pipeline_budget config=$cfg B=4 T=128 stages=$P microbatches=$M least_bytes=$least budget_bytes=$budget"

# The even split: every stage recomputes its first k blocks; its arena peak
# for each k (from --plan-only, the same memory model).
L=12
per=$((L / P))
layers=$(python3 -c "print(','.join(['$per']*$P))")
even_peak=()
for k in $(seq 0 $per); do
  ck=""
  for s in $(seq 0 $((P - 1))); do
    for i in $(seq 0 $((k - 1))); do ck+="${ck:+,}$((s * per + i))"; done
  done
  args=(--stages $P --layers "$layers")
  [[ -n $ck ]] && args+=(--ckpt-layers "$ck")
  even_ck[$k]=$ck
  even_peak[$k]=$( (mpirun --oversubscribe -np $P "$remat" train "${common[@]}" "${args[@]}" \
    --plan-only 2>/dev/null || true) |
    sed -n 's/^stage [0-9]* arena [^(]*(\([0-9]*\) bytes).*/\1/p' | sort -n | tail -1)
  echo "bench=pipeline_even k=$k max_stage_arena_bytes=${even_peak[$k]} fits_budget=$([[ ${even_peak[$k]} -le $budget ]] && echo yes || echo no)"
done
# A second budget where an even split fits: the least of its peaks.
even_budget=$(printf '%s\n' "${even_peak[@]}" | sort -n | head -1)
for k in $(seq 0 $per); do [[ ${even_peak[$k]} -eq $even_budget ]] && even=$k; done
even_args=(--stages $P --layers "$layers")
[[ -n ${even_ck[$even]} ]] && even_args+=(--ckpt-layers "${even_ck[$even]}")
echo "bench=pipeline_budget2 budget_bytes=$even_budget (the least an even split needs, k=$even)"

for round in 1 2; do
  run "remat_plan_at_least_budget_$round" --stages $P --mem "$budget"
  run "remat_plan_at_even_budget_$round" --stages $P --mem "$even_budget"
  run "even_split_k${even}_$round" "${even_args[@]}"
done

fi

# 3. Schedules on 2 ranks of one thread: the best plan under 1F1B, ZB-H1,
#    interleaved and zbv at one budget (5% above the most that any of the
#    last three least needs: they hold more), alternated; each one's
#    measured and predicted time and bubble.
P=2
cfg3="8,256,8,8192,256"
common=(--config "$cfg3" --batch 4 --seq 128 --grad-accum 8 --steps "$steps" --threads 1
        --quiet --precision fp32)
least3=0
for sched in zb-h1 interleaved zbv; do
  l=$( ("$remat" plan --config "$cfg3" --batch 4 --seq 128 --stages 2 --microbatches 8 \
    --schedule $sched --precision fp32 --mem 1 --format json 2>/dev/null || true) |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["min_budget_bytes"])')
  ((l > least3)) && least3=$l
done
budget3=$((least3 * 105 / 100))
if want 3; then
echo "bench=pipeline_schedules config=$cfg3 B=4 T=128 stages=2 microbatches=8 budget_bytes=$budget3"
for round in 1 2 3; do
  run "sched_1f1b_$round" --stages 2 --mem "$budget3" --schedule 1f1b --calibrate 3
  run "sched_zbh1_$round" --stages 2 --mem "$budget3" --schedule zb-h1 --calibrate 3
  run "sched_interleaved_$round" --stages 2 --mem "$budget3" --schedule interleaved --calibrate 3
  run "sched_zbv_$round" --stages 2 --mem "$budget3" --schedule zbv --calibrate 3
done
fi

want 4 || exit 0
# 4. Against the even split on 2 ranks of one thread, calibrated.
even2_peak=()
for k in 0 1 2 3 4; do
  ck=""
  for s in 0 1; do for i in $(seq 0 $((k - 1))); do ck+="${ck:+,}$((s * 4 + i))"; done; done
  args=(--stages 2 --layers 4,4)
  [[ -n $ck ]] && args+=(--ckpt-layers "$ck")
  even2_ck[$k]=$ck
  even2_peak[$k]=$( (mpirun --oversubscribe -np 2 "$remat" train "${common[@]}" "${args[@]}" \
    --plan-only 2>/dev/null || true) |
    sed -n 's/^stage [0-9]* arena [^(]*(\([0-9]*\) bytes).*/\1/p' | sort -n | tail -1)
done
k=2 # the even split that recomputes 2 blocks a stage; its least budget
budget4=${even2_peak[$k]}
echo "bench=pipeline_even2 k=$k budget_bytes=$budget4 recomputed=${even2_ck[$k]}"
for round in 1 2 3; do
  run "even2_remat_$round" --stages 2 --mem "$budget4" --calibrate 3
  run "even2_split_$round" --stages 2 --layers 4,4 --ckpt-layers "${even2_ck[$k]}" --calibrate 3
done

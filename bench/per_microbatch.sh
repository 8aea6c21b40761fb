#!/usr/bin/env bash
# per_microbatch.sh: recompute per micro-batch against the best plan per
# layer, measured on a 2-stage pipeline.
#
# At a budget between two per-layer plans (stage 0 must recompute two
# blocks for every micro-batch; one would not fit), remat plan's exact
# optimum per layer and its optimum with --per-microbatch (a block
# recomputed in one of stage 0's two slots only) are run under 1F1B on P=2
# ranks of one thread each (no more ranks than this machine's cores),
# alternated REPS times. Each run's step times after the first, their
# median per plan, the (layer, micro-batch) recomputations each plan makes
# a step, the predicted iteration, the last loss (the same bits: recompute
# is exact) and whether every rank's arena was planned = measured.
# One line per case, key=value, then the ratio.
#
# usage: bench/per_microbatch.sh [REMAT] [STEPS] [REPS]   (./build/app/remat, 8, 5)
set -euo pipefail
remat=${1:-./build/app/remat}
steps=${2:-8}
reps=${3:-5}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cfg="4,256,8,256,256"
M=8
shape=(--config "$cfg" --batch 8 --seq 128 --precision fp32)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "bench=per_microbatch_machine cpu=\"$cpu\" cores=$(nproc) ranks=2 threads_per_rank=1"

least=$( ("$remat" plan "${shape[@]}" --stages 2 --microbatches $M --mem 1 --format json \
  2>/dev/null || true) | python3 -c 'import json,sys; print(json.load(sys.stdin)["min_budget_bytes"])')
budget=$((least * 130 / 100))
for kind in layer microbatch; do
  extra=()
  [[ $kind == microbatch ]] && extra=(--per-microbatch)
  "$remat" plan "${shape[@]}" --stages 2 --microbatches $M --mem "$budget" --no-middle \
    "${extra[@]}" --format json -o "$tmp/$kind.json" >/dev/null
  python3 - "$kind" "$tmp/$kind.json" "$budget" <<'PY'
import json, sys
kind, path, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
d = json.load(open(path))
m, units = d["microbatches"], 0
for s in d["stages"]:
    part = {l: k for l, k in s.get("full_slots", [])}
    n = s["microbatches_held"]
    for l in s["recomputed"]:
        k = part.get(l, n)  # slots in which it recomputes
        units += sum(1 for t in range(m) if t % n >= n - k)
print("bench=per_microbatch_plan kind=%s budget_bytes=%d recomputed=%s "
      "layer_microbatch_recomputes=%d simulated=%.4g" % (
          kind, budget, "/".join("%d%s" % (s["ckpt_layers"], "p" * len(s.get("full_slots", [])))
                                 for s in d["stages"]), units, d["simulated_time"]))
PY
done

run() { # run KIND REP
  mpirun --oversubscribe -np 2 "$remat" train "${shape[@]}" --stages 2 --grad-accum $M \
    --steps "$steps" --threads 1 --quiet --plan "$tmp/$1.json" --log "$tmp/$1.$2.jsonl" \
    >"$tmp/$1.$2.out" 2>&1
}
for r in $(seq 1 "$reps"); do
  run layer "$r"
  run microbatch "$r"
done
python3 - "$tmp" "$reps" <<'PY'
import glob, json, re, statistics, sys
tmp, reps = sys.argv[1], int(sys.argv[2])
med = {}
for kind in ("layer", "microbatch"):
    steps, ok, loss, pred = [], True, None, []
    for r in range(1, reps + 1):
        rows = [json.loads(l) for l in open("%s/%s.%d.jsonl" % (tmp, kind, r))]
        steps += [x["step_s"] for x in rows[1:]]
        ok &= all(x["rank_planned_peak_bytes"] == x["rank_measured_peak_bytes"] for x in rows)
        loss = rows[-1]["loss"]
        m = re.search(r"iteration [0-9.]+ s measured, ([0-9.]+) s predicted",
                      open("%s/%s.%d.out" % (tmp, kind, r)).read())
        if m: pred.append(float(m.group(1)))
    med[kind] = statistics.median(steps)
    print("bench=per_microbatch case=%s runs=%d step_s_median=%.4f step_s_min=%.4f "
          "step_s_max=%.4f predicted_s=%s planned_eq_measured=%s loss_last=%.6f" % (
              kind, reps, med[kind], min(steps), max(steps),
              "%.4f" % statistics.median(pred) if pred else "?", ok, loss))
print("bench=per_microbatch_ratio microbatch_over_layer=%.4f" % (med["microbatch"] / med["layer"]))
PY

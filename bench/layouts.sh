#!/usr/bin/env bash
# layouts.sh: remat plan --ranks 2 against measured runs of its layouts.
#
# The search (--calibrate: this machine's layer times at one thread a rank,
# a tensor rank's shard timed alone; --link measured between the 2 ranks
# by default, or given by LINK) predicts a step of each
# layout of 2 ranks (every layout planned, --every-layout): the fastest
# with t = 2 tensor ranks (with sequence parallelism and without), the
# fastest with p = 2 pipeline stages and the fastest with d = 2 replicas.
# Each is run by remat train on 2 ranks of one thread (the pipeline by --plan, its plan
# made alone with the same settings; the tensor ranks and the replicas
# planning their blocks under the same budget) (no more ranks than this
# machine's cores), the four alternated REPS times; every run's step
# times after the first give the median. One line per layout, key=value: the search's predicted step, the
# measured median, their ratio, planned = measured on every rank; then
# whether the search's order is the measured order, of t2, p2 and d2 (the
# goal's three) and of all four.
#
# usage: bench/layouts.sh [REMAT] [STEPS] [REPS]   (./build/app/remat, 8, 3)
#        PRECISION=bf16 bench/layouts.sh ...      (fp32 by default)
set -euo pipefail
remat=${1:-./build/app/remat}
steps=${2:-8}
reps=${3:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cfg="4,256,8,1024,256"
G=16
T=128
mem=1GiB
link=${LINK:-measured} # or given, in GB/s: LINK=tp=5,pp=5,dp=5
precision=${PRECISION:-fp32}
common=(--config "$cfg" --seq $T --precision "$precision" --threads 1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "bench=layouts_machine cpu=\"$cpu\" cores=$(nproc) ranks=2 threads_per_rank=1 link=$link precision=$precision"

mpirun --oversubscribe -np 2 "$remat" plan "${common[@]}" --ranks 2 --global-batch $G \
  --mem $mem --link "$link" --calibrate 3 --every-layout --format json -o "$tmp/search.json" \
  >/dev/null 2>"$tmp/search.err"
sed -n 's/^links measured/bench=layouts_links measured/p' "$tmp/search.err"
# the fastest row of each kind: "p2" (2 stages) and "d2" (2 replicas)
python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
rows = json.load(open(tmp + "/search.json"))["layouts"]["rows"]
for kind, key, sp in (("t2", "tensor_parallel", 0), ("t2sp", "tensor_parallel", 1),
                      ("p2", "stages", 0), ("d2", "data_parallel", 0)):
    r = min((r for r in rows if r[key] == 2 and r["sequence_parallel"] == sp),
            key=lambda r: r["time"])
    json.dump(r, open("%s/%s.row.json" % (tmp, kind), "w"))
    print("bench=layouts_search kind=%s b=%d M=%d zero=%d schedule=%s predicted_s=%.4f "
          "replicas_s=%.4f pipeline_s=%.4f" % (kind, r["micro_batch_size"], r["microbatches"],
          r["zero"], r["schedule"], r["time"], r["replicas_time"], r["pipeline_time"]))
PY

field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$@"; }
for kind in t2 t2sp p2 d2; do
  row="$tmp/$kind.row.json"
  b=$(field "$row" micro_batch_size)
  M=$(field "$row" microbatches)
  if [[ $kind == p2 ]]; then
    layout=(--stages 2 --schedule "$(field "$row" schedule)")
    "$remat" plan "${common[@]}" --batch "$b" --microbatches "$M" --mem $mem "${layout[@]}" \
      --head-chunk "$(field "$row" head_chunk)" --calibrate 3 --min-blocks 1 --format json \
      -o "$tmp/$kind.plan.json" >/dev/null
    layout+=(--plan "$tmp/$kind.plan.json")
  elif [[ $kind == d2 ]]; then # replicas of one stage: remat train plans its blocks
    layout=(--data-parallel 2 --zero "$(field "$row" zero)" --mem $mem
            --head-chunk "$(field "$row" head_chunk)")
  else # a tensor group of one stage, likewise
    layout=(--tensor-parallel 2 --mem $mem --head-chunk "$(field "$row" head_chunk)")
    [[ $kind == t2sp ]] && layout+=(--sequence-parallel)
  fi
  echo "$b $M ${layout[*]}" >"$tmp/$kind.args"
done

run() { # run KIND REP
  read -r b M rest <"$tmp/$1.args"
  # shellcheck disable=SC2086
  mpirun --oversubscribe -np 2 "$remat" train "${common[@]}" --batch "$b" --grad-accum "$M" \
    $rest --steps "$steps" --quiet --log "$tmp/$1.$2.jsonl" \
    >"$tmp/$1.$2.out" 2>&1
}
for r in $(seq 1 "$reps"); do
  run t2 "$r"
  run t2sp "$r"
  run p2 "$r"
  run d2 "$r"
done
python3 - "$tmp" "$reps" <<'PY'
import json, statistics, sys
tmp, reps = sys.argv[1], int(sys.argv[2])
pred, meas = {}, {}
for kind in ("t2", "t2sp", "p2", "d2"):
    steps, ok = [], True
    for r in range(1, reps + 1):
        rows = [json.loads(l) for l in open("%s/%s.%d.jsonl" % (tmp, kind, r))]
        steps += [x["step_s"] for x in rows[1:]]
        ok &= all(x["rank_planned_peak_bytes"] == x["rank_measured_peak_bytes"] for x in rows)
    pred[kind] = json.load(open("%s/%s.row.json" % (tmp, kind)))["time"]
    meas[kind] = statistics.median(steps)
    print("bench=layouts case=%s runs=%d predicted_s=%.4f step_s_median=%.4f step_s_min=%.4f "
          "step_s_max=%.4f predicted_over_measured=%.3f planned_eq_measured=%s" % (
              kind, reps, pred[kind], meas[kind], min(steps), max(steps),
              pred[kind] / meas[kind], ok))
order = lambda v, ks: "<".join(sorted(ks, key=v.get))
for ks in (("t2", "p2", "d2"), ("t2", "t2sp", "p2", "d2")):  # the goal's three, then all
    print("bench=layouts_order kinds=%s predicted=%s measured=%s same=%s" % (
        ",".join(ks), order(pred, ks), order(meas, ks), order(pred, ks) == order(meas, ks)))
PY

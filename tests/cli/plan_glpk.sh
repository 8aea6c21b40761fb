#!/usr/bin/env bash
# plan_glpk.sh REMAT TMPDIR: the planner's optimum against GLPK. For small
# problems (with and without the middle policy, a third choice per layer)
# under several budgets, objectives and schedules (chunked and zero-bubble
# ones too), exports the MIP
# with `remat plan --format lp`, solves it with glpsol, and compares the
# optimum with remat's objective_value; an infeasible budget must be
# infeasible for both. glpsol is required (glpk-utils), not optional.
set -u
REMAT=$1
TMP=$2
DATA=$(cd "$(dirname "$0")/../data/plan" && pwd)
mkdir -p "$TMP"
if ! command -v glpsol >/dev/null 2>&1; then
  echo "plan_glpk: glpsol not found; install glpk-utils (scripts/install-deps.sh --test does)" >&2
  exit 1
fi

. "$(dirname "$0")/lib.sh"
runs=0

# value of "objective_value" in remat's JSON on stdin
objective_of() { sed -n 's/^[[:space:]]*"objective_value":[[:space:]]*\([^,]*\),*$/\1/p'; }

close() { # a b: equal within 1e-6 relative
  awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a; if (m < 1) m = 1; exit !(d <= 1e-6 * m) }'
}

check() { # file, then remat options
  local file=$1
  shift
  runs=$((runs + 1))
  local tag="$(basename -- "$file") $*"
  local lp="$TMP/case$runs.lp" out="$TMP/case$runs.out"
  if ! "$REMAT" plan "$file" "$@" --format lp -o "$lp"; then
    echo "FAIL $tag: LP export failed" >&2
    fails=$((fails + 1))
    return
  fi
  local json rc
  json=$("$REMAT" plan "$file" "$@" --format json 2>"$TMP/err$runs")
  rc=$?
  glpsol --lp "$lp" -o "$out" >"$TMP/log$runs" 2>&1
  local status
  status=$(sed -n 's/^Status:[[:space:]]*//p' "$out")
  if [ "$rc" -ne 0 ]; then
    if [ "$status" = "INTEGER OPTIMAL" ]; then
      echo "FAIL $tag: remat says infeasible (rc $rc), glpsol found an optimum" >&2
      fails=$((fails + 1))
    else
      echo "ok   $tag: infeasible for both ($status)"
    fi
    return
  fi
  local mine theirs
  mine=$(printf '%s\n' "$json" | objective_of)
  theirs=$(sed -n 's/^Objective:.*= *\([-0-9.eE+]*\).*/\1/p' "$out")
  if [ "$status" != "INTEGER OPTIMAL" ] || [ -z "$mine" ] || ! close "$mine" "$theirs"; then
    echo "FAIL $tag: remat $mine, glpsol $theirs ($status)" >&2
    fails=$((fails + 1))
  else
    echo "ok   $tag: $mine"
  fi
}

for obj in bottleneck 1f1b; do
  for sched in 1f1b gpipe; do
    for mem in 9000 14000 20000 40000; do
      check "$DATA/small.json" --objective $obj --schedule $sched --mem $mem
    done
    for mem in 1000,900,700 700,700,700 600,900,1200 2000; do
      check "$DATA/hetero.json" --objective $obj --schedule $sched --mem $mem
    done
    for mem in 450 700 1000 1400; do
      check "$DATA/mixed.json" --objective $obj --schedule $sched --mem $mem
    done
    # work bytes (y): above, between and below the scratch sizes
    for mem in 750,750,750 900,800,700 1000,900,800 1100 1400 1000,1200,1000; do
      check "$DATA/work.json" --objective $obj --schedule $sched --mem $mem
    done
    # a third choice per layer, the middle policy
    for mem in 780 800 900,800,700 1000 1100 1000,900,800; do
      check "$DATA/middle.json" --objective $obj --schedule $sched --mem $mem
    done
    # a GPT-2 shape: identical blocks, each with three choices
    for mem in 3150080 3447449 4042188 4339558; do
      check --config 4,64,4,256,64 --batch 4 --seq 32 --stages 2 --microbatches 4 \
        --objective $obj --schedule $sched --mem $mem
    done
  done
done
# the chunked and zero-bubble schedules: interleaved (2 and 3 chunks), zb-h1
# (bytes kept for deferred weight gradients), zbv (a V of two chunks)
for obj in bottleneck 1f1b; do
  for mem in 900 1000 1200 1500 2500; do
    check "$DATA/zb.json" --objective $obj --schedule zb-h1 --mem $mem
    check "$DATA/zb.json" --objective $obj --schedule interleaved --mem $mem
    check "$DATA/zb.json" --objective $obj --schedule zbv --mem $mem
  done
  check "$DATA/zb.json" --objective $obj --schedule interleaved --chunks 3 --stages 2 --mem 1500
  check "$DATA/middle.json" --objective $obj --schedule zbv --stages 2 --mem 1400
  check "$DATA/work.json" --objective $obj --schedule interleaved --stages 2 --mem 1500
  for mem in 5117696 5479168 5800000 6200000; do
    check --config 4,64,4,256,64 --batch 4 --seq 32 --stages 2 --microbatches 4 \
      --objective $obj --schedule zbv --mem $mem
    check --config 4,64,4,256,64 --batch 4 --seq 32 --stages 2 --microbatches 4 \
      --objective $obj --schedule zb-h1 --mem $mem
  done
done
# budgets too small for any arrangement
check "$DATA/small.json" --mem 2000
check "$DATA/hetero.json" --mem 300,300,300
check "$DATA/work.json" --mem 700
check "$DATA/middle.json" --mem 779
check --config 4,64,4,256,64 --batch 4 --seq 32 --stages 2 --microbatches 4 --mem 3150079
check "$DATA/zb.json" --schedule zbv --mem 939

summary plan_glpk "$runs"

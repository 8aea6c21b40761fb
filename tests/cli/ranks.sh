#!/usr/bin/env bash
# remat plan --ranks: the layout search through the CLI. Its JSON lists the
# layouts, the fastest first, and the plan beside them is the fastest
# layout's (its stages, schedule, micro-batches and memory); every listed
# layout fits the budget, the front is marked, a Megatron export takes the
# fastest layout's degrees, and the table says what it searched; with
# --calibrate the times are seconds; --every-layout leaves none out.
# usage: ranks.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1

job=(--config gpt2-124m --ranks 8 --global-batch 32 --seq 1024 --mem 4GiB --precision fp32
     --link tp=100,pp=25,dp=25 --rank-tflops 100)
"$remat" plan "${job[@]}" --format json >plan.json 2>plan.err
check "the search and the plan as JSON" python3 - <<'PY'
import json, sys
d = json.load(open("plan.json"))
L = d["layouts"]
rows = L["rows"]
best = rows[0]
ok = (L["layouts"] >= L["solved"] > 0 and len(rows) > 0
      and all(r["rank_memory"] <= 4 << 30 for r in rows)
      and best["time"] == min(r["time"] for r in rows)
      and any(r["pareto"] for r in rows)
      and all(r["tensor_parallel"] * r["stages"] * r["data_parallel"] == 8 for r in rows)
      and all(r["micro_batch_size"] * r["microbatches"] * r["data_parallel"] == 32 for r in rows)
      and d["num_stages"] == best["stages"] and d["microbatches"] == best["microbatches"]
      and d["schedule"] == best["schedule"] and d["max_memory_bytes"] == best["rank_memory"])
sys.exit(not ok)
PY
"$remat" plan "${job[@]}" --format megatron >megatron.txt 2>table.txt
t=$(python3 -c 'import json; print(json.load(open("plan.json"))["layouts"]["rows"][0]["tensor_parallel"])')
p=$(python3 -c 'import json; print(json.load(open("plan.json"))["layouts"]["rows"][0]["stages"])')
check "the Megatron export takes the fastest layout's degrees" \
  grep -q -- "--tensor-model-parallel-size $t" megatron.txt
check "... and its stages" grep -q -- "--pipeline-model-parallel-size $p" megatron.txt
check "the table goes to standard error beside an export" grep -q "^pareto" table.txt
"$remat" plan "${job[@]}" >table.out 2>&1
check "the table says what it searched and timed" \
  grep -q "^links: tensor timed, pipeline timed, replicas timed" table.out
check "... then the fastest layout's plan" grep -q "^the fastest layout's plan:" table.out
# --calibrate: this machine's seconds, a tensor rank's shard timed alone,
# with and without sequence parallelism
"$remat" plan --config tiny --ranks 2 --global-batch 2 --seq 64 --mem 1GiB --precision fp32 \
  --link tp=5,pp=5,dp=5 --calibrate 1 --threads 1 --format json >cal.json 2>cal.err
check "--calibrate: seconds, t = 2 rows with and without sequence parallelism, the plan the fastest row's" python3 - <<'PY'
import json, sys
d = json.load(open("cal.json"))
rows = d["layouts"]["rows"]
t2 = [r["sequence_parallel"] for r in rows if r["tensor_parallel"] == 2]
best = rows[0]
own = d["simulated_time"] + best["replicas_time"] + best["pipeline_time"]
sys.exit(not (rows and True in t2 and False in t2 and d["time_unit"] == "s"
              and all(0 < r["time"] < 60 for r in rows)
              and abs(best["time"] - own) <= 1e-6 * own))  # the plan is the row's own
PY
# one layout of tensor ranks timed on this machine: its shard alone, its
# collectives at the link's rate
"$remat" plan --config tiny --batch 2 --seq 64 --mem 1GiB --precision fp32 --threads 1 \
  --tensor-parallel 2 --sequence-parallel --calibrate 1 --link tp=5 >tpcal.out 2>&1
check "--tensor-parallel with --calibrate: seconds measured, collectives at the link" \
  grep -q "measured on this machine (--calibrate).*tensor collectives timed at 5 GB/s" tpcal.out
# --every-layout: no layout bounded out, each that fits listed, and the
# same fastest layout as the bounded search
"$remat" plan "${job[@]}" --every-layout --format json >every.json 2>every.err
check "--every-layout: every layout solved, the same fastest, more rows" python3 - <<'PY'
import json, sys
a, e = (json.load(open(p))["layouts"] for p in ("plan.json", "every.json"))
key = lambda r: (r["time"], r["rank_memory"])
sys.exit(not (e["solved"] == e["layouts"] == a["layouts"] and e["solved"] > a["solved"]
              and len(e["rows"]) > len(a["rows"]) and key(e["rows"][0]) == key(a["rows"][0])))
PY
expect_error "--every-layout without --ranks refused" "go with --ranks" \
  plan --config tiny --every-layout
summary ranks

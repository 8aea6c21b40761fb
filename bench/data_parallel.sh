#!/usr/bin/env bash
# data_parallel.sh: memory and communication of D data-parallel replicas at
# ZeRO 0 to 3 (default gpt2-124m, D = 4). On a machine with fewer cores than
# ranks the ranks are oversubscribed, so this reports bytes, not speed: per
# rank the planned and measured arena peak, the persistent state against the
# ZeRO table (16 Psi, 8 Psi + 8 Psi/D, 4 Psi + 12 Psi/D, 16 Psi/D), and the
# bytes a rank sends per step: counted by the runtime, from the shapes
# (shards padded), and ideal from Psi alone; and, as medians over the steps
# after the first, the step time, rank 0's communication time (each
# collective from its post to its observed completion), the part of it
# exposed (inside MPI calls) and the overlapped share 1 - exposed / time, for
# all collectives and for the layers' (reduce-scatters, ZeRO 3's gathers),
# and each rank's overlapped share. Times on an oversubscribed machine say
# more about the scheduler than about the network. One JSON line per case.
#
# usage: bench/data_parallel.sh [REMAT] [CONFIG] [D] [BATCH] [SEQ] [STEPS]
set -u
remat=${1:-build/app/remat}
config=${2:-gpt2-124m}
D=${3:-4}
B=${4:-1}
T=${5:-64}
steps=${6:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for z in 0 1 2 3; do
  mpirun --oversubscribe -np "$D" "$remat" train --config "$config" --batch "$B" --seq "$T" \
    --steps "$steps" --data-parallel "$D" --zero "$z" --threads 1 --peak-gflops 1 --quiet \
    --log "$tmp/z$z.jsonl" >"$tmp/z$z.out" 2>&1 || { echo "ZeRO $z failed:" >&2; tail -5 "$tmp/z$z.out" >&2; exit 1; }
  python3 - "$tmp/z$z.jsonl" "$tmp/z$z.out" "$config" "$D" "$z" <<'PY'
import json, re, statistics, sys
logs = [json.loads(l) for l in open(sys.argv[1])]
log = logs[-1]
timed = logs[1:] or logs
med = lambda key: statistics.median(x[key] for x in timed)
out = open(sys.argv[2]).read()
config, D, z = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
psi = int(re.search(r"(\d+) parameters", out).group(1))
persistent = int(re.search(r"persistent (\d+) bytes per rank", out).group(1))
m = re.search(r"V=(\d+) \(padded (\d+)\)", out)
C = int(re.search(r"C=(\d+)", out).group(1))
tied = int(m.group(2)) * C  # the head's gradient of the tied matrix, reduced apart
table = [16 * psi, 8 * psi + 8 * psi / D, 4 * psi + 12 * psi / D, 16 * psi / D][z]
# ideal bytes a rank sends: a reduce-scatter of Psi (+ the tied gradient) per
# micro-batch; ZeRO 0-2 one all-gather of Psi a step (gradients or
# parameters); ZeRO 3 two all-gathers of Psi per micro-batch
f = (D - 1) / D * 4
ideal = f * (psi + tied) + (f * psi if z <= 2 else 2 * f * psi)
print(json.dumps({
    "bench": "data_parallel", "config": config, "replicas": D, "zero": z, "psi": psi,
    "rank_planned_peak_bytes": log["rank_planned_peak_bytes"],
    "rank_measured_peak_bytes": log["rank_measured_peak_bytes"],
    "planned_equals_measured": log["rank_planned_peak_bytes"] == log["rank_measured_peak_bytes"],
    "persistent_bytes": persistent, "table_bytes": round(table),
    "persistent_over_table": round(persistent / table, 4),
    "comm_bytes_measured": log["comm_bytes"], "comm_bytes_from_shapes": log["comm_bytes_theory"],
    "comm_bytes_ideal": round(ideal), "collectives": log["collectives"],
    "step_s": med("step_s"), "comm_s": med("comm_s"), "comm_exposed_s": med("comm_exposed_s"),
    "comm_overlap": med("comm_overlap"), "layer_comm_s": med("layer_comm_s"),
    "layer_comm_exposed_s": med("layer_comm_exposed_s"),
    "layer_comm_overlap": med("layer_comm_overlap"),
    "rank_comm_overlap": [round(statistics.median(x["rank_comm_overlap"][k] for x in timed), 4)
                          for k in range(D)],
    "rss_peak_bytes_rank0": log["rss_peak_bytes"]}))
PY
done

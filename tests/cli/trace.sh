#!/usr/bin/env bash
# What `remat train --trace` draws is true, on a pipeline (1F1B and zbv's
# chunks), on data-parallel replicas and on a P x D grid: every step 1..N
# has exactly one update span per rank, numbered with its own step; every
# rank's arena counter moves as micro-batches take and free their
# activations, and a replica's peaks at its planned arena; a track is
# named only on a rank that has spans on it (no empty tracks).
# usage: trace.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1

common=(--config 4,64,4,256,64 --batch 2 --seq 32 --threads 1 --quiet --peak-gflops 10)
runs=("pipe 2 --stages 2 --grad-accum 2 --steps 5"
      "zbv 2 --stages 2 --grad-accum 4 --schedule zbv --steps 3"
      "reps 2 --data-parallel 2 --zero 1 --grad-accum 4 --steps 4"
      "reps3 2 --data-parallel 2 --zero 3 --steps 3 --ckpt-layers 1"
      "grid 4 --stages 2 --data-parallel 2 --grad-accum 2 --zero 2 --steps 3")
for r in "${runs[@]}"; do
  read -r tag np args <<<"$r"
  # shellcheck disable=SC2086 # args: the run's flags, split on purpose
  mpi "$np" "$remat" train "${common[@]}" $args --log "$tag.jsonl" --trace "$tag.json" \
    >"$tag.out" 2>&1 || { bad "$tag: the run"; tail -3 "$tag.out"; continue; }
  steps=${args##*--steps }
  steps=${steps%% *}
  if python3 - "$tag" "$np" "$steps" <<'PY'
import collections, json, sys
tag, ranks, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ev = json.load(open(tag + ".json"))["traceEvents"]
X = [e for e in ev if e["ph"] == "X"]
ok = True
# one update per rank and step, with the step's own number
up = collections.Counter((e["pid"], e["args"]["step"]) for e in X if e["cat"] == "update")
want = {(p, s): 1 for p in range(ranks) for s in range(1, steps + 1)}
if dict(up) != want:
    print("  updates (rank, step): count", sorted(up.items()))
    ok = False
# every named track has spans, every span a named track
named = {(e["pid"], e["tid"]) for e in ev if e.get("name") == "thread_name"}
used = {(e["pid"], e["tid"]) for e in X}
if named != used:
    print("  tracks without spans", sorted(named - used), "spans without a track",
          sorted(used - named))
    ok = False
# each rank's arena counter moves; a replica's reaches its planned arena
peak = json.loads(open(tag + ".jsonl").readlines()[-1]).get("rank_planned_peak_bytes")
for p in range(ranks):
    vals = [e["args"]["bytes"] for e in ev if e["ph"] == "C" and e["pid"] == p]
    moves = len(set(vals)) > 1
    tops = not tag.startswith("reps") or max(vals) == peak[p]
    print("  %s rank %d: %d arena samples, %d values, top %d%s" %
          (tag, p, len(vals), len(set(vals)), max(vals),
           " = its planned arena" if tag.startswith("reps") and tops else ""))
    ok = ok and moves and tops
raise SystemExit(0 if ok else 1)
PY
  then ok "$tag: an update per rank for each step 1..$steps, no empty track, the arena counter moves"
  else bad "$tag trace"; fi
done

summary

#!/usr/bin/env bash
# `remat train --trace` read back, on one process (no MPI) and, where
# mpirun is found, on a 2-rank pipeline and 2 data-parallel replicas: each
# file is valid trace-event JSON with one process entry per rank; each rank
# has exactly one update span per step the run printed ("step N/M"), with
# that step's number, and those steps are 1..N; a forward span and a
# backward per micro-batch and step; each rank's arena counter takes more than
# one value; every named track (thread_name) has spans and every span a
# named track.
# usage: trace_read.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1

common=(--config tiny --batch 2 --seq 32 --threads 1 --peak-gflops 10)
# tag ranks micro-batches-per-rank-and-step flags (ranks 1: no mpirun)
runs=("one 1 2 --grad-accum 2 --ckpt-layers 1 --steps 4")
if command -v mpirun >/dev/null; then
  runs+=("pipe 2 2 --stages 2 --grad-accum 2 --steps 3"
         "reps 2 2 --data-parallel 2 --grad-accum 2 --steps 3")
else
  echo "mpirun not found: one process only"
fi
for r in "${runs[@]}"; do
  read -r tag np micro args <<<"$r"
  launch=()
  [[ $np -gt 1 ]] && launch=(mpirun --oversubscribe -np "$np")
  # shellcheck disable=SC2086 # args: the run's flags, split on purpose
  timeout -k 5 240 "${launch[@]}" "$remat" train "${common[@]}" $args --trace "$tag.json" \
    >"$tag.out" 2>&1 || { bad "$tag: the run"; tail -3 "$tag.out"; continue; }
  if python3 - "$tag" "$np" "$micro" <<'PY'
import collections, json, re, sys
tag, ranks, micro = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ok = True
def fail(*what):
    global ok
    print("  %s:" % tag, *what)
    ok = False
# the steps the run printed, rank 0's lines
out = open(tag + ".out").read()
steps = [int(m.group(1)) for m in re.finditer(r"^step (\d+)/\d+ \|", out, re.M)]
if not steps or steps != list(range(1, len(steps) + 1)):
    fail("printed steps", steps, "are not 1..N")
try:
    ev = json.load(open(tag + ".json"))["traceEvents"]
except (OSError, ValueError, KeyError, TypeError) as e:
    print("  %s: no valid trace: %s" % (tag, e))
    raise SystemExit(1)
procs = sorted(e["pid"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name")
if procs != list(range(ranks)):
    fail("process entries", procs, "not one per rank")
X = [e for e in ev if e.get("ph") == "X"]
# one update span per rank and printed step, labelled with that step
up = collections.Counter((e["pid"], e["args"]["step"]) for e in X if e["cat"] == "update")
want = {(p, s): 1 for p in range(ranks) for s in steps}
if dict(up) != want:
    fail("update spans (rank, step): count", sorted(up.items()), "want one per rank for steps",
         steps)
# a forward span per micro-batch, on every rank and step, and its backward
# (a replica's is one span per layer)
for cat in ("forward", "backward"):
    mbs = collections.defaultdict(set)
    n = collections.Counter()
    for e in X:
        if e["cat"] == cat:
            mbs[e["pid"], e["args"]["step"]].add(e["args"]["micro"])
            n[e["pid"], e["args"]["step"]] += 1
    want = {(p, s): micro for p in range(ranks) for s in steps}
    if {k: len(v) for k, v in mbs.items()} != want or (cat == "forward" and dict(n) != want):
        fail(cat, "spans (rank, step): count", sorted(n.items()), "want", micro,
             "micro-batches each")
# the one-process run recomputes a block: its recompute per micro-batch
if tag == "one":
    n = sum(1 for e in X if e["cat"] == "recompute")
    if n != micro * len(steps):
        fail("%d recompute spans, want %d" % (n, micro * len(steps)))
# every named track has spans, every span a named track
named = collections.Counter((e["pid"], e["tid"]) for e in ev if e.get("name") == "thread_name")
used = {(e["pid"], e["tid"]) for e in X}
if set(named) != used or max(named.values(), default=1) > 1:
    fail("named tracks", sorted(named), "tracks with spans", sorted(used))
# each rank's arena counter moves
for p in range(ranks):
    vals = [e["args"]["bytes"] for e in ev if e.get("ph") == "C" and e["pid"] == p]
    if len(set(vals)) < 2:
        fail("rank %d's arena counter: %d samples, values %s" % (p, len(vals), sorted(set(vals))))
print("  %s: %d ranks, steps %s, %d events, tracks %s" %
      (tag, ranks, steps, len(ev), sorted(named)))
raise SystemExit(0 if ok else 1)
PY
  then ok "$tag: an update per rank for each printed step, the arena counter moves, no empty track"
  else bad "$tag trace"; fi
done

summary

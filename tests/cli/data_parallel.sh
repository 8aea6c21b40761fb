#!/usr/bin/env bash
# Data-parallel replicas over MPI against one process: bit-identical losses,
# gradient norms and saved checkpoints for D in {2, 4} at ZeRO 0 to 3 with
# dropout on (and with K micro-batches per replica, recompute, a checkpoint
# loaded), with each layer's reduce-scatter overlapping the next layer's
# backward; the log's communication figures are sane and the trace shows
# the overlap; every rank's arena planned = measured = what `remat plan` prints;
# each rank's persistent bytes are the ZeRO table's, computed here from the
# shapes; ZeRO 3 moves about 1.5 times the bytes of ZeRO 1 and 2; bad
# starts fail clearly; a killed rank ends the job. A P x D grid (pipelines
# whose stages are replicas) against one process, likewise.
# usage: data_parallel.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1

shape=(--config 4,64,4,256,64 --batch 2 --seq 32 --precision fp32) # bf16 replicas: bf16.sh
common=("${shape[@]}" --steps 3 --dropout 0.1 --warmup 1 --cosine --threads 1
        --peak-gflops 10 --quiet)

same_run() { # same_run ONE.jsonl ONE.bin TWO.jsonl TWO.bin D
  python3 - "$1" "$3" "$5" <<'PY' && cmp -s "$2" "$4"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
D = int(sys.argv[3])
same = [(x["loss"], x["grad_norm"]) for x in a] == [(x["loss"], x["grad_norm"]) for x in b]
mem = all(len(x["rank_planned_peak_bytes"]) == D and
          x["rank_planned_peak_bytes"] == x["rank_measured_peak_bytes"] for x in b)
comm = all(x["comm_bytes"] == x["comm_bytes_theory"] > 0 for x in b)
# communication time > 0, exposed within it, the overlapped share in [0, 1]
# and 1 - exposed / time, for rank 0 and for every rank
eps = 1e-5
def sane(t, e, share):
    return t > 0 and -eps <= e <= t + eps and 0 <= share <= 1 and abs(share - (1 - e / t)) < 1e-3
for x in b:
    comm = comm and sane(x["comm_s"], x["comm_exposed_s"], x["comm_overlap"])
    comm = comm and sane(x["layer_comm_s"], x["layer_comm_exposed_s"], x["layer_comm_overlap"])
    comm = comm and x["layer_comm_s"] <= x["comm_s"] + eps
    comm = comm and len(x["rank_comm_overlap"]) == D and x["rank_comm_s"][0] == x["comm_s"]
    comm = comm and all(sane(*v) for v in zip(x["rank_comm_s"], x["rank_comm_exposed_s"],
                                               x["rank_comm_overlap"]))
sys.exit(0 if same and mem and comm and len(a) == len(b) == 3 else 1)
PY
}

# One process with --grad-accum D is the reference for D replicas.
for D in 2 4; do
  "$remat" train "${common[@]}" --grad-accum "$D" --log one$D.jsonl --save one$D.bin >one$D.out 2>&1
  for z in 0 1 2 3; do
    tag="D=$D ZeRO $z"
    mpi "$D" "$remat" train "${common[@]}" --data-parallel "$D" --zero "$z" \
      --log dp$D$z.jsonl --save dp$D$z.bin --trace dp$D$z.json >dp$D$z.out 2>&1
    if same_run one$D.jsonl one$D.bin dp$D$z.jsonl dp$D$z.bin "$D"; then ok "bit-identical: $tag"
    else bad "bit-identical: $tag"; tail -5 dp$D$z.out; fi
  done
done

# The traces of those runs: valid JSON, a track per rank, every kind of
# span; per micro-batch a backward and a reduce span for each of the L + 2
# layers, and ZeRO 3 a gather span per parameter request (2 L + 3); and on
# some rank a layer's reduce-scatter (post to completion) overlaps another
# layer's backward: it travels while the backward goes on.
if python3 - <<'PY'
import json
L, steps = 4, 3
ok = True
for D in (2, 4):
    for z in range(4):
        ev = json.load(open("dp%d%d.json" % (D, z)))["traceEvents"]
        X = [e for e in ev if e["ph"] == "X"]
        kinds = {e["cat"] for e in X}
        need = {"forward", "backward", "reduce", "wait", "update", "gather"}
        pids = {e["pid"] for e in X}
        per = lambda cat: [e for e in X if e["cat"] == cat and "layer" in e["args"]]
        bwd, red, gat = per("backward"), per("reduce"), per("gather")
        counts = (len(bwd) == len(red) == D * steps * (L + 2) and
                  len(gat) == (D * steps * (2 * L + 3) if z == 3 else 0))
        over = 0
        for r in red:
            end = r["ts"] + r["dur"]
            over += any(b["pid"] == r["pid"] and b["args"]["layer"] != r["args"]["layer"] and
                        b["ts"] < end and r["ts"] < b["ts"] + b["dur"] for b in bwd)
        good = need <= kinds and pids == set(range(D)) and counts and over > 0
        print("  D=%d ZeRO %d: %d spans; %d of %d reduce-scatters overlap another layer's "
              "backward %s" % (D, z, len(X), over, len(red), "" if good else "BAD"))
        ok = ok and good
raise SystemExit(0 if ok else 1)
PY
then ok "traces: every span; reduce-scatters overlap the backward"
else bad "traces"; fi

# K micro-batches per replica (a step of K x D, round by round), recompute.
"$remat" train "${common[@]}" --grad-accum 6 --ckpt-layers 0,middle:2 --log k1.jsonl --save k1.bin >k1.out 2>&1
for z in 1 3; do
  mpi 2 "$remat" train "${common[@]}" --data-parallel 2 --grad-accum 3 --zero "$z" \
    --ckpt-layers 0,middle:2 --log k$z.jsonl --save k$z.bin >k$z.out 2>&1
  if same_run k1.jsonl k1.bin k$z.jsonl k$z.bin 2; then ok "bit-identical: D=2 K=3 ZeRO $z, block 0 recomputed, 2 middle"
  else bad "D=2 K=3 ZeRO $z"; tail -5 k$z.out; fi
done

# Weights loaded from a checkpoint (ZeRO 3 takes its shards of it).
"$remat" train "${common[@]}" --grad-accum 2 --model one2.bin --log m1.jsonl --save m1.bin >m1.out 2>&1
mpi 2 "$remat" train "${common[@]}" --data-parallel 2 --zero 3 --model one2.bin --log m3.jsonl \
  --save m3.bin >m3.out 2>&1
if same_run m1.jsonl m1.bin m3.jsonl m3.bin 2; then ok "bit-identical: --model at ZeRO 3"
else bad "--model at ZeRO 3"; tail -5 m3.out; fi

# Every rank's arena: planned = measured (above) = remat plan's figure; the
# persistent bytes of a rank are the table's, from the shapes: units (a
# layer's tensors), shards of ceil(n / D) rounded up to 1024 floats.
for D in 2 4; do
  for z in 0 1 2 3; do
    "$remat" plan "${shape[@]}" --microbatches 1 --data-parallel "$D" --zero "$z" --mem 1GiB \
      --format json -o plan$D$z.json >/dev/null 2>&1
    mpi "$D" "$remat" train "${common[@]}" --data-parallel "$D" --zero "$z" --plan-only \
      >po$D$z.out 2>&1
  done
done
if python3 - <<'PY'
import json, math, re
L, C, Vp, maxT = 4, 64, 256, 64
units = [Vp * C + maxT * C] + [12 * C * C + 13 * C] * L + [2 * C]
tied = Vp * C
al = lambda b: (b + 63) // 64 * 64
shard = lambda n, D: math.ceil(math.ceil(n / D) / 1024) * 1024
ok = True
ratio = {}
for D in (2, 4):
    for z in range(4):
        whole = sum(al(4 * n) for n in units)
        sh = sum(4 * shard(n, D) for n in units)
        table = [4 * whole, 2 * whole + 2 * sh, whole + 3 * sh, 4 * sh][z]
        table += al(4 * tied) if z <= 1 else 4 * shard(units[0], D)
        out = open("po%d%d.out" % (D, z)).read()
        got = int(re.search(r"persistent (\d+) bytes per rank", out).group(1))
        ranks = [int(x) for x in re.findall(r"^rank \d+ arena .*? \((\d+) bytes\)", out, re.M)]
        plan = json.load(open("plan%d%d.json" % (D, z)))["stages"][0]["memory_bytes"]
        log = json.loads(open("dp%d%d.jsonl" % (D, z)).readlines()[-1])
        good = (got == table and len(ranks) == D and set(ranks) == {plan} and
                log["rank_measured_peak_bytes"] == [plan] * D)
        ratio[(D, z)] = log["comm_bytes"]
        print("  D=%d ZeRO %d: persistent %d = table %d, arena %d per rank, sent %d bytes/step %s"
              % (D, z, got, table, plan, log["comm_bytes"], "" if good else "MISMATCH"))
        ok = ok and good
    # ZeRO 3 gathers parameters twice per micro-batch instead of once per step
    r = ratio[(D, 3)] / ratio[(D, 1)]
    print("  D=%d ZeRO 3 / ZeRO 1 bytes: %.2f" % (D, r))
    ok = ok and ratio[(D, 1)] == ratio[(D, 2)] == ratio[(D, 0)] and 1.3 < r < 1.7
raise SystemExit(0 if ok else 1)
PY
then ok "per rank: planned = measured = remat plan; persistent bytes = the ZeRO table"
else bad "memory figures"; fi

expect_fail() { expect_fail_mpi "$@"; } # NAME PATTERN NP args...
expect_fail "wrong rank count" "started on 3 ranks but --data-parallel is 2" 3 --config tiny --data-parallel 2
expect_fail "a grid on too few ranks" "started on 3 ranks but --stages 2 x --data-parallel 2 is a grid of 4 ranks" \
  3 --config tiny --stages 2 --data-parallel 2
expect_fail "--zero alone" "give --data-parallel D too" 1 --config tiny --zero 2
expect_fail "--eval-every" "drop it with --data-parallel" 2 --config tiny --data-parallel 2 --eval-every 5
n=$((n + 1))
mpirun --oversubscribe -np 1 "$remat" train --config tiny --data-parallel 2 --seed 1 --steps 1 : \
  -np 1 "$remat" train --config tiny --data-parallel 2 --seed 2 --steps 1 >err.out 2>&1
if grep -q "other flags than rank 0" err.out; then echo "ok   [flags differ across ranks]"
else fails=$((fails + 1)); echo "FAIL [flags differ across ranks]"; head -3 err.out; fi

# A rank killed with SIGKILL ends the job within 30 s, with a message.
kill_a_rank --config tiny --data-parallel 2 --zero 3

# The P x D grid: 2 pipelines of 2 stages (world rank = stage x 2 + replica),
# 2 micro-batches each, against one process with --grad-accum 4 (one4 above):
# the same losses, norms and bytes at every ZeRO stage, under 1F1B and
# GPipe, with uneven stages and recompute; every rank's arena planned =
# measured = the per-rank line --plan-only prints.
grid=(--stages 2 --data-parallel 2 --grad-accum 2)
grid_same() { # grid_same TWO.jsonl TWO.bin PO.out
  python3 - one4.jsonl "$1" "$3" <<'PY' && cmp -s one4.bin "$2"
import json, re, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
po = [int(x) for x in re.findall(r"^rank \d+ stage \d+ replica \d+ arena .*? \((\d+) bytes\)",
                                 open(sys.argv[3]).read(), re.M)]
same = [(x["loss"], x["grad_norm"]) for x in a] == [(x["loss"], x["grad_norm"]) for x in b]
mem = all(x["rank_planned_peak_bytes"] == x["rank_measured_peak_bytes"] == po for x in b)
# rank 0's communication among its stage's replicas: time > 0, the exposed
# part within it, the overlapped share 1 - exposed / time in [0, 1]
comm = all(x["comm_s"] > 0 and -1e-5 <= x["comm_exposed_s"] <= x["comm_s"] + 1e-5 and
           0 <= x["comm_overlap"] <= 1 and 0 <= x["layer_comm_overlap"] <= 1 and
           abs(x["comm_overlap"] - (1 - x["comm_exposed_s"] / x["comm_s"])) < 1e-3 for x in b)
sys.exit(0 if same and mem and comm and len(po) == 4 and len(a) == len(b) == 3 else 1)
PY
}
for c in "0 1f1b 2,2 -" "1 gpipe 1,3 0,2" "2 1f1b 3,1 1" "3 gpipe 2,2 0,3"; do
  read -r z sched layers ck <<<"$c"
  ckpt=()
  [[ $ck != - ]] && ckpt=(--ckpt-layers "$ck")
  tag="grid 2 x 2 ZeRO $z $sched layers $layers recompute $ck"
  args=("${common[@]}" "${grid[@]}" --zero "$z" --schedule "$sched" --layers "$layers" "${ckpt[@]}")
  mpi 4 "$remat" train "${args[@]}" --plan-only >gpo$z.out 2>&1
  mpi 4 "$remat" train "${args[@]}" --log g$z.jsonl --save g$z.bin --trace gt$z.json >g$z.out 2>&1
  if grid_same g$z.jsonl g$z.bin gpo$z.out; then ok "bit-identical, planned = measured per rank: $tag"
  else bad "$tag"; tail -5 g$z.out; fi
done
# The trace has one track per rank; replica r's forwards are micro-batches r,
# r + 2; every rank's replica spans are there, a backward and a
# reduce-scatter per layer it holds and micro-batch, and on some rank a
# reduce-scatter overlaps another layer's backward.
if python3 - <<'PY'
import json
ev = json.load(open("gt3.json"))["traceEvents"]
names = [e["args"]["name"] for e in ev if e.get("name") == "process_name"]
fwd = sorted({(e["pid"], e["args"]["micro"]) for e in ev if e.get("cat") == "forward"})
want = [(p, m) for p in range(4) for m in ((0, 2) if p % 2 == 0 else (1, 3))]
ok = names == ["rank %d: stage %d, replica %d" % (k, k // 2, k % 2) for k in range(4)] and fwd == want
per = lambda cat: [e for e in ev if e.get("cat") == cat and "layer" in e.get("args", {})]
bwd, red = per("backward"), per("reduce")
layers = {0: 3, 1: 3, 2: 3, 3: 3}  # --layers 2,2: the embedding and 2 blocks; 2 blocks and the head
counts = all(sum(e["pid"] == p for e in red) == 3 * 2 * layers[p] for p in range(4))
over = sum(any(b["pid"] == r["pid"] and b["args"]["layer"] != r["args"]["layer"] and
               b["ts"] < r["ts"] + r["dur"] and r["ts"] < b["ts"] + b["dur"] for b in bwd)
           for r in red)
print("  grid trace: %d reduce-scatters, %d overlap another layer's backward" % (len(red), over))
raise SystemExit(0 if ok and counts and len(bwd) == len(red) and over > 0 else 1)
PY
then ok "grid trace: a track per rank, replica r runs micro-batches r, r + 2, reduce-scatters overlap"; else bad "grid trace"; fi
# A grid resumes: 6 steps = 3, then a resume for 3, byte for byte, on the
# run's thread count (OpenBLAS's AVX2 sgemm, which OPENBLAS_CORETYPE=Haswell
# picks on an AVX-512 CPU, gives other bits on another thread count).
R=("${shape[@]}" --steps 6 --dropout 0.1 --warmup 2 --cosine --threads 1 --quiet --peak-gflops 10
   "${grid[@]}" --zero 2)
rm -rf gck
mpi 4 "$remat" train "${R[@]}" --checkpoint-dir gck --checkpoint-every 3 --save gfull.bin >/dev/null 2>&1
mpi 4 "$remat" train --resume gck/step_00000003 --threads 1 --save ghalf.bin >/dev/null 2>&1
if [[ -f gck/step_00000003/state_rank_3.bin ]] && cmp -s gfull.bin ghalf.bin; then
  ok "grid ZeRO 2: 6 steps = 3 + --resume DIR for 3, same bytes"
else bad "grid resume"; fi
# remat plan places a grid's stages with a replica's bytes, as --mem does in
# remat train; its stage figure counts the whole model's communication
# buffers, so it bounds each rank's arena.
"$remat" plan "${shape[@]}" --stages 2 --microbatches 2 --data-parallel 2 --zero 3 --mem 1GiB \
  --format json -o gplan.json >/dev/null 2>&1
mpi 4 "$remat" train "${common[@]}" "${grid[@]}" --zero 3 --mem 1GiB --log gm.jsonl >gm.out 2>&1
if python3 - <<'PY'
import json
plan = [s.get("stream_peak_bytes") or s["memory_bytes"] for s in json.load(open("gplan.json"))["stages"]]
ranks = json.loads(open("gm.jsonl").readlines()[-1])["rank_measured_peak_bytes"]
print("  remat plan stages:", plan, "| ranks:", ranks)
ok = len(plan) == 2 and all(ranks[2 * s + r] <= plan[s] < 1.5 * ranks[2 * s + r]
                            for s in range(2) for r in range(2))
raise SystemExit(0 if ok else 1)
PY
then ok "remat plan --stages 2 --data-parallel 2: each stage's figure bounds its ranks' arenas"
else bad "remat plan on a grid"; fi
n=$((n + 1))
mpirun --oversubscribe -np 2 "$remat" train --config tiny --stages 2 --data-parallel 2 --seed 1 --steps 1 : \
  -np 2 "$remat" train --config tiny --stages 2 --data-parallel 2 --seed 2 --steps 1 >err.out 2>&1
if grep -q "rank 2 was started with other flags than rank 0" err.out; then echo "ok   [grid: flags differ across ranks]"
else fails=$((fails + 1)); echo "FAIL [grid: flags differ across ranks]"; head -3 err.out; fi

# A trace that cannot be written ends every replica within seconds.
touch afile
mkdir -p adir
rm -f afifo && mkfifo afifo
for t in "nodir/t.json:create the directory" "afile/t.json:Not a directory" \
         "adir:directory" "afifo:FIFO"; do
  path=${t%%:*} want=${t#*:} t0=$SECONDS
  timeout -k 5 60 mpirun --oversubscribe -np 2 "$remat" train --config tiny --steps 1 \
    --threads 1 --quiet --peak-gflops 1 --data-parallel 2 --trace "$path" >err.out 2>&1
  rc=$? took=$((SECONDS - t0))
  if [[ $rc -ne 0 && $rc -ne 124 && $rc -ne 137 ]] && grep -q -- "$want" err.out &&
     [[ -p afifo && -d adir ]]; then ok "--data-parallel 2 --trace $path: ends in ${took} s"
  else bad "--data-parallel 2 --trace $path (rc $rc after ${took} s)"; grep -m2 . err.out; fi
done

# Resumable replicas: a checkpoint holds each rank's own moments (its shards
# under ZeRO 1-3); resuming gives the uninterrupted run's bytes.
for z in 2 3; do
  R=(--config 4,64,4,256,64 --batch 2 --seq 32 --steps 6 --dropout 0.1 --warmup 2 --cosine
     --threads 1 --quiet --peak-gflops 10 --data-parallel 2 --zero "$z")
  rm -rf "ck$z"
  mpi 2 "$remat" train "${R[@]}" --checkpoint-dir "ck$z" --checkpoint-every 3 --save "full$z.bin" >/dev/null 2>&1
  mpi 2 "$remat" train "${R[@]}" --resume "ck$z/step_00000003" --save "half$z.bin" >/dev/null 2>&1
  if [[ -f ck$z/step_00000003/state_rank_1.bin ]] && cmp -s "full$z.bin" "half$z.bin"; then
    ok "ZeRO $z: 6 steps = 3 + resume for 3, same bytes"
  else bad "ZeRO $z resume"; fi
  # the directory alone: the saved settings (replicas, ZeRO stage) are the run's
  mpi 2 "$remat" train --resume "ck$z/step_00000003" --quiet --peak-gflops 10 --threads 1 \
    --save "alone$z.bin" >/dev/null 2>&1
  cmp -s "full$z.bin" "alone$z.bin" && ok "ZeRO $z: --resume DIR alone, same bytes" || \
    bad "ZeRO $z resume alone"
done
mpi 2 "$remat" train --resume ck2 >fin.out 2>&1 && grep -q "the run in ck2 finished at step 6" fin.out \
  && ok "replicas: a finished run says so" || bad "replicas finished: $(head -c 200 fin.out)"
mpi 2 "$remat" train --config 4,64,4,256,64 --batch 2 --seq 32 --steps 6 --dropout 0.1 --warmup 2 \
  --cosine --threads 1 --quiet --peak-gflops 10 --data-parallel 2 --zero 3 --resume ck2 >err.out 2>&1
if grep -q "\-\-zero 3 differs from the saved run's 2" err.out; then ok "resume under another ZeRO stage refused"
else bad "resume under another ZeRO stage: $(head -c 200 err.out)"; fi

summary

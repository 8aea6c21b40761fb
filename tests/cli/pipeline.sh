#!/usr/bin/env bash
# Pipeline stages over MPI against one process: bit-identical losses,
# gradient norms and saved checkpoints for P in {2, 3, 4}, under 1F1B, GPipe
# and ZB-H1 (B and W apart, W deferred), dropout on, heterogeneous layers and
# recompute (full and middle) per stage; every rank's arena
# planned = measured = what `remat plan` prints; a plan file is checked
# against the job; bad starts fail clearly; a killed rank ends the job; the
# trace is valid JSON with the expected events.
# usage: pipeline.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1

# one model, small enough to run many times: 6 blocks, B=4, T=32, 5 micro-batches
# fp32 here (bf16 pipelines: bf16.sh)
common=(--config 6,64,4,256,64 --batch 4 --seq 32 --grad-accum 5 --steps 3 --dropout 0.1
        --warmup 1 --cosine --threads 1 --peak-gflops 10 --quiet --precision fp32)

# P, schedule, blocks per stage, recomputed blocks
cases=("2 1f1b 3,3 1,4" "3 1f1b 1,3,2 0,middle:2-3,full:5" "4 1f1b 1,1,1,3 0,1,2,3,4,5"
       "4 gpipe 2,1,2,1 middle:1,3"
       "3 gpipe 0,5,1 4" "2 gpipe 6,0 -"
       "2 zb-h1 3,3 1,4" "3 zb-h1 1,3,2 0,middle:2-3,full:5" "4 zb-h1 1,1,1,3 middle:0-1,full:4")
for c in "${cases[@]}"; do
  read -r P sched layers ck <<<"$c"
  ckpt=()
  [[ $ck != - ]] && ckpt=(--ckpt-layers "$ck")
  tag="P=$P $sched layers $layers recompute $ck"
  "$remat" train "${common[@]}" "${ckpt[@]}" --log one.jsonl --save one.bin >one.out 2>&1
  mpi "$P" "$remat" train "${common[@]}" "${ckpt[@]}" --stages "$P" --schedule "$sched" \
    --layers "$layers" --log two.jsonl --save two.bin >two.out 2>&1
  if same_run one.jsonl one.bin two.jsonl two.bin 3; then ok "bit-identical: $tag"
  else bad "bit-identical: $tag"; tail -5 two.out; fi
done

# One micro-batch per step: one process adds the embedding's tied gradient
# onto the head's (no buffer apart), a pipeline sums them on two stages and
# then adds; the bits are the same.
single=(--config 6,64,4,256,64 --batch 4 --seq 32 --steps 3 --dropout 0.1 --warmup 1 --cosine
        --threads 1 --peak-gflops 10 --quiet --precision fp32)
"$remat" train "${single[@]}" --log one.jsonl --save one.bin >one.out 2>&1
mpi 2 "$remat" train "${single[@]}" --stages 2 --log two.jsonl --save two.bin >two.out 2>&1
if same_run one.jsonl one.bin two.jsonl two.bin 3; then
  ok "bit-identical: P=2, one micro-batch (one process adds onto the head's tied gradient)"
else bad "bit-identical: P=2, one micro-batch"; tail -5 two.out; fi
# --save-precision bf16: the stages' weights gathered and rounded as one process rounds its own.
"$remat" train "${single[@]}" --save one5.bin --save-precision bf16 >/dev/null 2>&1
mpi 2 "$remat" train "${single[@]}" --stages 2 --save two5.bin --save-precision bf16 >two5.out 2>&1
if [[ -s two5.bin ]] && cmp -s one5.bin two5.bin &&
   [[ $(($(stat -c %s two5.bin) * 2 - 1024)) -eq $(stat -c %s two.bin) ]]; then
  ok "P=2 saves the same bf16 file (version 5) as one process"
else bad "P=2 bf16 save"; tail -3 two5.out; fi

# The planner places the stages under a budget; each rank's arena is the
# plan's figure, planned and measured.
"$remat" plan --config 6,64,4,256,64 --precision fp32 --batch 4 --seq 32 --stages 3 --microbatches 5 \
  --mem 5MiB --format json -o plan.json >/dev/null 2>&1
mpi 3 "$remat" train "${common[@]}" --stages 3 --mem 5MiB --log mem.jsonl >mem.out 2>&1
if python3 - <<'PY'
import json
plan = [s.get("stream_peak_bytes") or s["memory_bytes"] for s in json.load(open("plan.json"))["stages"]]
rec = sum(len(s["recomputed"]) for s in json.load(open("plan.json"))["stages"])
log = [json.loads(l) for l in open("mem.jsonl")]
ok = rec > 0 and all(x["rank_planned_peak_bytes"] == plan == x["rank_measured_peak_bytes"] for x in log)
print("  remat plan:", plan, "recomputed", rec, "| log:", log[-1]["rank_measured_peak_bytes"])
raise SystemExit(0 if ok else 1)
PY
then ok "--mem: planned = measured = remat plan, per rank"; else bad "--mem figures"; tail -5 mem.out; fi

# The same under zb-h1: the plan counts a micro-batch until its W and each
# block's W records; every rank's arena is the plan's figure, and the plan
# file runs.
"$remat" plan --config 6,64,4,256,64 --precision fp32 --batch 4 --seq 32 --stages 3 \
  --microbatches 5 --mem 7MiB --schedule zb-h1 --format json -o zbplan.json >/dev/null 2>&1
mpi 3 "$remat" train "${common[@]}" --stages 3 --mem 7MiB --schedule zb-h1 --log zbmem.jsonl \
  >zbmem.out 2>&1
mpi 3 "$remat" train "${common[@]}" --stages 3 --plan zbplan.json --schedule zb-h1 \
  --log zbfile.jsonl >zbfile.out 2>&1
if python3 - <<'PY'
import json
plan = [s.get("stream_peak_bytes") or s["memory_bytes"] for s in json.load(open("zbplan.json"))["stages"]]
rec = sum(len(s["recomputed"]) for s in json.load(open("zbplan.json"))["stages"])
logs = [[json.loads(l) for l in open(f)] for f in ("zbmem.jsonl", "zbfile.jsonl")]
ok = rec > 0 and all(x["rank_planned_peak_bytes"] == plan == x["rank_measured_peak_bytes"]
                     for log in logs for x in log) and len(logs[0]) == len(logs[1]) == 3
ok = ok and [x["loss"] for x in logs[0]] == [x["loss"] for x in logs[1]]
print("  remat plan (zb-h1):", plan, "recomputed", rec)
raise SystemExit(0 if ok else 1)
PY
then ok "zb-h1 --mem and --plan: planned = measured = remat plan, per rank"
else bad "zb-h1 --mem figures"; tail -5 zbmem.out zbfile.out; fi

# --calibrate: rank 0 times the layers, every rank places the stages by its
# figures (the same placement on every rank, or the run would hang or
# differ), and the prediction is in those seconds.
mpi 2 "$remat" train "${common[@]}" --stages 2 --mem 8MiB --schedule zb-h1 --calibrate 2 \
  --log cal.jsonl >cal.out 2>&1
if python3 - <<'PY'
import json, re
log = [json.loads(l) for l in open("cal.jsonl")]
text = open("cal.out").read()
m = re.search(r"iteration ([0-9.]+) s measured, ([0-9.]+) s predicted", text)
ok = m and float(m.group(2)) > 0 and len(log) == 3 and all(
    x["rank_planned_peak_bytes"] == x["rank_measured_peak_bytes"] for x in log)
print("  measured %s s, predicted %s s" % (m.group(1), m.group(2)) if m else "  no prediction")
raise SystemExit(0 if ok else 1)
PY
then ok "--calibrate: stages placed by measured layer times, a prediction in seconds"
else bad "--calibrate"; tail -5 cal.out; fi

# The same plan from its file, and checked against the job.
mpi 3 "$remat" train "${common[@]}" --stages 3 --plan plan.json --log file.jsonl >file.out 2>&1
if cmp -s <(python3 -c 'import json;[print(json.loads(l)["loss"]) for l in open("mem.jsonl")]') \
          <(python3 -c 'import json;[print(json.loads(l)["loss"]) for l in open("file.jsonl")]'); then
  ok "--plan runs the planner's plan"
else bad "--plan"; tail -5 file.out; fi

expect_fail() { expect_fail_mpi "$@"; } # NAME PATTERN NP args...
expect_fail "a plan for another shape" "was made for" 3 "${common[@]}" --seq 16 --stages 3 --plan plan.json
expect_fail "a plan for another stage count" "is for 3 stages" 2 "${common[@]}" --stages 2 --plan plan.json
expect_fail "wrong rank count" "started on 2 ranks but --stages is 3" 2 --config tiny --stages 3
expect_fail "more stages than layers" "more stages than the model has layers" 5 --config tiny --stages 5
expect_fail "a budget that does not fit" "smallest budget that fits" 2 --config tiny --stages 2 --mem 1MiB
expect_fail "layers that do not add up" "places 5 blocks" 2 "${common[@]}" --stages 2 --layers 2,3
# An MPMD launch whose ranks differ in their flags, one of them perhaps not
# given the MPI flags at all (a job of its own): every rank takes part in
# the agreement, and the job ends within 30 s naming the rank (the cases
# above take seconds; 30 leaves a loaded machine room).
mpmd() { # mpmd NAME NP "RANK 0 FLAGS" "THE OTHERS' FLAGS"
  local t0=$SECONDS
  # shellcheck disable=SC2086
  timeout -k 5 30 mpirun --oversubscribe -np "$2" "$remat" train --config tiny --steps 1 \
    --threads 1 --quiet --peak-gflops 1 $3 : -np "$2" "$remat" train --config tiny --steps 1 \
    --threads 1 --quiet --peak-gflops 1 $4 >err.out 2>&1
  local rc=$? took=$((SECONDS - t0))
  if [[ $rc -ne 0 && $rc -ne 124 && $rc -ne 137 ]] &&
     grep -q "rank $2 was started with other flags than rank 0" err.out; then
    ok "MPMD, $1: ends in ${took} s, naming rank $2"
  else bad "MPMD, $1 (rc $rc after ${took} s)"; grep -m2 . err.out; fi
}
mpmd "one rank without --stages" 1 "--stages 2" ""
mpmd "one rank without --data-parallel" 1 "--data-parallel 2" ""
mpmd "another --seed" 1 "--stages 2 --seed 1" "--stages 2 --seed 2"
mpmd "another --steps" 1 "--stages 2 --steps 2" "--stages 2"
mpmd "grid flags on two ranks only" 2 "--stages 2 --data-parallel 2" ""
# --help on some ranks: such a rank used to print the usage and leave, the
# others waiting in MPI_Init for it forever; it takes part instead.
mpmd "--help on rank 1 only" 1 "--stages 2" "--stages 2 --help"
mpmd "--help on rank 0 only" 1 "--stages 2 --help" "--stages 2"
t0=$SECONDS
timeout -k 5 30 mpirun --oversubscribe -np 2 "$remat" train --stages 2 --help >help.out 2>err.out
rc=$? took=$((SECONDS - t0))
if [[ $rc -eq 0 && $(grep -c '^usage: remat train' help.out) -eq 1 ]]; then
  ok "--help on every rank: the usage once, exit 0, in ${took} s"
else bad "--help on every rank (rc $rc after ${took} s)"; grep -m2 . err.out; fi

# A trace that cannot be written, on any rank's account, ends every rank
# within seconds with the reason (no rank waits for another).
touch afile
mkdir -p adir
rm -f afifo && mkfifo afifo
for t in "nodir/t.json:create the directory" "afile/t.json:Not a directory" \
         "adir:directory" "afifo:FIFO"; do
  path=${t%%:*} want=${t#*:} t0=$SECONDS
  timeout -k 5 60 mpirun --oversubscribe -np 2 "$remat" train --config tiny --steps 1 \
    --threads 1 --quiet --peak-gflops 1 --stages 2 --trace "$path" >err.out 2>&1
  rc=$? took=$((SECONDS - t0))
  if [[ $rc -ne 0 && $rc -ne 124 && $rc -ne 137 ]] && grep -q -- "$want" err.out &&
     [[ -p afifo && -d adir ]]; then ok "--stages 2 --trace $path: ends in ${took} s"
  else bad "--stages 2 --trace $path (rc $rc after ${took} s)"; grep -m2 . err.out; fi
done

# A rank killed with SIGKILL ends the job within 30 s, with a message.
kill_a_rank --config tiny --stages 2 --grad-accum 2

# The log failing mid-run on rank 0 (a file size limit: write fails with
# EFBIG) ends every rank within seconds with its message.
t0=$SECONDS
rm -f big.jsonl
timeout -k 5 60 mpirun --oversubscribe -np 2 bash -c "ulimit -f 2; exec \"\$0\" \"\$@\"" \
  "$remat" train --config tiny --steps 100000 --threads 1 --quiet --peak-gflops 1 --stages 2 \
  --log big.jsonl >err.out 2>&1
rc=$? took=$((SECONDS - t0))
if [[ $rc -ne 0 && $rc -ne 124 && $rc -ne 137 ]] && grep -q "cannot write log file.*too large" err.out
then ok "the log failing mid-run on rank 0 ends the job in ${took} s"
else bad "the log failing mid-run (rc $rc after ${took} s)"; grep -m2 remat err.out; fi

# The trace: valid JSON, one track per rank, every kind of span.
mpi 3 "$remat" train "${common[@]}" --stages 3 --layers 2,2,2 --ckpt-layers 3 --trace t.json >t.out 2>&1
if python3 - <<'PY'
import json
t = json.load(open("t.json"))
ev = t["traceEvents"]
spans = {(e["pid"], e["cat"]) for e in ev if e["ph"] == "X"}
need = {(0, "forward"), (0, "backward"), (0, "send activation"), (0, "receive gradient"),
        (1, "receive activation"), (1, "recompute"), (1, "send gradient"), (2, "backward"),
        (0, "reduce"), (2, "update")}
counters = {e["pid"] for e in ev if e["ph"] == "C"}
fwd = sum(1 for e in ev if e.get("cat") == "forward")
ok = need <= spans and counters == {0, 1, 2} and fwd == 3 * 3 * 5
print("  %d events; forward spans %d" % (len(ev), fwd))
raise SystemExit(0 if ok else 1)
PY
then ok "trace"; else bad "trace"; fi

# Under zb-h1 the trace draws each micro-batch's B and W apart on every rank,
# and the recompute of a block that does not keep its internals in both.
mpi 2 "$remat" train "${common[@]}" --stages 2 --layers 3,3 --ckpt-layers 4 --schedule zb-h1 \
  --trace zb.json >zb.out 2>&1
if python3 - <<'PY'
import json
ev = json.load(open("zb.json"))["traceEvents"]
kinds = {}
for e in ev:
    if e["ph"] == "X":
        kinds.setdefault(e["cat"], set()).add(e["pid"])
b = sum(1 for e in ev if e.get("cat") == "input gradient (B)")
w = sum(1 for e in ev if e.get("cat") == "weight gradient (W)")
ok = (kinds.get("input gradient (B)") == {0, 1} and kinds.get("weight gradient (W)") == {0, 1}
      and "backward" not in kinds and b == w == 2 * 3 * 5 and 1 in kinds.get("recompute", ()))
print("  B spans %d, W spans %d" % (b, w))
raise SystemExit(0 if ok else 1)
PY
then ok "zb-h1 trace: B and W apart on every rank"; else bad "zb-h1 trace"; tail -3 zb.out; fi

# Resume and extend on a pipeline: --resume DIR alone takes the stages, the
# blocks per stage and the checkpointing from the checkpoint; a constant
# rate extends (4 steps then 8 = 8 steps, byte for byte).
E=(--config 6,64,4,256,64 --batch 4 --seq 32 --grad-accum 3 --dropout 0.1 --stages 2 --layers 2,4
   --threads 1 --peak-gflops 10 --quiet)
mpi 2 "$remat" train "${E[@]}" --steps 8 --save e8.bin >/dev/null 2>&1
mpi 2 "$remat" train "${E[@]}" --steps 4 --checkpoint-dir eck --checkpoint-every 2 >/dev/null 2>&1
mpi 2 "$remat" train --resume eck --steps 8 --save e4to8.bin --quiet >/dev/null 2>&1
if cmp -s e8.bin e4to8.bin && [[ -f eck/step_00000008/state_rank_1.bin ]]; then
  ok "pipeline: 4 steps, then --resume DIR --steps 8 alone = 8 steps, checkpoints continue"
else bad "pipeline resume alone and extend"; fi
mpi 2 "$remat" train --resume eck --lr 0.01 >err.out 2>&1
grep -q "\-\-lr 0.01 differs from the saved run's 0.001" err.out && ok "pipeline: a changed flag refused" \
  || bad "pipeline resume refusal: $(head -c 200 err.out)"

# A plan file that is a FIFO is refused by every rank at once, never opened.
rm -f pfifo && mkfifo pfifo
timeout -k 5 60 mpirun --oversubscribe -np 2 "$remat" train --config tiny --stages 2 --plan pfifo \
  >err.out 2>&1 </dev/null
rc=$?
if [[ $rc -ne 0 && $rc -ne 124 && $rc -ne 137 ]] && grep -q "FIFO" err.out && [[ -p pfifo ]]; then
  ok "--plan FIFO under mpirun: refused (exit $rc), the FIFO left as it was"
else bad "--plan FIFO under mpirun: exit $rc: $(head -c 200 err.out)"; fi

summary

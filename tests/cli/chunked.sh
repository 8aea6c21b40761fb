#!/usr/bin/env bash
# Chunked schedules over MPI against one process: under interleaved 1F1B
# each rank runs v model chunks (virtual stages r, r + P, ...) in Megatron's
# order; under zbv two (r and 2P - 1 - r, a V), with each backward as B and
# a deferred W, the last rank handing its chunk 0's output to its chunk 1
# and rank 0 holding both the embedding and the head. Each chunk has its
# own arena and the rank's one transient workspace. Bit-identical losses,
# gradient norms and saved models for P in {2, 3, 4} (and v in {2, 3}),
# dropout on, heterogeneous blocks and recompute (full and middle) per
# chunk, fp32 and bf16; every rank's arenas planned = measured = the
# planner's memory for that stage; bad starts fail before any rank works.
# usage: chunked.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1

common=(--config 6,64,4,256,64 --batch 4 --seq 32 --steps 3 --dropout 0.1 --warmup 1 --cosine
        --threads 1 --peak-gflops 10 --quiet)

# schedule, P, chunks, micro-batches, blocks per chunk (P v of them, model
# order), recomputed blocks, precision
cases=("interleaved 2 2 4 1,2,2,1 1,4 fp32"
       "interleaved 3 2 6 1,1,1,1,1,1 0,middle:2-3,full:5 fp32"
       "interleaved 4 2 4 0,1,1,1,1,1,1,0 middle:0-1,full:4 fp32"
       "interleaved 2 3 4 1,1,1,1,1,1 middle:0-1,full:4 fp32"
       "interleaved 2 2 2 2,1,1,2 - fp32" "interleaved 2 2 4 1,2,2,1 1,middle:4 bf16"
       "zbv 2 2 4 1,2,2,1 1,middle:4 fp32" "zbv 3 2 6 1,1,1,1,1,1 0,middle:2-3,full:5 fp32"
       "zbv 4 2 8 0,1,1,1,1,1,1,0 middle:0-1,full:4 fp32" "zbv 2 2 3 2,1,1,2 - fp32"
       "zbv 2 2 4 1,2,2,1 full:1,middle:4 bf16")
for c in "${cases[@]}"; do
  read -r sched P v M layers ck prec <<<"$c"
  if [[ $prec == bf16 ]] && ! "$remat" train --config tiny --steps 0 --precision bf16 --quiet \
       >/dev/null 2>&1; then
    ok "$sched P=$P v=$v bf16: skipped, this CPU has no bf16 instructions"
    continue
  fi
  ckpt=()
  [[ $ck != - ]] && ckpt=(--ckpt-layers "$ck")
  tag="$sched P=$P v=$v M=$M $prec blocks $layers recompute $ck"
  "$remat" train "${common[@]}" "${ckpt[@]}" --grad-accum "$M" --precision "$prec" \
    --log one.jsonl --save one.bin >one.out 2>&1
  mpi "$P" "$remat" train "${common[@]}" "${ckpt[@]}" --grad-accum "$M" --precision "$prec" \
    --stages "$P" --schedule "$sched" --chunks "$v" --layers "$layers" \
    --log two.jsonl --save two.bin >two.out 2>&1
  if same_run one.jsonl one.bin two.jsonl two.bin 3; then ok "bit-identical: $tag"
  else bad "bit-identical: $tag"; tail -5 two.out; fi
done

# The log counts the whole model's recomputed and middle blocks (here both
# on rank 1), not rank 0's, and gives each rank's recomputing seconds.
mpi 2 "$remat" train "${common[@]}" --grad-accum 4 --precision fp32 --stages 2 --schedule zbv \
  --chunks 2 --layers 1,2,2,1 --ckpt-layers full:1,middle:4 --log cnt.jsonl >cnt.out 2>&1
if python3 -c 'import json,sys; x=json.loads(open("cnt.jsonl").readlines()[-1]); r=x["rank_recompute_s"]; sys.exit(not (x["recomputed_blocks"] == 1 and x["middle_blocks"] == 1 and len(r) == 2 and r[0] == 0 and r[1] > 0))' 2>/dev/null
then ok "a pipeline's log counts the whole model's recomputed and middle blocks, and each rank's recomputing"
else bad "a pipeline's log's block counts: $(tail -c 300 cnt.jsonl) $(grep -m1 remat cnt.out)"; fi

# The planner places the chunks under a budget; each rank's arenas are the
# planner's memory for its stage, byte for byte, and the run equals one
# process's (keep, middle and full give the same bits).
B=(--config 6,64,4,256,64 --batch 4 --seq 32 --grad-accum 4 --steps 3 --threads 1
   --peak-gflops 10 --precision fp32)
"$remat" train "${B[@]}" --quiet --log one.jsonl --save one.bin >/dev/null 2>&1
for sched in interleaved zbv; do
  least=$( ("$remat" plan --config 6,64,4,256,64 --batch 4 --seq 32 --stages 2 --microbatches 4 \
    --schedule $sched --mem 1 --precision fp32 --format json 2>/dev/null || true) |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["min_budget_bytes"])')
  mem=$((least * 105 / 100)) # recomputes: the least is where everything is recomputed
  "$remat" plan --config 6,64,4,256,64 --batch 4 --seq 32 --stages 2 --microbatches 4 \
    --schedule $sched --mem $mem --precision fp32 --format json -o plan.json >/dev/null 2>&1
  mpi 2 "$remat" train "${B[@]}" --stages 2 --schedule $sched --mem $mem --log two.jsonl \
    --save two.bin >two.out 2>&1
  if python3 - plan.json two.jsonl <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
want = [s.get("stream_peak_bytes") or s["memory_bytes"] for s in plan["stages"]]
rows = [json.loads(l) for l in open(sys.argv[2])]
got = rows[-1]["rank_planned_peak_bytes"]
meas = rows[-1]["rank_measured_peak_bytes"]
rec = sum(len(s["recomputed"]) for s in plan["stages"])
sys.exit(0 if want == got == meas and rec > 0 else 1)
PY
  then ok "$sched planned under --mem $mem: every rank's arenas = the planner's stage memory = measured"
  else bad "$sched: planner's memory against the ranks' arenas: $(grep -m3 'arena\|error' two.out)"; fi
  if same_run one.jsonl one.bin two.jsonl two.bin 3; then ok "$sched planned placement: bit-identical"
  else bad "$sched planned placement: bit-identical"; fi
  grep -q "stage 1 chunk 1 arena" two.out && grep -q "$sched simulation" two.out \
    && ok "$sched: the run shows each chunk's arena and the plan's simulation" \
    || bad "$sched: chunk arenas in the header: $(head -c 300 two.out)"
  # the plan file places the same chunks and policies: the same run
  mpi 2 "$remat" train "${B[@]}" --stages 2 --schedule $sched --plan plan.json --log three.jsonl \
    --save three.bin >three.out 2>&1
  if same_run two.jsonl two.bin three.jsonl three.bin 3 && grep -q "stage 1 chunk 1 arena" three.out
  then ok "$sched: --plan FILE runs the plan's chunks"
  else bad "$sched --plan: $(grep -m2 'error\|arena' three.out)"; fi
  cp plan.json "plan-$sched.json"
done
# zbv's first rank holds the embedding and the head: the head reads the
# embedding's tied matrix and keeps only its own gradient of it (in bf16
# its bf16 copy too), so its smallest budget comes within 5% of 1f1b's
# (gpt2-350m, B8 T1024, 8 micro-batches on 4 stages: 1f1b 3141652480 bytes
# in fp32, 3143063040 in bf16; zbv 3462254592 and 3450623488 when the head
# held its own copy and AdamW moments of the matrix). Planning needs no
# bf16 instructions.
least_of() {
  ("$remat" plan --config gpt2-350m --batch 8 --seq 1024 --stages 4 --microbatches 8 \
    --schedule "$1" --mem 1 --precision "$2" --format json 2>/dev/null || true) |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["min_budget_bytes"])'
}
for prec in fp32:3462254592 bf16:3450623488; do
  p=${prec%:*} before=${prec#*:}
  l1=$(least_of 1f1b "$p") lv=$(least_of zbv "$p")
  if [[ -n $l1 && -n $lv ]] && ((lv * 100 <= l1 * 105 && lv < before)); then
    ok "$p: zbv's smallest budget $lv bytes is within 5% of 1f1b's $l1"
  else bad "$p: zbv's smallest budget '$lv' against 1f1b's '$l1'"; fi
  # and with every stage holding a block (the planner folds the head into
  # the last block): the plan at that budget fits it, no stage over
  "$remat" plan --config gpt2-350m --batch 8 --seq 1024 --stages 4 --microbatches 8 \
    --schedule zbv --mem "${lv:-1}" --min-blocks 1 --precision "$p" >fold.out 2>&1 &&
    ! grep -q "OVER BUDGET" fold.out && ok "$p: zbv with --min-blocks 1 fits its smallest budget" ||
    bad "$p: zbv with --min-blocks 1 at $lv bytes: $(grep -m2 'OVER\|error' fold.out)"
done
expect_fail_mpi "a zbv plan for an interleaved job" "is for 2 stages, 4 micro-batches and zbv" 2 \
  "${B[@]}" --stages 2 --schedule interleaved --plan plan-zbv.json
expect_fail_mpi "an interleaved plan for a 1f1b job" "and interleaved of 2 chunks" 2 \
  "${B[@]}" --stages 2 --plan plan-interleaved.json

# Checkpoints: each rank's state file holds every chunk's moments; 4 steps,
# then --resume DIR --steps 8 alone, equal 8 steps at once, byte for byte
# (zbv in bf16 too: its head's bf16 copy of the borrowed matrix after a load).
for run in interleaved:fp32 zbv:fp32 zbv:bf16; do
  sched=${run%:*} prec=${run#*:}
  if [[ $prec == bf16 ]] && ! "$remat" train --config tiny --steps 0 --precision bf16 --quiet \
       >/dev/null 2>&1; then
    ok "$sched bf16 resume: skipped, this CPU has no bf16 instructions"
    continue
  fi
  E=(--config 6,64,4,256,64 --batch 4 --seq 32 --grad-accum 4 --threads 1 --stages 2
     --schedule $sched --layers 1,2,2,1 --ckpt-layers 1,middle:4 --dropout 0.1 --precision $prec
     --quiet)
  rm -rf eck
  mpi 2 "$remat" train "${E[@]}" --steps 8 --save e8.bin >/dev/null 2>&1
  mpi 2 "$remat" train "${E[@]}" --steps 4 --checkpoint-dir eck --checkpoint-every 2 >/dev/null 2>&1
  mpi 2 "$remat" train --resume eck --steps 8 --save e4to8.bin --quiet >res.out 2>&1
  if [[ -s e8.bin ]] && cmp -s e8.bin e4to8.bin && [[ -f eck/step_00000008/state_rank_1.bin ]]; then
    ok "$run: 4 steps, then --resume DIR --steps 8 alone = 8 steps, every chunk's moments kept"
  else bad "$run resume: $(head -c 300 res.out)"; fi
  mpi 2 "$remat" train --resume eck --chunks 3 >err.out 2>&1
  grep -q "chunks" err.out && ok "$run: a changed --chunks refused on resume" \
    || bad "$run resume refusal: $(head -c 200 err.out)"
done

# Each rank's slots and W records in one pool: under zbv with everything
# kept the pools hold less than the slots and records side by side, and
# --spend-pools keeps layers the bound alone would recompute: at 44 MiB the
# plan under the bound recomputes 2 of 6 layers, the spent one none, its
# ranks' arenas and pools within the budget, planned = measured, and the
# run is one process's, bit for bit.
S=(--config small --batch 8 --seq 64 --precision fp32)
for spend in "" --spend-pools; do
  "$remat" plan "${S[@]}" --stages 2 --microbatches 4 --schedule zbv --mem 44MiB $spend \
    --format json -o "pool$spend.json" >/dev/null 2>&1
done
"$remat" train "${S[@]}" --grad-accum 4 --steps 3 --threads 1 --peak-gflops 10 --quiet \
  --log pone.jsonl --save pone.bin >/dev/null 2>&1
mpi 2 "$remat" train "${S[@]}" --grad-accum 4 --steps 3 --threads 1 --peak-gflops 10 \
  --stages 2 --schedule zbv --mem 44MiB --spend-pools --log ptwo.jsonl --save ptwo.bin \
  >ptwo.out 2>&1
if python3 - pool.json pool--spend-pools.json ptwo.jsonl <<'PY'
import json, sys
bound, spent = (json.load(open(f)) for f in sys.argv[1:3])
run = [json.loads(l) for l in open(sys.argv[3])][-1]
rec = lambda p: sum(len(s["recomputed"]) for s in p["stages"])
held = [s["stream_peak_bytes"] for s in spent["stages"]]
ok = rec(bound) == 2 and rec(spent) == 0 and all(h <= 44 << 20 for h in held)
ok = ok and any(s["memory_bytes"] > 44 << 20 for s in spent["stages"])
ok = ok and held == run["rank_planned_peak_bytes"] == run["rank_measured_peak_bytes"]
sys.exit(0 if ok else 1)
PY
then ok "zbv --spend-pools at 44 MiB: all 6 layers kept (2 recomputed under the bound), the ranks' pools within the budget, planned = measured"
else bad "zbv --spend-pools: $(grep -m2 'error\|remat' ptwo.out)"; fi
if same_run pone.jsonl pone.bin ptwo.jsonl ptwo.bin 3 && grep -q "stage 1 pool" ptwo.out &&
  grep -q "then the pools' room spent by a search" ptwo.out
then ok "zbv --spend-pools: one process's bits; the run shows each rank's pool"
else bad "zbv --spend-pools against one process: $(grep -m2 'pool\|error' ptwo.out)"; fi

# The trace under zbv: B and W apart on every rank.
mpi 2 "$remat" train --config 6,64,4,256,64 --batch 4 --seq 32 --grad-accum 4 --steps 2 \
  --threads 1 --stages 2 --schedule zbv --precision fp32 --quiet --trace t.json >t.out 2>&1
if python3 - <<'PY'
import json, sys
t = json.load(open("t.json"))
ev = t["traceEvents"] if isinstance(t, dict) else t
ranks = {e.get("pid") for e in ev if e.get("ph") == "X"}
for r in ranks:
    names = [e["name"] for e in ev if e.get("pid") == r and e.get("ph") == "X"]
    if not any(n.startswith("input gradient (B)") for n in names) or \
       not any(n.startswith("weight gradient (W)") for n in names):
        sys.exit(1)
sys.exit(0 if len(ranks) == 2 else 1)
PY
then ok "zbv trace: B and W apart on both ranks"
else bad "zbv trace: $(head -c 200 t.out)"; fi

# Bad starts: one line, every rank, before any step.
T=(--config 6,64,4,256,64 --batch 4 --seq 32 --steps 1 --threads 1 --stages 2)
expect_fail_mpi "M not a multiple of P" "not a multiple of 2" 2 "${T[@]}" --schedule interleaved \
  --grad-accum 3
expect_fail_mpi "more chunks than layers" "needs 8 layers\|layers" 2 --config tiny --stages 2 \
  --schedule interleaved --chunks 4 --grad-accum 2 --steps 1 --threads 1
expect_fail_mpi "--chunks without interleaved" "goes with --schedule interleaved" 2 "${T[@]}" \
  --grad-accum 2 --chunks 2
expect_fail_mpi "zbv of 3 chunks" "exactly 2" 2 "${T[@]}" --schedule zbv --grad-accum 2 --chunks 3
expect_fail_mpi "blocks per stage, not per chunk" "one per chunk" 2 "${T[@]}" \
  --schedule interleaved --grad-accum 2 --layers 3,3
summary

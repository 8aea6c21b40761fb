#!/usr/bin/env bash
# Mixed precision (--precision bf16) through the CLI: pipeline stages over
# MPI against one process, bit for bit (P in {2, 3}, 1F1B, GPipe and ZB-H1, dropout
# on, heterogeneous layers, keep, middle and full); the thread count does not
# change the bits; resume equals an uninterrupted run; every rank's arena
# planned = measured; replicas under ZeRO 0 to 3 and the 2 x 2 grid equal one
# process too; the run says which precision it chose and why; bad
# requests are one-line errors. On a CPU without bf16 instructions only the
# refusal is checked.
# usage: bf16.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1

expect_error "an unknown precision" "not a precision" train --precision fp16 --steps 1

if ! "$remat" train --config tiny --steps 1 --quiet --peak-gflops 10 >probe.out 2>&1 ||
   ! grep -q "^precision bf16" probe.out; then
  "$remat" train --config tiny --steps 1 --precision bf16 --quiet --peak-gflops 10 >probe.out 2>&1
  if grep -q "needs AVX512-BF16" probe.out; then
    echo "skip: $(cat probe.out)"
    summary bf16
    exit $?
  fi
  bad "a bf16 run on a CPU with the instructions"
  cat probe.out
fi
check "bf16 is the default here, and the run says why" \
  grep -q "^precision bf16 .*(the default here, bf16: AVX512-BF16" probe.out

model=(--config 6,64,4,256,64 --batch 4 --seq 32 --grad-accum 4 --steps 3 --dropout 0.1
       --warmup 1 --peak-gflops 10 --quiet)
common=("${model[@]}" --threads 1 --precision bf16)

# P, schedule, blocks per stage, recomputed blocks
cases=("2 1f1b 3,3 middle:1,full:4" "3 gpipe 1,3,2 0,middle:2-3,full:5" "2 1f1b 2,4 -"
       "3 zb-h1 2,2,2 middle:1,full:4")
for c in "${cases[@]}"; do
  read -r P sched layers ck <<<"$c"
  ckpt=()
  [[ $ck != - ]] && ckpt=(--ckpt-layers "$ck")
  tag="bf16 P=$P $sched layers $layers recompute $ck"
  "$remat" train "${common[@]}" "${ckpt[@]}" --log one.jsonl --save one.bin >one.out 2>&1
  mpi "$P" "$remat" train "${common[@]}" "${ckpt[@]}" --stages "$P" --schedule "$sched" \
    --layers "$layers" --log two.jsonl --save two.bin >two.out 2>&1
  if same_run one.jsonl one.bin two.jsonl two.bin 3; then ok "bit-identical: $tag"
  else bad "bit-identical: $tag"; tail -5 two.out; fi
done

# bf16 differs from fp32 (the products did run in bf16) and stays near it
"$remat" train "${model[@]}" --threads 1 --precision fp32 --log f32.jsonl >f32.out 2>&1
check "bf16 is not fp32, and near it" python3 - one.jsonl f32.jsonl <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
sys.exit(0 if a != b and max(abs(x - y) for x, y in zip(a, b)) < 0.05 else 1)
PY

# the thread count does not change the bits
for t in 1 2; do
  "$remat" train "${model[@]}" --precision bf16 --threads $t --log t$t.jsonl --save t$t.bin \
    >t$t.out 2>&1
done
check "bf16: 1 thread and 2 threads give the same bits" same_run t1.jsonl t1.bin t2.jsonl t2.bin 3

# resume: checkpoints every 2 steps of 4, the last one removed, resumed
res=(--config 6,64,4,256,64 --batch 4 --seq 32 --steps 4 --dropout 0.1 --threads 1
     --peak-gflops 10 --quiet --precision bf16 --checkpoint-every 2)
"$remat" train "${res[@]}" --checkpoint-dir full --save full.bin >full.out 2>&1
"$remat" train "${res[@]}" --checkpoint-dir cut --save cut.bin >cut.out 2>&1
rm -rf cut/step_00000004
"$remat" train --resume cut --save cut.bin >resumed.out 2>&1
check "bf16: resumed from step 2 = uninterrupted" cmp -s full.bin cut.bin
check "bf16: the resumed run keeps its precision" grep -q "^precision bf16" resumed.out
expect_error "bf16: a resume may not change the precision" "precision" \
  train --resume cut --precision fp32

# replicas under ZeRO 0 to 3 and the 2 x 2 grid: one process's bits (each
# replica runs 2 of the step's 4 micro-batches)
for z in 0 1 2 3; do
  mpi 2 "$remat" train "${common[@]}" --grad-accum 2 --data-parallel 2 --zero $z \
    --log dp.jsonl --save dp.bin >dp.out 2>&1
  "$remat" train "${common[@]}" --log one.jsonl --save one.bin >one.out 2>&1
  if same_run one.jsonl one.bin dp.jsonl dp.bin 3; then ok "bit-identical: bf16 D=2 ZeRO $z"
  else bad "bit-identical: bf16 D=2 ZeRO $z"; tail -5 dp.out; fi
done
mpi 4 "$remat" train "${common[@]}" --grad-accum 2 --stages 2 --data-parallel 2 --zero 3 \
  --layers 3,3 \
  --ckpt-layers middle:1,full:4 --log grid.jsonl --save grid.bin >grid.out 2>&1
"$remat" train "${common[@]}" --ckpt-layers middle:1,full:4 --log one.jsonl --save one.bin \
  >one.out 2>&1
if same_run one.jsonl one.bin grid.jsonl grid.bin 3; then ok "bit-identical: bf16 2 x 2 grid, ZeRO 3"
else bad "bit-identical: bf16 2 x 2 grid, ZeRO 3"; tail -5 grid.out; fi
# remat plan sizes bf16's product scratchpad for the threads each rank runs:
# --threads 1 plans the bytes 4 ranks of --threads 1 plan and measure, and
# its default for 2 stages on this machine is what 2 ranks get.
shape=(--config 8,128,4,512,128 --batch 2 --seq 128 --precision bf16)
plan_bytes() { "$remat" plan "${shape[@]}" --microbatches 4 --mem 1GiB --format json "$@" |
  python3 -c 'import json, sys; print(*[s["memory_bytes"] for s in json.load(sys.stdin)["stages"]])'; }
run_bytes() { mpi "$1" "$remat" train "${shape[@]}" --stages "$1" --grad-accum 4 --plan-only "${@:2}" |
  sed -n 's/^ranks   arena planned = measured on every rank: //p; s/^stage [0-9]* arena [^(]*(\([0-9]*\) bytes).*/\1/p' |
  tr '\n' ' ' | sed 's/ $//'; }
p1=$(plan_bytes --stages 4 --threads 1)
r1=$(run_bytes 4 --threads 1)
check "bf16: remat plan --threads 1 gives 4 ranks' arenas at --threads 1: $p1" test "$p1" = "$r1"
cpus=$(nproc)
if [ "$cpus" -ge 2 ]; then
  want=$((cpus / 2))
  p2=$(plan_bytes --stages 2)
  r2=$(plan_bytes --stages 2 --threads "$want")
  check "bf16: remat plan's default for 2 stages is $want thread(s) a rank, CPUs / ranks" test "$p2" = "$r2"
fi
summary bf16

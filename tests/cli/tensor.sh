#!/usr/bin/env bash
# Tensor parallelism run (--tensor-parallel T over MPI, Megatron-LM's
# layout) against one process, over 5 AdamW steps: every loss and gradient
# norm agrees within a relative 1e-5 (float rounding: the group's sums add
# the ranks' parts where one process adds a whole row), for T in {2, 4},
# GPT-2 and Llamas (untied and tied heads, key/value heads split), and
# T=2 groups as 2 replicas under ZeRO 0 (and 1 to 3: bit for bit), as 2
# pipeline stages (1f1b, zb-h1; interleaved and zbv bit for bit), or both
# (8 ranks) against one process accumulating their micro-batches (and
# against T=2 alone, bit for bit), with
# blocks kept, in full, middle, dropout (each rank its heads' share of the
# whole mask), several micro-batches a step and the head in chunks; a run
# repeats bit for bit, recomputing gives the kept run's bits, the guard
# backend the CPU's; every rank's arena planned = measured, and = `remat
# plan --tensor-parallel`'s; the saved model is one process's within
# rounding, a resume the uninterrupted run bit for bit, a model file loads
# into the shards, the held-out loss is one process's; the same with
# sequence parallelism (--sequence-parallel); --trace draws every rank and
# the group's collectives; what is not run yet is refused, saying so.
# usage: tensor.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1

shape=(--config 4,64,4,256,64 --batch 2 --seq 32 --precision fp32)
common=("${shape[@]}" --steps 5 --warmup 1 --threads 1 --peak-gflops 10 --dropout 0 --quiet)

# near ONE.jsonl T.jsonl T: same step count, losses and norms within a
# relative 1e-5, every one of the T ranks' arenas planned = measured
near() { near_run "$1" "$2" "$3" 1e-5; }
# same A.jsonl B.jsonl: the same losses and gradient norms, bit for bit
same() { same_steps "$1" "$2"; }

# a Llama (untied head, 4 key/value heads) with every policy, and one with
# a tied head and 2 key/value heads
llama=(--config llama:4,64,4,4,176,256,64 --batch 2 --seq 32)
llama_tied=(--config llama:4,64,4,2,176,256,64,10000,1 --batch 2 --seq 32)
cases=("keep:" "full-middle-accum:--ckpt-layers full:0-1,middle:2-3 --grad-accum 2"
       "middle-chunks:--ckpt-layers middle:0-3 --head-chunk 16"
       "dropout:--dropout 0.1 --ckpt-layers full:0,middle:1"
       "llama:${llama[*]} --ckpt-layers full:0,middle:1-2 --dropout 0.1"
       "llama-tied:${llama_tied[*]} --ckpt-layers middle:0-1")
for c in "${cases[@]}"; do
  name=${c%%:*}
  read -r -a extra <<<"${c#*:}"
  "$remat" train "${common[@]}" "${extra[@]}" --log one_$name.jsonl >one_$name.out 2>&1
  for t in 2 4; do
    [[ $name == llama-tied && $t == 4 ]] && continue # 4 does not divide its 2 kv heads
    mpi "$t" "$remat" train "${common[@]}" "${extra[@]}" --tensor-parallel "$t" \
      --log tp${t}_$name.jsonl >tp${t}_$name.out 2>&1
    if d=$(near one_$name.jsonl tp${t}_$name.jsonl "$t"); then ok "$name, T=$t = one process ($d)"
    else bad "$name, T=$t against one process: $d $(grep -m2 -i 'error\|remat' tp${t}_$name.out)"; fi
  done
done

# T=2 tensor groups as D=2 replicas (ZeRO 0; 4 ranks, the tensor ranks
# adjacent) against one process accumulating D micro-batches a step
for c in "gpt2:" "llama:${llama[*]}"; do
  name=${c%%:*}
  read -r -a extra <<<"${c#*:}"
  "$remat" train "${common[@]}" "${extra[@]}" --dropout 0.1 --grad-accum 2 \
    --log dp_one_$name.jsonl >dp_one_$name.out 2>&1
  mpi 4 "$remat" train "${common[@]}" "${extra[@]}" --dropout 0.1 --tensor-parallel 2 \
    --data-parallel 2 --log dp_$name.jsonl >dp_$name.out 2>&1
  if d=$(near dp_one_$name.jsonl dp_$name.jsonl 4); then ok "$name, T=2 x D=2 = one process ($d)"
  else bad "$name, T=2 x D=2 against one process: $d $(grep -m2 -i 'error\|remat' dp_$name.out)"; fi
done

# T=2 tensor groups as P=2 pipeline stages (4 ranks) under 1f1b and
# zb-h1 against one process accumulating the 4 micro-batches; the saved
# model; the planner's stages and their bytes, every rank's arena
for c in "gpt2-1f1b:1f1b:" "gpt2-zbh1:zb-h1:" "llama-1f1b:1f1b:${llama[*]}"; do
  name=${c%%:*}
  rest=${c#*:}
  schedule=${rest%%:*}
  read -r -a extra <<<"${rest#*:}"
  "$remat" train "${common[@]}" "${extra[@]}" --dropout 0.1 --grad-accum 4 \
    --log pp_one_$name.jsonl --save pp_one_$name.bin >pp_one_$name.out 2>&1
  mpi 4 "$remat" train "${common[@]}" "${extra[@]}" --dropout 0.1 --grad-accum 4 \
    --tensor-parallel 2 --stages 2 --schedule "$schedule" --log pp_$name.jsonl \
    --save pp_$name.bin >pp_$name.out 2>&1
  if d=$(near pp_one_$name.jsonl pp_$name.jsonl 4); then ok "$name, T=2 x P=2 = one process ($d)"
  else bad "$name, T=2 x P=2 against one process: $d $(grep -m2 -i 'error\|remat' pp_$name.out)"; fi
done
if python3 - pp_one_gpt2-1f1b.bin pp_gpt2-1f1b.bin <<'PY'; then ok "T=2 x P=2 --save: one process's weights within 1e-4"
import array, sys
a, b = (open(p, "rb").read() for p in sys.argv[1:3])
x, y = array.array("f", a[1024:]), array.array("f", b[1024:])
sys.exit(0 if a[:1024] == b[:1024] and len(x) == len(y) > 0 and
         max(abs(p - q) for p, q in zip(x, y)) <= 1e-4 else 1)
PY
else bad "T=2 x P=2 --save against one process"; fi
# the same bits whatever the pipeline and data degrees: T=2 alone
# accumulating the micro-batches = T=2 x P=2 = T=2 x D=2
mpi 2 "$remat" train "${common[@]}" --dropout 0.1 --grad-accum 4 --tensor-parallel 2 \
  --log alone4.jsonl --save alone4.bin >alone4.out 2>&1
mpi 2 "$remat" train "${common[@]}" --dropout 0.1 --grad-accum 2 --tensor-parallel 2 \
  --log alone2.jsonl --save alone2.bin >alone2.out 2>&1
check "T=2 alone = T=2 x P=2, bit for bit (losses, norms)" same alone4.jsonl pp_gpt2-1f1b.jsonl
# recompute per micro-batch (full@K: a block recomputed for the oldest K
# micro-batches in flight) on tensor ranks: the kept run's bits
mpi 4 "$remat" train "${common[@]}" --dropout 0.1 --grad-accum 4 --tensor-parallel 2 --stages 2 \
  --schedule zb-h1 --layers 2,2 --ckpt-layers "full@1:0-1,middle:2,full@1:3" \
  --log pp_slots.jsonl --save pp_slots.bin >pp_slots.out 2>&1
check "T=2 x P=2 (zb-h1) recomputing per micro-batch = kept, byte for byte" \
  cmp -s pp_gpt2-zbh1.bin pp_slots.bin
check "... every rank's arena planned = measured" python3 -c '
import json, sys
x = [json.loads(l) for l in open("pp_slots.jsonl")][-1]
sys.exit(not (len(x["rank_planned_peak_bytes"]) == 4 and
              x["rank_planned_peak_bytes"] == x["rank_measured_peak_bytes"]))'
# the prediction counts the group's collectives at the link measured now
if grep -Eq "^link    the tensor ranks' sum measured now at [0-9.e+]+ GB/s" alone2.out &&
   ! grep -q "^link .* at 0 GB/s" alone2.out &&
   grep -q "^time .* predicted .*its group's collectives at the link measured" alone2.out; then
  ok "a t=2 run measures its link and counts the group's collectives in its prediction"
else bad "t=2 link and prediction: $(grep -E '^(link|time)' alone2.out)"; fi
check "... and the saved model, byte for byte" cmp -s alone4.bin pp_gpt2-1f1b.bin
check "T=2 alone = T=2 x D=2, bit for bit" same alone2.jsonl dp_gpt2.jsonl
# the whole layout: T=2 x P=2 x D=2 on 8 ranks, each pipeline 2 micro-batches
mpi 8 "$remat" train "${common[@]}" --dropout 0.1 --grad-accum 2 --tensor-parallel 2 \
  --stages 2 --data-parallel 2 --log grid.jsonl --save grid.bin >grid.out 2>&1
check "T=2 alone = T=2 x P=2 x D=2, bit for bit" same alone4.jsonl grid.jsonl
check "... and its saved model, byte for byte" cmp -s alone4.bin grid.bin
if python3 - grid.jsonl <<'PY'; then ok "T=2 x P=2 x D=2: all 8 arenas planned = measured"
import json, sys
x = [json.loads(l) for l in open(sys.argv[1])][-1]
sys.exit(0 if len(x["rank_planned_peak_bytes"]) == 8 and
         x["rank_planned_peak_bytes"] == x["rank_measured_peak_bytes"] else 1)
PY
else bad "T=2 x P=2 x D=2 arenas: $(tail -c 300 grid.out)"; fi

# chunked schedules: each rank's two chunks, each a shard of its own
for schedule in interleaved zbv; do
  mpi 4 "$remat" train "${common[@]}" --dropout 0.1 --grad-accum 4 --tensor-parallel 2 \
    --stages 2 --schedule $schedule --log chunks_$schedule.jsonl --save chunks_$schedule.bin \
    >chunks_$schedule.out 2>&1
  check "T=2 alone = T=2 x P=2 ($schedule), bit for bit" same alone4.jsonl chunks_$schedule.jsonl
  check "... and the saved model, byte for byte" cmp -s alone4.bin chunks_$schedule.bin
done
ch=("${common[@]}" --dropout 0.1 --grad-accum 4 --tensor-parallel 2 --stages 2 \
    --schedule interleaved)
mpi 4 "$remat" train "${ch[@]}" --steps 3 --checkpoint-dir ck_ch --checkpoint-every 3 \
  >ch_half.out 2>&1
mpi 4 "$remat" train "${ch[@]}" --resume ck_ch --save ch_res.bin --log ch_res.jsonl \
  >ch_res.out 2>&1
if cmp -s chunks_interleaved.bin ch_res.bin &&
   [[ "$(tail -n 2 chunks_interleaved.jsonl | cut -d, -f1-4)" == "$(cut -d, -f1-4 ch_res.jsonl)" ]]; then
  ok "T=2 x P=2 interleaved resumed at step 3 = uninterrupted, bit for bit"
else bad "T=2 x P=2 interleaved resume: $(tail -c 300 ch_res.out)"; fi

# replicas sharding AdamW's moments (ZeRO 1), the gradients (2) and the
# parameters (3, each replica a piece of its tensor rank's shard): the norm
# from their shards' chunk sums, split and whole tensors apart
for z in 1 2 3; do
  mpi 4 "$remat" train "${common[@]}" --dropout 0.1 --tensor-parallel 2 --data-parallel 2 \
    --zero $z --log zero$z.jsonl --save zero$z.bin >zero$z.out 2>&1
  check "T=2 alone = T=2 x D=2 under ZeRO $z, bit for bit" same alone2.jsonl zero$z.jsonl
  check "... and the saved model, byte for byte" cmp -s alone2.bin zero$z.bin
done
for z in 2 3; do
  mpi 8 "$remat" train "${common[@]}" --dropout 0.1 --grad-accum 2 --tensor-parallel 2 \
    --stages 2 --data-parallel 2 --zero $z --log grid_zero$z.jsonl --save grid_zero$z.bin \
    >grid_zero$z.out 2>&1
  check "T=2 alone = T=2 x P=2 x D=2 under ZeRO $z, bit for bit" same alone4.jsonl grid_zero$z.jsonl
  check "... and its saved model, byte for byte" cmp -s alone4.bin grid_zero$z.bin
done
if python3 - zero3.jsonl grid_zero3.jsonl <<'PY'; then ok "ZeRO 3: every arena of T x D and T x P x D planned = measured"
import json, sys
rows = [[json.loads(l) for l in open(p)][-1] for p in sys.argv[1:]]
sys.exit(0 if [len(x["rank_planned_peak_bytes"]) for x in rows] == [4, 8] and
         all(x["rank_planned_peak_bytes"] == x["rank_measured_peak_bytes"] for x in rows) else 1)
PY
else bad "ZeRO 3 arenas: $(tail -c 300 grid_zero3.out)"; fi
zz=("${common[@]}" --dropout 0.1 --tensor-parallel 2 --data-parallel 2 --zero 3)
mpi 4 "$remat" train "${zz[@]}" --steps 3 --checkpoint-dir ck_zero --checkpoint-every 3 \
  >zero_half.out 2>&1
mpi 4 "$remat" train "${zz[@]}" --steps 5 --resume ck_zero --save zero_res.bin \
  --log zero_res.jsonl >zero_res.out 2>&1
if cmp -s zero3.bin zero_res.bin &&
   [[ "$(tail -n 2 zero3.jsonl | cut -d, -f1-4)" == "$(cut -d, -f1-4 zero_res.jsonl)" ]]; then
  ok "T=2 x D=2 under ZeRO 3 resumed at step 3 = uninterrupted, bit for bit"
else bad "T=2 x D=2 ZeRO 3 resume: $(tail -c 300 zero_res.out)"; fi

pp=("${common[@]}" --grad-accum 4 --tensor-parallel 2 --stages 2 --dropout 0.1)
mpi 4 "$remat" train "${pp[@]}" --steps 3 --checkpoint-dir ck_pp --checkpoint-every 3 \
  >pp_half.out 2>&1
mpi 4 "$remat" train "${pp[@]}" --steps 5 --resume ck_pp --save pp_res.bin --log pp_res.jsonl \
  >pp_res.out 2>&1
if cmp -s pp_gpt2-1f1b.bin pp_res.bin &&
   [[ "$(tail -n 2 pp_gpt2-1f1b.jsonl | cut -d, -f1-4)" == "$(cut -d, -f1-4 pp_res.jsonl)" ]]; then
  ok "T=2 x P=2 resumed at step 3 = uninterrupted, bit for bit"
else bad "T=2 x P=2 resume: $(tail -c 300 pp_res.out)"; fi
mpi 4 "$remat" train "${common[@]}" --grad-accum 4 --tensor-parallel 2 --stages 2 --mem 1.4MiB \
  --log ppmem.jsonl >ppmem.out 2>&1
"$remat" plan "${shape[@]}" --stages 2 --microbatches 4 --tensor-parallel 2 --mem 1.4MiB \
  --format json >ppplan.json 2>ppplan.err
if python3 - ppmem.jsonl ppplan.json <<'PY'; then ok "T=2 x P=2 --mem: each stage's ranks' arenas = the plan's stages"
import json, sys
run = [json.loads(l) for l in open(sys.argv[1])][-1]
stages = [s.get("stream_peak_bytes") or s["memory_bytes"] for s in json.load(open(sys.argv[2]))["stages"]]
want = [stages[0], stages[0], stages[1], stages[1]]
sys.exit(0 if run["rank_planned_peak_bytes"] == run["rank_measured_peak_bytes"] == want else 1)
PY
else bad "T=2 x P=2 --mem against remat plan: $(tail -c 300 ppmem.out)"; fi

# repeats, recompute and the guard backend: the same bits
mpi 2 "$remat" train "${common[@]}" --tensor-parallel 2 --log again.jsonl >again.out 2>&1
check "a run of T=2 repeats bit for bit" same tp2_keep.jsonl again.jsonl
mpi 2 "$remat" train "${common[@]}" --tensor-parallel 2 --ckpt-layers full:0-3 \
  --log full.jsonl >full.out 2>&1
check "T=2 recomputing every block gives the kept run's bits" same tp2_keep.jsonl full.jsonl
mpi 2 "$remat" train "${common[@]}" --tensor-parallel 2 --backend guard \
  --log guard.jsonl >guard.out 2>&1
check "T=2 under the guard backend gives the CPU's bits" same tp2_keep.jsonl guard.jsonl
# replicas sharding the norm's sums (ZeRO 2) and the parameters (3) of
# sequence-parallel tensor ranks: the guard backend's bits are the CPU's,
# and nothing but its operations touched its memory
for z in 2 3; do
  for b in cpu guard; do
    mpi 4 "$remat" train "${common[@]}" --dropout 0.1 --tensor-parallel 2 --sequence-parallel \
      --data-parallel 2 --zero $z --steps 3 --backend $b --save gz${z}_$b.bin \
      >gz${z}_$b.out 2>&1
  done
  check "T=2 x D=2 under ZeRO $z (sequence-parallel): the guard backend saves the CPU's bytes" \
    cmp -s gz${z}_cpu.bin gz${z}_guard.bin
done

# the planner's rank: the same blocks recomputed, its bytes the arena's
mpi 2 "$remat" train "${common[@]}" --tensor-parallel 2 --mem 2.3MiB --log mem.jsonl >mem.out 2>&1
"$remat" plan "${shape[@]}" --tensor-parallel 2 --mem 2.3MiB --format json >plan.json 2>plan.err
if python3 - mem.jsonl plan.json mem.out <<'PY'; then ok "T=2 --mem: the plan's rank bytes = every rank's arena"
import json, sys
run = [json.loads(l) for l in open(sys.argv[1])][-1]
plan = json.load(open(sys.argv[2]))
stage = plan["stages"][0]
arenas = set(run["rank_planned_peak_bytes"]) | set(run["rank_measured_peak_bytes"])
policy = "policy  3 of 4 blocks recomputed (0,1,2)" in open(sys.argv[3]).read()
sys.exit(0 if arenas == {stage["memory_bytes"]} and policy else 1)
PY
else bad "T=2 --mem against remat plan: $(head -c 300 mem.out)"; fi

# weights out and in: the group's saved model is one process's within
# rounding; a resume goes on as the uninterrupted run, bit for bit; one
# process's model file trained on by the group is one process's run
"$remat" train "${common[@]}" --steps 6 --save one6.bin --log one6.jsonl >one6.out 2>&1
mpi 2 "$remat" train "${common[@]}" --steps 6 --tensor-parallel 2 --save tp6.bin \
  --checkpoint-dir ck_all --checkpoint-every 3 --log tp6.jsonl >tp6.out 2>&1
if python3 - one6.bin tp6.bin <<'PY'; then ok "T=2 --save: one process's weights within 1e-4"
import array, sys
a, b = (open(p, "rb").read() for p in sys.argv[1:3])
x, y = array.array("f", a[1024:]), array.array("f", b[1024:])
sys.exit(0 if a[:1024] == b[:1024] and len(x) == len(y) > 0 and
         max(abs(p - q) for p, q in zip(x, y)) <= 1e-4 else 1)
PY
else bad "T=2 --save against one process: $(tail -c 300 tp6.out)"; fi
mpi 2 "$remat" train "${common[@]}" --steps 3 --tensor-parallel 2 --checkpoint-dir ck_half \
  --checkpoint-every 3 >half.out 2>&1
mpi 2 "$remat" train "${common[@]}" --steps 6 --tensor-parallel 2 --resume ck_half \
  --save res6.bin --log res6.jsonl >res6.out 2>&1
if cmp -s tp6.bin res6.bin && [[ -f ck_half/step_00000003/state_rank_1.bin ]] &&
   [[ "$(tail -n 3 tp6.jsonl | cut -d, -f1-4)" == "$(cut -d, -f1-4 res6.jsonl)" ]]; then
  ok "T=2 resumed at step 3 = uninterrupted: losses, norms, weights bit for bit"
else bad "T=2 resume: $(tail -c 300 res6.out)"; fi
"$remat" train "${common[@]}" --steps 2 --model one6.bin --log from1.jsonl >from1.out 2>&1
mpi 2 "$remat" train "${common[@]}" --steps 2 --model one6.bin --tensor-parallel 2 \
  --log from2.jsonl >from2.out 2>&1
if python3 - from1.jsonl from2.jsonl <<'PY'; then ok "T=2 from one process's model file = one process"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
rel = lambda x, y: abs(x - y) / abs(x)
sys.exit(0 if len(a) == len(b) == 2 and all(rel(x["loss"], y["loss"]) <= 1e-5 and
         rel(x["grad_norm"], y["grad_norm"]) <= 1e-5 for x, y in zip(a, b)) else 1)
PY
else bad "T=2 from a model file: $(tail -c 300 from2.out)"; fi
mpi 2 "$remat" train "${common[@]}" --steps 2 --model one6.bin --tensor-parallel 2 \
  --grad-accum 2 --log from2a.jsonl >from2a.out 2>&1
mpi 4 "$remat" train "${common[@]}" --steps 2 --model one6.bin --tensor-parallel 2 \
  --data-parallel 2 --zero 3 --log from_z3.jsonl >from_z3.out 2>&1
if [[ -s from2a.jsonl ]] &&
   [[ "$(cut -d, -f1-4 from2a.jsonl)" == "$(cut -d, -f1-4 from_z3.jsonl)" ]]; then
  ok "T=2 x D=2 under ZeRO 3 from a model file = T=2, bit for bit"
else bad "T=2 x D=2 ZeRO 3 from a model file: $(tail -c 300 from_z3.out)"; fi

# the held-out loss, evaluated by the group
"$remat" train "${common[@]}" --steps 4 --eval-every 2 --log eval1.jsonl >eval1.out 2>&1
mpi 2 "$remat" train "${common[@]}" --steps 4 --eval-every 2 --tensor-parallel 2 \
  --log eval2.jsonl >eval2.out 2>&1
if python3 - eval1.jsonl eval2.jsonl <<'PY'; then ok "T=2 held-out losses = one process's"
import json, sys
a, b = ([x.get("val_loss") for x in map(json.loads, open(p))] for p in sys.argv[1:3])
sys.exit(0 if len(a) == len(b) == 4 and a[1] and a[3] and b[0] is None and
         all(x is None and y is None or abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b))
         else 1)
PY
else bad "T=2 evaluation: $(tail -c 300 eval2.out)"; fi

# sequence parallelism: the norms, dropout and residual adds on a rank's
# rows of the stream, the products' inputs gathered and outputs
# reduce-scattered; against one process (T = 2 and 4, GPT-2 with dropout,
# recompute and the head in chunks, a Llama), the same bits whatever the
# pipeline and data degrees and after a resume, every arena planned =
# measured and = the planner's
for name in dropout middle-chunks llama; do
  c=$(printf '%s\n' "${cases[@]}" | grep "^$name:")
  read -r -a extra <<<"${c#*:}"
  for t in 2 4; do
    mpi "$t" "$remat" train "${common[@]}" "${extra[@]}" --tensor-parallel "$t" \
      --sequence-parallel --log sp${t}_$name.jsonl >sp${t}_$name.out 2>&1
    if d=$(near one_$name.jsonl sp${t}_$name.jsonl "$t"); then
      ok "$name, T=$t sequence-parallel = one process ($d)"
    else bad "$name, T=$t sequence-parallel: $d $(grep -m2 -i 'error\|remat' sp${t}_$name.out)"; fi
  done
done
sp=("${common[@]}" --dropout 0.1 --tensor-parallel 2 --sequence-parallel)
mpi 2 "$remat" train "${sp[@]}" --grad-accum 4 --log sp_alone.jsonl --save sp_alone.bin \
  >sp_alone.out 2>&1
mpi 2 "$remat" train "${sp[@]}" --grad-accum 4 --ckpt-layers full:0-3 --log sp_full.jsonl \
  >sp_full.out 2>&1
check "sequence-parallel: recomputing every block gives the kept run's bits" \
  same sp_alone.jsonl sp_full.jsonl
for schedule in 1f1b zb-h1; do
  mpi 4 "$remat" train "${sp[@]}" --grad-accum 4 --stages 2 --schedule $schedule \
    --log sp_pp_$schedule.jsonl --save sp_pp_$schedule.bin >sp_pp_$schedule.out 2>&1
  check "sequence-parallel: T=2 alone = T=2 x P=2 ($schedule), bit for bit" \
    same sp_alone.jsonl sp_pp_$schedule.jsonl
  check "... and the saved model, byte for byte" cmp -s sp_alone.bin sp_pp_$schedule.bin
done
mpi 4 "$remat" train "${sp[@]}" --grad-accum 4 --stages 2 --schedule zbv \
  --log sp_zbv.jsonl --save sp_zbv.bin >sp_zbv.out 2>&1
check "sequence-parallel: T=2 alone = T=2 x P=2 (zbv), bit for bit" same sp_alone.jsonl sp_zbv.jsonl
check "... and the saved model, byte for byte" cmp -s sp_alone.bin sp_zbv.bin
"$remat" train "${common[@]}" "${llama[@]}" --dropout 0.1 --grad-accum 4 \
  --ckpt-layers middle:0,full:1 --log sp_llama_one.jsonl >sp_llama_one.out 2>&1
mpi 4 "$remat" train "${common[@]}" "${llama[@]}" --dropout 0.1 --grad-accum 4 \
  --ckpt-layers middle:0,full:1 --tensor-parallel 2 --sequence-parallel --stages 2 \
  --schedule zbv --log sp_llama_zbv.jsonl >sp_llama_zbv.out 2>&1
if d=$(near sp_llama_one.jsonl sp_llama_zbv.jsonl 4); then
  ok "a Llama, T=2 sequence-parallel x P=2 (zbv) = one process ($d)"
else bad "a Llama, T=2 sequence-parallel x P=2 (zbv): $d $(tail -c 300 sp_llama_zbv.out)"; fi
mpi 4 "$remat" train "${common[@]}" "${llama[@]}" --dropout 0.1 --grad-accum 2 \
  --ckpt-layers middle:0,full:1 --tensor-parallel 2 --sequence-parallel --data-parallel 2 \
  --zero 3 --log sp_llama_z3.jsonl >sp_llama_z3.out 2>&1
if d=$(near sp_llama_one.jsonl sp_llama_z3.jsonl 4); then
  ok "a Llama, T=2 sequence-parallel x D=2 (ZeRO 3) = one process ($d)"
else bad "a Llama, T=2 sequence-parallel x D=2 (ZeRO 3): $d $(tail -c 300 sp_llama_z3.out)"; fi
mpi 8 "$remat" train "${sp[@]}" --grad-accum 2 --stages 2 --data-parallel 2 --zero 2 \
  --log sp_grid.jsonl >sp_grid.out 2>&1
check "sequence-parallel: T=2 alone = T=2 x P=2 x D=2 (ZeRO 2), bit for bit" \
  same sp_alone.jsonl sp_grid.jsonl
if python3 - sp_pp_1f1b.jsonl sp_pp_zb-h1.jsonl sp_grid.jsonl <<'PY'; then ok "sequence-parallel: every arena of the pipelines and the grid planned = measured"
import json, sys
rows = [[json.loads(l) for l in open(p)][-1] for p in sys.argv[1:]]
sys.exit(0 if [len(x["rank_planned_peak_bytes"]) for x in rows] == [4, 4, 8] and
         all(x["rank_planned_peak_bytes"] == x["rank_measured_peak_bytes"] for x in rows) else 1)
PY
else bad "sequence-parallel arenas: $(tail -c 300 sp_grid.out)"; fi
# a first stage of the embedding alone (a large vocabulary), whose work
# and gradient buffer are its arena's top
mpi 4 "$remat" train "${sp[@]}" --config 4,64,4,4096,64 --grad-accum 2 --stages 2 \
  --layers 0,4 --log sp_emb.jsonl >sp_emb.out 2>&1
if python3 - sp_emb.jsonl <<'PY'; then ok "sequence-parallel: an embedding-only stage's arenas planned = measured"
import json, sys
x = [json.loads(l) for l in open(sys.argv[1])][-1]
sys.exit(0 if len(x["rank_planned_peak_bytes"]) == 4 and
         x["rank_planned_peak_bytes"] == x["rank_measured_peak_bytes"] else 1)
PY
else bad "sequence-parallel, embedding alone: $(tail -c 300 sp_emb.out)"; fi
mpi 2 "$remat" train "${sp[@]}" --steps 6 --save sp6.bin --log sp6.jsonl >sp6.out 2>&1
mpi 2 "$remat" train "${sp[@]}" --steps 3 --checkpoint-dir ck_sp --checkpoint-every 3 \
  >sp_half.out 2>&1
mpi 2 "$remat" train "${sp[@]}" --steps 6 --resume ck_sp --save sp_res.bin --log sp_res.jsonl \
  >sp_res.out 2>&1
if cmp -s sp6.bin sp_res.bin &&
   [[ "$(tail -n 3 sp6.jsonl | cut -d, -f1-4)" == "$(cut -d, -f1-4 sp_res.jsonl)" ]]; then
  ok "sequence-parallel: resumed at step 3 = uninterrupted, bit for bit"
else bad "sequence-parallel resume: $(tail -c 300 sp_res.out)"; fi
mpi 2 "$remat" train "${common[@]}" --tensor-parallel 2 --sequence-parallel --mem 2.2MiB \
  --log sp_mem.jsonl >sp_mem.out 2>&1
"$remat" plan "${shape[@]}" --tensor-parallel 2 --sequence-parallel --mem 2.2MiB --format json \
  >sp_plan.json 2>sp_plan.err
if python3 - sp_mem.jsonl sp_plan.json sp_mem.out <<'PY'; then ok "sequence-parallel --mem: the plan's rank bytes = every rank's arena"
import json, sys, re
run = [json.loads(l) for l in open(sys.argv[1])][-1]
plan = json.load(open(sys.argv[2]))
stage = plan["stages"][0]
arenas = set(run["rank_planned_peak_bytes"]) | set(run["rank_measured_peak_bytes"])
m = re.search(r"policy  (\d+) of 4 blocks recomputed", open(sys.argv[3]).read())
sys.exit(0 if arenas == {stage["memory_bytes"]} and m and 0 < int(m.group(1)) < 4 else 1)
PY
else bad "sequence-parallel --mem against remat plan: $(head -c 300 sp_mem.out)"; fi
# ZeRO 3 of tensor ranks: remat plan's rank bytes = every rank's arena
"$remat" plan "${shape[@]}" --tensor-parallel 2 --data-parallel 2 --zero 3 --mem 1GiB --format json \
  >z3_plan.json 2>z3_plan.err
if python3 - zero3.jsonl z3_plan.json <<'PY'; then ok "ZeRO 3 of T=2 x D=2: remat plan's rank bytes = every rank's arena"
import json, sys
run = [json.loads(l) for l in open(sys.argv[1])][-1]
plan = json.load(open(sys.argv[2]))
arenas = set(run["rank_planned_peak_bytes"]) | set(run["rank_measured_peak_bytes"])
sys.exit(0 if arenas == {plan["stages"][0]["memory_bytes"]} else 1)
PY
else bad "ZeRO 3 rank bytes against remat plan: $(head -c 300 z3_plan.err)"; fi
expect_error "--sequence-parallel without tensor ranks refused" "give --tensor-parallel" \
  train "${shape[@]}" --sequence-parallel
mpi 4 "$remat" train "${common[@]}" --seq 30 --tensor-parallel 4 --sequence-parallel \
  >sp_seq.out 2>&1
if grep -q "sequence parallelism" sp_seq.out; then ok "a sequence T=4 does not divide refused"
else bad "--seq 30 at T=4 sequence-parallel: $(head -c 300 sp_seq.out)"; fi

# the timeline: one process per rank, named by its stage, replica and
# tensor rank, the group's collectives on a track of their own, every
# step's update
tr=("${common[@]}" --steps 3 --grad-accum 2 --tensor-parallel 2)
mpi 2 "$remat" train "${tr[@]}" --sequence-parallel --trace tr_alone.json >tr_alone.out 2>&1
mpi 4 "$remat" train "${tr[@]}" --stages 2 --trace tr_pp.json >tr_pp.out 2>&1
mpi 4 "$remat" train "${tr[@]}" --data-parallel 2 --zero 1 --trace tr_dp.json >tr_dp.out 2>&1
if python3 - tr_alone.json:2:tensor.reduce-scatter tr_pp.json:4:tensor.sum \
     tr_dp.json:4:tensor.sum <<'PY'; then ok "--trace: every rank, the group's collectives, every update"
import collections, json, sys
for arg in sys.argv[1:]:
    path, ranks, kind = arg.split(":")
    ev = json.load(open(path))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in ev if e.get("name") == "process_name"}
    tracks = {(e["pid"], e["args"]["name"]) for e in ev if e.get("name") == "thread_name"}
    spans = collections.Counter((e["pid"], e["cat"]) for e in ev if e.get("ph") == "X")
    updates = {(e["pid"], e["args"]["step"]) for e in ev if e.get("cat") == "update"}
    want = kind.replace(".", " ")
    if not (len(names) == int(ranks) and
            all("tensor rank %d" % (p % 2) in n for p, n in names.items()) and
            all((p, "tensor collectives") in tracks and spans[(p, want)] > 0 for p in names) and
            any(spans[(p, "tensor maximum")] > 0 for p in names) and
            updates == {(p, s) for p in names for s in (1, 2, 3)}):
        sys.exit("%s: %s" % (path, sorted(spans.items())[:6]))
PY
else bad "--trace of tensor ranks: $(tail -c 300 tr_pp.out)"; fi

# what is not run yet, refused before anything starts
expect_error "more than 64 ranks refused" "is 128 ranks" train "${shape[@]}" \
  --tensor-parallel 4 --stages 4 --data-parallel 8
mpi 3 "$remat" train "${common[@]}" --tensor-parallel 2 >ranks.out 2>&1
if grep -q "started on 3 ranks but --tensor-parallel is 2" ranks.out; then ok "3 ranks for T=2 refused"
else bad "3 ranks for T=2: $(head -c 300 ranks.out)"; fi
mpi 4 "$remat" train "${common[@]}" "${llama_tied[@]}" --tensor-parallel 4 >kv.out 2>&1
if grep -q "does not divide its key/value heads" kv.out; then
  ok "T=4 of a Llama's 2 key/value heads refused"
else bad "T=4 of 2 key/value heads: $(head -c 300 kv.out)"; fi
mpi 8 "$remat" train "${common[@]}" --tensor-parallel 8 >heads.out 2>&1
if grep -q "must divide the heads" heads.out; then ok "T=8 of 4 heads refused"
else bad "T=8 of 4 heads: $(head -c 300 heads.out)"; fi

summary

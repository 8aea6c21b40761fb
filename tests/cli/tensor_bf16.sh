#!/usr/bin/env bash
# Tensor and sequence parallelism in bf16 (GPT-2 and Llamas) against
# one process in bf16, over 5 AdamW steps: every loss and gradient norm
# within a relative 3e-4 (the group's sums add the ranks' fp32 parts where
# one process's product adds a whole row, and a product's bf16 output can
# round the other way from that), for T in {2, 4}, with blocks kept, in
# full, middle, dropout, several micro-batches and the head in chunks, and
# Llamas (untied and tied heads, key/value heads split); with
# --sequence-parallel the same bits as without;
# every rank's arena planned = measured. Bit for bit: a repeat, recompute
# against keep, the guard backend against the CPU's, T=2 alone against
# T=2 x P=2 under every schedule and T=2 x D=2 under ZeRO 0 to 3, and a
# resume, sequence-parallel ranks as stages and replicas too; the stages'
# arenas are `remat plan --tensor-parallel`'s. On a CPU
# without bf16 instructions everything is skipped, saying so.
# usage: tensor_bf16.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1

if ! bf16_here; then
  ok "skipped: this CPU has no bf16 instructions"
  summary tensor_bf16
  exit $?
fi

shape=(--config 4,64,4,256,64 --batch 2 --seq 32 --precision bf16)
common=("${shape[@]}" --steps 5 --warmup 1 --threads 1 --peak-gflops 10 --dropout 0 --quiet)

# near ONE.jsonl T.jsonl T: same step count, losses and norms within a
# relative 3e-4, every one of the T ranks' arenas planned = measured
near() { near_run "$1" "$2" "$3" 3e-4; }
# same A.jsonl B.jsonl: the same losses and gradient norms, bit for bit
same() { same_steps "$1" "$2"; }

llama=(--config llama:4,64,4,4,176,256,64 --batch 2 --seq 32)
llama_tied=(--config llama:4,64,4,2,176,256,64,10000,1 --batch 2 --seq 32)
cases=("keep:" "full-middle-accum:--ckpt-layers full:0-1,middle:2-3 --grad-accum 2"
       "middle-chunks:--ckpt-layers middle:0-3 --head-chunk 16"
       "dropout:--dropout 0.1 --ckpt-layers full:0,middle:1"
       "llama:${llama[*]} --ckpt-layers full:0,middle:1-2 --dropout 0.1"
       "llama-accum-chunks:${llama[*]} --grad-accum 2 --head-chunk 16"
       "llama-tied:${llama_tied[*]} --ckpt-layers middle:0-1")
for c in "${cases[@]}"; do
  name=${c%%:*}
  read -r -a extra <<<"${c#*:}"
  "$remat" train "${common[@]}" "${extra[@]}" --log one_$name.jsonl >one_$name.out 2>&1
  for t in 2 4; do
    [[ $name == llama-tied && $t == 4 ]] && continue # 4 does not divide its 2 kv heads
    mpi "$t" "$remat" train "${common[@]}" "${extra[@]}" --tensor-parallel "$t" \
      --log tp${t}_$name.jsonl >tp${t}_$name.out 2>&1
    if d=$(near one_$name.jsonl tp${t}_$name.jsonl "$t"); then ok "bf16 $name, T=$t = one process ($d)"
    else bad "bf16 $name, T=$t against one process: $d $(grep -m2 -i 'error\|remat' tp${t}_$name.out)"; fi
    mpi "$t" "$remat" train "${common[@]}" "${extra[@]}" --tensor-parallel "$t" \
      --sequence-parallel --log sp${t}_$name.jsonl >sp${t}_$name.out 2>&1
    if same tp${t}_$name.jsonl sp${t}_$name.jsonl && near one_$name.jsonl sp${t}_$name.jsonl "$t" \
      >/dev/null; then ok "bf16 $name, T=$t with sequence parallelism: the same bits"
    else bad "bf16 $name, T=$t with sequence parallelism: $(grep -m2 -i 'error\|remat' sp${t}_$name.out)"; fi
  done
done

# repeats, recompute and the guard backend: the same bits
d=(--dropout 0.1)
mpi 2 "$remat" train "${common[@]}" "${d[@]}" --tensor-parallel 2 --log a.jsonl >a.out 2>&1
mpi 2 "$remat" train "${common[@]}" "${d[@]}" --tensor-parallel 2 --log again.jsonl >again.out 2>&1
check "bf16 T=2 repeats bit for bit" same a.jsonl again.jsonl
mpi 2 "$remat" train "${common[@]}" "${d[@]}" --tensor-parallel 2 --ckpt-layers full:0-3 \
  --log full.jsonl >full.out 2>&1
check "bf16 T=2 recomputing every block gives the kept run's bits" same a.jsonl full.jsonl
mpi 2 "$remat" train "${common[@]}" "${d[@]}" --tensor-parallel 2 --backend guard \
  --log guard.jsonl >guard.out 2>&1
check "bf16 T=2 under the guard backend gives the CPU's bits" same a.jsonl guard.jsonl

# the same bits whatever the pipeline and data degrees
mpi 2 "$remat" train "${common[@]}" "${d[@]}" --grad-accum 4 --tensor-parallel 2 \
  --log alone4.jsonl --save alone4.bin >alone4.out 2>&1
for s in 1f1b zb-h1 interleaved zbv; do
  mpi 4 "$remat" train "${common[@]}" "${d[@]}" --grad-accum 4 --tensor-parallel 2 --stages 2 \
    --schedule $s --log pp_$s.jsonl --save pp_$s.bin >pp_$s.out 2>&1
  if same alone4.jsonl pp_$s.jsonl && cmp -s alone4.bin pp_$s.bin; then
    ok "bf16 T=2 alone = T=2 x P=2 under $s, bit for bit (losses, norms, saved model)"
  else bad "bf16 T=2 x P=2 under $s: $(grep -m2 -i 'error\|remat' pp_$s.out)"; fi
done
mpi 2 "$remat" train "${common[@]}" "${d[@]}" --grad-accum 2 --tensor-parallel 2 \
  --log alone2.jsonl >alone2.out 2>&1
for z in 0 1 2 3; do
  mpi 4 "$remat" train "${common[@]}" "${d[@]}" --tensor-parallel 2 --data-parallel 2 --zero $z \
    --log dp_$z.jsonl >dp_$z.out 2>&1
  if same alone2.jsonl dp_$z.jsonl; then ok "bf16 T=2 alone = T=2 x D=2 under ZeRO $z, bit for bit"
  else bad "bf16 T=2 x D=2 under ZeRO $z: $(grep -m2 -i 'error\|remat' dp_$z.out)"; fi
done
# a Llama: T=2 alone = T=2 x P=2 (zbv) = T=2 x D=2 (ZeRO 3)
ll=("${common[@]}" "${llama[@]}" "${d[@]}" --tensor-parallel 2)
mpi 2 "$remat" train "${ll[@]}" --grad-accum 4 --log l_alone4.jsonl >l_alone4.out 2>&1
mpi 4 "$remat" train "${ll[@]}" --grad-accum 4 --stages 2 --schedule zbv --log l_pp.jsonl \
  >l_pp.out 2>&1
check "bf16 Llama T=2 alone = T=2 x P=2 under zbv, bit for bit" same l_alone4.jsonl l_pp.jsonl
mpi 2 "$remat" train "${ll[@]}" --grad-accum 2 --log l_alone2.jsonl >l_alone2.out 2>&1
mpi 4 "$remat" train "${ll[@]}" --data-parallel 2 --zero 3 --log l_dp.jsonl >l_dp.out 2>&1
check "bf16 Llama T=2 alone = T=2 x D=2 under ZeRO 3, bit for bit" same l_alone2.jsonl l_dp.jsonl
# sequence-parallel ranks as zbv stages (W records) and ZeRO 3 replicas,
# under the guard backend too (nothing but its operations touch its memory)
for fam in gpt2 llama; do
  sq=("${common[@]}" "${d[@]}" --tensor-parallel 2 --sequence-parallel)
  [[ $fam == llama ]] && sq+=("${llama[@]}")
  want4=alone4.jsonl want2=alone2.jsonl
  [[ $fam == llama ]] && want4=l_alone4.jsonl want2=l_alone2.jsonl
  mpi 4 "$remat" train "${sq[@]}" --grad-accum 4 --stages 2 --schedule zbv --backend guard \
    --log sp_pp_$fam.jsonl >sp_pp_$fam.out 2>&1
  check "bf16 $fam T=2 sequence-parallel x P=2 under zbv (guard backend) = T=2 alone, bit for bit" \
    same $want4 sp_pp_$fam.jsonl
  mpi 4 "$remat" train "${sq[@]}" --data-parallel 2 --zero 3 --log sp_dp_$fam.jsonl \
    >sp_dp_$fam.out 2>&1
  check "bf16 $fam T=2 sequence-parallel x D=2 under ZeRO 3 = T=2 alone, bit for bit" \
    same $want2 sp_dp_$fam.jsonl
done

# a resume: the uninterrupted run's bits
pp=("${common[@]}" "${d[@]}" --grad-accum 4 --tensor-parallel 2 --stages 2)
mpi 4 "$remat" train "${pp[@]}" --steps 3 --checkpoint-dir ck --checkpoint-every 3 >half.out 2>&1
mpi 4 "$remat" train "${pp[@]}" --steps 5 --resume ck --save res.bin --log res.jsonl >res.out 2>&1
if cmp -s pp_1f1b.bin res.bin &&
   [[ "$(tail -n 2 pp_1f1b.jsonl | cut -d, -f1-4)" == "$(cut -d, -f1-4 res.jsonl)" ]]; then
  ok "bf16 T=2 x P=2 resumed at step 3 = uninterrupted, bit for bit"
else bad "bf16 T=2 x P=2 resume: $(tail -c 300 res.out)"; fi

# the planner's stages and their bytes, every rank's arena
mpi 4 "$remat" train "${common[@]}" --grad-accum 4 --tensor-parallel 2 --stages 2 --mem 1.7MiB \
  --log ppmem.jsonl >ppmem.out 2>&1
"$remat" plan "${shape[@]}" --stages 2 --microbatches 4 --tensor-parallel 2 --mem 1.7MiB \
  --format json >ppplan.json 2>ppplan.err
if python3 - ppmem.jsonl ppplan.json <<'PY'; then ok "bf16 T=2 x P=2 --mem: each stage's ranks' arenas = the plan's stages"
import json, sys
run = [json.loads(l) for l in open(sys.argv[1])][-1]
stages = [s.get("stream_peak_bytes") or s["memory_bytes"] for s in json.load(open(sys.argv[2]))["stages"]]
want = [stages[0], stages[0], stages[1], stages[1]]
sys.exit(0 if run["rank_planned_peak_bytes"] == run["rank_measured_peak_bytes"] == want else 1)
PY
else bad "bf16 T=2 x P=2 --mem against remat plan: $(tail -c 300 ppmem.out) $(head -c 300 ppplan.err)"; fi

# refused: a vocabulary the norm's gradient sum cannot borrow
expect_fail_mpi "bf16 T=2 with a vocabulary under four times the channels refused" \
  "four times the channels" 2 "${common[@]}" --config 4,128,4,256,64 --tensor-parallel 2

summary tensor_bf16

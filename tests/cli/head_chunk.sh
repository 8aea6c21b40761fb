#!/usr/bin/env bash
# The head in chunks of tokens (--head-chunk): a run's planned peak falls
# by the logits it no longer holds and stays = measured, in fp32 and bf16,
# on one process and on a pipeline's every rank; the first step's loss is
# the whole head's, bit for bit (the tokens' losses are the same rows); the
# head matrix's gradient sums the tokens chunk by chunk, so later steps
# agree to rounding (test_head_chunk has the bounds). Under a budget that
# the whole head does not fit, --head-chunk auto (the default) takes the
# chunks where they let the run recompute less, and says so; remat plan
# does the same, writes the choice into its plan, and remat train --plan
# runs it. A resume keeps the run's chunk; bad values are refused.
# usage: head_chunk.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1

common=(--config 4,64,4,8000,64 --batch 8 --seq 64 --threads 1 --peak-gflops 10 --quiet)
peak() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])["planned_peak_bytes"])' "$1"; }
first_loss() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["loss"])' "$1"; }
losses_near() {
  python3 - "$1" "$2" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(f)] for f in sys.argv[1:3])
sys.exit(not (len(a) == len(b) == 3 and all(abs(x - y) < 1e-4 for x, y in zip(a, b))))
PY
}

precisions=(fp32)
"$remat" train --config tiny --steps 0 --precision bf16 --quiet >/dev/null 2>&1 && precisions+=(bf16)
for p in "${precisions[@]}"; do
  "$remat" train "${common[@]}" --steps 3 --precision "$p" --head-chunk 0 --log "whole_$p.log" \
    >/dev/null 2>&1
  for k in 128 100; do
    "$remat" train "${common[@]}" --steps 3 --precision "$p" --head-chunk $k \
      --log "chunk_${p}_$k.log" >"out_${p}_$k" 2>&1
    check "$p chunks of $k: planned = measured" log_planned "chunk_${p}_$k.log"
    check "$p chunks of $k: a lower planned peak" \
      test "$(peak "chunk_${p}_$k.log")" -lt "$(peak "whole_$p.log")"
    check "$p chunks of $k: the first loss is the whole head's" \
      test "$(first_loss "chunk_${p}_$k.log")" = "$(first_loss "whole_$p.log")"
    check "$p chunks of $k: the losses agree to rounding" \
      losses_near "chunk_${p}_$k.log" "whole_$p.log"
    check "$p chunks of $k: said" grep -q "^head    logits in chunks of $k of a micro-batch's 512 tokens" "out_${p}_$k"
  done
  "$remat" train "${common[@]}" --steps 3 --precision "$p" --head-chunk 512 --log "all_$p.log" \
    >/dev/null 2>&1
  check "$p: all the tokens at once is the whole head, every bit" log_bits "all_$p.log" "whole_$p.log" 3
done

# One process under a budget the whole head does not fit without recompute.
"$remat" train "${common[@]}" --steps 1 --precision fp32 --mem 30MB --log auto.log >auto.out 2>&1
check "auto under --mem: the head in chunks" grep -q "^head    logits in chunks of 256 .*(--head-chunk auto: the budget needs them)" auto.out
check "auto under --mem: no block recomputed" grep -q "^policy  0 of 4 blocks recomputed" auto.out
check "auto under --mem: planned = measured" log_planned auto.log
"$remat" train "${common[@]}" --steps 1 --precision fp32 --mem 30MB --head-chunk 0 >whole.out 2>&1
check "the whole head under the same --mem recomputes" grep -q "^policy  [1-4] of 4 blocks recomputed" whole.out
"$remat" train "${common[@]}" --steps 1 --precision fp32 --mem 1GB >roomy.out 2>&1
check "auto with room: the whole head" bash -c '! grep -q "^head " roomy.out'

# A pipeline: the last stage's arena falls, every rank planned = measured.
pp=(--grad-accum 4 --stages 2 --steps 2 --precision fp32 --layers 4,0)
mpi 2 "$remat" train "${common[@]}" "${pp[@]}" --head-chunk 0 --log pp_whole.log >/dev/null 2>&1
mpi 2 "$remat" train "${common[@]}" "${pp[@]}" --head-chunk 128 --log pp_chunk.log >/dev/null 2>&1
check "pipeline, chunks: every rank planned = measured" log_ranks pp_chunk.log 2
check "pipeline, chunks: the last stage's arena falls" python3 - <<'PY'
import json
a, b = (json.loads(open(f).readlines()[-1])["rank_planned_peak_bytes"] for f in ("pp_whole.log", "pp_chunk.log"))
assert a[0] == b[0] and b[1] < a[1], (a, b)
PY

# remat plan: a budget only the chunked head fits; the plan carries the
# chunk, and remat train --plan runs it
plan=(--config 4,64,4,8000,64 --batch 8 --seq 64 --stages 2 --microbatches 4 --precision fp32
      --threads 1 --mem 25MB)
"$remat" plan "${plan[@]}" >plan.txt 2>&1
check "remat plan auto: the head in chunks" grep -q "^problem: .*, head in chunks of 256 tokens" plan.txt
expect_error "remat plan --head-chunk 0: the whole head does not fit" "no arrangement fits" \
  plan "${plan[@]}" --head-chunk 0
"$remat" plan "${plan[@]}" --format json -o plan.json >/dev/null 2>&1
check "the plan file carries the chunk" grep -q '"head_chunk":[[:space:]]*256' plan.json
for fw in megatron colossalai; do
  "$remat" plan "${plan[@]}" --format $fw >"$fw.txt" 2>&1
  check "the $fw export says the framework makes the logits whole" \
    grep -q "holds the head.s logits in chunks of 256 tokens" "$fw.txt"
done
mpi 2 "$remat" train "${common[@]}" --grad-accum 4 --stages 2 --steps 2 --precision fp32 \
  --plan plan.json --log pp_plan.log >pp_plan.out 2>&1
check "train --plan: the plan's chunk" grep -q "^head    logits in chunks of 256 .*(the plan's)" pp_plan.out
check "train --plan: every rank planned = measured" log_ranks pp_plan.log 2
mpi 2 "$remat" train "${common[@]}" --grad-accum 4 --stages 2 --steps 2 --precision fp32 \
  --mem 25MB --log pp_mem.log >pp_mem.out 2>&1
check "train --stages --mem auto: the planner's chunk" grep -q "^head    logits in chunks of 256 .*auto" pp_mem.out
check "train --stages --mem auto: every rank planned = measured" log_ranks pp_mem.log 2

# A resume keeps the run's chunk; bad values are refused.
"$remat" train "${common[@]}" --steps 2 --precision fp32 --head-chunk 64 --checkpoint-dir ck \
  --checkpoint-every 2 >/dev/null 2>&1
"$remat" train --resume ck --steps 3 --quiet --log resumed.log >resumed.out 2>&1
check "a resume keeps the chunk" grep -q "^head    logits in chunks of 64 " resumed.out
expect_error "a resume's other chunk" "differs from the saved run's" train --resume ck --steps 4 --head-chunk 32
expect_error "a negative chunk" "head-chunk" train "${common[@]}" --steps 1 --head-chunk -3
expect_error "a chunk that is not a number" "head-chunk" train "${common[@]}" --steps 1 --head-chunk lots
expect_error "remat plan --head-chunk with a problem file" "goes with --config" \
  plan plan.json --head-chunk 64
summary head_chunk

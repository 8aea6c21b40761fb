#!/usr/bin/env bash
# End-to-end runs of `remat train`: the loss falls below a stated value, the
# log holds one object per step with planned == measured peak, checkpoints
# round-trip, recomputation (full and middle) reproduces plain training bit
# for bit through the command line, and --mem picks the fastest choice of
# policies that fits.
# usage: train_runs.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
field() { # field FILE KEY LINE: the numeric value of KEY on line LINE (or "last")
  perl -ne 'BEGIN{($k,$l)=@ARGV[1,2]; @ARGV=($ARGV[0])} push @v, /"\Q$k\E": ([-0-9.e+]+)/ ? $1 : "NA";
    END{ print $l eq "last" ? $v[-1] : $v[$l-1] }' "$@"
}
lt() { perl -e 'exit !($ARGV[0] < $ARGV[1])' "$1" "$2"; }

# 1. The default model on the embedded corpus learns: from ln(256) = 5.55 to
#    below 2.5 in 150 steps.
"$remat" train --steps 150 --log "$tmp/a.jsonl" --save "$tmp/a.bin" --quiet >"$tmp/a.out" 2>&1
check "default run exits 0" test $? -eq 0
cat "$tmp/a.out"
check "log has 150 lines" test "$(wc -l <"$tmp/a.jsonl")" -eq 150
first=$(field "$tmp/a.jsonl" loss 1)
last=$(field "$tmp/a.jsonl" loss last)
echo "loss $first -> $last"
check "first loss near ln 256" perl -e 'exit !(abs($ARGV[0] - 5.55) < 0.3)' "$first"
check "loss falls below 2.5" lt "$last" 2.5
check "every line has the required keys" perl -ne '$bad++ unless /"step": \d+/ && /"loss": / &&
  /"tokens_per_s": / && /"mfu": / && /"planned_peak_bytes": \d+/ && /"measured_peak_bytes": \d+/;
  END { exit($bad ? 1 : 0) }' "$tmp/a.jsonl"
check "planned == measured peak within 1% on every step" perl -ne '
  ($p) = /"planned_peak_bytes": (\d+)/; ($m) = /"measured_peak_bytes": (\d+)/;
  $bad++ if !$p || abs($m - $p) > 0.01 * $p; END { exit($bad ? 1 : 0) }' "$tmp/a.jsonl"

# Held-out evaluation: logged every 50 steps, and it falls too.
"$remat" train --steps 100 --eval-every 50 --log "$tmp/e.jsonl" --quiet >/dev/null 2>&1
check "eval run exits 0" test $? -eq 0
check "held-out loss logged at steps 50 and 100" test "$(grep -c '"val_loss"' "$tmp/e.jsonl")" -eq 2
v1=$(perl -ne 'print "$1\n" if /"val_loss": ([0-9.]+)/' "$tmp/e.jsonl" | head -1)
v2=$(perl -ne 'print "$1\n" if /"val_loss": ([0-9.]+)/' "$tmp/e.jsonl" | tail -1)
echo "held-out loss $v1 -> $v2"
check "held-out loss falls below 2.6" lt "$v2" 2.6
check "held-out loss falls" lt "$v2" "$v1"

# 2. The checkpoint resumes where training stopped.
"$remat" train --model "$tmp/a.bin" --steps 1 --log "$tmp/b.jsonl" --quiet >/dev/null 2>&1
check "resume from checkpoint exits 0" test $? -eq 0
resumed=$(field "$tmp/b.jsonl" loss 1)
echo "resumed loss $resumed"
check "resumed loss is a trained model's" lt "$resumed" 2.7

# 3. Recomputing any number of blocks gives the same losses, bit for bit
#    (printed to 6 decimals here; the unit test compares every bit).
for r in 0 0.5 1; do
  "$remat" train --config tiny --steps 20 --dropout 0.1 --grad-accum 2 --ckpt-ratio $r \
    --log "$tmp/r$r.jsonl" --quiet >/dev/null 2>&1
  perl -ne 'print "$1\n" if /"loss": ([-0-9.e+]+)/' "$tmp/r$r.jsonl" >"$tmp/r$r.loss"
done
check "ratio 0.5 reproduces ratio 0" cmp -s "$tmp/r0.loss" "$tmp/r0.5.loss"
check "ratio 1 reproduces ratio 0" cmp -s "$tmp/r0.loss" "$tmp/r1.loss"
check "ratio 1 recomputes 2 blocks" test "$(field "$tmp/r1.jsonl" recomputed_blocks 1)" = 2
for c in middle:0-1 full:0,middle:1; do
  "$remat" train --config tiny --steps 20 --dropout 0.1 --grad-accum 2 --ckpt-layers $c \
    --log "$tmp/m$c.jsonl" --quiet >/dev/null 2>&1
  perl -ne 'print "$1\n" if /"loss": ([-0-9.e+]+)/' "$tmp/m$c.jsonl" >"$tmp/m$c.loss"
  check "--ckpt-layers $c reproduces ratio 0" cmp -s "$tmp/r0.loss" "$tmp/m$c.loss"
done
check "middle:0-1 has 2 middle blocks" test "$(field "$tmp/mmiddle:0-1.jsonl" middle_blocks 1)" = 2
# --mem on one process with several micro-batches a step: planned (the
# head beside the embedding, its tied gradient apart) and run, planned =
# measured; remat plan with --microbatches alike
"$remat" train --config small --grad-accum 2 --mem 30MiB --steps 2 --precision fp32 \
  --log "$tmp/memacc.jsonl" --quiet >"$tmp/memacc.out" 2>&1
check "--mem with --grad-accum 2 on one process plans and runs, planned = measured" \
  python3 -c 'import json,sys; x=[json.loads(l) for l in open(sys.argv[1])]; sys.exit(not (len(x) == 2 and x[-1]["planned_peak_bytes"] == x[-1]["measured_peak_bytes"] and x[-1]["middle_blocks"] > 0))' "$tmp/memacc.jsonl"
check "remat plan --microbatches 2 on one stage plans" \
  "$remat" plan --config small --batch 8 --seq 64 --microbatches 2 --mem 30MiB --precision fp32 \
  -o "$tmp/memacc_plan.txt"

# 4. --mem: the fastest choice of keep, middle or full per block whose
#    arena fits (a budget is the arena, as in remat plan). At the peak of 6 recomputed blocks, middle blocks
#    take the place of some recomputed ones, for less recompute time.
plan_of() { "$remat" train --config gpt2-124m --batch 4 --seq 256 --plan-only "$@" 2>&1; }
peak_of() { perl -ne 'print $1 if /^arena   (\d+) bytes/'; }
full_of() { perl -ne 'print $1 if /^policy  (\d+) of/'; }
middle_of() { perl -ne 'print /^policy .*, (\d+) middle/ ? $1 : 0 if /^policy/'; }
mid=$(plan_of --ckpt-ratio 0.5 | peak_of)
echo "arena with 6 of 12 blocks recomputed: $mid"
out=$(plan_of --mem "$mid")
echo "$out" | grep '^policy'
check "--mem at the 6-block peak fits" test "$(echo "$out" | peak_of)" -le "$mid"
check "--mem at the 6-block peak recomputes fewer blocks, with middle ones" \
  test "$(echo "$out" | full_of)" -lt 6 -a "$(echo "$out" | middle_of)" -gt 0
check "--plan-only gives each policy's bytes and time" \
  test "$(echo "$out" | grep -c '^blocks  \(keep\|middle\|full\) *stores')" = 3
out=$(plan_of --mem "$((mid - 1))")
check "--mem one byte less fits" test "$(echo "$out" | peak_of)" -le "$((mid - 1))"
out=$(plan_of --mem 100GiB)
check "--mem 100GiB recomputes nothing" test "$(echo "$out" | full_of)" = 0 -a "$(echo "$out" | middle_of)" = 0
"$remat" train --config gpt2-124m --batch 4 --seq 256 --plan-only --mem 1GiB >"$tmp/inf.out" 2>"$tmp/inf.err"
check "--mem 1GiB is infeasible, exit 1" test $? -eq 1
check "infeasible message names the minimum" grep -q "at least" "$tmp/inf.err"

# 5. Plain text and token shards train.
perl -e 'print "the quick check of a small text file for training.\n" x 200' >"$tmp/t.txt"
"$remat" train --config tiny --text "$tmp/t.txt" --steps 30 --batch 4 --seq 32 --log "$tmp/t.jsonl" --quiet >/dev/null 2>&1
check "text training exits 0" test $? -eq 0
check "text training loss falls" lt "$(field "$tmp/t.jsonl" loss last)" "$(field "$tmp/t.jsonl" loss 1)"
perl -e 'open(my $h,">",$ARGV[0]) or die; binmode $h; my @t = map { ($_ * 7) % 100 } 0..9999;
  print $h pack("l<256", 20240520, 1, scalar(@t), (0) x 253); print $h pack("S<*", @t);' "$tmp/s.bin"
"$remat" train --config tiny --data "$tmp/s.bin" --steps 30 --batch 4 --seq 32 --log "$tmp/s.jsonl" --quiet >/dev/null 2>&1
check "shard training exits 0" test $? -eq 0
check "shard training loss falls" lt "$(field "$tmp/s.jsonl" loss last)" "$(field "$tmp/s.jsonl" loss 1)"

# 6. The thread policy (REMAT_IDLE_CPUS stands in for the start-up load
#    sample): a quiet machine pins one thread per CPU and spins briefly, a
#    shared one leaves them unpinned and waits passively (libgomp, which
#    reads its settings once, shows them only after the re-exec); neither
#    changes a single bit of the results.
ncpu=$(nproc)
policy_run() { # policy_run NAME ENV... : tiny training, its stdout+stderr and log
  local name=$1
  shift
  env "$@" OMP_DISPLAY_ENV=verbose "$remat" train --config tiny --steps 5 --dropout 0.1 \
    --log "$tmp/p$name.jsonl" --quiet >"$tmp/p$name.out" 2>&1
}
policy_run quiet REMAT_IDLE_CPUS="$ncpu"
check "quiet policy run exits 0" test $? -eq 0
policy_run shared REMAT_IDLE_CPUS=0
check "shared policy run exits 0" test $? -eq 0
grep -h '^threads' "$tmp/pquiet.out" "$tmp/pshared.out"
if [ "$ncpu" -ge 2 ]; then
  check "quiet machine: threads pinned one per CPU, spinning briefly" \
    grep -q "^threads $ncpu on $ncpu CPUs, pinned one per CPU, spinning 10000 times" "$tmp/pquiet.out"
  check "quiet machine: libgomp got GOMP_SPINCOUNT=10000" grep -q "GOMP_SPINCOUNT = '10000'" "$tmp/pquiet.out"
  check "shared machine: threads unpinned, passive" \
    grep -q "^threads $ncpu on $ncpu CPUs, not pinned (shared CPUs), waiting passively" "$tmp/pshared.out"
  check "shared machine: libgomp got OMP_WAIT_POLICY=passive (spin count 0)" \
    grep -q "GOMP_SPINCOUNT = '0'" "$tmp/pshared.out"
fi
perl -ne 'print "$1\n" if /"loss": ([-0-9.e+]+)/' "$tmp/pquiet.jsonl" >"$tmp/pquiet.loss"
perl -ne 'print "$1\n" if /"loss": ([-0-9.e+]+)/' "$tmp/pshared.jsonl" >"$tmp/pshared.loss"
check "both policies give the same losses" cmp -s "$tmp/pquiet.loss" "$tmp/pshared.loss"
check "the MFU summary line gives the trials' spread" \
  grep -Eq "^mfu     [0-9.]+% (\+-[0-9.]+ against the median of [0-9]+ trials|against the fastest step)" \
  "$tmp/pquiet.out"
check "no MFU above 100% in the log or the summary" perl -ne '
  $bad++ if /"mfu": ([0-9.e+-]+)/ && $1 > 1; $bad++ if /MFU ([0-9.]+)%/ && $1 > 100;
  END { exit($bad ? 1 : 0) }' "$tmp/pquiet.jsonl" "$tmp/pquiet.out" "$tmp/pshared.jsonl"

# --sample-every: a sample every N steps, between steps, from the model's
# own weights; sampling neither changes the training (the saved bytes) nor
# the planned = measured peak (the generator's region is planned and counted in both).
S=(--config tiny --batch 4 --seq 32 --steps 10 --quiet --peak-gflops 10 --threads 1)
"$remat" train "${S[@]}" --sample-every 5 --save "$tmp/s1.bin" --log "$tmp/s1.jsonl" >"$tmp/s1.out" 2>&1
"$remat" train "${S[@]}" --save "$tmp/s0.bin" >/dev/null 2>&1
check "--sample-every 5 --steps 10: two samples, at steps 5 and 10" \
  test "$(grep -c '^sample  step \(5\|10\) | .' "$tmp/s1.out")" -eq 2
check "the samples are one line each, non-printable bytes escaped" \
  perl -ne '$bad++ if /^sample/ && /[\x00-\x08\x0b-\x1f\x7f-\xff]/; END { exit($bad ? 1 : 0) }' "$tmp/s1.out"
check "sampling leaves the trained bytes alone" cmp -s "$tmp/s0.bin" "$tmp/s1.bin"
check "sampling leaves planned = measured" perl -ne '$bad++ if /"planned_peak_bytes": (\d+).*"measured_peak_bytes": (\d+)/ && $1 != $2;
  $n++; END { exit($bad || $n != 10 ? 1 : 0) }' "$tmp/s1.jsonl"
# a model of GPT-2's vocabulary decodes its sample with the BPE files
"$remat" train --config 2,64,4,50257,64 --batch 2 --seq 16 --steps 2 --sample-every 2 --quiet \
  --peak-gflops 10 --threads 1 >"$tmp/sb.out" 2>&1
check "a BPE model's sample is decoded text (one line of GPT-2 tokens)" \
  perl -ne '$n++ if /^sample  step 2 \| .*[a-z]{3}/; END { exit($n == 1 ? 0 : 1) }' "$tmp/sb.out"
"$remat" train "${S[@]}" --sample-every 5 --stages 2 >"$tmp/s2.out" 2>&1
check "--sample-every refused on several ranks" grep -q "sample-every runs on one process only" "$tmp/s2.out"

summary

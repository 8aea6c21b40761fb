#!/usr/bin/env bash
# What `remat train` prints says what is true: no MFU above 100% on any line
# (one process, a 3-stage pipeline and a 2 x 2 grid, measured or given peak);
# MFU spelled out once; a given peak that a step beat says so; the planned
# peak names what it counts, on several ranks rank 0's arena and the data;
# RSS explained; a model trained without --save is said to be discarded; a
# pipeline placed without budgets shows "none"; the planned peak does not
# grow with the checkpoint directory's path.
# usage: summary.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
rm -rf "$tmp"
mkdir -p "$tmp"
cd "$tmp" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fails=0
n=0
ok() { n=$((n + 1)); echo "ok   [$1]"; }
bad() { n=$((n + 1)); fails=$((fails + 1)); echo "FAIL [$1]"; }
mfu_ok() { # every "MFU x%" and "mfu x%" figure on every line, and "N% against", at most 100
  perl -ne 'while (/(?:MFU|mfu)[^%\n]*?([0-9.]+)%/g) { $n++; $bad++ if $1 > 100 }
    while (/([0-9.]+)% against/g) { $n++; $bad++ if $1 > 100 }
    END { print "  $n MFU figures\n"; exit($bad || !$n ? 1 : 0) }' "$1"
}
T=(--batch 4 --seq 32 --steps 12 --threads 1)

"$remat" train --config tiny "${T[@]}" >one.out 2>&1
mfu_ok one.out && ok "one process, measured peak: every MFU <= 100%" || bad "one process MFU"
[[ $(grep -c "MFU (model FLOPs utilisation)" one.out) -eq 1 ]] && ok "MFU spelled out once" || bad "MFU spelled out"
grep -q "^memory  planned peak [0-9]* bytes, measured peak [0-9]* bytes (+0.000%), the arena and the data; process RSS" one.out \
  && ok "the planned peak says what it counts" || bad "planned peak label: $(grep '^memory' one.out)"
grep -q "RSS holds more: the program and its libraries, OpenBLAS's and OpenMP's buffers" one.out \
  && ok "RSS explained" || bad "RSS line"
grep -q "^note    the trained model is discarded: give --save FILE" one.out \
  && ok "no --save: the model is said to be discarded" || bad "discarded note"
"$remat" train --config tiny "${T[@]}" --save kept.bin >kept.out 2>&1
grep -q "discarded" kept.out && bad "discarded said with --save" || ok "with --save no discarded note"

"$remat" train --config tiny "${T[@]}" --peak-gflops 0.001 >given.out 2>&1
mfu_ok given.out && grep -q "which beat the given --peak-gflops 0.001 (MFU never exceeds 100%)" given.out \
  && ok "a given peak a step beat: said, and MFU <= 100%" || bad "given peak: $(grep '^mfu' given.out)"

mpirun --oversubscribe -np 3 "$remat" train --config 6,64,4,256,64 "${T[@]}" --grad-accum 3 \
  --stages 3 >p3.out 2>&1
mfu_ok p3.out && ok "3-stage pipeline: every MFU <= 100% (best trial scaled by the ranks)" || bad "3 stages MFU: $(grep -i mfu p3.out | tail -3)"
grep -q "(+0.000%), rank 0's arena and the data" p3.out && ok "pipeline: planned peak labelled rank 0's" \
  || bad "pipeline planned label"
[[ $(grep -cE '^ +[0-2] +[0-9]+ .* none ' p3.out) -eq 3 ]] && ! grep -q PiB p3.out \
  && ok "no budget: each stage's budget is none" || bad "budget none: $(grep -A4 '^stage  layers' p3.out)"
mpirun --oversubscribe -np 4 "$remat" train --config 4,64,4,256,64 "${T[@]}" --grad-accum 2 \
  --stages 2 --data-parallel 2 >g4.out 2>&1
mfu_ok g4.out && ok "2 x 2 grid: every MFU <= 100%" || bad "grid MFU: $(grep -i mfu g4.out | tail -3)"
mpirun --oversubscribe -np 4 "$remat" train --config 4,64,4,256,64 "${T[@]}" --grad-accum 2 \
  --stages 2 --data-parallel 2 --peak-gflops 0.001 >g4g.out 2>&1
mfu_ok g4g.out && ok "2 x 2 grid, given peak: every MFU <= 100%" || bad "grid given MFU"

# The planned peak (and the measured one) does not grow with the checkpoint
# path's length, on a run and on its resume.
long=ck_$(printf 'x%.0s' {1..120})
for d in c "$long"; do
  "$remat" train --config tiny "${T[@]}" --steps 2 --checkpoint-dir "$d" --checkpoint-every 1 \
    --log "$d.jsonl" >/dev/null 2>&1
  "$remat" train --resume "$d/step_00000001" --log "$d.r.jsonl" --threads 1 >/dev/null 2>&1
done
p() { perl -ne 'print "$1 $2\n" if /"planned_peak_bytes": (\d+), "measured_peak_bytes": (\d+)/' "$1" | sort -u; }
if [[ $(p c.jsonl) == "$(p "$long.jsonl")" && $(p c.r.jsonl) == "$(p "$long.r.jsonl")" &&
      $(p c.jsonl | wc -l) -eq 1 && $(p c.jsonl | awk '{print ($1 == $2)}') -eq 1 ]]; then
  ok "planned = measured = $(p c.jsonl | cut -d' ' -f1) bytes with a 1- and a 123-byte checkpoint path, resumed too"
else bad "planned peak with the path length: $(p c.jsonl) / $(p "$long.jsonl") / $(p c.r.jsonl) / $(p "$long.r.jsonl")"; fi

echo "$((n - fails)) passed, $fails failed"
[[ $fails -eq 0 ]]

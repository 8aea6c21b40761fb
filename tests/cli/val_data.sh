#!/usr/bin/env bash
# A run's data: --data takes several shards, as a comma-separated list or a
# glob pattern (llm.c's -i), read one after another: the same run as one
# shard holding their tokens in that order; a checkpoint identifies them
# all (their size and CRC32C one after another), so a resume from another
# directory finds them, and shards in another order are refused.
# --val-data evaluates the held-out loss on a validation shard of its own
# (remat tokenize's PREFIX_val.bin), holding nothing of --data out: the
# training is the run's without evaluation, bit for bit.
# usage: val_data.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1

shard() { # shard FILE FIRST COUNT: COUNT byte-sized tokens from FIRST on
  perl -e 'my ($f,$s,$n)=@ARGV; my @t = map { (($_ + $s) * 7 + int(($_ + $s) / 13)) % 251 } 0..$n-1;
    open(my $h,">",$f) or die; binmode $h;
    print $h pack("l<256", 20240520, 1, $n, (0) x 253); print $h pack("S<*", @t);' "$@"
}
mkdir -p sh
shard sh/part_1.bin 0 3000
shard sh/part_2.bin 3000 2000
shard sh/part_3.bin 5000 2500
shard all.bin 0 7500 # the three parts' tokens in one shard
shard val.bin 90000 1200
shard short.bin 0 20
F=(--config tiny --batch 4 --seq 32 --peak-gflops 10 --threads 1 --precision fp32)
losses() { python3 -c 'import json,sys;[print(json.loads(l)["step"],json.loads(l)["loss"],json.loads(l)["grad_norm"]) for l in open(sys.argv[1])]' "$1"; }

# --- several shards: a pattern, a list
"$remat" train "${F[@]}" --steps 6 --data all.bin --save one.bin --log one.jsonl >one.out 2>&1
"$remat" train "${F[@]}" --steps 6 --data 'sh/part_*.bin' --save pat.bin --log pat.jsonl >pat.out 2>&1
"$remat" train "${F[@]}" --steps 6 --data sh/part_1.bin,sh/part_2.bin,sh/part_3.bin --save list.bin \
  --log list.jsonl --quiet >/dev/null 2>&1
grep -q "^data    sh/part_\*.bin (3 shards): 7500 tokens" pat.out &&
  ok "a pattern: its 3 shards' tokens, counted" || bad "pattern: $(grep '^data' pat.out)"
diff <(losses one.jsonl) <(losses pat.jsonl) >/dev/null && cmp -s one.bin pat.bin &&
  ok "--data 'sh/part_*.bin' = one shard of their tokens in name order: same losses, same bytes" ||
  bad "pattern against one shard"
diff <(losses one.jsonl) <(losses list.jsonl) >/dev/null && cmp -s one.bin list.bin &&
  ok "--data a,b,c = one shard of their tokens in that order" || bad "list against one shard"
"$remat" train "${F[@]}" --steps 6 --data sh/part_3.bin,sh/part_1.bin,sh/part_2.bin --save other.bin \
  --quiet >/dev/null 2>&1
cmp -s one.bin other.bin && bad "shards in another order trained the same" ||
  ok "shards in another order are other data"
expect_error "a pattern that matches nothing" "the shard pattern 'sh/nope_\*.bin' matches no file" \
  train "${F[@]}" --steps 1 --data 'sh/nope_*.bin' --quiet
expect_error "a list with an empty item" "has an empty item" \
  train "${F[@]}" --steps 1 --data sh/part_1.bin,,sh/part_2.bin --quiet
expect_error "a missing shard in a list, named" "sh/none.bin" \
  train "${F[@]}" --steps 1 --data sh/part_1.bin,sh/none.bin --quiet

# --- --val-data: the held-out loss on a shard of its own
"$remat" train "${F[@]}" --steps 6 --data all.bin --val-data val.bin --eval-every 2 --save v.bin \
  --log v.jsonl >v.out 2>&1
grep -q "^eval    val.bin: 1200 tokens; the held-out loss every 2 steps on its first 8 batches (nothing of the data is held out)" v.out &&
  ok "--val-data shown with its tokens" || bad "eval line: $(grep '^eval' v.out)"
python3 -c 'import json,sys
v=[(json.loads(l)["step"], json.loads(l).get("val_loss")) for l in open(sys.argv[1])]
sys.exit(0 if [s for s,x in v if x is not None]==[2,4,6] and all(3<x<7 for s,x in v if x is not None) else 1)' v.jsonl &&
  grep -q "held-out loss [0-9.]* (at step 6)" v.out &&
  ok "the held-out loss in the log at steps 2, 4, 6 and in the summary" || bad "val_loss: $(tail -1 v.jsonl)"
diff <(losses one.jsonl) <(losses v.jsonl) >/dev/null && cmp -s one.bin v.bin &&
  ok "nothing of --data held out: the training is the run's without evaluation, bit for bit" ||
  bad "--val-data changed the training"
cp val.bin val_copy.bin
"$remat" train "${F[@]}" --steps 6 --data all.bin --val-data val_copy.bin --eval-every 2 --log vc.jsonl \
  --quiet >/dev/null 2>&1
"$remat" train "${F[@]}" --steps 6 --data all.bin --val-data sh/part_2.bin --eval-every 2 --log vo.jsonl \
  --quiet >/dev/null 2>&1
vl() { python3 -c 'import json,sys;print([json.loads(l).get("val_loss") for l in open(sys.argv[1])])' "$1"; }
[[ $(vl v.jsonl) == "$(vl vc.jsonl)" && $(vl v.jsonl) != "$(vl vo.jsonl)" ]] &&
  ok "the held-out loss is the validation shard's: a copy gives the same, another shard another" ||
  bad "val losses: $(vl v.jsonl) / $(vl vc.jsonl) / $(vl vo.jsonl)"
expect_error "--val-data without --eval-every" "\-\-val-data is evaluated every \-\-eval-every N steps" \
  train "${F[@]}" --steps 1 --data all.bin --val-data val.bin --quiet
expect_error "--val-data with --val-frac" "with \-\-val-data nothing is held out: drop one" \
  train "${F[@]}" --steps 1 --data all.bin --val-data val.bin --eval-every 1 --val-frac 0.2 --quiet
expect_error "--val-data with --text" "\-\-val-data holds token shards" \
  train "${F[@]}" --steps 1 --text val.bin --val-data val.bin --eval-every 1 --quiet
expect_error "a validation shard shorter than a sequence" "\-\-val-data short.bin: .*needs 33" \
  train "${F[@]}" --steps 1 --data all.bin --val-data short.bin --eval-every 1 --quiet
expect_error "--save over the validation shard" "names the same file as the validation shard" \
  train "${F[@]}" --steps 1 --data all.bin --val-data val.bin --eval-every 1 --save val.bin --quiet

# --- checkpoints identify every shard; a resume from elsewhere finds them
mkdir -p run away
(cd run && "$remat" train "${F[@]}" --steps 8 --data '../sh/part_*.bin' --val-data ../val.bin \
  --eval-every 4 --save ../r8.bin --quiet >/dev/null 2>&1 &&
  "$remat" train "${F[@]}" --steps 4 --data '../sh/part_*.bin' --val-data ../val.bin --eval-every 4 \
  --checkpoint-dir ck --checkpoint-every 4 --quiet >/dev/null 2>&1)
grep -q "^data $tmp/sh/part_\*.bin\$" run/ck/step_00000004/settings &&
  grep -q "^val-data $tmp/val.bin\$" run/ck/step_00000004/settings &&
  grep -q "^data-bytes 18072\$" run/ck/step_00000004/settings &&
  grep -q "^val-data-crc [0-9a-f]\{8\}\$" run/ck/step_00000004/settings &&
  ok "the settings: the pattern with its directory resolved, the shards' bytes and CRC32C, the validation shard's" ||
  bad "settings: $(grep 'data' run/ck/step_00000004/settings | tr '\n' ' ')"
(cd away && "$remat" train --resume "$tmp/run/ck" --steps 8 --quiet --threads 1 --peak-gflops 10 \
  --save ../r4to8.bin >../away.out 2>&1)
cmp -s r8.bin r4to8.bin && ok "resumed from another directory: the shards found by the pattern, the same bytes" ||
  bad "resume from elsewhere: $(tail -2 away.out)"
expect_error "a resume given the shards in another order" "\-\-data .* differs from the saved run's" \
  train --resume run/ck --steps 12 --data sh/part_2.bin,sh/part_1.bin,sh/part_3.bin --quiet
"$remat" train --resume run/ck/step_00000004 --steps 8 --data sh/part_1.bin,sh/part_2.bin,sh/part_3.bin \
  --quiet --threads 1 --peak-gflops 10 --save rl.bin >rl.out 2>&1
cmp -s r8.bin rl.bin && ok "a resume given the same shards as a list: the same data, the same bytes" ||
  bad "resume with a list: $(tail -2 rl.out)"
expect_error "a resume with another validation shard" "\-\-val-data .* differs from the saved run's" \
  train --resume run/ck --steps 12 --val-data sh/part_2.bin --quiet
"$remat" train --resume run/ck/step_00000004 --steps 8 --eval-every 0 --quiet --threads 1 \
  --peak-gflops 10 --save re0.bin >/dev/null 2>&1
cmp -s r8.bin re0.bin && ok "--eval-every may change on a resume of a --val-data run" || bad "--eval-every 0 on resume"

summary

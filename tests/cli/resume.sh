#!/usr/bin/env bash
# Resumable training: a run of 2N steps and a run resumed at step N give the
# same losses and byte-identical checkpoints (shuffled data, dropout, warmup,
# cosine, gradient accumulation, recompute on); runs killed with SIGKILL at
# random moments always leave a loadable newest checkpoint, and resuming them
# to the end gives the uninterrupted run's bytes, also when one checkpoint
# was damaged on the way (the resume falls back past it); a damaged or
# mixed step directory is refused naming the file; a settings file edited
# by hand is refused by its checksum, or when resealed, quoting the line it
# cannot read or a value out of its flag's or the trainer's range; a
# resume with other settings is refused with one line, another run's
# model.bin or another precision too, resealed or not. A finished run
# resumed with --save writes its weights; --log on a resume appends (the
# lines after the checkpoint's step replaced); --keep-checkpoints N keeps
# the newest N step directories; a resume from another directory finds the
# data by its saved path, takes a copy of the same bytes, refuses others.
# usage: resume.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1
losses() { python3 -c 'import json,sys;[print(json.loads(l)["step"],json.loads(l)["loss"],json.loads(l)["grad_norm"]) for l in open(sys.argv[1])]' "$1"; }

F=(--config tiny --batch 4 --seq 32 --steps 12 --dropout 0.1 --grad-accum 2 --warmup 3 --cosine
   --ckpt-layers 1 --quiet --peak-gflops 10 --threads 1)

"$remat" train "${F[@]}" --checkpoint-dir full --checkpoint-every 6 --save full.bin --log full.jsonl >/dev/null
"$remat" train "${F[@]}" --resume full/step_00000006 --save half.bin --log half.jsonl >/dev/null
if cmp -s full.bin half.bin && diff <(losses full.jsonl | tail -6) <(losses half.jsonl) >/dev/null; then
  ok "12 steps = 6 steps + resume for 6: same losses, same bytes"
else bad "resume at step 6"; fi
[[ -f full/step_00000012/DONE && -f full/step_00000006/state.bin ]] && ok "step directories with DONE" || bad "step directories"

# Killed at random moments, resumed each time: the newest complete
# checkpoint always loads, and the end is the uninterrupted run's.
G=(--config tiny --batch 4 --seq 32 --steps 600 --dropout 0.1 --grad-accum 2 --warmup 5 --cosine
   --quiet --peak-gflops 10 --threads 1 --checkpoint-dir kill --checkpoint-every 1)
"$remat" train "${G[@]/kill/ref}" --save ref.bin >/dev/null
RANDOM=7
kills=0
# the kills fall 20 to 200 ms after the start, later by 200 ms each round
# that ends with no complete checkpoint (a loaded machine starts slowly)
late=0
# complete: a checkpoint with DONE (a run killed before its first, as on a
# loaded machine, leaves the directory and nothing to resume yet)
complete() { compgen -G "kill/step_*/DONE" >/dev/null; }
for round in $(seq 20); do
  args=("${G[@]}")
  complete && args+=(--resume kill)
  "$remat" train "${args[@]}" --save killed.bin >/dev/null 2>&1 &
  pid=$!
  ms=$((RANDOM % 181 + 20 + late)) # at any point of a step
  sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
  if kill -9 "$pid" 2>/dev/null; then kills=$((kills + 1)); fi
  wait "$pid" 2>/dev/null
  complete || late=$((late < 2000 ? late + 200 : late))
  if complete && ! "$remat" train "${G[@]}" --resume kill --plan-only >/dev/null 2>&1; then
    bad "after kill $round the newest checkpoint does not load"
  fi
  # once (from round 3, when two checkpoints are complete), the newest one
  # is damaged: the resume falls back past it
  newest=$(ls -d kill/step_*/DONE 2>/dev/null | tail -1)
  if [[ $round -ge 3 && -z ${corrupted:-} && $(ls -d kill/step_*/DONE 2>/dev/null | wc -l) -ge 2 ]]; then
    printf '\377' | dd of="${newest%DONE}model.bin" bs=1 seek=2000 conv=notrunc 2>/dev/null
    corrupted=${newest%/DONE}
  fi
done
"$remat" train "${G[@]}" --resume kill --save killed.bin >/dev/null 2>&1
if cmp -s ref.bin killed.bin; then ok "killed $kills times at random, resumed (one checkpoint damaged: ${corrupted:-none}): same bytes as one run"
else bad "killed and resumed runs differ from one run"; fi
[[ -n ${corrupted:-} ]] || bad "no checkpoint to damage from round 3 on"
[[ $kills -ge 15 ]] || bad "only $kills of 20 runs were killed while training"

# Self-checking checkpoints: a damaged or mixed step directory is refused
# by name; resuming from the parent falls back to the newest that verifies
# and still ends with the uninterrupted run's bytes.
cp -r full dmg
printf '\377' | dd of=dmg/step_00000012/model.bin bs=1 seek=5000 conv=notrunc 2>/dev/null
"$remat" train "${F[@]}" --resume dmg --save dmg.bin >/dev/null 2>&1
if cmp -s full.bin dmg.bin; then ok "newest checkpoint damaged: fell back to step 6, same bytes"
else bad "fallback past a damaged checkpoint"; fi
cp -r full mixed
cp full/step_00000006/model.bin mixed/step_00000012/model.bin
cp -r full mixed2
cp full/step_00000006/state.bin mixed2/step_00000012/state.bin

expect_fail() { # one line on stderr, exit 1 or 2
  local name=$1 pattern=$2
  shift 2
  "$remat" train "$@" >out 2>err
  local rc=$?
  if [[ ($rc -eq 1 || $rc -eq 2) && $(grep -c . err) -eq 1 ]] && grep -q -- "$pattern" err; then
    ok "$name"
  else bad "$name (rc $rc): $(head -c 300 err)"; fi
}
expect_fail "resume with another seed names the saved one" "\-\-seed 9 differs from the saved run's 1337; a resume keeps the run's settings: drop \-\-seed" "${F[@]}" --seed 9 --resume full
expect_fail "resume with another learning rate, shown as a number" "\-\-lr 0.002 differs from the saved run's 0.001" "${F[@]}" --lr 0.002 --resume full
expect_fail "resume with another batch" "\-\-batch 2 differs from the saved run's 4" --batch 2 --resume full
expect_fail "resume with another checkpoint interval" "\-\-checkpoint-every 3 differs from the saved run's 6" --checkpoint-every 3 --resume full
expect_fail "resume with another shape" "\-\-config small differs from the saved run's 2,64,4,256,64" --config small --resume full
expect_fail "resume cannot start holding tokens out" "\-\-eval-every 4 differs from the saved run's 0" --eval-every 4 --resume full
# the library refuses too, for a front end that does not ask first: the
# state's header (an older checkpoint without settings is checked this way)
cp -r full old
for s in old/step_*; do rm "$s/settings"; printf 'done\n' >"$s/DONE"; done
expect_fail "an older checkpoint without settings: flags as given, checked against the state" "different batch" "${F[@]}" --batch 2 --resume old
"$remat" train "${F[@]}" --resume old/step_00000006 --save old.bin >/dev/null 2>&1
cmp -s full.bin old.bin && ok "an older checkpoint resumes with the run's flags, as before" || bad "older checkpoint"
mkdir empty
expect_fail "nothing to resume" "no complete checkpoint" "${F[@]}" --resume empty
cp -r full dmg2
printf '\377' | dd of=dmg2/step_00000012/model.bin bs=1 seek=5000 conv=notrunc 2>/dev/null
expect_fail "damaged model.bin named" "model.bin checksum differs" "${F[@]}" --resume dmg2/step_00000012
expect_fail "model.bin of step 6 in step 12" "model.bin checksum differs" "${F[@]}" --resume mixed/step_00000012
expect_fail "state.bin of step 6 in step 12" "state.bin checksum differs" "${F[@]}" --resume mixed2/step_00000012
truncate -s 100 dmg2/step_00000006/state.bin
expect_fail "no checkpoint verifies" "no checkpoint in" "${F[@]}" --resume dmg2
expect_fail "resume and --model" "drop --model" "${F[@]}" --resume full --model full.bin
expect_fail "every without dir" "go together" "${F[@]}" --checkpoint-every 3
# A settings file edited by hand: refused by its checksum before it is read;
# resealed on purpose, refused quoting the line it cannot read.
hand() { # hand NAME TEXT [reseal]: full's step 6 with TEXT as its settings
  rm -rf "$1" && cp -r full "$1" && printf "$2" >"$1/step_00000006/settings"
  [[ -z ${3:-} ]] || reseal "$1/step_00000006"
}
hand edited 'bogus 1\n'
expect_fail "an edited settings file: the manifest's checksum first" "settings size differs" \
  --resume edited/step_00000006
hand bogus 'bogus 1\n' reseal
expect_fail "resealed settings without their header, quoted" "damaged at 'bogus 1'" \
  --resume bogus/step_00000006
hand header 'remat settings 1' reseal
expect_fail "resealed settings cut inside their header, quoted" "damaged at 'remat settings 1'" \
  --resume header/step_00000006
hand nothing 'remat settings 1\n' reseal
expect_fail "resealed settings with no setting" "hold no setting" --resume nothing/step_00000006
hand badvalue "$(sed 's/^lr .*/lr fast/' full/step_00000006/settings)\n" reseal
expect_fail "resealed settings with a value that is no number, quoted" "damaged at 'lr fast'" \
  --resume badvalue/step_00000006
# Resealed values out of range: refused by the trainer's checks or the
# checks of the flag that gives the setting, naming both and the file.
for kv in "eps -1|eps -1 must" "lr 1e400|lr inf must" "ckpt-ratio nan|--ckpt-ratio expects a number" \
  "steps -1|steps -1, warmup 3" "beta1 1.5|beta1 1.5 and beta2" "beta2 -0.5|beta2 -0.5 must" \
  "batch 0|batch 0, seq 32" "zero 4|--zero 4 is out of range" "val-frac 0.95|--val-frac 0.95 is out"; do
  set -- ${kv%%|*}
  hand range "$(sed "s/^$1 .*/$1 $2/" full/step_00000006/settings)\n" reseal
  expect_fail "resealed settings with $1 $2" \
    "the settings of range/step_00000006/settings: .*${kv#*|}.*restore it" --resume range/step_00000006
done
# The state binds its model.bin and precision: another run's weights, or
# another precision, resealed on purpose, are refused naming what differs;
# a state saved before it recorded them (version 1) still resumes.
reseal_all() { # DIR: every file DONE lists with its size and CRC32C again
  python3 - "$1" <<'PY'
import sys
T = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    T.append(c)
def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = T[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
d = sys.argv[1]
out = []
for l in open(d + "/DONE").read().splitlines():
    if l.startswith("crc "):
        continue
    if l.startswith("file "):
        data = open(d + "/" + l.split()[1], "rb").read()
        l = "file %s %d %08x" % (l.split()[1], len(data), crc32c(data))
    out.append(l)
text = "".join(l + "\n" for l in out)
open(d + "/DONE", "w").write(text + "crc %08x\n" % crc32c(text.encode()))
PY
}
rm -rf swapped && cp -r full swapped && cp ref.bin swapped/step_00000006/model.bin
reseal_all swapped/step_00000006
expect_fail "resealed with another run's model.bin" \
  "its model.bin (CRC32C [0-9a-f]*) is not the model file its training state was saved with" \
  --resume swapped/step_00000006
saved=$(sed -n 's/^precision //p' full/step_00000006/settings)
if [[ $saved == bf16 ]]; then
  hand prec "$(sed 's/^precision .*/precision fp32/' full/step_00000006/settings)\n" reseal
  expect_fail "resealed with precision bf16 -> fp32" "saved training in bf16, and this run trains in fp32" \
    --resume prec/step_00000006
else echo "skip: precision bf16 -> fp32 (this CPU trains in $saved)"; fi
rm -rf v1 && cp -r full v1
python3 - v1/step_00000006/state.bin <<'PY'
import struct, sys
p = sys.argv[1]
d = bytearray(open(p, "rb").read())
w = list(struct.unpack_from("<64q", d))
assert w[1] == 2 and w[33] == 3, w[:40]  # version 2, precision and model bound
w[1], w[33], w[34], w[35] = 1, 0, 0, 0
struct.pack_into("<64q", d, 0, *w)
h = 1469598103934665603
for b in d[:-8]:
    h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
struct.pack_into("<Q", d, len(d) - 8, h)
open(p, "wb").write(d)
PY
reseal_all v1/step_00000006
"$remat" train --resume v1/step_00000006 --quiet --peak-gflops 10 --threads 1 --save v1.bin \
  >v1.out 2>&1
cmp -s full.bin v1.bin && ok "a version 1 state (no model or precision recorded) resumes: the same bytes" ||
  bad "version 1 state: $(tail -2 v1.out)"

# Resume and extend: the checkpoint's settings are the run's; --resume DIR
# alone continues it, checkpointing included.
H=(--config tiny --batch 4 --seq 32 --dropout 0.1 --warmup 3 --grad-accum 2 --eval-every 4
   --val-frac 0.2 --quiet --peak-gflops 10 --threads 1)
"$remat" train "${H[@]}" --steps 16 --save h16.bin >/dev/null
"$remat" train "${H[@]}" --steps 8 --checkpoint-dir alone --checkpoint-every 4 --save h8.bin \
  >/dev/null
"$remat" train --resume alone --steps 16 --quiet --peak-gflops 10 --threads 1 --save h8to16.bin \
  >resumed.out 2>&1
if cmp -s h16.bin h8to16.bin; then ok "8 steps, then --resume DIR --steps 16 alone: the 16-step run's bytes"
else bad "resume alone extending 8 to 16: $(tail -2 resumed.out)"; fi
[[ -f alone/step_00000016/DONE && -f alone/step_00000012/DONE ]] && \
  grep -q "^file settings " alone/step_00000016/DONE && \
  ok "the resumed run kept checkpointing every 4 steps into alone/, settings listed in DONE" || \
  bad "checkpoints of the resumed run: $(ls alone)"
# interrupted (killed after step 12's checkpoint), resumed alone: the same bytes
"$remat" train "${H[@]}" --steps 16 --checkpoint-dir cut --checkpoint-every 4 >/dev/null
rm -rf cut/step_00000016
"$remat" train --resume cut --quiet --peak-gflops 10 --threads 1 --save cut.bin >/dev/null 2>&1
if cmp -s h16.bin cut.bin; then ok "interrupted at step 12, --resume DIR alone: the uninterrupted bytes"
else bad "resume alone after an interruption"; fi
# --eval-every may change on a resume (the held-out split stays the run's)
"$remat" train --resume cut/step_00000012 --eval-every 0 --quiet --peak-gflops 10 --threads 1 \
  --save cut0.bin >/dev/null 2>&1
cmp -s h16.bin cut0.bin && ok "resumed with --eval-every 0: the same bytes (the split is kept)" || \
  bad "--eval-every changed on a resume changes the training"
# a finished run says so and trains nothing
"$remat" train --resume cut >fin.out 2>&1
rc=$?
if [[ $rc -eq 0 ]] && grep -q "the run in cut finished at step 16; give --steps N > 16 to extend it" fin.out \
  && ! grep -q "^done" fin.out; then ok "a finished run resumed: says so, exit 0, no training"
else bad "finished run (rc $rc): $(cat fin.out)"; fi
# a cosine schedule is neither extended nor cut short
"$remat" train "${H[@]}" --cosine --steps 8 --checkpoint-dir cos --checkpoint-every 4 >/dev/null
expect_fail "a cosine run is not extended" "cosine schedule that ends at step 8" --resume cos --steps 12
expect_fail "a cosine run is not cut short" "cosine schedule that ends at step 8" --resume cos/step_00000004 --steps 6
expect_fail "steps before the checkpoint's" "it is at step 16 already" --resume cut --steps 10
"$remat" train --resume cos --steps 8 >fin.out 2>&1 && grep -q "finished at step 8" fin.out && \
  ok "a cosine run resumed with its own steps: finished" || bad "cosine resume with its own steps"
# the same values given again are fine
"$remat" train --resume cut/step_00000012 --config 2,64,4,256,64 --batch 4 --lr 0.001 --seed 1337 \
  --quiet --peak-gflops 10 --threads 1 --save again.bin >/dev/null 2>&1
cmp -s h16.bin again.bin && ok "flags with the saved values are accepted" || bad "same values again"

# A finished run resumed with --save writes the file: the checkpoint's weights.
"$remat" train --resume cut --save fin.bin --quiet --threads 1 >fin.out 2>&1
rc=$?
if [[ $rc -eq 0 ]] && cmp -s h16.bin fin.bin && grep -q "finished at step 16" fin.out && \
  grep -q "^saved   fin.bin" fin.out; then ok "a finished run resumed with --save: says so, writes its weights"
else bad "--save of a finished run (rc $rc): $(cat fin.out)"; fi

# --log on a resume appends: the lines up to the checkpoint's step stay,
# those after it (taken again) are replaced; a new run starts afresh.
"$remat" train "${H[@]}" --steps 12 --log ref12.jsonl >/dev/null
"$remat" train "${H[@]}" --steps 12 --checkpoint-dir lg --checkpoint-every 4 --log lg.jsonl >/dev/null
rm -rf lg/step_00000012 lg/step_00000008 # killed after step 8's checkpoint... of step 4
"$remat" train --resume lg --threads 1 --peak-gflops 10 --log lg.jsonl >lg.out 2>&1
if diff <(losses ref12.jsonl) <(losses lg.jsonl) >/dev/null && \
  grep -q "^log     lg.jsonl: appending after its 4 lines (steps to 4)" lg.out; then
  ok "--log on a resume appends: 12 lines of 12 steps, as one run's, and says so"
else bad "--log on a resume: $(wc -l <lg.jsonl) lines; $(grep '^log' lg.out)"; fi
"$remat" train "${H[@]}" --steps 3 --log lg.jsonl >/dev/null
[[ $(wc -l <lg.jsonl) -eq 3 ]] && ok "a new run starts its log afresh" || bad "new run's log: $(wc -l <lg.jsonl) lines"

# --keep-checkpoints N: the newest N step directories stay; a resume from
# the oldest keeps it until a newer one is sealed, and may change N.
"$remat" train "${H[@]}" --steps 16 --checkpoint-dir kept --checkpoint-every 2 --keep-checkpoints 2 \
  --save k16.bin >/dev/null
[[ $(ls kept | tr '\n' ' ') == "step_00000014 step_00000016 " ]] && cmp -s h16.bin k16.bin && \
  ok "--keep-checkpoints 2: step_00000014 and step_00000016 stay, the same bytes" || \
  bad "--keep-checkpoints 2 left: $(ls kept | tr '\n' ' ')"
"$remat" train "${H[@]}" --steps 8 --checkpoint-dir kr --checkpoint-every 2 >/dev/null
"$remat" train --resume kr/step_00000004 --keep-checkpoints 1 --threads 1 --peak-gflops 10 \
  --save kr.bin --quiet >/dev/null 2>&1
[[ $(ls kr | tr '\n' ' ') == "step_00000008 " ]] && cmp -s h8.bin kr.bin && \
  ok "resumed at step 4 with --keep-checkpoints 1: only step_00000008 stays, the same bytes" || \
  bad "resume with --keep-checkpoints 1 left: $(ls kr | tr '\n' ' ')"
"$remat" train --resume kept --steps 20 --threads 1 --peak-gflops 10 --quiet >/dev/null 2>&1
[[ $(ls kept | tr '\n' ' ') == "step_00000018 step_00000020 " ]] && \
  ok "--resume DIR alone keeps the run's --keep-checkpoints" || \
  bad "resume kept: $(ls kept | tr '\n' ' ')"

# Resume from anywhere: a shard given by a relative path is saved resolved
# with its size and CRC32C; --resume from another directory finds it; a
# copy of the same bytes at another path is the same data; other bytes,
# given or found at the saved path, are refused.
mkdir -p where/run
perl -e 'open(my $h,">",$ARGV[0]) or die; binmode $h; my @t = map { ($_ * 7) % 100 } 0..9999;
  print $h pack("l<256", 20240520, 1, scalar(@t), (0) x 253); print $h pack("S<*", @t);' \
  where/run/corpus_train.bin
D=(--config tiny --batch 4 --seq 32 --quiet --peak-gflops 10 --threads 1)
(cd where/run && "$remat" train "${D[@]}" --data corpus_train.bin --steps 12 --save ../../d12.bin \
  >/dev/null && "$remat" train "${D[@]}" --data corpus_train.bin --steps 8 --checkpoint-dir ck \
  --checkpoint-every 4 >/dev/null)
grep -q "^data $tmp/where/run/corpus_train.bin\$" where/run/ck/step_00000008/settings && \
  grep -q "^data-crc [0-9a-f]\{8\}\$" where/run/ck/step_00000008/settings && \
  ok "the shard's path saved resolved, with its size and CRC32C" || \
  bad "settings: $(grep '^data' where/run/ck/step_00000008/settings)"
"$remat" train "${D[@]}" --resume "$tmp/where/run/ck" --steps 12 --save d8to12.bin >wh.out 2>&1
cmp -s d12.bin d8to12.bin && ok "--resume /abs/ck from another directory finds the shard: the same bytes" || \
  bad "resume from elsewhere: $(tail -2 wh.out)"
cp where/run/corpus_train.bin copy.bin
"$remat" train "${D[@]}" --resume where/run/ck/step_00000004 --data "$tmp/copy.bin" --steps 12 \
  --save dcopy.bin >wh.out 2>&1
cmp -s d12.bin dcopy.bin && ok "--data /abs/copy of the same bytes on a resume: accepted, the same bytes" || \
  bad "resume with a copy of the data: $(tail -2 wh.out)"
grep -q "^data $tmp/copy.bin\$" where/run/ck/step_00000012/settings && \
  ok "the checkpoints after it name the copy, the path the run now reads" || \
  bad "settings after a resume with a copy: $(grep '^data ' where/run/ck/step_00000012/settings)"
cp copy.bin other.bin
printf '\1' | dd of=other.bin bs=1 seek=3000 conv=notrunc 2>/dev/null
expect_fail "other bytes given on a resume" "\-\-data $tmp/other.bin differs from the saved run's" \
  --resume where/run/ck --steps 16 --data "$tmp/other.bin"
cp other.bin copy.bin
expect_fail "other bytes at the saved path" "copy.bin is not the data of the run in .*CRC32C" \
  --resume where/run/ck --steps 16

summary

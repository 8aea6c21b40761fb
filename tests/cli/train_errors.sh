#!/usr/bin/env bash
# Every malformed input to `remat train` gets a one-line error and exit code 1
# or 2: never a crash, never a silent success.
# usage: train_errors.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"

# expect_fail "description" PATTERN args...: `remat train --quiet args...`
# exits 1 or 2 with one line on stderr that matches PATTERN.
expect_fail() { expect_error "$1" "$2" train --quiet "${@:3}"; }

# Files: little-endian int32 headers written with perl (always on Debian).
shard() { # shard FILE MAGIC VERSION COUNT NTOKENS_WRITTEN MAXID
  perl -e 'my ($f,$m,$v,$c,$n,$mx)=@ARGV; open(my $h,">",$f) or die; binmode $h;
    print $h pack("l<256",$m,$v,$c,(0)x253); print $h pack("S<*", map { $_ % ($mx+1) } 0..$n-1);' "$@"
}
shard "$tmp/good.bin" 20240520 1 5000 5000 255
shard "$tmp/magic.bin" 12345 1 5000 5000 255
shard "$tmp/version.bin" 20240520 7 5000 5000 255
shard "$tmp/trunc.bin" 20240520 1 5000 4000 255
shard "$tmp/trailing.bin" 20240520 1 4000 5000 255
shard "$tmp/bigid.bin" 20240520 1 5000 5000 999
head -c 100 "$tmp/good.bin" >"$tmp/header.bin"
: >"$tmp/empty.txt"
printf 'x' >"$tmp/one.txt"
"$remat" train --config tiny --steps 1 --quiet --save "$tmp/tiny.bin" >/dev/null 2>&1 ||
  { echo "FAIL: could not write a tiny checkpoint"; exit 1; }
head -c 5000 "$tmp/tiny.bin" >"$tmp/tiny_trunc.bin"
perl -e 'open(my $h,"+<",$ARGV[0]) or die; binmode $h; print $h pack("l<",1);' \
  "$(cp "$tmp/tiny.bin" "$tmp/tiny_magic.bin" && echo "$tmp/tiny_magic.bin")"

# --keep-checkpoints keeps step directories of --checkpoint-dir: 1 or more
expect_fail "--keep-checkpoints without --checkpoint-dir" \
  "\-\-keep-checkpoints N keeps the newest N checkpoints of \-\-checkpoint-dir DIR" \
  --config tiny --steps 1 --keep-checkpoints 2
expect_fail "--keep-checkpoints 0" "\-\-keep-checkpoints" --config tiny --steps 1 \
  --checkpoint-dir "$tmp/keep0" --checkpoint-every 1 --keep-checkpoints 0

# chunked schedules run a pipeline (their plan files: chunked.sh)
for sch in interleaved zbv; do
  expect_fail "--schedule $sch on one process" "$sch runs a pipeline of 2 or more stages" \
    --config tiny --schedule $sch --steps 1
done
# zb-h1 runs on a pipeline, not on one process or with replicas
expect_fail "--schedule zb-h1 on one process" "zb-h1 runs a pipeline of 2 or more stages" \
  --config tiny --schedule zb-h1 --steps 1
expect_fail "unknown option" "unknown option" --bogus 3
expect_fail "stray argument" "unexpected argument" hello
expect_fail "switch given a value" "--cosine is a switch and takes no value" --cosine=1
expect_fail "switch given an empty value" "--quiet is a switch and takes no value" --quiet=
expect_fail "missing value" "needs a value" --steps
expect_fail "batch not a number" "expects an integer" --batch abc
expect_fail "batch zero" "out of range" --batch 0
expect_fail "negative steps" "out of range" --steps -1
expect_fail "lr not finite" "expects a number" --lr nan
expect_fail "dropout 1" "out of range" --dropout 1
expect_fail "ratio above 1" "out of range" --ckpt-ratio 1.5
expect_fail "ckpt layer out of range" "blocks 0..3" --ckpt-layers 0,9
expect_fail "ckpt layers malformed" "block indices" --ckpt-layers 0,,1
expect_fail "ckpt layer twice" "twice" --ckpt-layers 1,1
expect_fail "middle layer out of range" "blocks 0..3" --ckpt-layers full:0,middle:2-4
expect_fail "ckpt range backwards" "block indices" --ckpt-layers 3-1
expect_fail "ckpt unknown policy" "block indices" --ckpt-layers half:0-1
expect_fail "full and middle block" "names block 1 twice" --ckpt-layers 0-1,middle:1
expect_fail "two policies" "at most one" --ckpt-ratio 0.5 --mem 1GiB
expect_fail "mem unit" "unknown unit" --mem 12XB
expect_fail "mem too small" "at least" --mem 1MB
expect_fail "plan larger than memory" "memory available" --config gpt2-124m --batch 512 --seq 1024
expect_fail "unknown config" "unknown model config" --config nope
expect_fail "heads do not divide" "divisible" --config 4,128,3,256,64
expect_fail "seq above maxT" "maximum sequence length" --seq 1000
expect_fail "data and text" "not both" --data "$tmp/good.bin" --text "$tmp/one.txt"
expect_fail "no such data file" "$tmp/none.bin" --data "$tmp/none.bin"
expect_fail "data is a directory" "$tmp" --data "$tmp"
expect_fail "shard magic" "magic" --data "$tmp/magic.bin"
expect_fail "shard version" "version" --data "$tmp/version.bin"
expect_fail "shard truncated" "truncated" --data "$tmp/trunc.bin"
expect_fail "shard trailing bytes" "trailing" --data "$tmp/trailing.bin"
expect_fail "shard header only" "truncated" --data "$tmp/header.bin"
expect_fail "token id above V" "vocab" --data "$tmp/bigid.bin"
expect_fail "empty text" "empty" --text "$tmp/empty.txt"
expect_fail "one-byte text" "byte" --text "$tmp/one.txt"
expect_fail "checkpoint magic" "magic" --model "$tmp/tiny_magic.bin"
expect_fail "checkpoint truncated" "truncated" --model "$tmp/tiny_trunc.bin"
expect_fail "checkpoint vs config" "asks for" --model "$tmp/tiny.bin" --config small
expect_fail "log unwritable" "nodir/x.jsonl.*create the directory" --config tiny --steps 1 --log "$tmp/nodir/x.jsonl"
expect_fail "save unwritable" "$tmp/nodir" --config tiny --steps 1 --save "$tmp/nodir/x.bin"
# A save never replaces something that is not a regular file.
mkfifo "$tmp/fifo"
mkdir "$tmp/outdir"
expect_fail "save over a FIFO" "FIFO" --config tiny --steps 1 --save "$tmp/fifo"
expect_fail "save over a directory" "directory" --config tiny --steps 1 --save "$tmp/outdir"
n=$((n + 1))
if [[ -p "$tmp/fifo" && -d "$tmp/outdir" ]] && ! ls "$tmp" | grep -q '\.tmp\.'; then
  echo "ok   [FIFO and directory left as they were, no temporaries]"
else
  echo "FAIL [FIFO or directory replaced, or a temporary left]: $(ls -l "$tmp" | tr '\n' ' ')"
  fails=$((fails + 1))
fi

# Inputs that are FIFOs (or links to one) are refused without being opened:
# nothing blocks waiting for a writer.
ln -s "$tmp/fifo" "$tmp/fifo-link"
expect_fail "data is a FIFO" "FIFO, not a regular file" --config tiny --steps 1 --data "$tmp/fifo"
expect_fail "text is a FIFO" "FIFO, not a regular file" --config tiny --steps 1 --text "$tmp/fifo"
expect_fail "model is a FIFO" "FIFO, not a regular file" --steps 1 --model "$tmp/fifo"
expect_fail "model links to a FIFO" "FIFO, not a regular file" --steps 1 --model "$tmp/fifo-link"
timeout -k 5 120 "$remat" train --quiet --config tiny --batch 2 --seq 16 --steps 1 --threads 1 \
  --checkpoint-dir "$tmp/ck" --checkpoint-every 1 >/dev/null 2>&1
rm -f "$tmp/ck/step_00000001/state.bin" && mkfifo "$tmp/ck/step_00000001/state.bin"
expect_fail "state.bin is a FIFO (step directory)" "FIFO" --config tiny --batch 2 --seq 16 --steps 2 \
  --threads 1 --resume "$tmp/ck/step_00000001"
expect_fail "state.bin is a FIFO (newest checkpoint)" "FIFO" --config tiny --batch 2 --seq 16 \
  --steps 2 --threads 1 --resume "$tmp/ck"
n=$((n + 1))
if [[ -p "$tmp/fifo" && -p "$tmp/ck/step_00000001/state.bin" ]]; then
  echo "ok   [the FIFOs are left as they were]"
else
  echo "FAIL [a FIFO was replaced]"
  fails=$((fails + 1))
fi

# Outputs that are FIFOs (or links to one) are refused before anything is
# loaded, without being opened; a checkpoint directory that cannot be made
# is refused before the first step, not when the first checkpoint is due.
expect_fail "log is a FIFO" "FIFO" --config tiny --steps 1 --log "$tmp/fifo"
expect_fail "log links to a FIFO" "FIFO" --config tiny --steps 1 --log "$tmp/fifo-link"
: >"$tmp/plainfile"
for ck in "$tmp/plainfile" "$tmp/plainfile/sub" "$tmp/nodir/sub" "$tmp/fifo"; do
  expect_fail "--checkpoint-dir $(basename "$(dirname "$ck")")/$(basename "$ck") refused" \
    "$(basename "$ck")" --config tiny --steps 2 --checkpoint-dir "$ck" --checkpoint-every 1
  n=$((n + 1))
  # refused in the job's set-up: before the plan is shown (and so before
  # the arena, the weights and any step)
  if grep -q '^\(memory\|threads\|peak\) ' "$tmp/out"; then
    echo "FAIL [--checkpoint-dir $ck: refused only after set-up]"; fails=$((fails + 1))
  else echo "ok   [--checkpoint-dir $(basename "$ck"): refused before the plan, the arena or a step]"; fi
done

# A file where a later step's checkpoint goes is found before step 1 (a
# step_N of another spelling, or of a step the run does not save, is no
# obstacle); an obstacle only the step itself meets (its model.bin a full
# directory) stops the run there, and --save still keeps the weights.
mkdir -p "$tmp/late" && : >"$tmp/late/step_00000010" && : >"$tmp/late/step_10" && : >"$tmp/late/step_00000007"
expect_fail "a file in the way of step 10's checkpoint, found before step 1" \
  "late/step_00000010' stands where the checkpoint of step 10 goes and is not a directory" \
  --config tiny --batch 2 --seq 16 --steps 20 --checkpoint-dir "$tmp/late" --checkpoint-every 5 \
  --save "$tmp/late.bin"
n=$((n + 1))
if grep -q '^\(memory\|saved\) ' "$tmp/out" || [[ -e $tmp/late/step_00000005 || -e $tmp/late.bin ]]; then
  echo "FAIL [the obstacle at step 10 was found only after steps]"; fails=$((fails + 1))
else echo "ok   [the obstacle at step 10 was found before the plan and any step]"; fi
rm "$tmp/late/step_00000010"
"$remat" train --config tiny --batch 2 --seq 16 --steps 10 --checkpoint-dir "$tmp/late" \
  --checkpoint-every 5 --quiet >/dev/null 2>&1
check "no obstacle in step_10 or step_00000007: the run checkpoints at 5 and 10" \
  test -f "$tmp/late/step_00000005/DONE" -a -f "$tmp/late/step_00000010/DONE"
mkdir -p "$tmp/deep/step_00000010/model.bin/x"
expect_fail "a checkpoint that cannot be written at step 10" "cannot remove.*model.bin" \
  --config tiny --batch 2 --seq 16 --steps 20 --checkpoint-dir "$tmp/deep" --checkpoint-every 5 \
  --save "$tmp/deep.bin"
"$remat" train --config tiny --batch 2 --seq 16 --steps 10 --quiet --save "$tmp/ten.bin" >/dev/null
check "--save keeps the weights of the 10 steps taken before the checkpoint failed" \
  cmp -s "$tmp/deep.bin" "$tmp/ten.bin"

# A log is one run's: a second run given it (or given it to --save) is
# refused while the first writes it, and the first one's lines stay whole.
jsonl_ok() { # jsonl_ok FILE MIN_LINES: whole JSON lines, at least MIN_LINES
  python3 -c 'import json,sys
t = open(sys.argv[1]).read()
ls = t.splitlines()
[json.loads(l) for l in ls]
sys.exit(0 if t.endswith("\n") and len(ls) >= int(sys.argv[2]) else 1)' "$1" "$2" 2>/dev/null
}
"$remat" train --config tiny --batch 2 --seq 16 --steps 1000000 --threads 1 --quiet \
  --peak-gflops 10 --log "$tmp/shared.jsonl" >/dev/null 2>&1 &
first=$!
for _ in $(seq 100); do [[ -s $tmp/shared.jsonl ]] && break; sleep 0.1; done
expect_fail "a second run's --log that a first run writes" \
  "the output '$tmp/shared.jsonl' is being written by another run" \
  --config tiny --steps 2 --log "$tmp/shared.jsonl"
expect_fail "a --save onto another run's log" "being written by another run" \
  --config tiny --steps 2 --save "$tmp/shared.jsonl"
kill -TERM "$first"; wait "$first"
check "the first run's log: whole JSON lines, untouched by the second" jsonl_ok "$tmp/shared.jsonl" 1
# A log cut by a write error (a file size limit) ends with a whole line.
(trap '' XFSZ; ulimit -f 4; "$remat" train --config tiny --batch 2 --seq 16 --steps 100 --threads 1 \
  --quiet --peak-gflops 10 --log "$tmp/cut.jsonl" >/dev/null 2>"$tmp/err")
rc=$?
check "a log cut at 4 KiB: exit $rc, '$(cat "$tmp/err")', whole lines before the cut" \
  eval '[[ $rc -eq 1 ]] && grep -q "File too large" "$tmp/err" && jsonl_ok "$tmp/cut.jsonl" 2'

# Outputs never overwrite inputs.
cp "$tmp/tiny.bin" "$tmp/in.bin"
expect_fail "log over the model" "overwrite an input" --model "$tmp/in.bin" --steps 1 --log "$tmp/in.bin"
expect_fail "save over the data" "overwrite an input" --config tiny --steps 1 --data "$tmp/magic.bin" --save "$tmp/magic.bin"
ln -sf "$tmp/in.bin" "$tmp/link.bin"
expect_fail "save through a link to the model" "overwrite an input" --model "$tmp/in.bin" --steps 1 --save "$tmp/link.bin"
n=$((n + 1))
if cmp -s "$tmp/in.bin" "$tmp/tiny.bin"; then
  echo "ok   [the input checkpoint is untouched]"
else
  echo "FAIL [the input checkpoint changed]"
  fails=$((fails + 1))
fi
# Flags: a missing value is not taken from the next flag; an unknown flag
# is unknown, even last.
expect_fail "save with no value" "--save needs a value" --config tiny --save --quiet
expect_fail "unknown last flag" "unknown option '--bogus'" --config tiny --bogus
expect_fail "unknown flag with value" "unknown option '--bogus'" --config tiny --bogus=3

# --save-precision: fp32 or bf16, for --save; a bf16 file (version 5) that is
# cut, of another version, or sized for fp32 is refused in one line.
expect_fail "save precision unknown" "--save-precision fp16 is not a precision; use fp32 or bf16" \
  --config tiny --steps 1 --save "$tmp/p.bin" --save-precision fp16
expect_fail "save precision without --save" "give --save too" --config tiny --steps 1 --save-precision bf16
expect_fail "save precision with no value" "--save-precision needs a value" --config tiny --save-precision
"$remat" train --config tiny --steps 1 --quiet --save "$tmp/tiny5.bin" --save-precision bf16 >/dev/null 2>&1 ||
  { echo "FAIL: could not write a bf16 checkpoint"; exit 1; }
head -c 5000 "$tmp/tiny5.bin" >"$tmp/tiny5_trunc.bin"
perl -e 'open(my $h,"+<",$ARGV[0]) or die; binmode $h; seek($h,4,0); print $h pack("l<",4);' \
  "$(cp "$tmp/tiny5.bin" "$tmp/tiny5_v4.bin" && echo "$tmp/tiny5_v4.bin")"
perl -e 'open(my $h,"+<",$ARGV[0]) or die; binmode $h; seek($h,4,0); print $h pack("l<",5);' \
  "$(cp "$tmp/tiny.bin" "$tmp/tiny3_as5.bin" && echo "$tmp/tiny3_as5.bin")"
expect_fail "bf16 checkpoint truncated" "truncated: its header announces 120576 bf16 parameters" \
  --model "$tmp/tiny5_trunc.bin" --steps 1
expect_fail "checkpoint version 4" "has version 4; remat reads version 3 (fp32) and 5 (bf16)" \
  --model "$tmp/tiny5_v4.bin" --steps 1
expect_fail "fp32 body under a version 5 header" "241152 trailing bytes" --model "$tmp/tiny3_as5.bin" --steps 1
expect_fail "bf16 checkpoint vs config" "asks for" --model "$tmp/tiny5.bin" --config small --steps 1
expect_error "sample: bf16 checkpoint truncated" "bf16 parameters" sample --model "$tmp/tiny5_trunc.bin"

# Weights that are finite but overflow float arithmetic: said so, not "lower --lr".
perl -e 'open(my $i,"<",$ARGV[0]) or die; binmode $i; local $/; my $d=<$i>;
  my $n=(length($d)-1024)/4; substr($d,1024,$n*4)=pack("f<",1e30) x $n;
  open(my $o,">",$ARGV[1]) or die; binmode $o; print $o $d;' "$tmp/tiny.bin" "$tmp/huge.bin"
expect_fail "weights that overflow" "overflow float arithmetic" --model "$tmp/huge.bin" --steps 1
# A memory limit the plan cannot fit is named before anything large is allocated.
# (Not under AddressSanitizer, which reserves terabytes of address space.)
n=$((n + 1))
if ldd "$remat" 2>/dev/null | grep -q libasan; then
  echo "ok   [address-space limit: skipped under AddressSanitizer]"
else
(ulimit -v 900000; "$remat" train --quiet --config gpt2-124m --batch 4 --seq 64 --steps 1) >"$tmp/out" 2>"$tmp/err"
rc=$?
if [[ $rc -eq 1 ]] && grep -q "ulimit -v" "$tmp/err" && [[ $(grep -c . "$tmp/err") -eq 1 ]]; then
  echo "ok   [address-space limit] -> $(cat "$tmp/err")"
else
  echo "FAIL [address-space limit]: rc $rc: $(head -c 300 "$tmp/err")"
  fails=$((fails + 1))
fi
fi

# Address-space limits that OpenBLAS's buffers (128 MiB a thread, mapped
# when it loads and at its first product) do not fit: a message naming the
# limit and what would fit, or a run capped to the threads that fit, within
# seconds; never the hang of an allocation retried for ever.
if ! ldd "$remat" 2>/dev/null | grep -q libasan; then
  for mb in 100 200 400; do
    for args in "--config tiny" "--config small" "--config small --plan-only"; do
      n=$((n + 1))
      t0=$(date +%s.%N)
      # shellcheck disable=SC2086
      (ulimit -v $((mb * 1000)); timeout -k 5 30 "$remat" train --quiet --steps 1 $args) \
        >"$tmp/out" 2>"$tmp/err" </dev/null
      rc=$?
      took=$(python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" \
             "$t0" "$(date +%s.%N)")
      if [[ $rc -eq 1 ]] && grep -q "ulimit -v $((mb * 1000))).*needs ulimit -v [0-9]" "$tmp/err" &&
         [[ $(grep -c . "$tmp/err") -eq 1 ]]; then
        echo "ok   [ulimit -v ${mb} MB, $args: refused in ${took} s] -> $(cat "$tmp/err")"
      elif [[ $rc -eq 0 ]] && { [[ ! -s $tmp/err ]] || grep -q "running [0-9]" "$tmp/err"; }; then
        echo "ok   [ulimit -v ${mb} MB, $args: ran in ${took} s] $(head -c 160 "$tmp/err")"
      else
        echo "FAIL [ulimit -v ${mb} MB, $args]: rc $rc after ${took} s: $(head -c 300 "$tmp/err")"
        fails=$((fails + 1))
      fi
    done
  done
fi
# Commands that run no matrix product need room for OpenBLAS's load alone:
# under a limit too low for a product they work, on as many threads as fit.
if ! ldd "$remat" 2>/dev/null | grep -q libasan; then
  printf 'Some text to tokenize, and some more.\n%.0s' $(seq 50) >"$tmp/some.txt"
  for args in "--help" "--version" "train --help" "plan --help" "tokenize --help" "sample --help" \
              "tokenize $tmp/some.txt --out $tmp/some --quiet"; do
    n=$((n + 1))
    # shellcheck disable=SC2086
    (ulimit -v 400000; timeout -k 5 30 "$remat" $args) >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
    if [[ $rc -eq 0 && ! -s $tmp/err ]] && { [[ -s $tmp/out ]] || [[ $args == tokenize*--quiet ]]; }; then
      echo "ok   [ulimit -v 400 MB: remat ${args%% "$tmp"*} works] $(head -1 "$tmp/out")"
    else
      echo "FAIL [ulimit -v 400 MB: remat $args]: rc $rc: $(head -c 300 "$tmp/err")"
      fails=$((fails + 1))
    fi
  done
fi
# A stack limit below what the kernels' tiles need: raised where the hard
# limit allows, else a message; never a crash.
expect_stack() { # expect_stack NAME ULIMIT-ARGS WANT-RC PATTERN
  n=$((n + 1))
  # shellcheck disable=SC2086
  (ulimit $2; timeout -k 5 60 "$remat" train --quiet --config tiny --batch 2 --seq 16 --steps 1) \
    >"$tmp/out" 2>"$tmp/err" </dev/null
  local rc=$?
  if [[ $rc -eq $3 ]] && { [[ -z $4 ]] || grep -q -- "$4" "$tmp/err"; }; then echo "ok   [$1] $(cat "$tmp/err")"
  else echo "FAIL [$1]: rc $rc: $(head -c 300 "$tmp/err")"; fails=$((fails + 1)); fi
}
expect_stack "ulimit -s 64 (soft and hard)" "-s 64" 1 "ulimit -s 64).*ulimit -s 1024"
expect_stack "ulimit -S -s 64 (the hard limit allows more)" "-S -s 64" 0 ""

# A signal during set-up (here the sgemm peak measurement, half a second at
# least) ends the process at once: 143 for SIGTERM, with one line.
n=$((n + 1))
# (stdbuf preloads a library; a sanitizer build must be told that is fine)
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
  stdbuf -oL "$remat" train --config small --steps 1 >"$tmp/out" 2>"$tmp/err" </dev/null &
pid=$!
for _ in $(seq 200); do grep -q "^threads" "$tmp/out" && break; sleep 0.02; done
t0=$(date +%s.%N)
kill -TERM "$pid"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
if kill -0 "$pid" 2>/dev/null; then
  kill -9 "$pid"
  echo "FAIL [SIGTERM during set-up: still running after 5 s]"
  fails=$((fails + 1))
else
  wait "$pid"
  rc=$?
  took=$(python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" \
         "$t0" "$(date +%s.%N)")
  if [[ $rc -eq 143 ]] && grep -q "before the first step" "$tmp/err" && ! grep -q "^done" "$tmp/out"
  then echo "ok   [SIGTERM during set-up: exit 143 in ${took} s] -> $(cat "$tmp/err")"
  else echo "FAIL [SIGTERM during set-up]: rc $rc: $(head -c 300 "$tmp/err")"; fails=$((fails + 1)); fi
fi

summary

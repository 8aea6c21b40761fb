#!/usr/bin/env bash
# plan_errors.sh REMAT TMPDIR: `remat plan` on bad input. Every case must exit
# with 1 or 2 (never a crash: no status >= 128), print exactly one line to
# standard error starting with "remat plan: ", and mention what was wrong.
set -u
REMAT=$1
TMP=$2
DATA=$(cd "$(dirname "$0")/../data/plan" && pwd)
mkdir -p "$TMP"
. "$(dirname "$0")/lib.sh"

OUT="$TMP/out" # where expect sends standard output

expect() { # word-in-message, then the command's arguments
  local word=$1
  shift
  n=$((n + 1))
  # a run that blocks (on a FIFO) fails here instead of hanging the suite
  timeout -k 5 20 "$REMAT" plan "$@" >"$OUT" 2>"$TMP/err" </dev/null
  local rc=$?
  local lines
  lines=$(wc -l <"$TMP/err")
  if [ "$rc" -ne 1 ] && [ "$rc" -ne 2 ]; then
    echo "FAIL [$*]: exit status $rc" >&2
    fails=$((fails + 1))
  elif [ "$lines" -ne 1 ] || ! head -c 12 "$TMP/err" | grep -q '^remat plan: '; then
    echo "FAIL [$*]: expected one 'remat plan: ' line on stderr, got:" >&2
    cat "$TMP/err" >&2
    fails=$((fails + 1))
  elif ! grep -qi -- "$word" "$TMP/err"; then
    echo "FAIL [$*]: message does not mention '$word':" >&2
    cat "$TMP/err" >&2
    fails=$((fails + 1))
  fi
}

problem() { # name, JSON text: writes $TMP/name.json
  printf '%s' "$2" >"$TMP/$1.json"
}

L='{"count":4,"fwd":1,"bwd":2,"recompute":1,"act_bytes":100,"ckpt_bytes":10,"state_bytes":0}'

# usage
expect "no problem"
expect "unknown option" --frobnicate
expect "needs a value" "$DATA/seed.json" --mem
expect "unknown format" "$DATA/seed.json" --format yaml
expect "unknown schedule" "$DATA/seed.json" --schedule zb-v
expect "unknown objective" "$DATA/seed.json" --objective speed
expect "calibrate goes with --config" "$DATA/seed.json" --calibrate 3
expect "out of range" --config tiny --batch 2 --seq 16 --stages 1 --microbatches 1 --calibrate 0
expect "stages" "$DATA/seed.json" --stages 0
expect "stages" "$DATA/seed.json" --stages abc
expect "stages" "$DATA/seed.json" --stages 1e999
expect "microbatches" "$DATA/seed.json" --microbatches -3
expect "mem" "$DATA/seed.json" --mem 20XB
expect "mem" "$DATA/seed.json" --mem -5GB
expect "mem" "$DATA/seed.json" --mem 1GB,,2GB
expect "budgets for 4 stages" "$DATA/seed.json" --mem 1GB,2GB
# the library's budget list parser, as `remat train --mem` uses it
expect "empty list of sizes" "$DATA/seed.json" --mem ""
expect "unknown unit 'XB'" "$DATA/seed.json" --mem 1GiB,2XB
# switches take no value
expect "--sweep is a switch and takes no value" "$DATA/seed.json" --sweep=1
expect "--no-middle is a switch and takes no value" "$DATA/seed.json" --no-middle=
expect "more than one problem" "$DATA/seed.json" "$DATA/seed.json"
expect "not both" "$DATA/seed.json" --config tiny
expect "sweep" "$DATA/seed.json" --sweep --format megatron
expect "points" "$DATA/seed.json" --sweep --points 1
expect "time-limit" "$DATA/seed.json" --time-limit -1
expect "time-limit" "$DATA/seed.json" --time-limit soon
expect "time-limit" "$DATA/seed.json" --time-limit nan
expect "--batch" --config gpt2-124m --stages 4 --microbatches 8 --mem 8GiB
expect "needs --mem too" --config gpt2-124m --batch 4 --seq 512
expect "unknown model config" --config gpt9 --batch 1 --seq 64 --stages 2 --microbatches 2 --mem 1GB
expect "--config" "$DATA/seed.json" --batch 4
expect "sequence length" --config tiny --batch 1 --seq 100000 --stages 2 --microbatches 2 --mem 1GB
expect "stages but only" --config tiny --batch 1 --seq 64 --stages 9 --microbatches 2 --mem 1GB
expect "create the directory first" "$DATA/seed.json" --mem 20GB -o /nonexistent/dir/plan.txt

# files
expect "cannot open" "$TMP/does-not-exist.json"
expect "cannot" "$TMP"
problem empty ''
expect "empty" "$TMP/empty.json"
printf '\x00\x01\x02\xff\xfe garbage' >"$TMP/binary.json"
expect "NUL byte at offset 0" "$TMP/binary.json"
printf '\x01\x02\xff\xfe garbage' >"$TMP/binary2.json"
expect "invalid JSON" "$TMP/binary2.json"
problem trunc '{"stages": 4, "microbatches": 8, "memory": 20e9, "layers": [ {"count": 32'
expect "invalid JSON at line 1" "$TMP/trunc.json"
problem array '[1, 2, 3]'
expect "object" "$TMP/array.json"
GOOD="{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[$L]}"
problem trailing "$GOOD x"
expect "unexpected data after the JSON value at offset 145" "$TMP/trailing.json"
problem twice "$GOOD$GOOD"
expect "after the JSON value at offset 144" "$TMP/twice.json"
problem dupkey "{\"stages\":2,\"microbatches\":2,\"stages\":3,\"memory\":1000,\"layers\":[$L]}"
expect 'duplicate key "stages"' "$TMP/dupkey.json"
problem duplayer "{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[$L,{\"fwd\":1,\"fwd\":2}]}"
expect 'duplicate key "fwd" in layers\[1\]' "$TMP/duplayer.json"
printf '{"stages":2,\x00"microbatches":2}' >"$TMP/nul.json"
expect "contains a NUL byte at offset 12" "$TMP/nul.json"
problem deep "{\"stages\":$(printf '%.0s[' $(seq 5000))1$(printf '%.0s]' $(seq 5000))}"
expect "nested too deeply at offset 17" "$TMP/deep.json"
# too large: refused before reading (a sparse file of 20 MB)
truncate -s 20000000 "$TMP/large.json"
expect "20000000 bytes, more than the limit of 16777216" "$TMP/large.json"
# not a regular file: refused without reading (a device, a pipe, a FIFO
# with no writer, which would block a reader forever)
expect "character device, not a regular file" /dev/zero
expect "not a regular file" <(head -c 17000000 /dev/zero | tr '\0' ' ')
rm -f "$TMP/fifo.json" && mkfifo "$TMP/fifo.json"
expect "FIFO, not a regular file" "$TMP/fifo.json"

# problems
problem nolayers '{"stages":2,"microbatches":2,"memory":1000}'
expect "layers" "$TMP/nolayers.json"
problem nostages "{\"microbatches\":2,\"memory\":1000,\"layers\":[$L]}"
expect "stages" "$TMP/nostages.json"
problem nomem "{\"stages\":2,\"microbatches\":2,\"layers\":[$L]}"
expect "memory" "$TMP/nomem.json"
problem toomany "{\"stages\":5,\"microbatches\":2,\"memory\":1000,\"layers\":[$L]}"
expect "5 stages but only 4 layers" "$TMP/toomany.json"
problem negmem "{\"stages\":2,\"microbatches\":2,\"memory\":-1,\"layers\":[$L]}"
expect "negative" "$TMP/negmem.json"
problem fracmem "{\"stages\":2,\"microbatches\":2,\"memory\":0.5,\"layers\":[$L]}"
expect "whole number" "$TMP/fracmem.json"
problem infmem "{\"stages\":2,\"microbatches\":2,\"memory\":1e999,\"layers\":[$L]}"
expect "finite" "$TMP/infmem.json"
problem memlen "{\"stages\":2,\"microbatches\":2,\"memory\":[1,2,3],\"layers\":[$L]}"
expect "one per stage" "$TMP/memlen.json"
problem sched "{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"schedule\":\"zb-h2\",\"layers\":[$L]}"
expect "schedule" "$TMP/sched.json"
problem obj "{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"objective\":3,\"layers\":[$L]}"
expect "objective" "$TMP/obj.json"
problem count0 '{"stages":1,"microbatches":2,"memory":1000,"layers":[{"count":0,"fwd":1,"bwd":2,"recompute":1,"act_bytes":1,"ckpt_bytes":1,"state_bytes":0}]}'
expect "count" "$TMP/count0.json"
problem huge '{"stages":2,"microbatches":2,"memory":1000,"layers":[{"count":1e12,"fwd":1,"bwd":2,"recompute":1,"act_bytes":1,"ckpt_bytes":1,"state_bytes":0}]}'
expect "count" "$TMP/huge.json"
problem negf '{"stages":1,"microbatches":2,"memory":1000,"layers":[{"fwd":-1,"bwd":2,"recompute":1,"act_bytes":1,"ckpt_bytes":1,"state_bytes":0}]}'
expect "fwd" "$TMP/negf.json"
problem typo "{\"stages\":2,\"microbatches\":2,\"memory\":1000,\"layers\":[{\"count\":4,\"fwd\":1,\"bwd\":2,\"recompute\":1,\"act_bytes\":100,\"ckpt_bytes\":10,\"state_byte\":0}]}"
expect "unknown field" "$TMP/typo.json"
problem bigbytes '{"stages":2,"microbatches":100,"memory":1000,"layers":[{"count":4,"fwd":1,"bwd":2,"recompute":1,"act_bytes":9e17,"ckpt_bytes":1,"state_bytes":0}]}'
expect "range" "$TMP/bigbytes.json"

# a budget too small: the least-memory arrangement goes to stdout, the
# smallest budget that fits to stderr
expect "smallest budget that fits is" "$DATA/seed.json" --mem 1GB
if ! grep -q "does not fit" "$TMP/out"; then
  echo "FAIL: the infeasible plan's table is missing" >&2
  fails=$((fails + 1))
fi
expect "more" "$DATA/hetero.json" --mem 300,300,300
expect "smallest budget" --config gpt2-124m --batch 8 --seq 1024 --stages 4 --microbatches 8 --mem 1GiB
# schedules that do not fit the stages, micro-batches, chunks or layers
T="--config tiny --batch 4 --seq 64 --mem 1GB"
expect "multiple of the stages" $T --stages 2 --microbatches 3 --schedule interleaved
expect "needs 8 layers" $T --stages 2 --microbatches 4 --schedule interleaved --chunks 4
expect "exactly 2 chunks" $T --stages 2 --microbatches 4 --schedule zbv --chunks 3
expect "at least 2 chunks" $T --stages 2 --microbatches 4 --schedule interleaved --chunks 1
expect "one chunk" $T --stages 2 --microbatches 4 --chunks 2
expect "one chunk" $T --stages 2 --microbatches 4 --schedule zb-h1 --chunks 2
expect "needs 6 layers" $T --stages 3 --microbatches 3 --schedule zbv
expect "sweep runs under" $T --stages 2 --microbatches 4 --schedule zbv --sweep
expect "schedule" $T --stages 2 --microbatches 4 --schedule zb-h2
expect "--chunks" $T --stages 2 --microbatches 4 --schedule zbv --chunks 0
problem wgrad '{"stages":1,"microbatches":2,"memory":1000,"layers":[{"fwd":1,"bwd":2,"wgrad":3,"recompute":1,"act_bytes":1,"ckpt_bytes":1,"state_bytes":0}]}'
expect "wgrad" "$TMP/wgrad.json"
problem chunks '{"stages":1,"microbatches":2,"memory":1000,"schedule":"interleaved","chunks":0,"layers":[{"count":4,"fwd":1,"bwd":2,"recompute":1,"act_bytes":1,"ckpt_bytes":1,"state_bytes":0}]}'
expect "chunks" "$TMP/chunks.json"

# writing: standard output full; -o replaces the file atomically or leaves it
OUT=/dev/full
expect "cannot write to standard output" "$DATA/seed.json"
expect "cannot write to standard output" "$DATA/seed.json" --format lp
expect "cannot write to standard output" "$DATA/seed.json" --mem 1GB
expect "cannot write to standard output" --help
OUT="$TMP/out"
echo "old plan" >"$TMP/kept.txt"
# a file size limit (1 KiB, with SIGXFSZ ignored) makes the write fail midway
(trap '' XFSZ; ulimit -f 1; "$REMAT" plan "$DATA/seed.json" --format lp -o "$TMP/kept.txt") \
  2>"$TMP/err" >/dev/null
rc=$?
n=$((n + 1))
if [ "$rc" -ne 1 ] || [ "$(cat "$TMP/kept.txt")" != "old plan" ] ||
  ls -a "$TMP" | grep -q '^\.\?kept\.txt\.' || [ "$(wc -l <"$TMP/err")" -ne 1 ]; then
  echo "FAIL: a failed -o write must leave the old file and no temporary (rc $rc):" >&2
  cat "$TMP/err" >&2
  fails=$((fails + 1))
fi
mkdir -p "$TMP/adir"
expect "Is a directory" "$DATA/seed.json" -o "$TMP/adir"
if ls -a "$TMP" | grep -q '^\.\?adir\.'; then
  echo "FAIL: a temporary file was left beside $TMP/adir" >&2
  fails=$((fails + 1))
fi
"$REMAT" plan "$DATA/seed.json" -o "$TMP/kept.txt" 2>"$TMP/err"
rc=$?
n=$((n + 1))
if [ "$rc" -ne 0 ] || ! grep -q '^plan: 32 layers' "$TMP/kept.txt" || [ -s "$TMP/err" ]; then
  echo "FAIL: -o over an existing file" >&2
  fails=$((fails + 1))
fi

# -o checked before solving, under the library's rules for every output
check() { # description, then a shell condition that must hold
  n=$((n + 1))
  if ! eval "$2"; then
    echo "FAIL: $1" >&2
    cat "$TMP/err" >&2
    fails=$((fails + 1))
  fi
}
O="$TMP/o"
rm -rf "$O" && mkdir -p "$O/adir"
cp "$DATA/seed.json" "$O/problem.json"
ln -s problem.json "$O/problem-link.json"
expect "is the problem file" "$O/problem.json" -o "$O/problem.json"
check "-o onto the problem file must leave it byte for byte" \
  'cmp -s "$DATA/seed.json" "$O/problem.json" && [ ! -s "$OUT" ]'
expect "is the problem file" "$O/problem.json" -o "$O/problem-link.json"
expect "is the problem file" --problem "$O/problem-link.json" -o "$O/./problem.json"
check "-o through a link to the problem file must leave it and the link" \
  'cmp -s "$DATA/seed.json" "$O/problem.json" && [ -L "$O/problem-link.json" ]'
ln -s adir "$O/dirlink"
expect "is a directory" "$DATA/seed.json" -o "$O/dirlink"
ln -s loop2 "$O/loop1" && ln -s loop1 "$O/loop2"
expect "too many levels of symbolic links" "$DATA/seed.json" -o "$O/loop1"
mkfifo "$O/fifo"
expect "FIFO, not a regular file" "$DATA/seed.json" -o "$O/fifo"
ln -s fifo "$O/fifolink"
expect "links to .*FIFO" "$DATA/seed.json" -o "$O/fifolink"
check "nothing is left beside refused outputs" \
  '[ "$(ls -A "$O" | sort | tr "\n" " ")" = "adir dirlink fifo fifolink loop1 loop2 problem-link.json problem.json " ]'
# the longest name a file system allows (255 bytes): the temporary's name
# beside it must stay within the limit too
long=$(printf 'p%.0s' $(seq 255))
"$REMAT" plan "$DATA/seed.json" -o "$O/$long" 2>"$TMP/err"
rc=$?
check "-o onto a 255-byte name (rc $rc)" \
  '[ "$rc" -eq 0 ] && grep -q "^plan: 32 layers" "$O/$long" && [ ! -s "$TMP/err" ] &&
   [ "$(ls -A "$O" | wc -l)" -eq 9 ]'
# through a symlink: the target is written and the link kept
echo "old plan" >"$O/target.txt"
ln -s target.txt "$O/link.txt"
"$REMAT" plan "$DATA/seed.json" -o "$O/link.txt" 2>"$TMP/err"
rc=$?
check "-o through a symlink writes its target and keeps the link (rc $rc)" \
  '[ "$rc" -eq 0 ] && [ -L "$O/link.txt" ] && [ "$(readlink "$O/link.txt")" = target.txt ] &&
   grep -q "^plan: 32 layers" "$O/target.txt"'
# budgets: one per stage, parsed as `remat train --mem` parses them
"$REMAT" plan --config tiny --batch 4 --seq 64 --stages 2 --microbatches 2 --mem 1GiB,2GiB \
  --format json >"$TMP/out" 2>"$TMP/err"
rc=$?
check "--mem 1GiB,2GiB for 2 stages gives each stage its budget (rc $rc)" \
  '[ "$rc" -eq 0 ] && [ "$(grep -o "\"budget_bytes\":[^,]*" "$TMP/out" | tr -d "\t" |
   tr "\n" " ")" = "\"budget_bytes\":1073741824 \"budget_bytes\":2147483648 " ]'
check "--config's JSON says what its figures describe" \
  'grep -q "\"source_note\":.*\(fp32\|bf16\) GPT-2 engine.*python/remat" "$TMP/out"'
"$REMAT" plan --config tiny --batch 4 --seq 64 --stages 2 --microbatches 2 --mem 1GiB \
  >"$TMP/out" 2>"$TMP/err"
check "--config's table says what its figures describe, once" \
  '[ "$(grep -c "^note: .*\(fp32\|bf16\) GPT-2 engine.*docs/profile.md" "$TMP/out")" -eq 1 ]'
"$REMAT" plan --config tiny --batch 4 --seq 64 --mem 1GiB --format json >"$TMP/out" 2>"$TMP/err"
check "--config without --stages and --microbatches plans one stage of one micro-batch" \
  'python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(not (d[\"num_stages\"] == 1 and d[\"microbatches\"] == 1))" "$TMP/out"'

# help works and a good run exits 0
"$REMAT" plan --help >"$TMP/out" 2>&1 || { echo "FAIL: --help" >&2; fails=$((fails + 1)); }
"$REMAT" plan "$DATA/seed.json" >"$TMP/out" 2>"$TMP/err" || { echo "FAIL: seed plan" >&2; fails=$((fails + 1)); }
[ -s "$TMP/err" ] && { echo "FAIL: a good run wrote to stderr" >&2; fails=$((fails + 1)); }
# a time limit too short for the exact search: exit 0, the plan, the bound
# and the gap on standard output, one note on standard error
"$REMAT" plan "$DATA/seed.json" --time-limit 1e-9 --format json >"$TMP/out" 2>"$TMP/err"
rc=$?
n=$((n + 1))
if [ "$rc" -ne 0 ] || ! grep -q '"optimal":.*false' "$TMP/out" || ! grep -q '"gap"' "$TMP/out" ||
  [ "$(wc -l <"$TMP/err")" -ne 1 ] || ! grep -q 'stopped the exact search.*gap' "$TMP/err"; then
  echo "FAIL: --time-limit 1e-9 (rc $rc):" >&2
  cat "$TMP/err" >&2
  fails=$((fails + 1))
fi

# the time limit holds while the chunked search enumerates its partitions:
# zbv on one stage of 100000 equal layers (1e5 partitions, each stage's
# least memory once a pass over the layers) ends within the limit and names it
python3 - "$TMP/zbv.json" <<'PY'
import json, sys
g = lambda name, **kw: dict(name=name, count=1, fwd=1, bwd=1, recomputable=False, act_bytes=1,
                            ckpt_bytes=1, state_bytes=0, **kw)
json.dump({"stages": 1, "microbatches": 8, "memory": "20GB", "schedule": "zbv",
           "layers": [g("embedding"), dict(name="block", count=100000, fwd=1, bwd=2, recompute=1,
                                            act_bytes=10000, ckpt_bytes=1000, state_bytes=0),
                      g("head")]}, open(sys.argv[1], "w"))
PY
start=$(date +%s)
timeout 60 "$REMAT" plan "$TMP/zbv.json" --time-limit 2 >"$TMP/out" 2>"$TMP/err"
rc=$? took=$(($(date +%s) - start))
n=$((n + 1))
if [ "$rc" -ne 1 ] || [ "$took" -gt 8 ] || ! grep -q 'time limit ran out while enumerating' "$TMP/err"; then
  echo "FAIL: zbv over 100000 layers at --time-limit 2: rc $rc after $took s" >&2
  cat "$TMP/err" >&2
  fails=$((fails + 1))
fi

# tensor parallelism and the layout search
tp=(--config gpt2-350m --batch 1 --seq 64 --mem 8GiB --precision fp32)
expect "heads NH" "${tp[@]}" --tensor-parallel 3
expect "tensor-parallel 2 or more" "${tp[@]}" --sequence-parallel
expect "multiple of 4" "${tp[@]}" --seq 62 --tensor-parallel 4 --sequence-parallel
expect "--link" "${tp[@]}" --tensor-parallel 2 --link tp=fast --rank-tflops 10
expect "--rank-tflops" "${tp[@]}" --tensor-parallel 2 --link tp=100
expect "go with --ranks" "${tp[@]}" --tensor-parallel 2 --link tp=100,pp=10 --rank-tflops 10
expect "go with --ranks" "${tp[@]}" --global-batch 8
rk=(--config gpt2-124m --seq 256 --precision fp32 --link tp=100,pp=25,dp=25 --rank-tflops 10)
expect "--global-batch" "${rk[@]}" --ranks 4 --mem 4GiB
expect "--stages" "${rk[@]}" --ranks 4 --global-batch 8 --mem 4GiB --stages 2
expect "one budget" "${rk[@]}" --ranks 4 --global-batch 8 --mem 4GiB,4GiB
expect "no layout" "${rk[@]}" --ranks 4 --global-batch 8 --mem 1MiB
expect "LP" "${rk[@]}" --ranks 4 --global-batch 8 --mem 4GiB --format lp

summary plan_errors "$n"

#!/usr/bin/env bash
# `remat train --save FILE --save-precision bf16` writes llm.c's bf16
# checkpoint (version 5): half the bytes of fp32, each weight the nearest-even
# bf16 of what the same run saves as fp32; training goes on from it (--model),
# remat sample reads it, saving it again as bf16 gives the same bytes; a
# resume may change --save-precision while its checkpoints stay fp32.
# (pipeline.sh checks a pipeline's bf16 save, under MPI.)
# usage: save_bf16.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"

run() { "$remat" train --config tiny --threads 1 --quiet --peak-gflops 100 "$@"; }
loss() { perl -ne 'print $1 if /^done .*loss ([0-9.]+) ->/' "$1"; }

run --steps 20 --save "$tmp/a3.bin" >"$tmp/a3.out" 2>&1
run --steps 20 --save "$tmp/a5.bin" --save-precision bf16 >"$tmp/a5.out" 2>&1
check "fp32 and bf16 saves of one run" test -s "$tmp/a3.bin" -a -s "$tmp/a5.bin"
check "the bf16 save is reported as such" grep -q "^saved   $tmp/a5.bin (bf16, version 5)" "$tmp/a5.out"
# version 5 header, 2 bytes a weight, and each the fp32 weight rounded to
# nearest even (computed here from the bits, not by remat)
check "version 5: each weight the nearest-even bf16 of the fp32 save" python3 - "$tmp/a3.bin" "$tmp/a5.bin" <<'PY'
import struct, sys
a3, a5 = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
h3, h5 = struct.unpack("<256i", a3[:1024]), struct.unpack("<256i", a5[:1024])
n = (len(a3) - 1024) // 4
assert h3[:2] == (20240326, 3) and h5[:2] == (20240326, 5) and h3[2:] == h5[2:], "headers"
assert len(a5) == 1024 + 2 * n, "size"
w = struct.unpack("<%dI" % n, a3[1024:])
b = struct.unpack("<%dH" % n, a5[1024:])
def rne(u):
    lo, rest = u >> 16, u & 0xffff
    return (lo + (rest > 0x8000 or (rest == 0x8000 and lo & 1))) & 0xffff
bad = sum(rne(u) != h for u, h in zip(w, b))
print("  %d weights, %d differ from nearest even" % (n, bad))
sys.exit(bad != 0)
PY

run --model "$tmp/a5.bin" --steps 5 --save "$tmp/b3.bin" >"$tmp/b.out" 2>&1
rc=$?
check "training goes on from the bf16 file ($(grep '^done' "$tmp/b.out"))" test $rc -eq 0
check "its first loss is a trained model's, not a fresh one's (5.5)" \
  perl -e 'exit !($ARGV[0] > 0 && $ARGV[0] < 4.5)' "$(loss "$tmp/b.out")"
run --model "$tmp/a3.bin" --steps 5 >"$tmp/b_ref.out" 2>&1
check "within 0.02 of the loss going on from the fp32 file" \
  perl -e 'exit !(abs($ARGV[0] - $ARGV[1]) < 0.02)' "$(loss "$tmp/b.out")" "$(loss "$tmp/b_ref.out")"
run --model "$tmp/a5.bin" --steps 0 --save "$tmp/c5.bin" --save-precision bf16 >/dev/null 2>&1
check "a bf16 model saved as bf16 again: the same bytes" cmp -s "$tmp/a5.bin" "$tmp/c5.bin"

"$remat" sample --model "$tmp/a5.bin" --tokens 60 --seed 3 --prompt "The day" >"$tmp/s1" 2>&1
rc=$?
"$remat" sample --model "$tmp/a5.bin" --tokens 60 --seed 3 --prompt "The day" >"$tmp/s2" 2>&1
check "remat sample reads the bf16 file ($(head -c 40 "$tmp/s1" | tr '\n' ' ')...)" \
  test $rc -eq 0 -a "$(head -c 7 "$tmp/s1")" = "The day"
check "and writes the same text twice for one seed" cmp -s "$tmp/s1" "$tmp/s2"

# checkpoints stay fp32; a resume may choose another --save-precision
run --steps 6 --checkpoint-dir "$tmp/ck" --checkpoint-every 3 --save "$tmp/d3.bin" >/dev/null 2>&1
check "checkpoint directory's model.bin is version 3" python3 -c '
import struct, sys; sys.exit(struct.unpack("<2i", open(sys.argv[1], "rb").read(8))[1] != 3)' \
  "$tmp/ck/step_00000006/model.bin"
"$remat" train --resume "$tmp/ck/step_00000003" --quiet --threads 1 --peak-gflops 100 \
  --save "$tmp/d5.bin" --save-precision bf16 >"$tmp/d.out" 2>&1
rc=$?
check "a resume saves bf16 ($(grep '^saved' "$tmp/d.out"))" test $rc -eq 0 -a -s "$tmp/d5.bin"
check "the resumed run's bf16 file has half the bytes of its fp32 one, plus the header" \
  test $(($(stat -c %s "$tmp/d5.bin") * 2 - 1024)) -eq "$(stat -c %s "$tmp/d3.bin")"

summary

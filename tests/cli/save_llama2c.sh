#!/usr/bin/env bash
# remat train saves a Llama in llama2.c's formats and reads them back: --save
# writes export.py's version 1 ("ak42", its header checked here from the
# bytes, the shared_classifier byte 0 for llama-tiny's untied head);
# --save-format llama2c-legacy writes run.c's file (seven int32, vocab_size
# negative, the RoPE tables before wcls: the size checked here); --model
# reads either, by its header, and saving again gives the same bytes (a
# round trip version 1 -> legacy -> version 1); a checkpoint directory's
# model.bin is version 1 and a resume goes on from it; the formats that
# cannot hold the model are refused before the first step, in one line.
# usage: save_llama2c.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"

run() { "$remat" train --threads 1 --quiet --peak-gflops 100 --precision fp32 "$@"; }

run --config llama-tiny --steps 3 --save "$tmp/v1.bin" >"$tmp/v1.out" 2>&1
check "a Llama's --save is reported as llama2.c version 1" \
  grep -q "^saved   $tmp/v1.bin (llama2.c, version 1)" "$tmp/v1.out"
check "version 1: ak42, version 1, the Config, shared_classifier 0, 256 bytes, then 4 per weight" \
  python3 - "$tmp/v1.bin" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
magic, version = struct.unpack("<Ii", b[:8])
dim, hidden, layers, heads, kv, vocab, seq = struct.unpack("<7i", b[8:36])
assert (magic, version) == (0x616b3432, 1) and b[:4] == b"24ka", "magic"
assert (dim, hidden, layers, heads, kv, vocab, seq) == (64, 176, 2, 4, 2, 256, 64), "config"
assert b[36] == 0 and set(b[37:256]) <= {0}, "shared_classifier and padding"
hs, kvd = dim // heads, kv * dim // heads
n = vocab * dim * 2 + layers * (2 * dim + 2 * dim * dim + 2 * dim * kvd + 3 * dim * hidden) + dim
assert len(b) == 256 + 4 * n, "size %d for %d weights" % (len(b), n)
PY

run --model "$tmp/v1.bin" --steps 0 --save "$tmp/legacy.bin" --save-format llama2c-legacy \
  >"$tmp/legacy.out" 2>&1
check "--save-format llama2c-legacy is reported as such" \
  grep -q "^saved   $tmp/legacy.bin (llama2.c, legacy)" "$tmp/legacy.out"
check "legacy: the Config with vocab_size -256, the weights and 2 x 64 x 16 / 2 table floats" \
  python3 - "$tmp/legacy.bin" "$tmp/v1.bin" <<'PY'
import struct, sys
b, v = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
assert struct.unpack("<7i", b[:28]) == (64, 176, 2, 4, 2, -256, 64), "config"
assert len(b) == 28 + (len(v) - 256) + 4 * 64 * 16, "size"
PY
run --model "$tmp/legacy.bin" --steps 0 --save "$tmp/v1b.bin" >"$tmp/v1b.out" 2>&1
check "version 1 -> legacy -> version 1 gives the same bytes" cmp -s "$tmp/v1.bin" "$tmp/v1b.bin"

run --config llama-tiny --steps 2 --checkpoint-dir "$tmp/ck" --checkpoint-every 2 >/dev/null 2>&1
check "a Llama checkpoint directory's model.bin is version 1" \
  python3 -c "import sys; sys.exit(open('$tmp/ck/step_00000002/model.bin','rb').read(4) != b'24ka')"
"$remat" train --resume "$tmp/ck" --steps 3 --quiet --peak-gflops 100 >"$tmp/resume.out" 2>&1
check "a resume goes on from it" grep -q "^done" "$tmp/resume.out"

expect_error "llm.c's format for a Llama" "llm.c's checkpoint holds GPT-2, not a Llama" \
  train --config llama-tiny --steps 1 --quiet --save "$tmp/x.bin" --save-format llm.c
expect_error "a Llama in bf16" "llama2.c's formats hold fp32 weights" \
  train --model "$tmp/v1.bin" --steps 1 --quiet --save "$tmp/x.bin" --save-precision bf16
expect_error "llama2.c's format for GPT-2" "llama2.c's formats hold a Llama, not GPT-2" \
  train --config tiny --steps 1 --quiet --save "$tmp/x.bin" --save-format llama2c-v1
expect_error "an unknown format" "not a model file format" \
  train --config tiny --steps 1 --quiet --save "$tmp/x.bin" --save-format llama2c
expect_error "--save-format without --save" "give --save too" \
  train --config tiny --steps 1 --quiet --save-format llama2c-v1
head -c 300 "$tmp/v1.bin" >"$tmp/cut.bin"
expect_error "a version 1 file cut short" "is truncated" train --model "$tmp/cut.bin" --steps 1
summary

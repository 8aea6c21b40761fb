#!/usr/bin/env bash
# `remat sample` on a Llama: llama-tiny (untied, 2 key/value heads of 4)
# trained a few steps and saved in llama2.c's version 1 writes the prompt
# and then exactly the tokens asked for, greedy at --temperature 0 (the
# same text as --top-k 1, at 1 and 2 threads); the same weights saved in
# run.c's legacy format give the same greedy text; a seed gives one text
# at temperature 1; generation past the context of 64 slides the window; a
# tied Llama with one key/value head samples too; remat train
# --sample-every samples a Llama while it trains.
# usage: llama_sample.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"

train=(train --config llama-tiny --steps 40 --threads 1 --quiet --peak-gflops 100 --seed 3)
"$remat" "${train[@]}" --save "$tmp/v1.bin" >"$tmp/train" 2>&1
check "llama-tiny trained 40 steps and saved: $(grep '^saved' "$tmp/train")" \
  grep -q "^saved.*llama2.c, version 1" "$tmp/train"
"$remat" "${train[@]}" --save "$tmp/legacy.bin" --save-format llama2c-legacy >"$tmp/train2" 2>&1
check "the same run saved in run.c's legacy format: $(grep '^saved' "$tmp/train2")" \
  test -s "$tmp/legacy.bin"

s() { "$remat" sample --tokens 100 --prompt "The " "$@"; }
s --model "$tmp/v1.bin" --temperature 0 >"$tmp/g1" 2>"$tmp/g1.err"
check "greedy sample exits 0 ($(head -c 60 "$tmp/g1" | tr '\n' ' ')...)" test ! -s "$tmp/g1.err"
check "the output starts with the prompt" bash -c "head -c 4 '$tmp/g1' | grep -qx 'The '"
check "100 byte tokens after the prompt's 4, then a newline" \
  test "$(stat -c %s "$tmp/g1")" -eq 105
s --model "$tmp/v1.bin" --top-k 1 --seed 9 >"$tmp/g2" 2>&1
check "--temperature 0 and --top-k 1 write the same most likely text" cmp -s "$tmp/g1" "$tmp/g2"
s --model "$tmp/v1.bin" --temperature 0 --threads 2 >"$tmp/g3" 2>&1
check "--threads 2 writes what one thread writes" cmp -s "$tmp/g1" "$tmp/g3"
s --model "$tmp/legacy.bin" --temperature 0 >"$tmp/g4" 2>&1
check "the legacy file of the same weights gives the same greedy text" cmp -s "$tmp/g1" "$tmp/g4"

s --model "$tmp/v1.bin" --seed 7 >"$tmp/a" 2>&1
s --model "$tmp/v1.bin" --seed 7 >"$tmp/b" 2>&1
s --model "$tmp/v1.bin" --seed 8 >"$tmp/c" 2>&1
check "seed 7 twice: the same text" cmp -s "$tmp/a" "$tmp/b"
check "seed 8: another text" bash -c "! cmp -s '$tmp/a' '$tmp/c'"
"$remat" sample --model "$tmp/v1.bin" --tokens 200 --top-k 5 >"$tmp/long" 2>&1
check "200 tokens past the context of 64 (the window slides; no prompt: a newline, not printed): $(stat -c %s "$tmp/long") bytes" \
  test "$(stat -c %s "$tmp/long")" -eq 201

"$remat" train --config llama:2,64,4,1,176,256,64,10000,1 --steps 10 --threads 1 --quiet \
  --peak-gflops 100 --save "$tmp/tied.bin" >"$tmp/train3" 2>&1
s --model "$tmp/tied.bin" --temperature 0 >"$tmp/t1" 2>&1
check "a tied Llama with one key/value head: greedy sample of 100 tokens" \
  test "$(stat -c %s "$tmp/t1")" -eq 105

"$remat" train --config llama-tiny --steps 4 --threads 1 --peak-gflops 100 --sample-every 2 \
  >"$tmp/train4" 2>&1
check "remat train --sample-every samples a Llama as it trains (steps 2 and 4)" \
  test "$(grep -c '^sample  step [24] |' "$tmp/train4")" -eq 2

summary llama_sample

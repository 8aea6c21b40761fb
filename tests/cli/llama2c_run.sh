#!/usr/bin/env bash
# A Llama remat trains, saved in run.c's legacy format, gives in llama2.c's
# own run.c (third_party/llama2c, commit 350e04f) at temperature 0 the
# greedy tokens `remat sample --temperature 0` gives: llama-tiny (untied, 2
# key/value heads of 4) and a tied Llama with one key/value head, 300 steps
# each, over the whole context of 64 positions, for two prompts each.
#
# run.c reads its tokens' strings from a tokenizer.bin, made here for the
# byte vocabulary: max_token_length 1, then per id i a score 0, a length 1
# and the byte i. Its encode then gives BOS (id 1), a space (the dummy
# prefix: its id, 32) and the prompt's bytes (no pair is in the vocabulary,
# so nothing merges), and it writes the pieces from the prompt's second
# token on, skipping unprintable bytes, stopping at id 1. remat sample gets
# the same ids as its prompt ("\x01 " then the text) and writes them all;
# its text after those 2 bytes must be run.c's, byte for byte, which holds
# while neither writes an unprintable byte (a well-trained byte model does
# not) and remat's rounding (its rotary angles in double, its sums in
# OpenBLAS's order) never flips a near-tie of run.c's.
# usage: llama2c_run.sh REMAT RUN TMPDIR
set -u
remat=$1
run=$2
tmp=$3
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1

python3 - <<'PY'
import struct
with open("tokenizer.bin", "wb") as f:
    f.write(struct.pack("<i", 1))
    for i in range(256):
        f.write(struct.pack("<fi", 0.0, 1) + bytes([i]))
PY

for kind in untied tied; do
  case $kind in
  untied) config=llama-tiny ;;
  tied) config=llama:2,64,4,1,176,256,64,10000,1 ;;
  esac
  "$remat" train --config "$config" --steps 300 --threads 1 --quiet --peak-gflops 100 --seed 3 \
    --save "$kind.bin" --save-format llama2c-legacy >"$kind.train" 2>&1
  check "$kind: $config trained 300 steps, saved in run.c's format: $(grep '^saved' "$kind.train")" \
    grep -q "^saved.*legacy" "$kind.train"
  for prompt in "The " "It was"; do
    # run.c: 64 positions, BOS and the dummy space included
    "$run" "$kind.bin" -z tokenizer.bin -t 0 -n 64 -i "$prompt" >"$kind.run" 2>"$kind.run.err"
    printf '\001 %s' "$prompt" >"$kind.prompt"
    gen=$((64 - 2 - ${#prompt} + 1))
    "$remat" sample --model "$kind.bin" --prompt-file "$kind.prompt" --temperature 0 \
      --tokens "$gen" >"$kind.remat" 2>&1
    tail -c +3 "$kind.remat" >"$kind.remat.text"
    check "$kind, prompt '$prompt': run.c wrote the prompt, $gen tokens and a newline" \
      test "$(stat -c %s "$kind.run")" -eq $((${#prompt} + gen + 1))
    check "$kind, prompt '$prompt': run.c's $gen greedy tokens are remat sample's ($(tr '\n' '|' <"$kind.run" | head -c 70)...)" \
      cmp -s "$kind.run" "$kind.remat.text"
  done
done

summary llama2c_run

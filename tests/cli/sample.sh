#!/usr/bin/env bash
# `remat sample`: a byte model trained a few steps and saved writes the same
# text twice for one seed and another text for another seed; the prompt
# comes first, from --prompt or --prompt-file; --top-p draws the same text
# for a seed, all of it at 1 and the most likely text at a tiny P; a BPE
# model (vocabulary 50257) samples through GPT-2's vocabulary and stops at
# <|endoftext|> unless --ignore-eot, as remat train --sample-every's samples
# do; bad inputs get one-line errors.
# usage: sample.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"

# expect_fail "description" PATTERN args...: `remat sample args...` exits 1 or 2
# with one line on stderr naming PATTERN.
expect_fail() { expect_error "$1" "$2" sample "${@:3}"; }

"$remat" train --config tiny --steps 40 --threads 1 --quiet --peak-gflops 100 --save "$tmp/byte.bin" >"$tmp/train" 2>&1
check "a byte model trained 40 steps and saved: $(grep '^done' "$tmp/train")" test -s "$tmp/byte.bin"

s() { "$remat" sample --model "$tmp/byte.bin" --tokens 200 "$@"; }
s --seed 7 --prompt "The day" >"$tmp/a" 2>&1
s --seed 7 --prompt "The day" >"$tmp/b" 2>&1
s --seed 8 --prompt "The day" >"$tmp/c" 2>&1
check "seed 7 twice: the same text ($(head -c 60 "$tmp/a" | tr '\n' ' ')...)" cmp -s "$tmp/a" "$tmp/b"
check "seed 8: another text" bash -c "! cmp -s '$tmp/a' '$tmp/c'"
check "the output starts with the prompt" bash -c "head -c 7 '$tmp/a' | grep -qx 'The day'"
check "200 byte tokens after the 7 of the prompt, then a newline" test "$(stat -c %s "$tmp/a")" -eq 208
s --temperature 0 --seed 1 >"$tmp/g1"
s --top-k 1 --seed 2 >"$tmp/g2"
check "temperature 0 and --top-k 1 both write the most likely text" cmp -s "$tmp/g1" "$tmp/g2"
s --tokens 300 --top-k 5 >"$tmp/long" 2>&1
s --tokens 300 --top-k 5 --threads 2 >"$tmp/long2" 2>&1
check "--threads 2 writes what one thread writes" cmp -s "$tmp/long" "$tmp/long2"
check "300 tokens past the context of 64 (the window slides; no prompt: a newline, not printed): $(stat -c %s "$tmp/long") bytes" \
  test "$(stat -c %s "$tmp/long")" -eq 301

s --seed 7 --prompt "The day" --top-p 0.9 >"$tmp/tp1" 2>&1
s --seed 7 --prompt "The day" --top-p 0.9 >"$tmp/tp2" 2>&1
check "--top-p 0.9, seed 7 twice: the same text ($(head -c 60 "$tmp/tp1" | tr '\n' ' ')...)" cmp -s "$tmp/tp1" "$tmp/tp2"
s --seed 7 --prompt "The day" --top-p 1 >"$tmp/tp3" 2>&1
check "--top-p 1 draws what no --top-p draws" cmp -s "$tmp/tp3" "$tmp/a"
s --seed 5 --top-p 0.000001 >"$tmp/tp4"
check "--top-p 0.000001 writes the most likely text, as temperature 0 does" cmp -s "$tmp/tp4" "$tmp/g1"
printf 'The day' >"$tmp/prompt.txt"
s --seed 7 --prompt-file "$tmp/prompt.txt" >"$tmp/pf" 2>&1
check "--prompt-file gives what --prompt gives" cmp -s "$tmp/pf" "$tmp/a"
expect_fail "--top-p 0" "keeps no token" --model "$tmp/byte.bin" --top-p 0
expect_fail "--top-p 1.5" "out of range" --model "$tmp/byte.bin" --top-p 1.5
expect_fail "--prompt and --prompt-file" "choose one" --model "$tmp/byte.bin" --prompt x --prompt-file "$tmp/prompt.txt"
expect_fail "a missing --prompt-file" "cannot read" --model "$tmp/byte.bin" --prompt-file "$tmp/none.txt"

printf 'The planner chooses which layers keep their activations. The model'"'"'s memory is known before the first step.\n%.0s' $(seq 60) >"$tmp/text.txt"
"$remat" tokenize "$tmp/text.txt" --out "$tmp/bpe" --quiet
"$remat" train --data "$tmp/bpe_train.bin" --config 2,64,2,50257,64 --batch 2 --seq 32 --steps 2 \
  --threads 1 --quiet --peak-gflops 100 --save "$tmp/bpe.bin" >"$tmp/train" 2>&1
check "a BPE model (vocabulary 50257) trained on tokenize's shard and saved" test -s "$tmp/bpe.bin"
"$remat" sample --model "$tmp/bpe.bin" --prompt "The planner" --tokens 20 --seed 3 >"$tmp/p1"
"$remat" sample --model "$tmp/bpe.bin" --prompt "The planner" --tokens 20 --seed 3 >"$tmp/p2"
check "BPE: seed 3 twice gives the same text: $(head -c 100 "$tmp/p1" | tr '\n' ' ')" cmp -s "$tmp/p1" "$tmp/p2"
"$remat" sample --model "$tmp/bpe.bin" --tokens 5 >"$tmp/p3"
check "BPE: no prompt starts from <|endoftext|>" test -s "$tmp/p3"

# A BPE model that always writes <|endoftext|>: every weight 0 but the final
# layernorm's bias and the embedding of 50256, both ones (its logit C, the
# others' 0).
python3 - "$tmp/bpe.bin" "$tmp/eot.bin" <<'PY'
import array, struct, sys
d = open(sys.argv[1], "rb").read()
C = struct.unpack("<256i", d[:1024])[6]
w = array.array("f", bytes(len(d) - 1024))
w[50256 * C:50257 * C] = array.array("f", [1.0] * C)
w[len(w) - C:] = array.array("f", [1.0] * C)
open(sys.argv[2], "wb").write(d[:1024] + w.tobytes())
PY
"$remat" sample --model "$tmp/eot.bin" --prompt "Hi" --tokens 50 >"$tmp/eot" 2>&1
check "BPE: generation stops at <|endoftext|>, which is not written: $(od -c "$tmp/eot" | head -1)" \
  bash -c "printf 'Hi\n' | cmp -s - '$tmp/eot'"
"$remat" sample --model "$tmp/eot.bin" --prompt "Hi" --tokens 3 --ignore-eot >"$tmp/eot2" 2>&1
check "BPE: --ignore-eot goes on, writing it as text: $(cat "$tmp/eot2")" \
  bash -c "printf 'Hi<|endoftext|><|endoftext|><|endoftext|>\n' | cmp -s - '$tmp/eot2'"
# remat train --sample-every stops there too (a step at a tiny rate leaves
# the model writing <|endoftext|> first)
"$remat" train --model "$tmp/eot.bin" --data "$tmp/bpe_train.bin" --batch 2 --seq 16 --steps 1 \
  --lr 1e-9 --sample-every 1 --threads 1 --quiet --peak-gflops 100 >"$tmp/eot3" 2>&1
check "BPE: train --sample-every stops at <|endoftext|>, not written: $(grep '^sample' "$tmp/eot3")" \
  grep -qx 'sample  step 1 | ' "$tmp/eot3"

"$remat" train --config 2,64,4,300,64 --steps 1 --threads 1 --quiet --peak-gflops 100 --save "$tmp/v300.bin" >/dev/null 2>&1
expect_fail "a vocabulary of 300" "--bytes" --model "$tmp/v300.bin"
"$remat" sample --model "$tmp/v300.bin" --bytes --tokens 10 >"$tmp/v300" 2>&1
check "... which --bytes reads as bytes" test $? -eq 0
expect_fail "no --model" "--model FILE" --tokens 3
expect_fail "a missing checkpoint" "cannot" --model "$tmp/none.bin"
expect_fail "a token shard as checkpoint" "magic" --model "$tmp/bpe_train.bin"
expect_fail "a negative temperature" "out of range" --model "$tmp/byte.bin" --temperature -1
expect_fail "a vocabulary directory without the files" "fetch-vocab.sh" --model "$tmp/bpe.bin" --vocab "$tmp"
expect_fail "an unknown option" "unknown option" --model "$tmp/byte.bin" --beam 4

"$remat" sample --help >"$tmp/help"
for flag in --model --prompt --prompt-file --tokens --temperature --top-k --top-p --seed --vocab \
  --bytes --ignore-eot --threads --help '<|endoftext|>'; do
  grep -q -- "$flag" "$tmp/help" || { echo "FAIL --help does not mention $flag"; fails=$((fails + 1)); }
done
summary sample

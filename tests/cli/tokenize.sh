#!/usr/bin/env bash
# `remat tokenize`: a text (several scripts, emoji, white space runs, bytes
# that are not UTF-8) to a training and a validation shard and back, byte
# for byte, with GPT-2's BPE and as bytes; the BPE training shard trains a
# model with a vocabulary of 50257; several inputs (files, a directory's
# files in sorted order, a .jsonl file's "text" per line, standard input)
# joined by <|endoftext|> (50256), the literal text of it ordinary unless
# --allow-special; bad inputs (a vocab.bpe cut short, a malformed .jsonl
# line among them) get one-line errors and write nothing.
# usage: tokenize.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"

# expect_fail "description" PATTERN args...: `remat tokenize args...` exits 1 or 2
# with one line on stderr naming PATTERN.
expect_fail() { expect_error "$1" "$2" tokenize "${@:3}"; }

text=$tmp/text.txt
{
  for i in $(seq 1 40); do
    printf 'Line %d: the model'"'"'s memory, they'"'"'re planning; it'"'"'ll fit.   Spaces\t\ttabs\n' "$i"
    printf 'Ünïcödé café, Ελληνικά, русский, 日本語のテキスト、한국어, हिन्दी 😀👍🏽 1234567890\n\n'
  done
  printf 'bytes that are not UTF-8: \xff\xfe \xc3( \x80 end'
  printf '%*s\n' 300 ''
} >"$text"

"$remat" tokenize "$text" --out "$tmp/bpe" --val-frac 0.2 >"$tmp/log" 2>&1
check "tokenize writes a training and a validation shard: $(head -1 "$tmp/log")" \
  test -s "$tmp/bpe_train.bin" -a -s "$tmp/bpe_val.bin"
"$remat" tokenize --decode "$tmp/bpe_train.bin" >"$tmp/dec_train" 2>"$tmp/err"
"$remat" tokenize --decode "$tmp/bpe_val.bin" --out "$tmp/dec_val" --quiet 2>>"$tmp/err"
cat "$tmp/dec_train" "$tmp/dec_val" >"$tmp/dec"
check "decoding both shards (stdout and --out) gives the text back byte for byte" cmp -s "$tmp/dec" "$text"

"$remat" tokenize "$text" --out "$tmp/byte" --bytes --val-frac 0 --quiet
check "--bytes --val-frac 0: one shard of $(stat -c %s "$text") byte tokens, no validation shard" \
  test "$(stat -c %s "$tmp/byte_train.bin")" -eq $((1024 + 2 * $(stat -c %s "$text"))) -a ! -e "$tmp/byte_val.bin"
"$remat" tokenize --decode "$tmp/byte_train.bin" --bytes >"$tmp/dec_bytes"
check "a byte shard decodes with --bytes" cmp -s "$tmp/dec_bytes" "$text"

"$remat" train --data "$tmp/bpe_train.bin" --config 2,64,2,50257,64 --batch 2 --seq 32 --steps 3 \
  --threads 1 --quiet --peak-gflops 100 >"$tmp/train" 2>&1
rc=$?
check "the BPE training shard trains --config 2,64,2,50257,64 for 3 steps: $(grep '^done' "$tmp/train")" \
  test $rc -eq 0
"$remat" train --data "$tmp/bpe_train.bin" --config tiny --steps 1 --quiet >"$tmp/train" 2>&1
rc=$?
check "a vocabulary of 256 refuses the BPE shard: $(tail -1 "$tmp/train")" test $rc -ne 0

cp "$text" "$tmp/in_train.bin"
expect_fail "the training shard would overwrite the input" "overwrite the input" "$tmp/in_train.bin" --out "$tmp/in"
expect_fail "a missing input" "cannot read" "$tmp/none.txt" --out "$tmp/n"
expect_fail "no --out" "--out PREFIX" "$text"
expect_fail "no input" "no input given" --out "$tmp/x"
expect_fail "an unknown option" "unknown option" "$text" --out "$tmp/x" --frobnicate 1
expect_fail "--val-frac out of range" "out of range" "$text" --out "$tmp/x" --val-frac 0.95
expect_fail "a vocabulary directory without the files" "fetch-vocab.sh" "$text" --out "$tmp/x" --vocab "$tmp"
# vocab.bpe cut short reads well up to its end: its count of merges tells
vocab=$(dirname "$0")/../../third_party/gpt2-vocab
mkdir -p "$tmp/cut2" "$tmp/cut_half"
cp "$vocab/encoder.json" "$tmp/cut2/" && head -2 "$vocab/vocab.bpe" >"$tmp/cut2/vocab.bpe"
cp "$vocab/encoder.json" "$tmp/cut_half/" && head -c "$(($(stat -c %s "$vocab/vocab.bpe") / 2))" \
  "$vocab/vocab.bpe" | sed '$d' >"$tmp/cut_half/vocab.bpe"
expect_fail "vocab.bpe cut to 2 lines" "holds 1 merges, GPT-2's vocab.bpe 50000.*fetch-vocab.sh" \
  "$text" --out "$tmp/x" --vocab "$tmp/cut2"
expect_fail "vocab.bpe cut in half" "holds 2[0-9]* merges, GPT-2's vocab.bpe 50000.*fetch-vocab.sh" \
  "$text" --out "$tmp/x" --vocab "$tmp/cut_half"
check "no shard written from a cut vocabulary" test ! -e "$tmp/x_train.bin"
printf 'hi' >"$tmp/short.txt"
expect_fail "too short for two shards" "too few" "$tmp/short.txt" --out "$tmp/s"
mkfifo "$tmp/fifo_train.bin"
expect_fail "a FIFO where the shard goes" "fifo" "$text" --out "$tmp/fifo"
expect_fail "decoding a text file" "magic" --decode "$text"
expect_fail "decoding a BPE shard as bytes" "not a byte shard" --decode "$tmp/bpe_train.bin" --bytes
expect_fail "decoding onto the shard itself" "being decoded" --decode "$tmp/bpe_val.bin" --out "$tmp/bpe_val.bin"

# Several inputs: documents joined by <|endoftext|>, one between each two.
# ids FILE: a shard's tokens, one line of ids.
ids() { python3 -c 'import sys, array; a = array.array("H"); a.frombytes(open(sys.argv[1], "rb").read()[1024:]); print(*a)' "$1"; }
# eots FILE: how many 50256 a shard holds.
eots() { ids "$1" | tr ' ' '\n' | grep -cx 50256; }
c=$tmp/corpus
mkdir -p "$c/dir/sub" "$c/dir/.git"
printf 'First file.\n' >"$c/one.txt"
printf 'It holds\n<|endoftext|>\nas text.\n' >"$c/two.txt"
printf 'b in dir\n' >"$c/dir/b.txt"
printf 'a in dir/sub\n' >"$c/dir/sub/a.txt"
printf 'c in dir\n' >"$c/dir/c"
printf 'hidden\n' >"$c/dir/.git/HEAD"
printf 'hidden too\n' >"$c/dir/.hidden.txt"
printf '{"text": "json one", "id": 1}\n\n{"text": "json \\u00e9 two\\n"}\r\n' >"$c/docs.jsonl"
printf 'from standard input\n' | "$remat" tokenize "$c/one.txt" "$c/two.txt" "$c/dir" "$c/docs.jsonl" - \
  --out "$tmp/multi" --val-frac 0 >"$tmp/log" 2>&1
check "files, a directory, a .jsonl file and - in one run: $(head -1 "$tmp/log")" \
  grep -q "^tokenize  7 inputs (8 documents): " "$tmp/log"
e='<|endoftext|>'
printf "First file.\n${e}It holds\n${e}\nas text.\n${e}b in dir\n${e}c in dir\n${e}a in dir/sub\n${e}json one${e}json \xc3\xa9 two\n${e}from standard input\n" >"$tmp/multi_want"
"$remat" tokenize --decode "$tmp/multi_train.bin" >"$tmp/multi_dec"
check "in the order given, a directory's files sorted and its subdirectories in place, hidden names skipped, each .jsonl line's text a document" \
  cmp -s "$tmp/multi_dec" "$tmp/multi_want"
check "7 separators (50256) between 8 documents; the literal text in two.txt is ordinary text" \
  test "$(eots "$tmp/multi_train.bin")" -eq 7
"$remat" tokenize "$c/two.txt" --out "$tmp/lit" --val-frac 0 --quiet
"$remat" tokenize "$c/two.txt" --out "$tmp/spec" --val-frac 0 --quiet --allow-special
check "without --allow-special the literal <|endoftext|> is 7 tokens (27 91 437 1659 5239 91 29): $(ids "$tmp/lit_train.bin")" \
  bash -c "[[ '$(ids "$tmp/lit_train.bin")' == *' 27 91 437 1659 5239 91 29 '* && $(eots "$tmp/lit_train.bin") -eq 0 ]]"
check "with --allow-special it is 50256, 6 tokens fewer: $(ids "$tmp/spec_train.bin")" \
  bash -c "[[ $(eots "$tmp/spec_train.bin") -eq 1 && \$(wc -w <<< '$(ids "$tmp/spec_train.bin")') -eq \$(( $(ids "$tmp/lit_train.bin" | wc -w) - 6 )) ]]"
"$remat" tokenize "$c/one.txt" "$c/dir" --out "$tmp/mb" --bytes --val-frac 0 --quiet
"$remat" tokenize --decode "$tmp/mb_train.bin" --bytes >"$tmp/mb_dec"
cat "$c/one.txt" "$c/dir/b.txt" "$c/dir/c" "$c/dir/sub/a.txt" >"$tmp/mb_want"
check "--bytes joins the documents by nothing" cmp -s "$tmp/mb_dec" "$tmp/mb_want"
printf '{"text": "fine"}\n{"text": "cut\n' >"$c/bad.jsonl"
expect_fail "a malformed .jsonl line names the file and line" "bad.jsonl' line 2 is not JSON" \
  "$text" "$c/bad.jsonl" --out "$tmp/j"
printf '{"text": "fine"}\n\n["a list"]\n' >"$c/notext.jsonl"
expect_fail "a .jsonl line without a \"text\" string" "notext.jsonl' line 3 has no \"text\" string" \
  "$text" "$c/notext.jsonl" --out "$tmp/j"
check "nothing written when an input is refused" test ! -e "$tmp/j_train.bin" -a ! -e "$tmp/j_val.bin"
mkdir -p "$tmp/empty/.only_hidden"
expect_fail "a directory with no file to read" "holds no file" "$tmp/empty" --out "$tmp/j"
expect_fail "- twice" "given twice" - - --out "$tmp/j"
expect_fail "--allow-special with --bytes" "needs GPT-2's BPE" "$text" --bytes --allow-special --out "$tmp/j"
expect_fail "a FIFO as input" "not a regular file or a directory" "$tmp/fifo_train.bin" --out "$tmp/j"
"$remat" tokenize "$c/dir" --out "$c/dir/shards" --val-frac 0 --quiet
expect_fail "a shard inside an input directory, run again" "overwrite the input" "$c/dir" --out "$c/dir/shards" --val-frac 0

"$remat" tokenize --help >"$tmp/help"
for flag in --out --val-frac --vocab --bytes --decode --quiet --help --allow-special '<|endoftext|>' \
  '50256' '.jsonl' 'standard input' 'sorted order'; do
  grep -q -- "$flag" "$tmp/help" || { echo "FAIL --help does not mention $flag"; fails=$((fails + 1)); }
done
summary tokenize

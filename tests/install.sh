#!/usr/bin/env bash
# The installed library, used from outside: installs the build into a fresh
# prefix, builds examples/ against it with find_package(remat) and once more
# by hand with pkg-config, and runs both programs. The installed remat
# tokenizes without --vocab from the vocabulary installed beside it, also
# once the prefix has moved.
# usage: install.sh BUILD_DIR SOURCE_DIR WORK_DIR [CC]
set -euo pipefail
build=$1 src=$2 work=$3 cc=${4:-cc}
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" > "$work/install.log"
for f in include/remat.h include/remat/base.h include/remat/version.h bin/remat; do
  [ -e "$prefix/$f" ] || { echo "install: $f is not installed"; exit 1; }
done

# find_package(remat): the CMake package
cmake -S "$src/examples" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Release > "$work/configure.log"
cmake --build "$work/cmake" > "$work/build.log"
"$work/cmake/plan_memory" | tee "$work/cmake.out"

# pkg-config remat
pc=$(dirname "$(find "$prefix" -name remat.pc | head -1)")
flags=$(PKG_CONFIG_PATH=$pc pkg-config --cflags --libs remat)
echo "pkg-config --cflags --libs remat: $flags"
# a shared libremat in a prefix the loader does not search: the RUNPATH says
libdir=$(PKG_CONFIG_PATH=$pc pkg-config --variable=libdir remat)
"$cc" -std=c11 -Wall -Wextra -Werror "$src/examples/plan_memory.c" $flags -Wl,-rpath,"$libdir" \
   -o "$work/plan_memory_pc"
"$work/plan_memory_pc" > "$work/pc.out"
cmp "$work/cmake.out" "$work/pc.out" || { echo "install: the two builds print different things"; exit 1; }
grep -q "^remat [0-9]*\.[0-9]*\.[0-9]* (headers" "$work/cmake.out"

# GPT-2's vocabulary beside the installed remat (when fetched into the source)
if [ -e "$src/third_party/gpt2-vocab/encoder.json" ]; then
  vocab=share/remat/gpt2-vocab
  for f in encoder.json vocab.bpe; do
    cmp -s "$prefix/$vocab/$f" "$src/third_party/gpt2-vocab/$f" \
      || { echo "install: $vocab/$f is not installed"; exit 1; }
  done
  printf 'The installed remat finds its vocabulary.\n%.0s' $(seq 20) >"$work/text.txt"
  # the prefix moved: the vocabulary is found from the executable's place
  mv "$prefix" "$work/moved"
  env -u REMAT_VOCAB "$work/moved/bin/remat" tokenize "$work/text.txt" --out "$work/tok" --quiet
  env -u REMAT_VOCAB "$work/moved/bin/remat" tokenize --decode "$work/tok_train.bin" \
    --out "$work/tok.txt" --quiet
  head -c "$(stat -c %s "$work/tok.txt")" "$work/text.txt" | cmp -s - "$work/tok.txt" \
    || { echo "install: the installed remat's shard does not decode to the text"; exit 1; }
  # ... and it is the installed copy that is read, not the source tree's: a
  # copy cut short is refused, naming it
  head -2 "$src/third_party/gpt2-vocab/vocab.bpe" >"$work/moved/$vocab/vocab.bpe"
  if env -u REMAT_VOCAB "$work/moved/bin/remat" tokenize "$work/text.txt" --out "$work/tok2" \
       2>"$work/cut.err"; then
    echo "install: the installed remat did not read the installed vocabulary"; exit 1
  fi
  grep -q "$(cd "$work/moved" && pwd -P)/$vocab/vocab.bpe holds 1 merges" "$work/cut.err" \
    || { echo "install: unexpected refusal: $(cat "$work/cut.err")"; exit 1; }
  echo "install: the installed remat tokenizes with $vocab, found beside it"
else
  echo "install: no vocabulary in $src/third_party/gpt2-vocab (scripts/fetch-vocab.sh): not installed, not checked"
fi
echo "install: ok"

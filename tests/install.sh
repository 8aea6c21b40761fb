#!/usr/bin/env bash
# The installed library, used from outside: installs the build into a fresh
# prefix, builds examples/ against it with find_package(remat) and once more
# by hand with pkg-config, and runs both programs.
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
echo "install: ok"

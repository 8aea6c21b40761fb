#!/usr/bin/env bash
# Installs dependencies, builds with warnings as errors, and runs the whole
# test suite; then builds once more under AddressSanitizer and
# UndefinedBehaviorSanitizer and runs the unit tests there; last, fuzzes the
# file readers and the planner's JSON parser for 30 seconds each
# (scripts/fuzz.sh, about two and a half minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --test
jobs=$(nproc)

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DREMAT_WERROR=ON
cmake --build build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs")

cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DREMAT_WERROR=ON -DREMAT_SANITIZE=ON
cmake --build build-asan -j"$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$jobs" -L unit)

# The CUDA backend, never built by default: compiled where the toolkit is
# installed, with its check (docs/cuda.md); a GPU is not needed.
if command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DREMAT_WERROR=ON -DREMAT_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
  cmake --build build-cuda -j"$jobs" --target remat_cli
  bash tests/cli/cuda_built.sh build-cuda/app/remat build-cuda/cuda_built.tmp
fi

bash scripts/fuzz.sh 30

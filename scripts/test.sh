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

bash scripts/fuzz.sh 30

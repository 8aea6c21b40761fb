#!/usr/bin/env bash
# gpu_check.sh: the CUDA backend's device check (docs/cuda.md), one script
# for a machine with one NVIDIA GPU (H100 or H200: sm_90), the CUDA toolkit
# and remat's build dependencies, in under 8 minutes. It
#   1. builds remat with the CUDA backend (build-gpu/, sm_90, only the CLI
#      and test_backend_ops);
#   2. says which GPU, driver and CUDA it ran on;
#   3. runs test_backend_ops, which checks every op of every backend built
#      against the CPU's, the CUDA one on its managed arena
#      (REMAT_CUDA_MANAGED=1: the test reads buffers directly);
#   4. trains a small GPT-2 for a few fp32 steps with dropout on the CPU and
#      on the GPU under keep, middle and full recompute: the three GPU runs
#      must save the same weights, byte for byte, and each must measure the
#      peak it planned; the losses beside the CPU's say how close the GPU's
#      arithmetic is (cuBLASLt's products are not OpenBLAS's bits);
#   5. prints one table, one row per check, and exits 1 if any failed.
# Nothing here has run yet: the backend has never met a GPU.
#   bash bench/gpu_check.sh            (from the repository root)
# Environment: JOBS (build jobs, default: nproc), STEPS (default 5).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
build=$root/build-gpu
jobs=${JOBS:-$(nproc)}
steps=${STEPS:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rows=()
fails=0
row() { # row CHECK RESULT DETAIL
  rows+=("$(printf '%-34s %-5s %s' "$1" "$2" "$3")")
  [[ $2 == FAIL ]] && fails=$((fails + 1))
  echo "[$2] $1: $3"
}
table() {
  echo
  echo "== remat CUDA backend: device check =="
  printf '%-34s %-5s %s\n' "check" "result" "detail"
  printf '%s\n' "${rows[@]}"
  echo "$fails failed"
}

# ---------------------------------------------------------------- machine
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
  head -1)
cuda=$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | head -1)
row "gpu, driver, memory" "info" "${gpu:-nvidia-smi found no GPU}"
row "cuda toolkit" "info" "${cuda:-nvcc not found}"

# ------------------------------------------------------------------ build
t0=$SECONDS
if timeout 300 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DREMAT_CUDA=ON \
     -DCMAKE_CUDA_ARCHITECTURES=90 >"$tmp/configure.log" 2>&1 &&
   grep -q 'CUDA backend: built' "$tmp/configure.log" &&
   timeout 420 cmake --build "$build" -j "$jobs" --target remat_cli test_backend_ops \
     >"$tmp/build.log" 2>&1; then
  row "build (cmake, nvcc sm_90)" "ok" "$((SECONDS - t0)) s"
else
  row "build (cmake, nvcc sm_90)" "FAIL" \
    "$(grep -m2 -i 'error' "$tmp/configure.log" "$tmp/build.log" | tr '\n' ' ')"
  table
  exit 1
fi
remat=$build/app/remat
ops=$build/tests/test_backend_ops

if "$remat" --version | grep -q 'cuda'; then
  row "remat --version lists cuda" "ok" "$("$remat" --version | head -1)"
else
  row "remat --version lists cuda" "FAIL" "$("$remat" --version | tr '\n' ' ')"
fi

# --------------------------------------------------------- op by op
t0=$SECONDS
REMAT_CUDA_MANAGED=1 OMP_WAIT_POLICY=PASSIVE timeout 240 stdbuf -oL "$ops" >"$tmp/ops.log" 2>&1
rc=$?
# the lines of the cuda section: "-- backend cuda" up to the next "-- "
awk '/^-- backend cuda/{on=1; print; next} /^-- /{on=0} on' "$tmp/ops.log" >"$tmp/ops.cuda"
nfail=$(grep -c '^FAIL\|check failed' "$tmp/ops.cuda")
if [[ ! -s $tmp/ops.cuda ]]; then
  row "test_backend_ops: cuda" "FAIL" "no cuda section (rc $rc): $(tail -2 "$tmp/ops.log" | tr '\n' ' ')"
elif grep -q 'skipped' "$tmp/ops.cuda"; then
  row "test_backend_ops: cuda" "FAIL" "$(grep -m1 skipped "$tmp/ops.cuda")"
elif [[ $rc -ne 0 || $nfail -ne 0 ]]; then
  row "test_backend_ops: cuda" "FAIL" \
    "rc $rc, $nfail failed: $(grep -m2 '^FAIL\|check failed' "$tmp/ops.cuda" | tr '\n' ' ')"
else
  row "test_backend_ops: cuda" "ok" "every op against the CPU, $((SECONDS - t0)) s"
fi
cp "$tmp/ops.log" "$root/gpu_check.ops.log" 2>/dev/null

# ----------------------------------------------------------- training
# A small model (6 layers, width 256, 8 heads, vocabulary 2048, T 128) for
# STEPS fp32 steps with dropout: enough to cross every op of a step.
common=(--config 6,256,8,2048,128 --batch 8 --seq 128 --steps "$steps" --dropout 0.1
        --precision fp32 --peak-gflops 1000 --quiet)

# The log's facts of each step: loss, gradient norm, planned and measured peaks.
field() { # field LOG NAME: NAME of every step, one a line
  grep -o "\"$2\": [^,}]*" "$1" | sed 's/.*: //'
}

train() { # train NAME BACKEND ARGS...
  local name=$1 backend=$2
  shift 2
  local t=$SECONDS
  timeout 180 "$remat" train "${common[@]}" "$@" --backend "$backend" --log "$tmp/$name.jsonl" \
    --save "$tmp/$name.bin" >"$tmp/$name.out" 2>&1
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    row "train $name" "FAIL" "rc $rc: $(grep -m2 -i 'error\|fail\|cuda' "$tmp/$name.out" | tr '\n' ' ')"
    return 1
  fi
  local planned measured
  planned=$(field "$tmp/$name.jsonl" planned_peak_bytes | tail -1)
  measured=$(field "$tmp/$name.jsonl" measured_peak_bytes | tail -1)
  if [[ -n $planned && $planned == "$measured" ]]; then
    row "train $name: planned == measured" "ok" "$planned bytes, $((SECONDS - t)) s"
  else
    row "train $name: planned == measured" "FAIL" "planned $planned, measured $measured"
  fi
}

train cpu-keep cpu --threads "$(nproc)"
for mode in keep middle full; do
  case $mode in
    keep) args=() ;;
    middle) args=(--ckpt-layers middle:0-5) ;;
    full) args=(--ckpt-ratio 1) ;;
  esac
  train "cuda-$mode" cuda ${args[@]+"${args[@]}"}
done

same_bits() { # same_bits A B
  if [[ ! -s $tmp/$1.bin || ! -s $tmp/$2.bin ]]; then
    row "$2 == $1 (saved weights)" "FAIL" "a run saved nothing"
  elif cmp -s "$tmp/$1.bin" "$tmp/$2.bin" &&
       diff <(field "$tmp/$1.jsonl" loss) <(field "$tmp/$2.jsonl" loss) >/dev/null; then
    row "$2 == $1 (saved weights)" "ok" "bit for bit, and every step's loss"
  else
    row "$2 == $1 (saved weights)" "FAIL" "$(cmp "$tmp/$1.bin" "$tmp/$2.bin" 2>&1 | head -1)"
  fi
}
same_bits cuda-keep cuda-middle
same_bits cuda-keep cuda-full

# The GPU's losses beside the CPU's: near, not equal (the products differ).
if [[ -s $tmp/cpu-keep.jsonl && -s $tmp/cuda-keep.jsonl ]]; then
  d=$(paste <(field "$tmp/cpu-keep.jsonl" loss) <(field "$tmp/cuda-keep.jsonl" loss) |
    awk '{d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d} END {printf "%.3g", m + 0}')
  ok=$(awk -v d="$d" 'BEGIN {print (d < 1e-3) ? "ok" : "FAIL"}')
  row "cuda losses vs cpu (max |diff|)" "$ok" "$d over $steps steps (bound 1e-3)"
fi

# A backend named on a machine where it cannot run says so in one line:
# checked here the other way round (it runs), and on CPU machines by CTest.
table
[[ $fails -eq 0 ]]

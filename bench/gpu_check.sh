#!/usr/bin/env bash
# gpu_check.sh: the CUDA backend's device check (docs/cuda.md), one script
# for a machine with one NVIDIA GPU (H100 or H200: sm_90), the CUDA toolkit
# and remat's build dependencies, in under 8 minutes. It
#   1. builds remat with the CUDA backend (build-gpu/, sm_90, only the CLI
#      and test_backend_ops);
#   2. says which GPU, driver and CUDA it ran on;
#   3. runs test_backend_ops, which checks every op of every backend built
#      against the CPU's, the CUDA one on its managed arena
#      (REMAT_CUDA_MANAGED=1: the test reads buffers directly), with a row
#      for each newer family of ops in it (the vocabulary split across
#      tensor ranks, the Llama layers, the bf16 ones);
#   4. trains small models for a few steps with dropout, each run on the
#      GPU measuring the peak it planned, every step:
#      - GPT-2 in fp32 under keep, middle and full recompute: the three
#        runs save the same weights, byte for byte, with the same losses;
#        the losses beside the CPU's say how close the GPU's arithmetic is
#        (cuBLASLt's products are not OpenBLAS's bits);
#      - the same GPT-2 with dropout on 2 tensor ranks sharing the GPU
#        (mpirun -np 2, --tensor-parallel 2): every loss and gradient norm
#        within a relative 1e-4 of one process's, both ranks' arenas
#        planned = measured;
#      - a Llama (grouped-query attention, RMSNorm, SwiGLU, rotary
#        embedding) in fp32 under keep, middle and full: the same bits, and
#        the losses beside the CPU's;
#      - GPT-2 in bf16 under keep, middle and full: the same bits, and the
#        losses within a loose bound of the CPU's bf16 run where this CPU
#        has bf16;
#   5. runs bench/gpu_bench.sh (remat against PyTorch eager and
#      torch.compile, GPT-2 124M B16 T1024 bf16) in what is left of the
#      budget;
#   6. prints one table, one row per check (ok, FAIL, skip or info), then
#      the benchmark's, and exits 1 if any check failed.
# A case never stops the script: each records its row. A run the backend
# refuses in one line as not there yet (its kernels: "... yet") is a skip,
# saying so; so is a case mpirun is missing for, or one past the time
# budget. Every run's output and log stay in gpu_check.logs/, the op test's
# in gpu_check.ops.log. Nothing here has run yet: the backend has never met
# a GPU.
#   bash bench/gpu_check.sh            (from the repository root)
# Environment: JOBS (build jobs, default: nproc), STEPS (default 5), BUDGET
# (seconds, default 480: a case with under 20 s of it left is skipped, and
# none runs past it), BUILD (the build directory, default build-gpu).
# BACKEND=cpu rehearses the script on a machine with nvcc and no GPU: every
# "GPU" run and the op rows are the CPU backend's instead (named rehearsal-*),
# which checks the script, not the backend; the default, cuda, is the check.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
build=${BUILD:-build-gpu}
[[ $build == /* ]] || build=$root/$build
jobs=${JOBS:-$(nproc)}
steps=${STEPS:-5}
budget=${BUDGET:-480}
dev=${BACKEND:-cuda}
tag=$dev
[[ $dev == cpu ]] && tag=rehearsal # the CPU's reference runs keep the name cpu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rows=()
fails=0
row() { # row CHECK RESULT DETAIL
  rows+=("$(printf '%-58s %-5s %s' "$1" "$2" "$3")")
  [[ $2 == FAIL ]] && fails=$((fails + 1))
  echo "[$2] $1: $3"
}
table() {
  echo
  echo "== remat CUDA backend: device check ($dev) =="
  printf '%-58s %-5s %s\n' "check" "result" "detail"
  printf '%s\n' "${rows[@]}"
  echo "$fails failed"
}
# left CAP: the seconds a step may take: CAP, or what is left of the budget
# (at least 1: timeout 0 would mean none)
left() {
  local l=$((budget - SECONDS))
  l=$((l < $1 ? l : $1))
  echo $((l < 1 ? 1 : l))
}

# ---------------------------------------------------------------- machine
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
  head -1)
cuda=$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | head -1)
row "gpu, driver, memory" "info" "${gpu:-nvidia-smi found no GPU}"
row "cuda toolkit" "info" "${cuda:-nvcc not found}"

# ------------------------------------------------------------------ build
t0=$SECONDS
if timeout "$(left 300)" cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DREMAT_CUDA=ON \
     -DCMAKE_CUDA_ARCHITECTURES=90 >"$tmp/configure.log" 2>&1 &&
   grep -q 'CUDA backend: built' "$tmp/configure.log" &&
   timeout "$(left 420)" cmake --build "$build" -j "$jobs" --target remat_cli test_backend_ops \
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
REMAT_CUDA_MANAGED=1 OMP_WAIT_POLICY=PASSIVE timeout "$(left 240)" stdbuf -oL "$ops" \
  >"$tmp/ops.log" 2>&1
rc=$?
# the lines of the backend's section: "-- backend $dev" up to the next "-- "
awk -v b="-- backend $dev" '$0 == b {on=1; print; next} /^-- /{on=0} on' "$tmp/ops.log" \
  >"$tmp/ops.dev"
nfail=$(grep -c '^FAIL\|check failed' "$tmp/ops.dev")
if [[ ! -s $tmp/ops.dev ]]; then
  row "test_backend_ops: $dev" "FAIL" "no $dev section (rc $rc): $(tail -2 "$tmp/ops.log" | tr '\n' ' ')"
elif grep -q 'skipped' "$tmp/ops.dev"; then
  row "test_backend_ops: $dev" "FAIL" "$(grep -m1 skipped "$tmp/ops.dev" | sed 's/^ *//')"
elif [[ $rc -ne 0 || $nfail -ne 0 ]]; then
  row "test_backend_ops: $dev" "FAIL" \
    "rc $rc, $nfail failed: $(grep -m2 '^FAIL\|check failed' "$tmp/ops.dev" | tr '\n' ' ')"
else
  row "test_backend_ops: $dev" "ok" "every op against the CPU, $((SECONDS - t0)) s"
fi
cp "$tmp/ops.log" "$root/gpu_check.ops.log" 2>/dev/null

# ops_row NAME PATTERN: the section's checks whose text matches PATTERN
# (grep's basic expressions): none is a skip (the backend has not got them,
# or no op of it ran)
ops_row() {
  local good bad
  if ! grep -q '^ok ' "$tmp/ops.dev"; then
    row "test_backend_ops: $dev $1" "skip" "no op of the $dev backend ran"
    return
  fi
  good=$(grep -c "^ok .*\($2\)" "$tmp/ops.dev")
  bad=$(grep -c "^FAIL .*\($2\)" "$tmp/ops.dev")
  if ((bad)); then
    row "test_backend_ops: $dev $1" "FAIL" \
      "$bad of $((good + bad)): $(grep -m1 "^FAIL .*\($2\)" "$tmp/ops.dev" | cut -c1-160)"
  elif ((good)); then
    row "test_backend_ops: $dev $1" "ok" "$good checks"
  else
    row "test_backend_ops: $dev $1" "skip" "no such checks: NULL in the $dev table"
  fi
}
ops_row "vocabulary split" 'vocab'
ops_row "Llama layers" 'rmsnorm\|swiglu\|rope\|gqa'
ops_row "bf16 layers" 'bf16'

# ----------------------------------------------------------- training
# Small models (6 layers, width 256, 8 heads, vocabulary 2048, T 128; the
# Llama 4 layers, 4 key/value heads, MLP width 704) for STEPS steps with
# dropout: enough to cross every op of a step.
shape=(--config "6,256,8,2048,128" --batch 8 --seq 128)
gpt2=("${shape[@]}" --dropout 0.1)
llama=(--config "llama:4,256,8,4,704,2048,128" --batch 8 --seq 128 --dropout 0.1)
common=(--steps "$steps" --peak-gflops 1000 --quiet)
declare -A state # each run's outcome: ok, FAIL or skip

# The log's facts of each step: loss, gradient norm, planned and measured
# peaks (one process's), one a line; lists: the ranks' peaks, one list a line.
field() { grep -o "\"$2\": [^,}]*" "$1" | sed 's/.*: //'; }
list() { grep -o "\"$2\": \[[^]]*\]" "$1" | sed 's/.*: //'; }

# planned LOG NP: every step's arena planned = measured (NP > 1: each of
# the NP ranks'); the last step's figure, or nothing
planned() {
  local p m
  if (($2 == 1)); then
    p=$(field "$1" planned_peak_bytes) m=$(field "$1" measured_peak_bytes)
  else
    p=$(list "$1" rank_planned_peak_bytes) m=$(list "$1" rank_measured_peak_bytes)
    [[ $(tail -1 <<<"$p" | tr ',' '\n' | grep -c .) == "$2" ]] || return 1
  fi
  [[ -n $p && $p == "$m" && $(grep -c . <<<"$p") == "$steps" ]] && tail -1 <<<"$p"
}

train() { # train NAME BACKEND NP ARGS...: one run (NP > 1: over mpirun)
  local name=$1 backend=$2 np=$3 t=$SECONDS cap launch=()
  shift 3
  cap=$(left 180)
  if ((budget - SECONDS < 20)); then
    state[$name]=skip
    row "train $name" "skip" "no time left in the $budget s budget"
    return
  fi
  ((np > 1)) && launch=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
                        mpirun --oversubscribe -np "$np")
  timeout "$cap" ${launch[@]+"${launch[@]}"} "$remat" train "${common[@]}" "$@" \
    --backend "$backend" --log "$tmp/$name.jsonl" --save "$tmp/$name.bin" >"$tmp/$name.out" 2>&1
  local rc=$? peak
  if [[ $rc -eq 1 || $rc -eq 2 ]] && grep -qE ' yet|not trained' "$tmp/$name.out"; then
    state[$name]=skip # refused, as not there yet
    row "train $name" "skip" "$(grep -m1 -E ' yet|not trained' "$tmp/$name.out" | cut -c1-200)"
  elif [[ $rc -ne 0 ]]; then
    state[$name]=FAIL
    row "train $name" "FAIL" \
      "rc $rc: $(grep -m2 -i 'error\|fail\|cuda\|abort' "$tmp/$name.out" | tr '\n' ' ' | cut -c1-200)"
  elif peak=$(planned "$tmp/$name.jsonl" "$np"); then
    state[$name]=ok
    row "train $name: planned == measured" "ok" "$peak bytes, $((SECONDS - t)) s"
  else
    state[$name]=FAIL
    row "train $name: planned == measured" "FAIL" \
      "planned $(field "$tmp/$name.jsonl" planned_peak_bytes | tr '\n' ' '), measured $(
        field "$tmp/$name.jsonl" measured_peak_bytes | tr '\n' ' ')"
  fi
}

# both A B CHECK: whether both runs finished; if not, CHECK's row is a skip
# saying which did not
both() {
  local x
  for x in "$1" "$2"; do
    [[ ${state[$x]:-} == ok ]] && continue
    row "$3" "skip" "run $x: ${state[$x]:-not run}"
    return 1
  done
}

same_bits() { # same_bits A B: the same saved weights and every step's loss
  both "$1" "$2" "$2 == $1 (saved weights)" || return
  if cmp -s "$tmp/$1.bin" "$tmp/$2.bin" &&
     diff <(field "$tmp/$1.jsonl" loss) <(field "$tmp/$2.jsonl" loss) >/dev/null; then
    row "$2 == $1 (saved weights)" "ok" "bit for bit, and every step's loss"
  else
    row "$2 == $1 (saved weights)" "FAIL" "$(cmp "$tmp/$1.bin" "$tmp/$2.bin" 2>&1 | head -1)"
  fi
}

# near CPU DEV BOUND: the largest |loss difference| over the steps (absolute)
near() {
  both "$1" "$2" "$2 losses vs $1 (max |diff|)" || return
  local d verdict
  d=$(paste <(field "$tmp/$1.jsonl" loss) <(field "$tmp/$2.jsonl" loss) |
    awk '{d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d} END {printf "%.3g", m + 0}')
  verdict=$(awk -v d="$d" -v b="$3" 'BEGIN {print (d < b) ? "ok" : "FAIL"}')
  row "$2 losses vs $1 (max |diff|)" "$verdict" "$d over $steps steps (bound $3)"
}

# rel_near ONE RUN BOUND: every loss and gradient norm within a relative
# BOUND of ONE's
rel_near() {
  both "$1" "$2" "$2 vs $1 (loss, grad norm)" || return
  local d verdict
  d=$(paste <(field "$tmp/$1.jsonl" loss) <(field "$tmp/$2.jsonl" loss) \
            <(field "$tmp/$1.jsonl" grad_norm) <(field "$tmp/$2.jsonl" grad_norm) |
    awk 'function r(x, y) { d = x - y; if (d < 0) d = -d; if (x < 0) x = -x; return d / (x > 1e-30 ? x : 1e-30) }
         {a = r($1, $2); b = r($3, $4); if (a > m) m = a; if (b > m) m = b; n++}
         END {printf "%.2g %d", m + 0, n}')
  verdict=$(awk -v d="${d% *}" -v n="${d#* }" -v b="$3" -v s="$steps" \
    'BEGIN {print (d <= b && n == s) ? "ok" : "FAIL"}')
  row "$2 vs $1 (loss, grad norm)" "$verdict" "largest relative difference ${d% *} (bound $3)"
}

# recompute_runs NAME BLOCKS MODEL_ARGS...: keep, middle (BLOCKS, e.g.
# 0-5) and full on the device; the three the same bits
recompute_runs() {
  local name=$1 blocks=$2
  shift 2
  train "$name-keep" "$dev" 1 "$@"
  train "$name-middle" "$dev" 1 "$@" --ckpt-layers "middle:$blocks"
  train "$name-full" "$dev" 1 "$@" --ckpt-ratio 1
  same_bits "$name-keep" "$name-middle"
  same_bits "$name-keep" "$name-full"
}

# GPT-2, fp32: the CPU's run, then the device's under the three policies
train cpu-keep cpu 1 "${gpt2[@]}" --precision fp32 --threads "$(nproc)"
recompute_runs "$tag" 0-5 "${gpt2[@]}" --precision fp32
near cpu-keep "$tag-keep" 1e-3

# the same GPT-2 on 2 tensor ranks sharing the device (each its heads, its
# share of the MLP and of the vocabulary), against one process, with
# dropout (a rank keys its heads' masks among the whole model's)
if command -v mpirun >/dev/null; then
  train "$tag-drop" "$dev" 1 "${gpt2[@]}" --precision fp32
  train "$tag-tp2" "$dev" 2 "${gpt2[@]}" --precision fp32 --tensor-parallel 2 \
    --threads "$(($(nproc) > 3 ? $(nproc) / 2 : 1))"
  rel_near "$tag-drop" "$tag-tp2" 1e-4
else
  row "train $tag-tp2 (--tensor-parallel 2)" "skip" "mpirun not found"
fi

# a Llama, fp32
train cpu-llama cpu 1 "${llama[@]}" --precision fp32 --threads "$(nproc)"
recompute_runs "$tag-llama" 0-3 "${llama[@]}" --precision fp32
near cpu-llama "$tag-llama-keep" 1e-3

# GPT-2, bf16: the CPU's run only where it has bf16 products
if "$remat" train --config tiny --steps 0 --precision bf16 --backend cpu --quiet \
     >"$tmp/probe.out" 2>&1; then
  train cpu-bf16 cpu 1 "${gpt2[@]}" --precision bf16 --threads "$(nproc)"
else
  row "train cpu-bf16" "skip" "this CPU has no bf16 products: only the device's own checks"
fi
if [[ $dev == cpu && ${state[cpu-bf16]:-skip} != ok ]]; then
  row "train $tag-bf16-*" "skip" "a rehearsal runs them where cpu-bf16 ran (${state[cpu-bf16]:-no})"
else
  recompute_runs "$tag-bf16" 0-5 "${gpt2[@]}" --precision bf16
  [[ -n ${state[cpu-bf16]:-} ]] && near cpu-bf16 "$tag-bf16-keep" 5e-2
fi

# the benchmark against PyTorch on the same GPU (bench/gpu_bench.sh), in
# what is left of the budget and never on a rehearsal's CPU backend
if [[ $dev == cuda ]] && ((budget - SECONDS > 150)); then
  if timeout "$(left 400)" bash bench/gpu_bench.sh "$remat" "$tmp/bench.kv" >"$tmp/bench.out" 2>&1
  then row "benchmark against PyTorch (gpu_bench.sh)" "info" "table below"
  else row "benchmark against PyTorch (gpu_bench.sh)" "info" "stopped: $(tail -1 "$tmp/bench.out")"; fi
else
  row "benchmark against PyTorch (gpu_bench.sh)" "skip" "$dev, $((budget - SECONDS)) s left"
fi

mkdir -p "$root/gpu_check.logs" &&
  cp "$tmp"/*.out "$tmp"/*.jsonl "$root/gpu_check.logs/" 2>/dev/null
row "time" "info" "$SECONDS s of the $budget s budget; runs' logs in gpu_check.logs/"
# A backend named on a machine where it cannot run says so in one line:
# checked here the other way round (it runs), and on CPU machines by CTest.
table
[[ -s $tmp/bench.out ]] && cat "$tmp/bench.out"
[[ $fails -eq 0 ]]

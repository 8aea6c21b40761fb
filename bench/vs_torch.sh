#!/usr/bin/env bash
# vs_torch.sh: remat against PyTorch (Debian's python3-torch) on the same
# training step, fp32 or bf16 mixed precision, AdamW: GPT-2's gpt2-124m at
# B=4 T=64 and L6 C256 NH8 V8192 at B=4 T=1024, and on request the Llama
# llama-124m (remat's config: L12 C768 NH12, 4 key/value heads, SwiGLU
# width 2048, V32000, untied head) at B=4 T=64, each with no recompute and
# full recompute, alternating the systems REPS times. Names the BLAS each
# one loads and the thread settings, then prints every run and the medians,
# ratios and MFU (against remat's kept peak for the precision and threads;
# bench/vs_torch.py does the runs). A shape remat refuses at the precision
# (a Llama in bf16, where it does) is skipped with a line that says so.
#
# usage: bench/vs_torch.sh [BUILD_DIR]     (default: build)
#   env: PRECISION (fp32; bf16: remat bf16 against PyTorch's autocast to
#        bf16, and remat fp32 beside them), REPS (3), STEPS (5 per run, the
#        first a warm-up), THREADS (all
#        cores), SHAPES (gpt2-124m,seq-long; also gpt2-124m-long: T=1024,
#        and llama-124m; e.g. SHAPES=gpt2-124m,llama-124m RATIOS=0),
#        RATIOS (0,1: no recompute and full recompute), FP32_BESIDE (1; 0:
#        no remat fp32 runs beside bf16), QUIET_CPUS (0: start each run
#        at once; X: wait until X CPUs are idle, for a shared machine),
#        PEAK_GFLOPS (the peak MFU is against; default remat's kept figure)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
remat=$build/app/remat
py=/usr/bin/python3
[ -x "$remat" ] || { echo "vs_torch: no $remat; build first" >&2; exit 2; }
threads=${THREADS:-$(nproc)}

blas_of() { # the libopenblas or libblas a binary or library resolves to
  ldd "$1" | awk '/libopenblas|libblas/ {print $3}' | while read -r f; do
    echo "$f -> $(readlink -f "$f")"
  done
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
# OpenBLAS falls back to its SSE3 kernels (Prescott) on a CPU model newer
# than its tables; remat then picks the kernels the CPU's instructions allow
# (remat_blas_prepare). PyTorch gets the same, its best settings too.
if [[ -z ${OPENBLAS_CORETYPE:-} ]]; then
  detected=$(OPENBLAS_VERBOSE=2 $py -c 'import torch; torch.ones(64, 64) @ torch.ones(64, 64)' 2>&1 |
             sed -n 's/^Core: //p' | head -1)
  case $detected in
    Haswell|Zen|SkylakeX|Cooperlake|SapphireRapids|"") ;;
    *) if grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo; then
         export OPENBLAS_CORETYPE=SkylakeX
       elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
       echo "OpenBLAS: detected $detected kernels on this CPU; both run with" \
            "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}" ;;
  esac
fi
echo "remat:   $remat"
echo "  BLAS:  $(blas_of "$remat" | tr '\n' ' ')"
echo "  threads: --threads $threads (OpenMP; single-threaded OpenBLAS inside parallel regions;"
echo "           pinning and waiting by remat's policy, quoted on each run line)"
torch_lib=$($py -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))')
[ -e "$torch_lib" ] || torch_lib=$(ldconfig -p | awk '/libtorch_cpu.so/ {print $NF; exit}')
echo "PyTorch: $($py -c 'import torch; print(torch.__version__)') ($torch_lib)"
echo "  BLAS:  $(blas_of "$torch_lib" | tr '\n' ' ')"
$py -c 'import re, torch; c = torch.__config__.show()
print("  build: ", ", ".join(re.findall(r"(BLAS_INFO=\w+|USE_MKLDNN=\w+|CPU capability usage: \w+)", c)))'
echo "  threads: torch.set_num_threads($threads), OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$threads}, OMP_NUM_THREADS=${OMP_NUM_THREADS:-$threads}"
echo
precision=${PRECISION:-fp32}
if [[ $precision == bf16 ]]; then # which code oneDNN runs for each side's bf16 products
  echo "bf16:    remat: $("$remat" train --config tiny --steps 1 --quiet 2>&1 |
                          sed -n 's/^precision [^(]*(\(.*\))$/\1/p')"
  probe=$(ONEDNN_VERBOSE=1 "$remat" train --config tiny --steps 1 --quiet --precision bf16 2>&1)
  echo "  oneDNN (remat): $(grep -m1 ',info,cpu,isa:' <<<"$probe" | cut -d, -f4-);" \
       "matmul $(grep -m1 ',exec,cpu,matmul,' <<<"$probe" | cut -d, -f5)"
  echo "  oneDNN (PyTorch autocast): $(ONEDNN_VERBOSE=1 DNNL_VERBOSE=1 $py -c '
import torch
a = torch.randn(64, 64)
with torch.autocast("cpu", dtype=torch.bfloat16):
    (a @ a).sum()' 2>&1 | grep -m1 ',exec,cpu,' | cut -d, -f4-6)"
  echo
fi
exec $py "$here/vs_torch.py" compare "$remat" --reps "${REPS:-3}" --steps "${STEPS:-5}" \
  --threads "$threads" --shapes "${SHAPES:-gpt2-124m,seq-long}" --quiet-cpus "${QUIET_CPUS:-0}" \
  --precision "$precision" --ratios "${RATIOS:-0,1}" --peak-gflops "${PEAK_GFLOPS:-0}" \
  $([[ ${FP32_BESIDE:-1} == 0 ]] && echo --no-fp32-beside)

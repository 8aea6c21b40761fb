#!/usr/bin/env bash
# busy.sh: remat's thread policy against fixed thread settings on a quiet
# machine and with 1 and 2 competing busy loops (`yes >/dev/null`, pinned
# with taskset to CPU 0, then CPUs 0 and 1; COMPETITOR=yes leaves them
# unpinned, for the scheduler to place). For each condition and model,
# the settings run in turn, REPS times (the order rotating each time); each
# run's tokens/s is that of its steps after the first (remat train's summary)
# and its wall time includes start-up (the policy's 0.1 s load sample and
# re-exec included; the peak measurement is skipped with --peak-gflops).
# Prints one line per run, then per condition and model the median tokens/s
# of each setting, the best fixed setting, and the policy's ratio to it.
#
# Settings: auto (no flag: the policy decides, and re-places the threads
# between steps), 1 thread (--threads 1), and one thread per CPU pinned and
# spinning as libgomp does by default (remat's old default), pinned and
# spinning 10000 times (the policy's quiet choice), pinned and passive,
# unpinned and passive (the policy's shared choice), and unpinned spinning
# 10000 times. REMAT_IDLE_CPUS fixes the policy's decision (and keeps it
# from re-placing threads), OMP_WAIT_POLICY and GOMP_SPINCOUNT the rest.
# SETTINGS="auto 1thread ..." runs a subset.
#
# On a machine shared with other jobs, WAIT=1 starts each run only once the
# CPUs the condition leaves free are idle (up to 5 minutes; the run line
# gives the idle CPUs seen just before it).
#
# usage: bench/busy.sh [BUILD_DIR]     (default: build)
#   env: REPS (3), LOADS ("0 1 2"), MODELS (tiny,small,seq-long; see below),
#        WAIT (0), COMPETITOR (taskset), SETTINGS (all)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
remat=$build/app/remat
[ -x "$remat" ] || { echo "busy: no $remat; build first" >&2; exit 2; }
reps=${REPS:-3}
loads=${LOADS:-0 1 2}
ncpu=$(nproc)
declare -A model_args=(
  [tiny]="--config tiny --steps 100"
  [small]="--config small --steps 20"
  [seq-long]="--config 6,256,8,8192,1024 --batch 4 --seq 1024 --steps 3"
  [124m]="--config gpt2-124m --batch 4 --seq 64 --steps 3"
)
IFS=, read -r -a models <<<"${MODELS:-tiny,small,seq-long}"
read -r -a settings <<<"${SETTINGS:-auto 1thread pinned-spin pinned-spin10k pinned-passive unpinned-passive unpinned-spin10k}"

# env and flags of a setting
setting_cmd() {
  case $1 in
  auto) echo "" ;;
  1thread) echo "--threads 1" ;;
  pinned-spin) echo "REMAT_IDLE_CPUS=$ncpu GOMP_SPINCOUNT=300000" ;;
  pinned-spin10k) echo "REMAT_IDLE_CPUS=$ncpu" ;;
  pinned-passive) echo "REMAT_IDLE_CPUS=$ncpu OMP_WAIT_POLICY=passive" ;;
  unpinned-passive) echo "REMAT_IDLE_CPUS=0" ;;
  unpinned-spin10k) echo "REMAT_IDLE_CPUS=0 GOMP_SPINCOUNT=10000" ;;
  *) echo "busy: unknown setting $1" >&2; exit 2 ;;
  esac
}

for s in "${settings[@]}"; do setting_cmd "$s" >/dev/null || exit 2; done

idle_now() { # CPUs idle over one second, from /proc/stat
  local a b
  a=$(awk '/^cpu /{print $5+$6, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat)
  sleep 1
  b=$(awk '/^cpu /{print $5+$6, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat)
  echo "$a $b" | awk -v n="$ncpu" '{printf "%.2f", n * ($3 - $1) / ($4 - $2)}'
}

wait_idle() { # wait_idle WANT: until WANT CPUs are idle (5 minutes at most); prints the last
  local t0 idle
  t0=$(date +%s)
  while :; do
    idle=$(idle_now)
    if awk -v i="$idle" -v w="$1" 'BEGIN { exit !(i >= w) }' ||
      [ $(($(date +%s) - t0)) -ge 300 ]; then
      echo "$idle"
      return
    fi
    sleep 2
  done
}

busy_pids=()
stop_busy() {
  for p in "${busy_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${busy_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  busy_pids=()
}
trap stop_busy EXIT

echo "machine: $ncpu CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "remat:   $remat"
echo "busy loops: yes >/dev/null, $([ "${COMPETITOR:-taskset}" = yes ] && echo "unpinned" || echo "pinned to CPU 0, 1, ... with taskset")"
out=$(mktemp)
for load in $loads; do
  echo "condition busy_loops=$load: CPUs idle before the loops start: $(idle_now) of $ncpu"
  for ((i = 0; i < load; i++)); do
    if [ "${COMPETITOR:-taskset}" = yes ]; then
      yes >/dev/null &
    else
      taskset -c $((i % ncpu)) yes >/dev/null &
    fi
    busy_pids+=($!)
  done
  sleep 0.5
  for model in "${models[@]}"; do
    for ((rep = 0; rep < reps; rep++)); do
      n=${#settings[@]}
      for ((k = 0; k < n; k++)); do
        s=${settings[$(((k + rep) % n))]}
        read -r -a envs <<<"$(setting_cmd "$s" | tr ' ' '\n' | grep = | tr '\n' ' ')"
        read -r -a flags <<<"$(setting_cmd "$s" | tr ' ' '\n' | grep -v = | tr '\n' ' ')"
        idle=-1
        [ "${WAIT:-0}" = 1 ] && idle=$(wait_idle "$(echo "$ncpu - $load - 0.25" | bc)")
        t0=$(date +%s.%N)
        res=$(env "${envs[@]}" "$remat" train ${model_args[$model]} "${flags[@]}" --quiet \
          --peak-gflops 1 2>&1)
        t1=$(date +%s.%N)
        tps=$(printf '%s\n' "$res" | sed -n 's/^speed *\([0-9.]*\) tokens.*/\1/p')
        pol=$(printf '%s\n' "$res" | sed -n 's/^threads *//p' | head -1) # the choice at start
        line=$(printf 'run busy_loops=%s model=%s setting=%s rep=%d tokens_per_s=%s wall_s=%.2f idle_before=%s threads="%s"' \
          "$load" "$model" "$s" "$rep" "${tps:-0}" "$(echo "$t1 - $t0" | bc)" "$idle" "$pol")
        echo "$line"
        echo "$line" >>"$out"
      done
    done
  done
  stop_busy
done
python3 - "$out" <<'EOF'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    kv = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
    if "busy_loops" not in kv:
        continue
    key = (int(kv["busy_loops"]), kv["model"], kv["setting"])
    runs.setdefault(key, []).append((float(kv["tokens_per_s"]), float(kv["wall_s"])))
print()
print("median tokens/s (median wall s) per setting; 'auto' is the policy, its ratio to the "
      "best fixed setting in the last column")
conds = sorted({(l, m) for l, m, _ in runs})
settings = ["auto", "1thread", "pinned-spin", "pinned-spin10k", "pinned-passive",
            "unpinned-passive", "unpinned-spin10k"]
print("loops model     " + " ".join(f"{s:>18}" for s in settings) + "   auto/best fixed")
for l, m in conds:
    med = {s: (statistics.median(x[0] for x in runs[(l, m, s)]),
               statistics.median(x[1] for x in runs[(l, m, s)]))
           for s in settings if (l, m, s) in runs}
    best = max((v[0], s) for s, v in med.items() if s != "auto")
    cells = " ".join(f"{med[s][0]:>10.0f} ({med[s][1]:5.1f})" if s in med else f"{'-':>18}"
                     for s in settings)
    print(f"{l:>5} {m:9} {cells}   {med['auto'][0] / best[0]:.2f} (best: {best[1]})")
    print(f"summary busy_loops={l} model={m} auto_tokens_per_s={med['auto'][0]:.1f} "
          f"best_fixed={best[1]} best_fixed_tokens_per_s={best[0]:.1f} "
          f"auto_vs_best={med['auto'][0] / best[0]:.3f}")
EOF
rm -f "$out"

# lib.sh: the helpers every script under tests/cli/ shares, as libuv's tests
# share test/task.h. A script sources it before its cases:
#   . "$(dirname "$0")/lib.sh"
# It counts cases in n and failures in fails; ok and bad report one case,
# summary prints the closing line and gives the script's exit status. The
# helpers that run remat use $remat (the binary) and $tmp (the scratch
# directory), which the script sets.

fails=0
n=0

# Open MPI refuses to start as root (as in a container) without the first
# two, and to start more ranks than cores without the third.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

# mpi NP COMMAND...: COMMAND on NP ranks.
mpi() { mpirun --oversubscribe -np "$@"; }

# fresh_dir DIR: DIR, empty.
fresh_dir() { rm -rf "$1" && mkdir -p "$1"; }

# bf16_here: whether this CPU trains in bf16 (AVX512-BF16 or AMX); the
# scripts skip their bf16 cases where it does not, saying so.
bf16_here() { "$remat" train --config tiny --steps 0 --precision bf16 --quiet >/dev/null 2>&1; }

# ok TEXT, bad TEXT: one case passed ("ok   [TEXT]") or failed ("FAIL [TEXT]").
ok() { n=$((n + 1)); echo "ok   [$1]"; }
bad() { n=$((n + 1)); fails=$((fails + 1)); echo "FAIL [$1]"; }

# check "description" COMMAND...: one case, passed when COMMAND succeeds.
check() { if "${@:2}"; then ok "$1"; else bad "$1"; fi; }

# expect_error "description" PATTERN ARGS...: `remat ARGS...` must exit 1 or
# 2 with one line on stderr that matches PATTERN (case-insensitive); the line
# is shown. A run that blocks (on a FIFO) fails here instead of hanging the
# suite.
expect_error() {
  local what=$1 pattern=$2
  shift 2
  n=$((n + 1))
  timeout -k 5 120 "$remat" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  local rc=$?
  local lines
  lines=$(grep -c . "$tmp/err")
  if [[ $rc -ne 1 && $rc -ne 2 ]]; then
    echo "FAIL [$what]: exit code $rc (want 1 or 2): $(head -c 300 "$tmp/err")"
    fails=$((fails + 1))
  elif [[ $lines -ne 1 ]]; then
    echo "FAIL [$what]: $lines lines on stderr (want 1):"
    sed 's/^/    /' "$tmp/err" | head -5
    fails=$((fails + 1))
  elif ! grep -qi -- "$pattern" "$tmp/err"; then
    echo "FAIL [$what]: message does not mention '$pattern': $(cat "$tmp/err")"
    fails=$((fails + 1))
  else
    echo "ok   [$what] -> $(cat "$tmp/err")"
  fi
}

# expect_fail_mpi NAME PATTERN NP ARGS...: `remat train ARGS...` on NP ranks
# must fail with PATTERN in its output (err.out in the current directory).
expect_fail_mpi() {
  local name=$1 pattern=$2 np=$3
  shift 3
  mpi "$np" "$remat" train "$@" >err.out 2>&1
  local rc=$?
  if [[ $rc -ne 0 ]] && grep -q -- "$pattern" err.out; then ok "$name"
  else bad "$name (rc $rc)"; head -3 err.out; fi
}

# same_run ONE.jsonl ONE.bin TWO.jsonl TWO.bin STEPS: two runs' logs hold
# the same losses and gradient norms over STEPS steps, every rank's arena
# planned = measured in both, and their saved models are the same bytes.
same_run() { # same_run ONE.jsonl ONE.bin TWO.jsonl TWO.bin STEPS
  python3 - "$1" "$3" "$5" <<'PY' && cmp -s "$2" "$4"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
same = [(x["loss"], x["grad_norm"]) for x in a] == [(x["loss"], x["grad_norm"]) for x in b]
mem = all(x["rank_planned_peak_bytes"] == x["rank_measured_peak_bytes"] for x in a + b)
sys.exit(0 if same and mem and len(a) == len(b) == int(sys.argv[3]) else 1)
PY
}

# reseal STEP_DIR: DONE of a checkpoint made to vouch for its settings file
# as it is now (its size and CRC32C, and the manifest's own crc), as one who
# edits the settings on purpose would: what a resume must then check itself.
reseal() {
  python3 - "$1" <<'PY'
import sys
def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF
d = sys.argv[1]
settings = open(d + "/settings", "rb").read()
lines = [l for l in open(d + "/DONE").read().splitlines() if not l.startswith("crc ")]
lines = ["file settings %d %08x" % (len(settings), crc32c(settings))
         if l.startswith("file settings ") else l for l in lines]
text = "".join(l + "\n" for l in lines)
open(d + "/DONE", "w").write(text + "crc %08x\n" % crc32c(text.encode()))
PY
}

# below PID: every descendant of PID (a job's ranks, not another job's
# processes that happen to match its command line).
below() { local p; for p in $(pgrep -P "$1"); do echo "$p"; below "$p"; done; }

# kill_a_rank ARGS...: `remat train ARGS...` on 2 ranks for ever (on one
# thread each, --quiet), and after 3 s one of its ranks killed with SIGKILL:
# one case, passed when the job ends within 30 s with a message (its output
# in kill.out in the current directory); a job still running is killed.
kill_a_rank() {
  local start job victim rc took
  start=$(date +%s)
  mpi 2 "$remat" train "$@" --steps 1000000 --threads 1 --quiet --peak-gflops 1 >kill.out 2>&1 &
  job=$!
  sleep 3
  # a rank of this job: a descendant of $job running remat (not mpirun, and
  # no other job's process that happens to match the command line)
  victim=$(for p in $(below "$job"); do
    [[ $(ps -o comm= -p "$p") == remat ]] && echo "$p"; done | tail -1)
  [[ -n $victim ]] && kill -9 "$victim"
  for _ in $(seq 60); do kill -0 "$job" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$job" 2>/dev/null; then
    kill -9 $(below "$job") "$job" 2>/dev/null
    bad "a killed rank ends the job (still running after 30 s)"
  else
    wait "$job"
    rc=$?
    took=$(($(date +%s) - start - 3))
    if [[ $rc -ne 0 && -n $victim ]] && grep -q "signal 9" kill.out; then
      ok "a killed rank ends the job in ${took} s (exit $rc)"
    else bad "a killed rank (rc $rc)"; tail -3 kill.out; fi
  fi
}

# summary [NAME [CASES]]: the closing line, "N passed, F failed" (or
# "NAME: F failed", or "NAME: CASES cases, F failed"); the status is 0 when
# nothing failed.
summary() {
  if [[ $# -eq 0 ]]; then echo "$((n - fails)) passed, $fails failed"
  elif [[ $# -eq 1 ]]; then echo "$1: $fails failed"
  else echo "$1: $2 cases, $fails failed"; fi
  [[ $fails -eq 0 ]]
}

# The checks of two training logs (--log JSON lines):
# log_bits A B STEPS: the same losses and gradient norms, STEPS steps each
log_bits() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
rows = [[(x["loss"], x["grad_norm"]) for x in map(json.loads, open(f))] for f in sys.argv[1:3]]
sys.exit(not (rows[0] == rows[1] and len(rows[0]) == int(sys.argv[3])))
PY
}
# log_planned F: one process's planned peak = measured, every step
log_planned() {
  python3 - "$1" <<'PY'
import json, sys
xs = [json.loads(l) for l in open(sys.argv[1])]
sys.exit(not (xs and all(x["planned_peak_bytes"] == x["measured_peak_bytes"] for x in xs)))
PY
}
# log_ranks F NP: every step's arena planned = measured on NP ranks
log_ranks() {
  python3 - "$1" "$2" <<'PY'
import json, sys
xs = [json.loads(l) for l in open(sys.argv[1])]
n = int(sys.argv[2])
sys.exit(not (xs and all(len(x["rank_planned_peak_bytes"]) == n and
              x["rank_planned_peak_bytes"] == x["rank_measured_peak_bytes"] for x in xs)))
PY
}

# near_run ONE.jsonl RUN.jsonl RANKS BOUND: 5 steps in both, every loss and
# gradient norm within a relative BOUND of ONE's, every one of the RANKS
# ranks' arenas planned = measured; prints the largest difference.
near_run() {
  python3 - "$1" "$2" "$3" "$4" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
t, bound = int(sys.argv[3]), float(sys.argv[4])
rel = lambda x, y: abs(x - y) / max(abs(x), 1e-30)
worst = max([max(rel(x["loss"], y["loss"]), rel(x["grad_norm"], y["grad_norm"]))
             for x, y in zip(a, b)] or [1.0])
mem = all(len(y["rank_planned_peak_bytes"]) == t and
          y["rank_planned_peak_bytes"] == y["rank_measured_peak_bytes"] for y in b)
print("largest relative difference %.1e" % worst)
sys.exit(0 if len(a) == len(b) == 5 and worst <= bound and mem else 1)
PY
}

# same_steps A.jsonl B.jsonl: 5 steps, the same losses and gradient norms,
# bit for bit
same_steps() {
  python3 - "$1" "$2" <<'PY'
import json, sys
f = lambda p: [(x["loss"], x["grad_norm"]) for x in map(json.loads, open(p))]
sys.exit(0 if f(sys.argv[1]) == f(sys.argv[2]) and len(f(sys.argv[1])) == 5 else 1)
PY
}

#!/usr/bin/env bash
# gpu_bench.sh: remat's CUDA backend against PyTorch on the same GPU
# (issue 33's benchmark), for bench/gpu_check.sh or by hand:
#   bash bench/gpu_bench.sh REMAT [OUT]
# GPT-2 124M (L12 C768 NH12 V50257) at B16 T1024 in bf16 by default:
#   remat keep     remat train --backend cuda --precision bf16, no recompute
#   remat full     the same with every block recomputed (--ckpt-ratio 1)
#   torch eager    bench/vs_torch.py torch --device cuda (autocast to bf16,
#                  scaled_dot_product_attention)
#   torch compile  the same through torch.compile
# Each run's tokens/s comes from its median step after WARMUP steps. It
# prints one table: tokens/s, the device memory each holds (remat: its
# arena, planned and measured; PyTorch: max_memory_reserved and
# max_memory_allocated), the bytes PyTorch's caching allocator reserved
# but no tensor used (the largest at a step's end: fragmentation; remat's
# arena has none by construction), and the goals: remat at least compile's
# tokens/s at no more than 0.8x its reserved memory, full recompute at
# most 1.25x keep's step. It has not run on a GPU yet (docs/cuda.md).
# Environment: CONFIG, BATCH, SEQ, STEPS (default 20), WARMUP (default 3),
# PYTHON (default python3), and BACKEND=cpu with DEVICE=cpu to rehearse the
# script on a machine without a GPU (small CONFIG, BATCH, SEQ then).
# Key=value lines go to OUT (default: gpu_bench.out) for the caller.
set -uo pipefail
remat=${1:?usage: gpu_bench.sh REMAT [OUT]}
out=${2:-gpu_bench.out}
here=$(cd "$(dirname "$0")" && pwd)
config=${CONFIG:-12,768,12,50257,1024}
batch=${BATCH:-16}
seq=${SEQ:-1024}
steps=${STEPS:-20}
warmup=${WARMUP:-3}
python=${PYTHON:-python3}
backend=${BACKEND:-cuda}
device=${DEVICE:-cuda}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: >"$out"

# remat_run NAME RATIO: tokens/s from the median step after the warm-up,
# the arena planned and measured, from its log
remat_run() {
  local name=$1 ratio=$2
  if ! timeout 300 "$remat" train --backend "$backend" --precision bf16 --config "$config" \
       --batch "$batch" --seq "$seq" --steps "$steps" --ckpt-ratio "$ratio" --quiet \
       --log "$tmp/$name.jsonl" >"$tmp/$name.log" 2>&1; then
    echo "name=$name status=failed why=\"$(tail -1 "$tmp/$name.log")\"" >>"$out"
    return
  fi
  "$python" - "$tmp/$name.jsonl" "$name" "$warmup" "$batch" "$seq" >>"$out" <<'EOF'
import json, statistics, sys
recs = [json.loads(line) for line in open(sys.argv[1])]
name, warm, B, T = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
steps = [r["step_s"] for r in recs][warm:] or [r["step_s"] for r in recs]
last = recs[-1]
print(f"name={name} status=ok step_s={statistics.median(steps):.5f} "
      f"tokens_per_s={B * T / statistics.median(steps):.1f} "
      f"device_bytes={last['rank_planned_peak_bytes'][0]} "
      f"measured_bytes={last['rank_measured_peak_bytes'][0]} loss={last['loss']:.4f}")
EOF
}

# torch_run NAME [--compile]: vs_torch.py's line, renamed
torch_run() {
  local name=$1
  shift
  if ! timeout 600 "$python" "$here/vs_torch.py" torch --device "$device" --precision bf16 \
       --config "$config" --batch "$batch" --seq "$seq" --steps "$steps" --warmup "$warmup" \
       "$@" >"$tmp/$name.log" 2>&1; then
    echo "name=$name status=failed why=\"$(tail -1 "$tmp/$name.log")\"" >>"$out"
    return
  fi
  if grep -q '^torch skip' "$tmp/$name.log"; then
    echo "name=$name status=skipped why=\"$(grep '^torch skip' "$tmp/$name.log")\"" >>"$out"
    return
  fi
  grep '^torch ' "$tmp/$name.log" | tail -1 | sed "s/^torch /name=$name status=ok /" >>"$out"
}

remat_run remat_keep 0
remat_run remat_full 1
torch_run torch_eager
torch_run torch_compile --compile

"$python" - "$out" "$config" "$batch" "$seq" <<'EOF'
import sys
runs = {}
for line in open(sys.argv[1]):
    kv = {}
    for f in line.split():
        if "=" in f:
            k, v = f.split("=", 1)
            kv[k] = v.strip('"')
    runs[kv.get("name")] = kv
print(f"\n== GPT-2 {sys.argv[2]} B{sys.argv[3]} T{sys.argv[4]} bf16: remat against PyTorch ==")
print(f"{'run':14} {'tokens/s':>10} {'memory (MiB)':>28} {'unused reserved':>16}")
def mib(x):
    return f"{int(x) / 2**20:.0f}"
for name in ("remat_keep", "remat_full", "torch_eager", "torch_compile"):
    r = runs.get(name, {})
    if r.get("status") != "ok":
        print(f"{name:14} {r.get('status', 'missing')}: {r.get('why', '')}")
        continue
    if name.startswith("remat"):
        mem = f"arena {mib(r['device_bytes'])} = measured {mib(r['measured_bytes'])}"
        unused = "0"
    elif "max_memory_reserved" in r:
        mem = f"reserved {mib(r['max_memory_reserved'])}, allocated {mib(r['max_memory_allocated'])}"
        unused = mib(r["unused_reserved_max"])
    else:
        mem, unused = "(no device figures)", "-"
    print(f"{name:14} {float(r['tokens_per_s']):10.0f} {mem:>28} {unused:>16}")
def ok(name):
    return runs.get(name, {}).get("status") == "ok"
goals = []
if ok("remat_keep") and ok("remat_full"):
    x = float(runs["remat_full"]["step_s"]) / float(runs["remat_keep"]["step_s"])
    goals.append(("full recompute / keep step <= 1.25", x <= 1.25, f"{x:.3f}"))
    planned_eq = all(runs[n]["device_bytes"] == runs[n]["measured_bytes"]
                     for n in ("remat_keep", "remat_full"))
    goals.append(("remat arena planned == measured", planned_eq, ""))
ref = "torch_compile" if ok("torch_compile") else "torch_eager" if ok("torch_eager") else None
if ok("remat_keep") and ref:
    x = float(runs["remat_keep"]["tokens_per_s"]) / float(runs[ref]["tokens_per_s"])
    goals.append((f"remat keep tokens/s >= {ref}'s", x >= 1.0, f"x{x:.2f}"))
    if "max_memory_reserved" in runs[ref]:
        y = int(runs["remat_keep"]["device_bytes"]) / int(runs[ref]["max_memory_reserved"])
        goals.append((f"remat arena <= 0.8x {ref}'s reserved", y <= 0.8, f"x{y:.2f}"))
for what, good, detail in goals:
    print(f"goal {'met' if good else 'MISSED':6} {what} {detail}")
    print(f"goal_line what=\"{what}\" met={int(good)} detail={detail or '-'}", file=sys.stderr)
EOF

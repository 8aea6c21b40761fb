#!/usr/bin/env bash
# same_bits.sh OLD NEW: runs a fixed list of training jobs with two remat
# binaries and checks that a change kept their results: every step's loss
# and planned peak (from --log), every rank's planned arena, and the --save
# bytes must be identical. One process, ratios, block lists and --mem, a
# pipeline (planned, by hand, from a plan file, under budgets), replicas
# under ZeRO 1 and 3, the grid, resume, held-out evaluation. Prints one
# line per job and "N passed, N failed".
#   bash bench/same_bits.sh /path/to/old/remat build/app/remat
set -uo pipefail
old=$(realpath "$1") new=$(realpath "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
common=(--config small --seq 32 --steps 6 --dropout 0.1 --quiet --peak-gflops 100)

# The fields that must not move (losses, norms, every rank's planned arena);
# timings and RSS do. The process's planned bytes (the arena plus what the
# library holds outside it, the runtimes' own structures among them) are
# shown beside: a change of a runtime's structure moves them.
fields() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    o = json.loads(line)
    print(o["step"], repr(o["loss"]), o["grad_norm"], o.get("rank_planned_peak_bytes"),
          o.get("val_loss"))' "$1"
}

pass=0 fail=0
# run NAME NP ARGS...: NP 1 runs the binary directly
run() {
  local name=$1 np=$2
  shift 2
  for which in old new; do
    local bin=${!which} d="$tmp/$name.$which"
    mkdir -p "$d"
    local extra=()
    if [[ $which == old ]]; then extra=(${OLD_EXTRA:-}); else extra=(${NEW_EXTRA:-}); fi
    local cmd=("$bin" train "${common[@]}" "$@" ${extra[@]+"${extra[@]}"} --save "$d/model.bin"
               --log "$d/log.jsonl")
    if [[ $np -gt 1 ]]; then cmd=(mpirun -np "$np" "${cmd[@]}"); fi
    (cd "$d" && "${cmd[@]}" > out.txt 2>&1) || { echo "FAIL $name ($which exited non-zero)"; cat "$d/out.txt"; fail=$((fail + 1)); return; }
    fields "$d/log.jsonl" > "$d/fields.txt"
    python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["planned_peak_bytes"])' "$d/log.jsonl" > "$d/process.txt"
  done
  if cmp -s "$tmp/$name.old/model.bin" "$tmp/$name.new/model.bin" &&
     cmp -s "$tmp/$name.old/fields.txt" "$tmp/$name.new/fields.txt"; then
    local po pn
    po=$(cat "$tmp/$name.old/process.txt") pn=$(cat "$tmp/$name.new/process.txt")
    echo "same $name: step, loss, norm, arenas: $(tail -1 "$tmp/$name.new/fields.txt"); process planned $po -> $pn ($((pn - po)) bytes)"
    pass=$((pass + 1))
  else
    echo "FAIL $name differs"; diff "$tmp/$name.old/fields.txt" "$tmp/$name.new/fields.txt" | head -5
    fail=$((fail + 1))
  fi
}

run one 1
run accum 1 --grad-accum 3 --seq 32
run ratio 1 --ckpt-ratio 0.5
run layers 1 --ckpt-layers full:0,middle:1-2
# --mem: the same arena budget. OLD_EXTRA / NEW_EXTRA give each binary its
# own flags where a flag's meaning changed between them (set them in the
# environment for such a pair); both binaries here take --mem as the arena.
run mem 1 --mem $((25165824 - 4458664))
run eval 1 --eval-every 2
run pipe2 2 --stages 2 --grad-accum 3
run pipe3_gpipe 3 --stages 3 --grad-accum 4 --schedule gpipe
run pipe_hand 2 --stages 2 --grad-accum 2 --layers 1,3 --ckpt-layers middle:0,full:3
run pipe_mem 2 --stages 2 --grad-accum 4 --mem 13MiB,12MiB
"$new" plan --config small --batch 8 --seq 32 --stages 2 --microbatches 2 --mem 12MiB --format json -o "$tmp/plan.json" > /dev/null &&
  run pipe_plan 2 --stages 2 --grad-accum 2 --plan "$tmp/plan.json"
run dp2_zero1 2 --data-parallel 2 --zero 1 --grad-accum 2
run dp2_zero3 2 --data-parallel 2 --zero 3 --ckpt-layers 1
run grid 4 --stages 2 --data-parallel 2 --zero 2 --grad-accum 2

# resume: checkpoints every 2 steps, the last one removed, resumed
for which in old new; do
  bin=${!which} d="$tmp/resume.$which"
  mkdir -p "$d"
  "$bin" train "${common[@]}" --checkpoint-dir "$d/ck" --checkpoint-every 2 > /dev/null 2>&1
  rm -rf "$d/ck/step_00000006"
  "$bin" train "${common[@]}" --resume "$d/ck" --save "$d/model.bin" > "$d/out.txt" 2>&1
done
if cmp -s "$tmp/resume.old/model.bin" "$tmp/resume.new/model.bin" && [[ -s $tmp/resume.new/model.bin ]]; then
  echo "same resume"; pass=$((pass + 1))
else
  echo "FAIL resume"; fail=$((fail + 1))
fi
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]

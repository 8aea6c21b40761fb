#!/usr/bin/env bash
# remat plan --link measured: under mpirun, the ranks measure the links
# with remat's own collectives (the tensor group's sum, a pipeline's send,
# the replicas' reduce-scatter and all-gather), each over the ranks it
# spans (--node-ranks a node), and rank 0 plans with them, saying the rates
# once; a rate --link gives replaces its level's; nodes of one rank have no
# tensor link; outside mpirun, or on one rank, it is refused.
# usage: links.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

mpi 2 "$remat" plan --config tiny --ranks 2 --global-batch 4 --seq 64 --mem 1GiB \
  --precision fp32 --link measured,dp=7 --calibrate 1 --threads 1 --format json \
  -o measured.json >measured.out 2>measured.err
check "--link measured: the rates measured between 2 ranks, said once" python3 - <<'PY'
import json, re, sys
err = open("measured.err").read()
said = re.findall(r"links measured between 2 ranks, 2 a node \(as mpirun placed them; median of 20\): "
                  r"tensor sum ([0-9.e+]+) GB/s .*pipeline send ([0-9.e+]+) GB/s "
                  r".*replicas ([0-9.e+]+) GB/s", err)
rows = json.load(open("measured.json"))["layouts"]["rows"]
sys.exit(not (len(said) == 1 and all(float(x) > 0 for x in said[0]) and rows
            and "--link gives replaces" in err))
PY
# levels over the ranks they span: tensor ranks share a node, the
# pipeline and the replicas cross nodes (4 ranks, 2 a node)
mpi 4 "$remat" plan --config tiny --ranks 4 --global-batch 8 --seq 64 --mem 1GiB \
  --precision fp32 --link measured --node-ranks 2 --calibrate 1 --threads 1 >nodes.out 2>&1
check "--link measured: each level over its ranks (a node's, across nodes)" grep -Eq \
  "4 ranks, 2 a node .*tensor sum [0-9.e+]+ GB/s \(ranks 0 and 1,.*pipeline send [0-9.e+]+ GB/s \(rank 0 to rank 2,.*replicas [0-9.e+]+ GB/s \(ranks 0 and 2," \
  nodes.out
mpi 2 "$remat" plan --config tiny --ranks 2 --global-batch 4 --seq 64 --mem 1GiB \
  --precision fp32 --link measured --node-ranks 1 --calibrate 1 --threads 1 >one_a_node.out 2>&1
check "--link measured: nodes of one rank have no tensor link" grep -q \
  "tensor not measured (a node of one rank)" one_a_node.out
"$remat" plan --config tiny --ranks 2 --global-batch 4 --seq 64 --mem 1GiB --link measured \
  --calibrate 1 >alone.out 2>&1
check "--link measured outside mpirun refused, saying how to start it" \
  grep -q "run it as mpirun -np 2 remat plan" alone.out
mpi 1 "$remat" plan --config tiny --ranks 2 --global-batch 4 --seq 64 --mem 1GiB \
  --link measured --calibrate 1 >one.out 2>&1
check "--link measured on one rank refused: it takes 2 or more" grep -q "start 2 or more" one.out
# --calibrate under mpirun without --link: the links measured too
mpi 2 "$remat" plan --config tiny --ranks 2 --global-batch 4 --seq 64 --mem 1GiB \
  --precision fp32 --calibrate 1 --threads 1 >cal.out 2>&1
check "--calibrate under mpirun without --link measures the links" \
  grep -q "^links measured between 2 ranks" cal.out
summary links

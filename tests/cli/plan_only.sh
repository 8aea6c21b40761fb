#!/usr/bin/env bash
# One answer to one question: remat train --mem chooses what remat plan
# plans for one stage (the same blocks, under the same names: train counts
# blocks from 0, plan counts layers with the embedding as 0, and both say
# so); --plan-only states the slowdown as remat plan's objective does; a
# budget is echoed in bytes and binary units (8G is 8000000000 bytes), by
# remat train and by remat plan.
# usage: plan_only.sh REMAT TMPDIR
set -u
remat=$1
tmp=$2
. "$(dirname "$0")/lib.sh"
fresh_dir "$tmp"
cd "$tmp" || exit 1

for case in "gpt2-124m 4 512 2.8GiB" "gpt2-124m 8 1024 6G" "small 8 64 25MiB" "small 8 64 1G"; do
  set -- $case
  cfg=$1 B=$2 T=$3 mem=$4
  "$remat" train --config "$cfg" --batch "$B" --seq "$T" --mem "$mem" --plan-only --precision fp32 \
    >train.out 2>&1
  "$remat" plan --config "$cfg" --batch "$B" --seq "$T" --mem "$mem" --precision fp32 >plan.out 2>&1
  python3 - "$cfg $B x $T --mem $mem" <<'PY' && ok "$cfg $B x $T --mem $mem: train and plan give one answer" || bad "$cfg $B x $T --mem $mem: $(cat train.out plan.out | grep -E 'policy|recomputed layers|slowdown|budget' | tr '\n' ' ')"
import re, sys
t = open("train.out").read()
p = open("plan.out").read()
# the policy: train's blocks (from 0) against plan's layers (blocks from 1)
m = re.search(r"^policy  (\d+) of (\d+) blocks recomputed(?: \(([\d,]*)\))?(?:, (\d+) middle \(([\d,]*)\))?", t, re.M)
L = int(m.group(2))
rec = {int(x) for x in (m.group(3) or "").split(",") if x}
mid = {int(x) for x in (m.group(5) or "").split(",") if x}
full = rec  # the list names the blocks recomputed in full
cell = p.splitlines()[[i for i, l in enumerate(p.splitlines()) if l.startswith("stage  layers")][0] + 1]
last = re.split(r"\s{2,}", cell.strip())[-1]
def span(s):
    out = set()
    for part in s.split(","):
        part = part.strip()
        if not part or part == "-":
            continue
        a, _, b = part.partition("-")
        out |= set(range(int(a), int(b or a) + 1))
    return out
pfull, _, pmid = last.partition("; middle ")
pfull = set() if pfull.startswith("middle") else span(pfull)
if last.startswith("middle "):
    pmid = last[len("middle "):]
pmid = span(pmid)
same_policy = {b + 1 for b in full} == pfull and {b + 1 for b in mid} == pmid
# the slowdown as plan's objective
ts = re.search(r"^time    ([\d.e+]+) GFLOP a micro-batch, without recomputation ([\d.e+]+), slowdown ([\d.e+]+)", t, re.M)
ps = re.search(r"objective bottleneck = ([\d.e+]+), without recomputation \(best split, memory ignored\) ([\d.e+]+), slowdown ([\d.e+]+)", p)
close = lambda a, b: abs(float(a) - float(b)) <= 1e-3 * max(1.0, abs(float(b)))
same_time = ts and ps and all(close(ts.group(i), ps.group(i)) for i in (1, 2, 3))
numbered = re.search(r"^blocks  numbered 0\.\.%d here; remat plan numbers them as its layers 1-%d \(0 the embedding, %d the head\)$" % (L - 1, L, L + 1), t, re.M)
ok = same_policy and same_time and numbered
print("   full %s, middle %s (plan's layers %s; middle %s); slowdown %s" % (
    sorted(full), sorted(mid), sorted(pfull), sorted(pmid), ps and ps.group(3)))
if not ok:
    print("policy", sorted(full), sorted(mid), "plan", sorted(pfull), sorted(pmid), "time", ts and ts.groups(), ps and ps.groups(), "numbered", bool(numbered))
sys.exit(0 if ok else 1)
PY
done
"$remat" train --config gpt2-124m --batch 8 --seq 1024 --mem 6G --plan-only --precision fp32 >b.out 2>&1
grep -q "^budget  --mem 6G = 6000000000 bytes (5.59 GiB) bounds the arena; the data is held beside it\$" b.out &&
  ok "a decimal budget echoed in bytes and GiB" || bad "budget line: $(grep '^budget' b.out)"
"$remat" train --config small --batch 8 --seq 64 --mem 25MiB --plan-only --precision fp32 >b.out 2>&1
grep -q "^budget  --mem 25MiB = 26214400 bytes (25.00 MiB) bounds the arena" b.out &&
  ok "a binary budget echoed in bytes" || bad "budget line: $(grep '^budget' b.out)"
"$remat" plan --config gpt2-124m --batch 8 --seq 1024 --mem 6G --precision fp32 >p.out 2>&1
grep -q "^note: --mem 6G is 6000000000 bytes (5.59 GiB) a stage\$" p.out &&
  ok "remat plan echoes a budget in bytes and GiB too" || bad "plan's budget note: $(grep '^note' p.out)"
"$remat" plan --config small --batch 8 --seq 64 --stages 2 --mem 25MiB,30MiB --precision fp32 >p.out 2>&1
grep -q "^note: --mem 25MiB,30MiB is 26214400 bytes (25.00 MiB), 31457280 bytes (30.00 MiB), one per stage\$" p.out &&
  ok "and each of a budget per stage" || bad "plan's budgets note: $(grep '^note' p.out)"
"$remat" train --config small --batch 8 --seq 64 --ckpt-layers 0,middle:1 --plan-only --precision fp32 >c.out 2>&1
grep -q "^time    .* GFLOP a micro-batch, without recomputation .*, slowdown 1\.[0-9]* (remat plan's objective for one stage)\$" c.out &&
  ok "--plan-only states the slowdown of a policy given by hand too" || bad "slowdown: $(grep '^time' c.out)"

summary

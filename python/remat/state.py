"""Persistent bytes per parameter: weights, gradients, optimizer state.

Mixed precision (bf16, fp16) follows the ZeRO paper's accounting: 2-byte
weights and gradients, and an fp32 master copy that belongs to the optimizer
state (so ZeRO-1 shards it with the moments). ZeRO over D data-parallel
replicas shards the optimizer state (stage >= 1), the gradients (>= 2) and
the weights (3); tensor parallelism of degree tp divides a layer's parameter
count (norms replicated by tp are counted divided too: a slight
underestimate for them).

The table is remat's own (remat_state_bytes in the library, the one remat
train's ZeRO figures come from too): this module asks the remat command
(`remat state`, found as remat.config says) and keeps its answers.
"""
import functools
import json
import operator
import subprocess

from .config import PlanError, find_cli


@functools.lru_cache(maxsize=None)
def _ask(cli, num_params, precision, optimizer, zero, dp, tp):
    r = subprocess.run([cli, "state", "--params", str(num_params), "--precision", precision,
                        "--optimizer", optimizer, "--zero", str(zero), "--dp", str(dp),
                        "--tp", str(tp)], capture_output=True, text=True)
    msg = r.stderr.strip()
    if r.returncode == 2:  # a value remat refuses: say which, in its words
        raise ValueError(msg.removeprefix("remat state: "))
    if r.returncode:
        raise PlanError(f"{cli} state failed ({r.returncode}): {msg}")
    return json.loads(r.stdout)


def state(num_params, precision="fp32", optimizer="adamw", zero=0, dp=1, tp=1, cli=None):
    """remat's figures for num_params parameters on one rank, a dict:
    weights, grads, optimizer_state (bytes of each) and bytes (their sum),
    with the arguments."""
    ints = [operator.index(v) for v in (num_params, zero, dp, tp)]
    return dict(_ask(find_cli(cli), ints[0], str(precision), str(optimizer), *ints[1:]))


def state_bytes(num_params, precision="fp32", optimizer="adamw", zero=0, dp=1, tp=1, cli=None):
    """Whole bytes of persistent state for num_params parameters on one rank."""
    return state(num_params, precision, optimizer, zero, dp, tp, cli)["bytes"]

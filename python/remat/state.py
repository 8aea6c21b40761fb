"""Persistent bytes per parameter: weights, gradients, optimizer state.

Mixed precision (bf16, fp16) follows the ZeRO paper's accounting: 2-byte
weights and gradients, and an fp32 master copy that belongs to the optimizer
state (so ZeRO-1 shards it with the moments). ZeRO over D data-parallel
replicas shards the optimizer state (stage >= 1), the gradients (>= 2) and
the weights (3); tensor parallelism of degree tp divides a layer's parameter
count (norms replicated by tp are counted divided too: a slight
underestimate for them).
"""

PRECISIONS = {  # weight bytes, gradient bytes, master-copy bytes
    "fp32": (4, 4, 0),
    "bf16": (2, 2, 4),
    "fp16": (2, 2, 4),
}
OPTIMIZERS = {  # fp32 bytes of optimizer state per parameter
    "adamw": 8,
    "adam": 8,
    "sgd": 0,
    "sgd-momentum": 4,
    "none": 0,
}


def _ceil_div(a, b):
    return -(-a // b)


def bytes_per_param(precision="fp32", optimizer="adamw", zero=0, dp=1):
    """(weights, grads, optimizer incl. master) bytes per parameter, each
    before sharding, and the divisor that applies to each."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: one of {', '.join(PRECISIONS)}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer {optimizer!r}: one of {', '.join(OPTIMIZERS)}")
    if zero not in (0, 1, 2, 3):
        raise ValueError("zero must be 0, 1, 2 or 3")
    if dp < 1:
        raise ValueError("dp must be >= 1")
    w, g, master = PRECISIONS[precision]
    k = master + OPTIMIZERS[optimizer] if optimizer != "none" else 0
    return (w, 1 if zero < 3 else dp), (g, 1 if zero < 2 else dp), (k, 1 if zero < 1 else dp)


def state_bytes(num_params, precision="fp32", optimizer="adamw", zero=0, dp=1, tp=1):
    """Whole bytes of persistent state for num_params parameters on one rank."""
    if tp < 1:
        raise ValueError("tp must be >= 1")
    n = _ceil_div(num_params, tp)
    return sum(_ceil_div(b * n, d) for b, d in bytes_per_param(precision, optimizer, zero, dp))

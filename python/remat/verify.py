"""remat.verify: runs each stage of a plan on one device with the
micro-batches it holds at the schedule's peak (1F1B: stage s of P holds
min(P - s, M); GPipe: M), each layer under the plan's policy, and compares
the plan's bytes with what the stage measurably keeps.

- saved bytes: the storages saved for backward by the stage's layers over
  its micro-batches (saved_tensors_hooks, by storage, parameters and buffers
  left out), plus the RNG states checkpoint contexts keep on the device;
  planned: n_s * (sum of act_bytes over kept layers, ckpt_bytes over
  recomputed ones, middle_bytes over middle ones). These two are exact and
  must be equal.
- peak bytes: the allocator's peak growth while the stage runs its forwards
  and then its backwards (parameter gradients allocated beforehand, and the
  incoming gradient, except on the last stage, where the head makes it): on
  CUDA ``max_memory_allocated``, on the CPU the profiler's memory events.
  Planned: the plan's memory less the state and (but on the last stage) the
  incoming gradient (stage_bytes). Each sent output's data is freed once
  the next micro-batch starts, as Megatron does, unless a layer saved it, so
  the outputs do not pile up (the plan counts one, boundary_bytes).
"""
import json

import torch
from torch.autograd import Variable

from . import measure
from ._saved import SavedCounter, state_keys, storage_of
from .profile import _Untouched, fresh_input, split_batch, _layer_inputs


def _backward(y, g):
    # like Megatron's custom_backward: y's data may have been freed (only its
    # graph is needed), so the shape check of torch.autograd.backward is skipped
    Variable._execution_engine.run_backward((y,), (g,), False, False, (), True, True)


class Verification:
    """verify's answer: ``stages``, one dict per stage (planned and measured
    saved and peak bytes, the plan's memory and its sum from the profile,
    the layers' policies); ``saved_equal``; ``str()`` a table."""

    def __init__(self, stages, device):
        self.stages, self.device = stages, device

    @property
    def saved_equal(self):
        return all(s["measured_saved_bytes"] == s["planned_saved_bytes"] for s in self.stages)

    def to_dict(self):
        """The stages' figures and the device, as JSON takes them."""
        return {"device": str(self.device), "saved_equal": self.saved_equal,
                "stages": [dict(s) for s in self.stages]}

    def save(self, path):
        """Writes to_dict() as JSON (what `python3 -m remat.plot plan
        --measured` reads)."""
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1)
            f.write("\n")
        return path

    def __str__(self):
        src = "max_memory_allocated" if self.device.type == "cuda" else "CPU profiler"
        lines = [f"{'stage':>5} {'held':>4} {'saved planned':>14} {'saved measured':>15} "
                 f"{'peak planned':>13} {'peak measured':>14}  ({src}; peak: bytes above the state "
                 f"and the incoming gradient)"]
        for s in self.stages:
            lines.append(f"{s['stage']:>5} {s['microbatches_held']:>4} {s['planned_saved_bytes']:>14} "
                         f"{s['measured_saved_bytes']:>15} {s['planned_peak_bytes']:>13} "
                         f"{s['measured_peak_bytes']:>14}")
        return "\n".join(lines)


def _bytes_under(row, policy):
    return {"keep": row["act_bytes"], "full": row["ckpt_bytes"],
            "selective": row.get("middle_bytes")}[policy]


def _transient_under(row, policy):
    return {"keep": row["work_bytes"], "full": row.get("recompute_bytes", 0),
            "selective": row.get("middle_recompute_bytes", 0)}[policy]


def verify(model, plan, sample_batch, device=None):
    """Runs every stage of `plan` (made by remat.plan from a Profile of
    `model`) and returns a Verification: per stage the planned and measured
    saved bytes and peak bytes."""
    prof = plan.profile
    if prof is None:
        raise ValueError("verify needs a plan made from a Profile (remat.plan(remat.profile(...)))")
    chain = prof.chain
    if device is None:
        p = next(model.parameters(), None)
        device = p.device if p is not None else torch.device("cpu")
    device = torch.device(device)
    inputs, targets = split_batch(sample_batch)
    if chain.repeated:
        raise ValueError("this profile measured one block for all the layers (num_layers): "
                         "verify runs the model's own layers; profile the built model to verify")
    exclude = state_keys(model) | set(chain.side_keys())
    for m in chain.modules():
        exclude |= state_keys(m)
    mods = plan.stage_modules(reentrant=True)  # the profiler counts under the reentrant form
    # like profile, verify leaves the model as it found it (buffers such as
    # BatchNorm's statistics, gradients, modes, the RNG state)
    with _Untouched([model] + chain.modules(), device):
        model.train()
        xs = _layer_inputs(chain, inputs, targets)
        P = len(plan.stages)
        out = []
        for s, st in enumerate(plan.stages):
            out.append(_stage(plan, prof, chain, s, st, mods[s], xs, targets, exclude, device, P))
    return Verification(out, device)


def _stage(plan, prof, chain, s, st, seq, xs, targets, exclude, device, P):
    n = plan.held(s)
    first, count = st["first_layer"], st["layers"]
    ids = list(range(first, first + count))
    rows = [prof.layers[l] for l in ids]
    pols = [plan.policies[l] for l in ids]
    per_mb = sum(_bytes_under(r, p) for r, p in zip(rows, pols))
    trans = max(_transient_under(r, p) for r, p in zip(rows, pols))
    state = sum(r["state_bytes"] for r in rows)
    boundary = prof.boundary_bytes if s < P - 1 else 0
    recomposed = prof.stage_bytes + boundary + state + n * per_mb + trans

    last = chain.is_last(ids[-1])
    params = [p for m in seq for p in m.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    with torch.no_grad():
        probe = xs[first]
        for l in ids:
            probe = chain.layer(l, "keep")(probe)
    g = None if last else torch.randn_like(probe)
    del probe
    with measure.Peak(device) as pk:
        with SavedCounter(exclude, device) as c:
            outs = []
            for k in range(n):
                if outs and not last and storage_of(outs[-1])[0] not in c.saved:
                    # the previous output has been sent: free its data
                    outs[-1].data = torch.empty(0, device=outs[-1].device, dtype=outs[-1].dtype)
                x = fresh_input(xs[first])
                tg = None if targets is None or not last else targets.clone()
                for l, layer in zip(ids, seq):
                    c.layer = l
                    y = layer(x)
                    c.input_done(x)  # while x is alive: its address not yet reused
                    x = y
                del y
                if last:
                    x = chain.loss_fn(x, tg)
                outs.append(x)
        measured = c.total()
        c.release()  # let the backward free what it has used
        for y in outs:
            if last:
                y.backward()
            else:
                _backward(y, g)
        del outs, x
    for p in params:
        p.grad = None
    return {"stage": s, "layers": count, "first_layer": first, "microbatches_held": n,
            "policies": pols,
            "planned_saved_bytes": n * per_mb, "measured_saved_bytes": measured,
            "planned_memory_bytes": st["memory_bytes"], "recomposed_memory_bytes": recomposed,
            "state_bytes": state,
            # on the last stage the incoming gradient is made inside the stage (by the head)
            "planned_peak_bytes": recomposed - state - (0 if last else prof.stage_bytes),
            "measured_peak_bytes": pk.peak,
            # the measured peak with what it is measured above (remat.plot's measured bar)
            "measured_memory_bytes": pk.peak + state + (0 if last else prof.stage_bytes)}

"""Per-layer policies as plain PyTorch modules.

- keep: the layer as it is; autograd saves what its backward needs.
- full: ``Checkpointed(layer)``: ``torch.utils.checkpoint`` (reentrant) saves
  the layer's inputs and reruns its forward in the backward pass (remat's
  *recompute*).
- selective: ``Selective(layer, names)``: the submodules named (relative to
  the layer, e.g. ``"attn.core"``) are checkpointed inside it and everything
  else is kept: their inputs are saved, their internals rerun. This is the
  analogue of remat's *middle* policy (a second, partial way to recompute);
  which submodules to name is the user's choice. Checkpointing the attention
  core (scores, softmax, weighted sum) is Megatron's selective recomputation.

The profiler measures under the reentrant checkpoint, whose saved inputs pass
through ``save_for_backward`` and so are counted by ``saved_tensors_hooks``
(torch 1.13 and 2.x alike). The modules a plan hands to training
(``Plan.stage_modules``) use the non-reentrant one by default: it saves the
same inputs, and it works with ``torch.autograd.grad(inputs=...)``, which
torch's zero-bubble pipeline schedules call and the reentrant form refuses.
"""
import torch
import torch.nn as nn
import torch.utils.checkpoint as _cp

from ._saved import active_counter


def checkpoint_call(fn, *args, preserve_rng_state=True, reentrant=True):
    """Runs fn(*args) under torch.utils.checkpoint (reentrant or not), and
    reports the RNG state a reentrant context keeps to an active counter."""
    out = _cp.checkpoint(fn, *args, use_reentrant=reentrant, preserve_rng_state=preserve_rng_state)
    if not reentrant:
        return out
    counter = active_counter()
    if counter is not None:
        first = out[0] if isinstance(out, (tuple, list)) else out
        ctx = getattr(first, "grad_fn", None)
        kept = []
        for name in ("fwd_cpu_state",):
            t = getattr(ctx, name, None)
            if isinstance(t, torch.Tensor):
                kept.append(t)
        for name in ("fwd_gpu_states", "fwd_device_states"):  # names differ across versions
            for t in getattr(ctx, name, None) or []:
                if isinstance(t, torch.Tensor):
                    kept.append(t)
        counter.add_context(kept)
    return out


class Checkpointed(nn.Module):
    """A layer whose forward is rerun in the backward pass (full recompute)."""

    def __init__(self, module, preserve_rng_state=True, reentrant=True):
        super().__init__()
        self.module = module
        self.preserve_rng_state = preserve_rng_state
        self.reentrant = reentrant

    def forward(self, *args):
        return checkpoint_call(self.module, *args, preserve_rng_state=self.preserve_rng_state,
                               reentrant=self.reentrant)


class Selective(nn.Module):
    """A layer whose named submodules are checkpointed and the rest kept.

    The submodules are patched only while this module runs (the layer object
    itself is not changed), so the same layer can be profiled under every
    policy."""

    def __init__(self, module, names, preserve_rng_state=True, reentrant=True):
        super().__init__()
        self.module = module
        self.names = list(names)
        self.preserve_rng_state = preserve_rng_state
        self.reentrant = reentrant
        for n in self.names:
            module.get_submodule(n)  # fails early on a wrong name

    def forward(self, *args):
        subs = [self.module.get_submodule(n) for n in self.names]
        saved = []
        try:
            for sub in subs:
                orig = sub.forward
                saved.append((sub, "forward" in sub.__dict__, sub.__dict__.get("forward")))
                sub.forward = _patched(orig, self.preserve_rng_state, self.reentrant)
            return self.module(*args)
        finally:
            for sub, had, old in reversed(saved):
                if had:
                    sub.forward = old
                else:
                    del sub.forward


def _patched(orig, preserve, reentrant):
    def forward(*args):
        if not any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            return orig(*args)  # nothing to save for: run as it is
        return checkpoint_call(orig, *args, preserve_rng_state=preserve, reentrant=reentrant)

    return forward


def wrap(module, policy, selective=None, preserve_rng_state=True, reentrant=True):
    """The module under a policy: 'keep', 'full' or 'selective'."""
    if policy == "keep":
        return module
    if policy == "full":
        return Checkpointed(module, preserve_rng_state, reentrant)
    if policy == "selective":
        if not selective:
            raise ValueError("the selective policy needs the names of the submodules to checkpoint")
        return Selective(module, selective, preserve_rng_state, reentrant)
    raise ValueError(f"unknown policy {policy!r} (keep, full or selective)")

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

A layer of the chain is called with one tensor; ``Layer(module, kwargs)``
binds the constant keyword arguments a block takes (remat.profile's
side_inputs) and passes on the first element of a tuple output. Keyword
arguments reach checkpointed modules as positional tensors, so the
checkpoint saves them and their gradients flow.

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


def checkpoint_call(fn, *args, preserve_rng_state=True, reentrant=True, kwargs=None):
    """Runs fn(*args, **kwargs) under torch.utils.checkpoint (reentrant or
    not), and reports the RNG state a reentrant context keeps to an active
    counter. The checkpoint takes positional arguments only: tensor keyword
    arguments are passed to it positionally (so it saves them, and their
    gradients flow), the others bound."""
    if kwargs:
        names = [k for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
        fixed = {k: v for k, v in kwargs.items() if k not in names}
        n, inner = len(args), fn

        def fn(*a):
            return inner(*a[:n], **fixed, **dict(zip(names, a[n:])))

        args = args + tuple(kwargs[k] for k in names)
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


def first_tensor(y, name, module):
    """A chain member's output as the chain passes it on: the tensor, or
    of a tuple or list (the Hugging Face style) its first element, which
    must be the tensor."""
    if isinstance(y, torch.Tensor):
        return y
    if isinstance(y, (tuple, list)) and y and isinstance(y[0], torch.Tensor):
        return y[0]
    what = (f"a {type(y).__name__} whose first element is {type(y[0]).__name__}"
            if isinstance(y, (tuple, list)) and y else f"{type(y).__name__}")
    raise TypeError(f"{name} ({type(module).__name__}) returns {what}, not a tensor: the chain "
                    f"passes one tensor from layer to layer; make it return the hidden state, or "
                    f"a tuple with the hidden state first")


class Layer(nn.Module):
    """A member of the chain as the chain calls it: module(x, **kwargs)
    with its constant keyword arguments (side inputs: a mask, position
    ids) bound, and of a tuple output the first element."""

    def __init__(self, module, kwargs=None, name="layer"):
        super().__init__()
        self.module = module
        self.kwargs = dict(kwargs or {})
        self.name = name

    def forward(self, x):
        inner = self.module.module if isinstance(self.module, (Checkpointed, Selective)) else self.module
        return first_tensor(self.module(x, **self.kwargs), self.name, inner)


class Checkpointed(nn.Module):
    """A layer whose forward is rerun in the backward pass (full recompute)."""

    def __init__(self, module, preserve_rng_state=True, reentrant=True):
        super().__init__()
        self.module = module
        self.preserve_rng_state = preserve_rng_state
        self.reentrant = reentrant

    def forward(self, *args, **kwargs):
        return checkpoint_call(self.module, *args, preserve_rng_state=self.preserve_rng_state,
                               reentrant=self.reentrant, kwargs=kwargs)


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

    def forward(self, *args, **kwargs):
        subs = [self.module.get_submodule(n) for n in self.names]
        saved = []
        try:
            for sub in subs:
                orig = sub.forward
                saved.append((sub, "forward" in sub.__dict__, sub.__dict__.get("forward")))
                sub.forward = _patched(orig, self.preserve_rng_state, self.reentrant)
            return self.module(*args, **kwargs)
        finally:
            for sub, had, old in reversed(saved):
                if had:
                    sub.forward = old
                else:
                    del sub.forward


def _patched(orig, preserve, reentrant):
    def forward(*args, **kwargs):
        if not any(isinstance(a, torch.Tensor) and a.requires_grad
                   for a in list(args) + list(kwargs.values())):
            return orig(*args, **kwargs)  # nothing to save for: run as it is
        return checkpoint_call(orig, *args, preserve_rng_state=preserve, reentrant=reentrant,
                               kwargs=kwargs)

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

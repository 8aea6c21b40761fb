"""Counting the bytes autograd keeps for the backward pass.

Every tensor an operation saves for its backward goes through the pack hook
of ``torch.autograd.graph.saved_tensors_hooks``. A saved tensor keeps its
whole storage alive, whatever part of it the tensor views, so bytes are
counted per storage: a storage is identified by (device, data pointer) and
counted once with its full ``nbytes``. Storages of the model's parameters and
buffers are not activations (they are state) and are left out.

``torch.utils.checkpoint`` with ``use_reentrant=True`` (the wrappers in
``remat.wrap``) saves its inputs through ``save_for_backward``, so the hook
sees them; it also keeps the random-number state on its context when
``preserve_rng_state`` is set. That state is not a saved tensor, so the
wrappers report it here separately (only tensors on the measured device
count: on a GPU the saved RNG states are host tensors).
"""
import threading

import torch
from torch.autograd.graph import saved_tensors_hooks

_active = threading.local()


def storage_of(t):
    """(key, nbytes) of the storage a tensor views."""
    if hasattr(t, "untyped_storage"):  # torch >= 2.0
        s = t.untyped_storage()
    else:  # torch 1.13
        s = t.storage()
    return (str(t.device), s.data_ptr()), s.nbytes()


def state_keys(module):
    """Storage keys of a module's parameters and buffers."""
    keys = set()
    for t in list(module.parameters()) + list(module.buffers()):
        keys.add(storage_of(t)[0])
    return keys


class SavedCounter:
    """Records, while active, every storage saved for backward, with the
    index of the layer that was running (``self.layer``, set by the caller).

    ``saved[key] = (nbytes, layer)`` for the first layer that saved the
    storage; ``inputs[key] = layer`` for storages that were a layer's input
    (set with ``mark_input``); ``ctx_bytes[layer]`` sums the RNG states the
    checkpoint contexts of that layer keep on ``device``. The pack hook keeps
    a reference to every tensor it sees (autograd does too), and mark_input
    to every input, so a storage cannot be freed and its address reused
    while the counter is alive.
    """

    def __init__(self, exclude=(), device=None):
        self.exclude = set(exclude)
        self.device = None if device is None else str(torch.device(device))
        self.layer = 0
        self.saved = {}
        self.inputs = {}
        self.ctx_bytes = {}
        self.unsaved = {}  # layer -> bytes of its inputs that nothing saved
        self._hold = []
        self._ctx_seen = set()
        self._hooks = saved_tensors_hooks(self._pack, self._unpack)

    def _pack(self, t):
        key, nbytes = storage_of(t)
        if key not in self.exclude and nbytes > 0 and key not in self.saved:
            self.saved[key] = (nbytes, self.layer)
        self._hold.append(t)
        return t

    @staticmethod
    def _unpack(t):
        return t

    def mark_input(self, t):
        """Marks the storages of a layer's input tensors as owned by it."""
        for x in _tensors(t):
            key, _ = storage_of(x)
            self.inputs.setdefault(key, self.layer)
            # held, as saved tensors are: an input no layer saves (a post-norm
            # block's, whose projections save a contiguous copy) would
            # otherwise be freed and its address given to a later layer's
            # storage, which would then be counted as this layer's
            self._hold.append(x)

    def input_done(self, t):
        """After the running layer's forward on input t: an input storage
        that nothing saved still counts as kept by the layer. The tensor a
        stage receives is a leaf that autograd holds until its gradient is
        made (and a sender keeps what it sends), so a layer that does not
        save its input (a post-norm block, whose projections save a copy)
        still keeps it whenever it begins a stage."""
        for x in _tensors(t):
            key, nbytes = storage_of(x)
            # each call is one input at one time: an address seen before was
            # freed since (verify does not hold its layers' inputs)
            if key in self.exclude or key in self.saved or not nbytes:
                continue
            self.unsaved[self.layer] = self.unsaved.get(self.layer, 0) + nbytes

    def add_context(self, tensors):
        """RNG states kept by a checkpoint context (not saved tensors)."""
        for t in tensors:
            if self.device is not None and str(t.device) != self.device:
                continue
            key, nbytes = storage_of(t)
            if key in self._ctx_seen:
                continue
            self._ctx_seen.add(key)
            self._hold.append(t)
            self.ctx_bytes[self.layer] = self.ctx_bytes.get(self.layer, 0) + nbytes

    def __enter__(self):
        self._prev = getattr(_active, "counter", None)
        _active.counter = self
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
        _active.counter = self._prev
        return False

    def per_layer(self, n):
        """Bytes per layer: a storage belongs to the layer whose input it
        is, otherwise to the layer that saved it first; checkpoint contexts'
        RNG states to the layer that made them."""
        out = [0] * n
        for key, (nbytes, layer) in self.saved.items():
            owner = self.inputs.get(key, layer)
            out[owner] += nbytes
        for layer, b in self.ctx_bytes.items():
            out[layer] += b
        for layer, b in self.unsaved.items():
            out[layer] += b
        return out

    def total(self):
        return (sum(b for b, _ in self.saved.values()) + sum(self.ctx_bytes.values())
                + sum(self.unsaved.values()))

    def release(self):
        self._hold.clear()


def active_counter():
    return getattr(_active, "counter", None)


def _tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []

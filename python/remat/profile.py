"""remat.profile: measures a user's PyTorch model layer by layer and writes
remat's planner problem (docs/plan.md, docs/profile.md).

The model is seen as a chain: an optional embedding, the repeated layers (the
blocks, which the planner may recompute), an optional head, and a loss:

    x = embedding(inputs); x = block_0(x); ...; out = head(x); loss = loss_fn(out, targets)

Each member of the chain is one layer of the problem, in this order.
"""
import json
import math
import statistics

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import measure
from ._saved import SavedCounter, state_keys, storage_of
from .state import state_bytes
from .wrap import Layer, first_tensor, wrap

POLICIES = ("keep", "full", "selective")


def _resolve(model, spec, what):
    if spec is None or isinstance(spec, nn.Module):
        return spec
    if isinstance(spec, (list, tuple)) and all(isinstance(m, nn.Module) for m in spec):
        return list(spec)
    if isinstance(spec, str) and model is None:
        raise ValueError(f"{what}: give a module (there is no model to find {spec!r} in)")
    if isinstance(spec, str):
        obj = model
        for part in spec.split("."):
            obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
        return obj
    raise TypeError(f"{what}: a module or the dotted name of one in the model")


def default_loss(out, targets):
    """Cross entropy over the last dimension when there are targets, else
    the sum of the output."""
    if targets is None:
        return out.sum()
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), targets.reshape(-1))


class Chain:
    """The model as a sequence of layers, and how to run it under policies."""

    def __init__(self, blocks, embedding=None, head=None, loss_fn=None, selective=None,
                 preserve_rng_state=True, side_inputs=None, repeated=False):
        self.entries = []  # (name, kind, module)
        if embedding is not None:
            self.entries.append(("embedding", "embedding", embedding))
        for i, b in enumerate(blocks):
            self.entries.append((f"block{i}", "block", b))
        if head is not None:
            self.entries.append(("head", "head", head))
        self.loss_fn = loss_fn or default_loss
        self.selective = list(selective) if selective else None
        self.preserve_rng_state = preserve_rng_state
        # keyword arguments every block is called with (a mask, position ids)
        self.side_inputs = dict(side_inputs or {})
        # the blocks are one module measured once for all (a model too large to build)
        self.repeated = repeated
        self.tuple_layers = set()  # layers whose output is a tuple (its first element passed on)

    def __len__(self):
        return len(self.entries)

    def modules(self):
        return [m for _, _, m in self.entries]

    def recomputable(self, i):
        return self.entries[i][1] == "block"

    def kwargs(self, i):
        """The keyword arguments layer i is called with: the side inputs,
        for the blocks."""
        return self.side_inputs if self.entries[i][1] == "block" else {}

    def side_keys(self):
        """Storage keys and bytes of the side inputs' tensors (held once,
        as the state is, not saved per layer and micro-batch)."""
        out = {}
        for v in self.side_inputs.values():
            if isinstance(v, torch.Tensor):
                key, nbytes = storage_of(v)
                out[key] = nbytes
        return out

    def layer(self, i, policy, reentrant=True):
        """Layer i under a policy (embedding and head always keep), called
        with its side inputs; of a tuple output its first element."""
        name, _, mod = self.entries[i]
        if not self.recomputable(i):
            policy = "keep"
        return Layer(wrap(mod, policy, self.selective, self.preserve_rng_state, reentrant),
                     self.kwargs(i), name)

    def is_last(self, i):
        return i == len(self.entries) - 1

    def step(self, i, x, policy, targets):
        """Layer i's forward on x; the last layer's output goes through the
        loss (its saved tensors belong to the last layer)."""
        y = self.layer(i, policy)(x)
        if self.is_last(i):
            y = self.loss_fn(y, targets)
        return y


def split_batch(sample_batch):
    if isinstance(sample_batch, (tuple, list)):
        if len(sample_batch) != 2:
            raise ValueError("sample_batch: inputs, or (inputs, targets)")
        return sample_batch[0], sample_batch[1]
    return sample_batch, None


def fresh_input(x):
    """A copy with a storage of its own (so that micro-batches never share
    one), requiring grad when it is floating point."""
    y = x.detach().clone()
    if y.is_floating_point():
        y.requires_grad_(True)
    return y


class Profile:
    """What ``remat.profile`` measured. ``layers`` is a list of dicts, one per
    layer of the chain, with the problem's fields (bytes; times in seconds,
    written to the problem in ms) and ``name``, ``kind``, ``params``; ``stage_bytes`` and ``boundary_bytes``
    as in the problem; ``chain`` runs the model (for ``plan``'s exports and
    ``verify``)."""

    def __init__(self, chain, layers, stage_bytes, boundary_bytes, info, notes):
        self.chain = chain
        self.layers = layers
        self.stage_bytes = stage_bytes
        self.boundary_bytes = boundary_bytes
        self.info = info
        self.notes = notes

    def groups(self, middle=True):
        """Consecutive layers with the same kind and byte figures form one
        group (so the planner sees identical layers as such); a group's times
        are the medians of its layers' times."""
        keys = ("act_bytes", "ckpt_bytes", "state_bytes", "work_bytes", "recompute_bytes",
                "middle_bytes", "middle_recompute_bytes")
        out, members = [], []

        def flush():
            if not members:
                return
            first = members[0]
            g = {"name": first["kind"] if first["kind"] != "block" else first["type"],
                 "count": len(members)}
            for k in ("fwd", "bwd"):
                g[k] = _ms(statistics.median(m[k] for m in members))
            g["act_bytes"] = first["act_bytes"]
            g["ckpt_bytes"] = first["ckpt_bytes"]
            g["state_bytes"] = first["state_bytes"]
            g["work_bytes"] = first["work_bytes"]
            if first["recomputable"]:
                g["recompute"] = _ms(statistics.median(m["recompute"] for m in members))
                g["recompute_bytes"] = first["recompute_bytes"]
                if middle and first.get("middle_bytes") is not None:
                    g["middle_bytes"] = first["middle_bytes"]
                    g["middle_recompute"] = _ms(statistics.median(m["middle_recompute"] for m in members))
                    g["middle_recompute_bytes"] = first["middle_recompute_bytes"]
            else:
                g["recomputable"] = False
            out.append(g)

        for L in self.layers:
            if members and (members[0]["kind"], members[0]["type"]) == (L["kind"], L["type"]) and all(
                    members[0].get(k) == L.get(k) for k in keys):
                members.append(L)
            else:
                flush()
                members = [L]
        flush()
        return out

    def problem(self, stages, microbatches, memory, schedule="1f1b", objective="bottleneck",
                middle=True):
        """remat's problem JSON (a dict) for this model."""
        inf = self.info
        return {
            "comment": (f"remat.profile of {inf['model']} on {inf['device']} (torch {inf['torch']}): "
                        f"micro-batch {inf['batch']}, {inf['dtype']} activations, state for "
                        f"{inf['precision']} {inf['optimizer']} ZeRO-{inf['zero']} dp={inf['dp']} "
                        f"tp={inf['tp']}; times in ms (medians of {inf['repeats']})"),
            "stages": stages,
            "microbatches": microbatches,
            "schedule": schedule,
            "objective": objective,
            "memory": memory,
            "stage_bytes": self.stage_bytes,
            "boundary_bytes": self.boundary_bytes,
            "layers": self.groups(middle),
            **self._job(),
        }

    def _job(self):
        """The job's fields the exports use, where known."""
        inf, out = self.info, {"data_parallel": self.info["dp"], "tensor_parallel": self.info["tp"]}
        fam = inf.get("family")
        if isinstance(fam, str) and fam and all(c.isalnum() or c in "_-" for c in fam):
            out["family"] = fam.lower()
        for k in ("micro_batch_size", "seq_length"):
            if isinstance(inf.get(k), int) and inf[k] > 0:
                out[k] = inf[k]
        return out

    def write(self, path, stages, microbatches, memory, **kw):
        with open(path, "w") as f:
            json.dump(self.problem(stages, microbatches, memory, **kw), f, indent=1)
            f.write("\n")
        return path


def _ms(seconds):
    """Milliseconds, rounded to 1/1024 ms so the planner reads them exactly."""
    return math.ceil(seconds * 1000 * 1024) / 1024 if seconds > 0 else 0.0


def _counted_run(chain, inputs, targets, policy, exclude, device):
    """Forward of the whole chain under one policy for the blocks; bytes
    saved per layer."""
    n = len(chain)
    with SavedCounter(exclude, device) as c:
        x = fresh_input(inputs)
        for i in range(n):
            c.layer = i
            c.mark_input(x)
            y = chain.step(i, x, policy, targets)
            c.input_done(x)
            x = y
    per = c.per_layer(n)
    del x
    c.release()
    return per


def _layer_inputs(chain, inputs, targets):
    """Each layer's input (forwards without autograd). A layer that
    returns its input, or a view of it, is refused: its output's storage
    would be the next layer's input and its saved bytes would be counted
    with one layer and kept by two."""
    xs = []
    with torch.no_grad():
        x = inputs
        for i in range(len(chain)):
            xs.append(x.detach())
            name, _, mod = chain.entries[i]
            raw = mod(x, **chain.kwargs(i))
            if not isinstance(raw, torch.Tensor):
                chain.tuple_layers.add(i)
            y = first_tensor(raw, name, mod)
            del raw
            if not chain.is_last(i):
                if storage_of(y)[0] == storage_of(x)[0]:
                    raise ValueError(f"{name} ({type(mod).__name__}) returns its input (or a view "
                                     f"of it), which the next layer then keeps too: leave it out "
                                     f"of the chain (it has nothing to plan), or return a new "
                                     f"tensor (x.clone())")
                x = y
    return xs


def _out_bytes(t):
    return t.numel() * t.element_size()


class _LayerRun:
    """One layer alone on its recorded input: forward, backward, timing and
    transient bytes under a policy."""

    def __init__(self, chain, i, x, targets, device):
        self.chain, self.i, self.x, self.targets, self.device = chain, i, x, targets, device
        self.params = [p for p in chain.entries[i][2].parameters() if p.requires_grad]
        with torch.no_grad():
            y = chain.step(i, fresh_input(x), "keep", targets)
        self.grad = None if chain.is_last(i) else torch.randn_like(y)
        self.out_bytes = _out_bytes(y)

    def forward(self, policy):
        return self.chain.step(self.i, fresh_input(self.x), policy, self.targets)

    def backward(self, y):
        if self.grad is None:
            y.backward()
        else:
            torch.autograd.backward(y, self.grad)

    def transient(self, policy):
        """Largest transient bytes of a forward and of a backward: the
        forward's peak above what it leaves allocated, the backward's peak
        growth (parameter gradients already allocated, as from the second
        micro-batch on)."""
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        with measure.Peak(self.device) as pf:
            y = self.forward(policy)
        with measure.Peak(self.device) as pb:
            self.backward(y)
        del y
        return max(pf.peak - pf.end, pb.peak, 0)

    def times(self, policy, repeats):
        """Median forward and backward seconds."""
        fw, bw = [], []
        for r in range(repeats + 1):
            measure.sync(self.device)
            t0 = measure.time.perf_counter()
            y = self.forward(policy)
            measure.sync(self.device)
            t1 = measure.time.perf_counter()
            self.backward(y)
            measure.sync(self.device)
            t2 = measure.time.perf_counter()
            del y
            if r:  # the first is a warm-up
                fw.append(t1 - t0)
                bw.append(t2 - t1)
        return statistics.median(fw), statistics.median(bw)

    def sub_time(self, names, repeats):
        """Median seconds spent in the forwards of the named submodules
        during one forward of the layer (what the selective policy reruns)."""
        mod = self.chain.entries[self.i][2]
        spent = [0.0]
        start = {}
        hooks = []
        for n in names:
            sub = mod.get_submodule(n)

            def pre(m, args, n=n):
                measure.sync(self.device)
                start[n] = measure.time.perf_counter()

            def post(m, args, out, n=n):
                measure.sync(self.device)
                spent[0] += measure.time.perf_counter() - start[n]

            hooks.append(sub.register_forward_pre_hook(pre))
            hooks.append(sub.register_forward_hook(post))
        out = []
        try:
            for r in range(repeats + 1):
                spent[0] = 0.0
                with torch.no_grad():
                    self.forward("keep")
                if r:
                    out.append(spent[0])
        finally:
            for h in hooks:
                h.remove()
        return statistics.median(out)


def _check_runnable(chain, inputs, device):
    """Refuses what would measure nothing: an empty batch, or data on the
    meta device (shapes without storage: every byte would read as 0)."""
    if inputs.numel() == 0:
        raise ValueError(f"sample_batch is empty (shape {tuple(inputs.shape)}): profile measures "
                         f"one micro-batch as you train it; give at least one sample")
    meta = [n for n, _, m in chain.entries
            if any(t.is_meta for t in list(m.parameters()) + list(m.buffers()))]
    if device.type == "meta" or inputs.is_meta or meta:
        where = f"the layers {', '.join(meta)} are" if meta else "the sample batch is" \
            if inputs.is_meta else "the device is"
        raise ValueError(f"{where} on the meta device, which holds no data, so nothing can be "
                         f"measured: materialise what profile runs on a real device (e.g. "
                         f"module.to_empty(device='cpu') and initialise it); for a model too "
                         f"large to build, profile one block with num_layers=N")


class _Untouched:
    """Keeps a model as profile found it: its buffers (BatchNorm's running
    statistics and num_batches_tracked), its parameters' gradients, its
    training flag and the random-number state are put back on exit."""

    def __init__(self, modules, device):
        self.modules = [m for m in modules if m is not None]
        self.device = device

    def __enter__(self):
        seen = set()
        self.buffers, self.grads, self.modes = [], [], []
        for m in self.modules:
            for sub in m.modules():
                self.modes.append((sub, sub.training))
            for b in m.buffers():
                if id(b) not in seen:
                    seen.add(id(b))
                    self.buffers.append((b, b.detach().clone()))
            for q in m.parameters():
                if id(q) not in seen:
                    seen.add(id(q))
                    self.grads.append((q, None if q.grad is None else q.grad.detach().clone()))
        self.rng = torch.get_rng_state()
        self.cuda_rng = (torch.cuda.get_rng_state(self.device)
                         if self.device.type == "cuda" else None)
        return self

    def __exit__(self, *exc):
        with torch.no_grad():
            for b, v in self.buffers:
                b.copy_(v)
        for q, g in self.grads:
            q.grad = g
        for sub, mode in self.modes:
            sub.training = mode
        torch.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state(self.cuda_rng, self.device)
        return False


def profile(model, sample_batch, layers, embedding=None, head=None, loss_fn=None, selective=None,
            precision="fp32", optimizer="adamw", zero=0, dp=1, tp=1, device=None, repeats=3,
            preserve_rng_state=True, family=None, cli=None, side_inputs=None, num_layers=None,
            shard=False):
    """Measures every layer of the chain on one micro-batch (sample_batch:
    inputs, or (inputs, targets)) and returns a Profile.

    layers: the repeated blocks (a list or ModuleList, or its dotted name in
    model); embedding, head: a module or a dotted name, or None; loss_fn:
    loss_fn(output, targets) (default cross entropy). selective: names of
    submodules of a block (e.g. ["attn.core"]) that the selective (middle)
    policy checkpoints; None: no middle policy. precision ('fp32', 'bf16',
    'fp16'), optimizer ('adamw', 'adam', 'sgd', 'sgd-momentum', 'none'),
    zero (0-3) over dp replicas and tp give the state bytes; the activations
    are those of the modules as they run here (cast the model and use the
    dtype you train with). With tp > 1, shard=True says the modules are one
    tensor rank's shard (built at 1/tp of the heads and the MLP, or
    parallelized): their parameters and activations are a rank's as
    measured. shard=False (the default) measures the whole layers: their
    state is divided by tp, their activations are not, an upper bound of a
    rank's, and the problem's notes say so. Times are medians of `repeats` runs on `device`
    (default: the device of the model's first parameter). family: the model
    family for the exports ("llama", "gpt2", ...; default: a Hugging Face
    model's config.model_type, if it has one). cli: the remat command, which
    gives the state bytes (remat.state; default: as remat.config says).

    side_inputs: keyword arguments every block is called with, the same for
    all (an attention or padding mask, position ids): block(x, **side_inputs).
    Their tensors are held once, like state: left out of the saved bytes and
    counted in stage_bytes. A block may return a tuple (the Hugging Face
    style): its first element is the chain's tensor.

    num_layers: for a model too large to build: `layers` is one block (a
    module), measured once at full width, and the problem has num_layers
    copies of it; embedding and head are modules (model may be None). The
    problem is the one profiling all num_layers blocks gives.

    The model is left as it was found (buffers such as BatchNorm's running
    statistics, gradients, training flags, the RNG state)."""
    state_bytes(0, precision, optimizer, zero, dp, tp, cli)  # refuse bad values before measuring
    if num_layers is not None:
        if not isinstance(num_layers, int) or isinstance(num_layers, bool) or num_layers < 1:
            raise ValueError(f"num_layers: a positive number of blocks, not {num_layers!r}")
        block = _resolve(model, layers, "layers")
        if isinstance(block, (list, tuple, nn.ModuleList)):
            if len(block) != 1:
                raise ValueError(f"with num_layers, layers is one block (a module), not "
                                 f"{len(block)} of them")
            block = block[0]
        blocks = [block]
    else:
        blocks = list(_resolve(model, layers, "layers"))
    if not blocks:
        raise ValueError("layers: no blocks")
    chain = Chain(blocks, _resolve(model, embedding, "embedding"), _resolve(model, head, "head"),
                  loss_fn, selective, preserve_rng_state, side_inputs)
    if device is None:
        p = next((q for m in ([model] if model is not None else []) + chain.modules()
                  for q in m.parameters()), None)
        device = p.device if p is not None else torch.device("cpu")
    device = torch.device(device)
    inputs, targets = split_batch(sample_batch)
    _check_runnable(chain, inputs, device)
    with _Untouched(([model] if model is not None else []) + chain.modules(), device):
        # a shard's parameters are already a rank's: its state is not divided again
        rows, xs, notes = _measure(model, chain, inputs, targets, precision, optimizer, zero, dp,
                                   1 if shard else tp, device, repeats, cli,
                                   other=num_layers is None)
    if tp > 1:
        notes.append(f"tp={tp}: " + (
            "the modules are one tensor rank's shard; bytes and times as measured" if shard else
            "the activations were measured on the whole layers, not one tensor rank's shard: an "
            "upper bound of a rank's (a rank keeps 1/tp of the heads' and the MLP's); profile "
            "one rank's shard with shard=True for its own"))
    if num_layers is not None:
        rows, chain = _repeat(rows, chain, num_layers)

    outs = [r["out_bytes"] for r in rows[:-1]] or [rows[0]["out_bytes"]]
    named = model if model is not None else blocks[0]
    info = {"model": type(named).__name__, "device": str(device), "torch": torch.__version__,
            "batch": "x".join(str(s) for s in inputs.shape),
            "dtype": str(next((r for r in xs if r.is_floating_point()), xs[-1]).dtype).replace("torch.", ""),
            "precision": precision, "optimizer": optimizer, "zero": zero, "dp": dp, "tp": tp,
            "repeats": repeats,
            "family": family or getattr(getattr(named, "config", None), "model_type", None),
            "micro_batch_size": int(inputs.shape[0]) if inputs.dim() >= 1 else None,
            # token ids (batch, sequence): a language model's sequence length
            "seq_length": (int(inputs.shape[1]) if inputs.dim() == 2 and not inputs.is_floating_point()
                           else None)}
    side = sum(chain.side_keys().values())
    if side:
        notes.append(f"the side inputs ({', '.join(chain.side_inputs)}) hold {side} bytes on every "
                     f"stage: counted in stage_bytes")
    # every stage holds one incoming gradient of a layer's output while its
    # layers run backward, and every stage but the last the output it sends
    return Profile(chain, rows, max(outs) + side, max(outs), info, notes)


def _repeat(rows, chain, n):
    """The rows and chain of n copies of the one measured block."""
    k = next(i for i, r in enumerate(rows) if r["kind"] == "block")
    copies = []
    for j in range(n):
        r = dict(rows[k])
        r["name"] = f"block{j}"
        copies.append(r)
    emb = chain.entries[0][2] if chain.entries[0][1] == "embedding" else None
    head = chain.entries[-1][2] if chain.entries[-1][1] == "head" else None
    big = Chain([chain.entries[k][2]] * n, emb, head, chain.loss_fn, chain.selective,
                chain.preserve_rng_state, chain.side_inputs, repeated=True)
    for i in chain.tuple_layers:
        big.tuple_layers |= set(range(k, k + n)) if i == k else {i if i < k else i + n - 1}
    return rows[:k] + copies + rows[k + 1:], big


def _measure(model, chain, inputs, targets, precision, optimizer, zero, dp, tp, device, repeats,
             cli, other=True):
    """The rows of the problem, one per layer of the chain (see Profile),
    the layers' inputs and the notes."""
    n = len(chain)
    notes = []
    exclude = set(chain.side_keys())
    if model is not None:
        exclude |= state_keys(model)
    for m in chain.modules():
        exclude |= state_keys(m)

    for m in [model] + chain.modules():
        if m is not None:
            m.train()
    xs = _layer_inputs(chain, inputs, targets)
    saved = {pol: _counted_run(chain, inputs, targets, pol, exclude, device)
             for pol in POLICIES if pol != "selective" or chain.selective}
    for i in range(n):
        if not chain.recomputable(i) and len({saved[p][i] for p in saved}) > 1:
            notes.append(f"{chain.entries[i][0]}: its saved bytes depend on the blocks' policy "
                         f"({', '.join(str(saved[p][i]) for p in saved)}); the largest is used")

    # parameters counted once per layer that holds them (a tied embedding
    # and head each hold a copy on different stages)
    seen_params = set()
    rows = []
    for i, (name, kind, mod) in enumerate(chain.entries):
        run = _LayerRun(chain, i, xs[i], targets, device)
        params = 0
        for p in mod.parameters():
            params += p.numel()
            seen_params.add(storage_of(p)[0])
        buf = sum(_out_bytes(b) for b in mod.buffers())
        row = {"name": name, "kind": kind, "type": type(mod).__name__, "params": params,
               "recomputable": kind == "block", "out_bytes": run.out_bytes,
               "state_bytes": state_bytes(params, precision, optimizer, zero, dp, tp, cli) + buf,
               "buffer_bytes": buf}
        if kind == "block":
            row["act_bytes"] = saved["keep"][i]
            row["ckpt_bytes"] = saved["full"][i]
        else:
            row["act_bytes"] = row["ckpt_bytes"] = max(saved[p][i] for p in saved)
        # times first: the profiler that measures CPU transients slows what follows it
        row["fwd"], row["bwd"] = run.times("keep", repeats)
        if kind == "block":
            row["recompute"] = row["fwd"]  # the rerun is the layer's forward
            if chain.selective:
                row["middle_recompute"] = run.sub_time(chain.selective, repeats)
        row["work_bytes"] = run.transient("keep")
        if kind == "block":
            row["recompute_bytes"] = run.transient("full")
            if chain.selective:
                row["middle_bytes"] = saved["selective"][i]
                row["middle_recompute_bytes"] = run.transient("selective")
        rows.append(row)
        for p in mod.parameters():
            if p.grad is not None:
                p.grad = None

    if other and model is not None:
        other_params = sum(p.numel() for p in model.parameters()
                           if storage_of(p)[0] not in seen_params)
        if other_params:
            rows[0]["state_bytes"] += state_bytes(other_params, precision, optimizer, zero, dp, tp, cli)
            rows[0]["params"] += other_params
            notes.append(f"{other_params} parameters of the model are in no layer of the chain; "
                         f"their state is counted with {rows[0]['name']}")
    return rows, xs, notes

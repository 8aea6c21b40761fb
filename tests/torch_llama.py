"""Compares remat's Llama with a PyTorch Llama written here in plain
nn.Module code, as Meta's reference and llama2.c's model.py write it:
RMSNorm (x * rsqrt(mean(x^2) + eps) * weight), q, k and v as bias-free
products, the rotary embedding on adjacent pairs (x[2i], x[2i+1]) by the
angle pos * theta^(-2i/hs), grouped-query attention by repeating each
key/value head for its NH/NKV query heads, causal softmax scaled by
1/sqrt(hs), SwiGLU w2(silu(w1 x) * w3 x), residuals, a final RMSNorm and
the head (its own matrix, or the embedding when tied), F.cross_entropy
over the B*T tokens; torch.optim.AdamW with remat's settings (betas
(0.9, 0.95), eps 1e-8, weight decay 0.1 on the matrices and the embedding
only, lr 1e-2 constant) after global-norm clipping to 1.0.

The model is loaded from the checkpoint remat writes (llama2.c's version 1,
read here as export.py writes it), which must hold exactly remat's initial
parameters. Two shapes: untied with NKV < NH (llama:2,64,4,2,96,256,32,
blocks full recompute and keep) and tied with NKV = 1 and theta 500000
(llama:2,64,4,1,96,256,32,500000,1, blocks middle and keep); a batch of
B = 2 sequences of the full context T = 32; 5 AdamW steps. Three checks,
each to float32 rounding with torch_reference.py's fp32 tolerances:
  - each step's loss and gradient, PyTorch's taken at the parameters remat
    took its own at (so that step 5's compares the gradient, not how far
    two trainings drifted apart): the loss within 1e-5 relative, the
    gradient within 1e-5 of its largest element, and each tensor's within
    1e-5 of its own largest element (a tensor of small gradients, such as a
    norm's, cannot hide in the global maximum);
  - the update: PyTorch's clipping and AdamW fed remat's gradients from
    remat's initial parameters give remat's parameters before every later
    step and after the last within 1e-6;
  - training apart, as torch_reference.py does: PyTorch trains on its own
    from the checkpoint; each step's loss within 1e-5 relative, and the
    parameters after the steps with a median difference under 1e-7, a 99th
    percentile under 1e-5 and none beyond 2 lr steps (AdamW divides by
    sqrt(v), so where a gradient is tiny a rounding difference moves its
    parameter by up to lr per step).

The rotary angles, cos and sin are computed in float64 and rounded to
float32 once, as remat's kernels document. model.py's tables (frequencies
and angles in float32) differ from these by up to 6e-7 at T = 32; with
them the test passes with the same margins.

The test checks that it can fail: models with the rotary embedding turned
the other way, RMSNorm's eps ten times smaller, the key/value heads
repeated in the wrong order (query head h on kv head h % NKV, where
NKV > 1) and, when tied, the head's share left out of the embedding's
gradient must each miss the first step's tolerance.

bf16 is not compared: remat refuses to train a Llama in bf16 so far.

usage: torch_llama.py LLAMA_DUMP WORKDIR
"""
import math
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

B, STEPS = 2, 5  # as llama_dump.c's
LR, WD, CLIP, BETAS, EPS = 1e-2, 0.1, 1.0, (0.9, 0.95), 1e-8
NORM_EPS = 1e-5  # what remat gives a "llama:" shape
SHAPES = [("untied", "llama:2,64,4,2,96,256,32", "rk"),
          ("tied", "llama:2,64,4,1,96,256,32,500000,1", "mk")]
GRAD_TOL, TENSOR_TOL, LOSS_TOL, UPDATE_TOL = 1e-5, 1e-5, 1e-5, 1e-6


def parse_spec(spec):
    """remat's "llama:L,C,NH,NKV,H,V,T[,theta[,tied]]"."""
    f = spec.split(":", 1)[1].split(",")
    L, C, NH, NKV, H, V, T = (int(v) for v in f[:7])
    theta = float(f[7]) if len(f) > 7 else 10000.0
    tied = len(f) > 8 and int(f[8]) == 1
    return dict(L=L, C=C, NH=NH, NKV=NKV, H=H, V=V, T=T, theta=theta, tied=tied)


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(hs, T, theta):
    """cos and sin of pos * theta^(-2i/hs), (T, hs/2), in double rounded once."""
    freqs = theta ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), freqs)
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rotary(x, cos, sin, sign):
    """x (B, T, heads, hs), rotated pairwise: (x[2i], x[2i+1]) by the angle."""
    xr, xi = x.reshape(x.shape[:-1] + (-1, 2)).unbind(-1)
    cos, sin = cos[None, :, None, :], sign * sin[None, :, None, :]
    return torch.stack([xr * cos - xi * sin, xr * sin + xi * cos], dim=-1).flatten(3)


class Block(nn.Module):
    def __init__(self, s, eps, faults):
        super().__init__()
        C, H = s["C"], s["H"]
        self.NH, self.NKV, self.hs = s["NH"], s["NKV"], C // s["NH"]
        self.faults = faults
        kv = self.NKV * self.hs
        self.attention_norm = RMSNorm(C, eps)
        self.wq = nn.Linear(C, C, bias=False)
        self.wk = nn.Linear(C, kv, bias=False)
        self.wv = nn.Linear(C, kv, bias=False)
        self.wo = nn.Linear(C, C, bias=False)
        self.ffn_norm = RMSNorm(C, eps)
        self.w1 = nn.Linear(C, H, bias=False)
        self.w2 = nn.Linear(H, C, bias=False)
        self.w3 = nn.Linear(C, H, bias=False)

    def forward(self, x, cos, sin):
        Bb, Tt, C = x.shape
        xn = self.attention_norm(x)
        q = self.wq(xn).view(Bb, Tt, self.NH, self.hs)
        k = self.wk(xn).view(Bb, Tt, self.NKV, self.hs)
        v = self.wv(xn).view(Bb, Tt, self.NKV, self.hs)
        sign = -1.0 if "rope_sign" in self.faults else 1.0
        q, k = apply_rotary(q, cos, sin, sign), apply_rotary(k, cos, sin, sign)
        rep = self.NH // self.NKV
        if "kv_order" in self.faults:  # query head h on kv head h % NKV
            k, v = k.repeat(1, 1, rep, 1), v.repeat(1, 1, rep, 1)
        else:  # query head h on kv head h // rep, as model.py's repeat_kv
            k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hs))
        mask = torch.tril(torch.ones(Tt, Tt, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(Bb, Tt, C)
        x = x + self.wo(y)
        xn = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(xn)) * self.w3(xn))


class Llama(nn.Module):
    def __init__(self, s, faults=()):
        super().__init__()
        eps = NORM_EPS / 10 if "eps" in faults else NORM_EPS
        self.s, self.faults = s, faults
        self.tok_embeddings = nn.Embedding(s["V"], s["C"])
        self.layers = nn.ModuleList([Block(s, eps, faults) for _ in range(s["L"])])
        self.norm = RMSNorm(s["C"], eps)
        self.output = None if s["tied"] else nn.Linear(s["C"], s["V"], bias=False)
        cos, sin = rope_tables(s["C"] // s["NH"], s["T"], s["theta"])
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)

    def head(self):
        if self.output is not None:
            return self.output.weight
        w = self.tok_embeddings.weight
        return w.detach() if "tie_grad" in self.faults else w

    def forward(self, idx, targets):
        Tt = idx.shape[1]
        x = self.tok_embeddings(idx)
        for blk in self.layers:
            x = blk(x, self.cos[:Tt], self.sin[:Tt])
        logits = self.norm(x) @ self.head().t()
        return F.cross_entropy(logits.reshape(-1, self.s["V"]), targets.reshape(-1))

    def lp_order(self):
        """(name, [tensors], per-layer?) in remat's REMAT_LP_* order."""
        ls = self.layers
        out = [("tok_embeddings", [self.tok_embeddings.weight], False)]
        for name in ("attention_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w2", "w3"):
            out.append((name, [getattr(b, name).weight for b in ls], True))
        out.append(("norm", [self.norm.weight], False))
        if self.output is not None:
            out.append(("output", [self.output.weight], False))
        return out


def read_v1(path, s):
    """llama2.c's version 1 (export.py's version1_export): a 256-byte header
    (uint32 0x616b3432 "ak42", int32 1, dim, hidden_dim, n_layers, n_heads,
    n_kv_heads, vocab_size, max_seq_len, a uint8 shared_classifier), then
    fp32: every attention_norm, every ffn_norm, norm, tok_embeddings, every
    wq, wk, wv, wo, w1, w2, w3, and output when not shared. Returns
    {name: array}, the per-layer ones stacked."""
    raw = open(path, "rb").read()
    magic, version = np.frombuffer(raw, np.uint32, 1)[0], np.frombuffer(raw, np.int32, 1, 4)[0]
    dims = [int(v) for v in np.frombuffer(raw, np.int32, 7, 8)]
    shared = raw[36]
    L, C, NH, NKV, H, V, T = (s[k] for k in ("L", "C", "NH", "NKV", "H", "V", "T"))
    assert magic == 0x616B3432 and version == 1, "not llama2.c's version 1"
    assert dims == [C, H, L, NH, NKV, V, T], f"header {dims} for {s}"
    assert shared == int(s["tied"]) and not any(raw[37:256]), "bad flag or padding"
    kv = NKV * (C // NH)
    shapes = [("attention_norm", (L, C)), ("ffn_norm", (L, C)), ("norm", (C,)),
              ("tok_embeddings", (V, C)), ("wq", (L, C, C)), ("wk", (L, kv, C)),
              ("wv", (L, kv, C)), ("wo", (L, C, C)), ("w1", (L, H, C)), ("w2", (L, C, H)),
              ("w3", (L, H, C))] + ([] if shared else [("output", (V, C))])
    flat = np.frombuffer(raw, np.float32, offset=256).copy()
    out, off = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        out[name] = flat[off:off + n].reshape(shape)
        off += n
    assert off == flat.size, "checkpoint size mismatch"
    return out


def load(model, ckpt):
    with torch.no_grad():
        for name, ps, per_layer in model.lp_order():
            for i, p in enumerate(ps):
                p.copy_(torch.from_numpy(ckpt[name][i] if per_layer else ckpt[name]))


def flatten(model, attr=None):
    """Parameters (or their .grad) in remat's flat order."""
    out = []
    for _, ps, _ in model.lp_order():
        out += [(getattr(p, attr) if attr else p).detach().reshape(-1) for p in ps]
    return torch.cat(out).numpy()


def slices(model):
    """(name, first, end) of each LP tensor in the flat order."""
    out, off = [], 0
    for name, ps, _ in model.lp_order():
        n = sum(p.numel() for p in ps)
        out.append((name, off, off + n))
        off += n
    return out


def adamw(model):
    """remat's AdamW: weight decay on the matrices and the embedding only."""
    mats = ("wq", "wk", "wv", "wo", "w1", "w2", "w3")
    decay = [model.tok_embeddings.weight] + [
        getattr(b, n).weight for b in model.layers for n in mats]
    if model.output is not None:
        decay.append(model.output.weight)
    ids = {id(p) for p in decay}
    no_decay = [p for p in model.parameters() if id(p) not in ids]
    return torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=LR, betas=BETAS, eps=EPS, foreach=False)


def grad_errors(model, g, remat_g):
    """The step's gradient against remat's: the largest difference over the
    largest element, and the worst tensor's (name, its own relative error)."""
    whole = float(np.abs(g - remat_g).max()) / float(np.abs(g).max())
    worst = ("", 0.0)
    for name, a, b in slices(model):
        scale = float(np.abs(g[a:b]).max())
        e = float(np.abs(g[a:b] - remat_g[a:b]).max()) / scale if scale > 0 else 0.0
        if e > worst[1]:
            worst = (name, e)
    return whole, worst


def grads_ok(whole, worst):
    return whole < GRAD_TOL and worst[1] < TENSOR_TOL


def batch(work, s):
    tok = np.fromfile(os.path.join(work, "tokens.bin"), dtype=np.int32).astype(np.int64)
    n = B * s["T"]
    assert tok.size == 2 * n
    return (torch.from_numpy(tok[:n].reshape(B, s["T"])),
            torch.from_numpy(tok[n:].reshape(B, s["T"])))


def assign(model, flat, attr=None):
    """Sets the parameters (or their .grad) from remat's flat order."""
    off = 0
    with torch.no_grad():
        for _, ps, _ in model.lp_order():
            for p in ps:
                v = torch.from_numpy(flat[off:off + p.numel()].copy()).view_as(p)
                if attr:
                    setattr(p, attr, v)
                else:
                    p.copy_(v)
                off += p.numel()
    assert off == flat.size


def check_grads(label, model, work, idx, tgt):
    """Each step's loss and gradient at the parameters remat took it at."""
    remat_losses = np.fromfile(os.path.join(work, "losses.bin"), dtype=np.float32)
    failures = 0
    for step in range(STEPS):
        assign(model, np.fromfile(os.path.join(work, f"params_{step}.bin"), dtype=np.float32))
        model.zero_grad(set_to_none=False)
        loss = model(idx, tgt)
        loss.backward()
        remat_g = np.fromfile(os.path.join(work, f"grads_{step}.bin"), dtype=np.float32)
        whole, worst = grad_errors(model, flatten(model, "grad"), remat_g)
        ld = abs(loss.item() - float(remat_losses[step]))
        ok = grads_ok(whole, worst) and ld < LOSS_TOL * max(1.0, abs(loss.item()))
        print(f"{label} step {step + 1} at remat's parameters: loss torch {loss.item():.7f} "
              f"remat {remat_losses[step]:.7f} (diff {ld:.2e}); gradients max|diff|/max|g| "
              f"{whole:.2e}, worst tensor {worst[0]} {worst[1]:.2e}{'' if ok else '  FAILED'}")
        failures += not ok
    return failures


def check_update(label, model, work):
    """torch's clipping and AdamW fed remat's gradients, from remat's start:
    the parameters before each later step and after the last."""
    assign(model, np.fromfile(os.path.join(work, "params_0.bin"), dtype=np.float32))
    opt = adamw(model)
    worst = 0.0
    for step in range(STEPS):
        g = np.fromfile(os.path.join(work, f"grads_{step}.bin"), dtype=np.float32)
        assign(model, g, "grad")
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        name = f"params_{step + 1}.bin" if step + 1 < STEPS else "params_after.bin"
        remat_p = np.fromfile(os.path.join(work, name), dtype=np.float32)
        worst = max(worst, float(np.abs(flatten(model) - remat_p).max()))
    ok = worst < UPDATE_TOL
    print(f"{label}: {STEPS} updates on remat's gradients: max |diff| {worst:.2e} "
          f"(tol {UPDATE_TOL:.0e}){'' if ok else '  FAILED'}")
    return not ok


def check_training(label, model, work, idx, tgt):
    """torch trains on its own from the checkpoint: losses and parameters."""
    remat_losses = np.fromfile(os.path.join(work, "losses.bin"), dtype=np.float32)
    remat_after = np.fromfile(os.path.join(work, "params_after.bin"), dtype=np.float32)
    opt = adamw(model)
    failures = 0
    for step in range(STEPS):
        opt.zero_grad(set_to_none=False)
        loss = model(idx, tgt)
        loss.backward()
        ld = abs(loss.item() - float(remat_losses[step]))
        ok = ld < LOSS_TOL * max(1.0, abs(loss.item()))
        print(f"{label} step {step + 1} trained apart: loss torch {loss.item():.7f} remat "
              f"{remat_losses[step]:.7f} (diff {ld:.2e}){'' if ok else '  FAILED'}")
        failures += not ok
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
    diff = np.abs(flatten(model) - remat_after)
    med, p99, mx = float(np.median(diff)), float(np.quantile(diff, 0.99)), float(diff.max())
    ok = med < 1e-7 and p99 < 1e-5 and mx < 2 * LR * STEPS
    print(f"{label}: parameters after {STEPS} steps trained apart: median diff {med:.2e}, "
          f"99th pct {p99:.2e}, max {mx:.2e} (lr {LR}){'' if ok else '  FAILED'}")
    return failures + (not ok)


def check_shape(dump, work, label, spec, policies):
    work = os.path.join(work, label)
    os.makedirs(work, exist_ok=True)
    subprocess.run([dump, work, spec, policies], check=True)
    s = parse_spec(spec)
    ckpt = read_v1(os.path.join(work, "model.bin"), s)
    model = Llama(s)
    load(model, ckpt)
    start = np.fromfile(os.path.join(work, "params_0.bin"), dtype=np.float32)
    same = start.size == flatten(model).size and np.array_equal(start, flatten(model))
    print(f"{label}: the version 1 checkpoint holds remat's {start.size} initial parameters "
          f"bit for bit: {'yes' if same else 'NO'}")
    failures = not same
    idx, tgt = batch(work, s)
    failures += check_grads(label, Llama(s), work, idx, tgt)
    failures += check_update(label, Llama(s), work)
    failures += check_training(label, model, work, idx, tgt)
    failures += check_controls(label, s, ckpt, idx, tgt, work)
    return failures


def check_controls(label, s, ckpt, idx, tgt, work):
    """Each fault must miss the first step's tolerance (loss or gradients)."""
    faults = ["rope_sign", "eps"] + (["kv_order"] if s["NKV"] > 1 else []) + \
             (["tie_grad"] if s["tied"] else [])
    remat_g = np.fromfile(os.path.join(work, "grads_0.bin"), dtype=np.float32)
    remat_loss = float(np.fromfile(os.path.join(work, "losses.bin"), dtype=np.float32)[0])
    failures = 0
    for fault in faults:
        model = Llama(s, faults=(fault,))
        load(model, ckpt)
        loss = model(idx, tgt)
        loss.backward()
        whole, worst = grad_errors(model, flatten(model, "grad"), remat_g)
        lrel = abs(loss.item() - remat_loss) / max(1.0, abs(remat_loss))
        caught = not (grads_ok(whole, worst) and lrel < LOSS_TOL)
        print(f"{label} control {fault}: loss diff {lrel:.1e}, gradients {whole:.1e} "
              f"(worst {worst[0]} {worst[1]:.1e}): {'caught' if caught else 'NOT CAUGHT'}")
        failures += not caught
    return failures


def main():
    dump, work = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    failures = sum(check_shape(dump, work, *shape) for shape in SHAPES)
    print("torch_llama:", "ok" if failures == 0 else f"{failures} FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

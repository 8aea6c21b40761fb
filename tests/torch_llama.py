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
B = 2 sequences of the full context T = 32; 5 AdamW steps in fp32. Three
checks, each to float32 rounding with torch_reference.py's fp32
tolerances:
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

Then, where the CPU has bf16 products (llama_dump exits 3 where it has
not, and the check is skipped with a line), remat's mixed precision for
both shapes over 10 AdamW steps at lr 1e-3 from the same checkpoint and
tokens, against PyTorch run two ways: under torch.autocast("cpu",
dtype=torch.bfloat16), and as an fp32 model that rounds where remat's
Llama rounds (model/llama_block.c, the head in gpt2.c): every product on
bf16 operands (the matrices' bf16 copies, the head's too) with fp32
accumulation and its incoming gradient rounded to bf16; the norms'
outputs, q, k, v, h1, h3, the attention's output, the SwiGLU's output and
the logits stored in bf16; the rotary embedding turning the bf16 q and k,
rounded, its gradient rounded before and after; the attention as remat's
kernel computes it on bf16 operands (PolicyAttention: the exp rounded for
P v, the output's gradient rounded for its products, P and dS rounded for
theirs, D from the output as stored); the embedding, the residual stream,
the norms' statistics and backwards, the softmax and the loss in fp32.
Two checks:
  - trained apart, as torch_reference.py's bf16 check: the spread s
    between two runs of the same PyTorch model that differ only in
    summation order (the batch's two sequences swapped); remat within 3 s
    of the policy model at every step, no farther from autocast than the
    policy model is (plus s), and the first step's loss at least 10 times
    closer to the policy model than to fp32's (measured: s 2.4e-4, remat
    3.7e-4 and 1.5e-4 from the policy model; step 1 0 and 5e-7 from it,
    1e-5 and 4e-5 from fp32). Two trainings drift apart by as much as a
    misplaced rounding moves them (each mistake below stays within 3 s),
    hence the second check;
  - at remat's parameters (the tight check): the policy model's loss and
    gradient at the parameters remat took each step at, so that what is
    compared is one step's arithmetic, not two trainings' drift. The
    yardstick is the same policy evaluated in float64 between its
    roundings: an fp32 implementation of it differs from that only where
    its rounding errors tip a value to the other bf16 neighbour, which
    happens at few elements of few steps. The median over the steps of
    the loss differences must be within 3 times the yardstick's (at least
    3 float32 ulps of the loss; measured: 0, the yardstick 2e-7), and the
    root mean square over the steps of the gradient's relative difference
    (|g - g'| / |g'|) within 3 times the yardstick's (measured: 2.5e-4
    untied, 4.3e-4 tied; the yardstick 2.9e-4 and 4.0e-4).
The tight check must fail on the policy model with a deliberate mistake:
the residual stream rounded to bf16 after the attention branch
(round_res2), q and k left unrounded after the rotary embedding
(rope_fp32), the SwiGLU's output left unrounded (hsw_fp32) -- each moves
the loss median by 4e-5 to 2e-4, 30 to 160 times its tolerance -- and the
residual stream's gradient rounded at each block's input (dresid_bf16),
which moves the gradients by 1.4 to 1.8 times their tolerance. Mistakes
in the backward of one rounding's size, such as a product's incoming
gradient left in fp32 or a norm's output gradient rounded, move the
gradients by only 2 to 4 times the yardstick and are not claimed. The
policy model with autograd's softmax backward in place of the kernel's
(torch_reference.py's GPT-2 model) differs from remat's gradients by
about 1e-3, so the attention is written out.

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
BF16_STEPS, BF16_LR = 10, 1e-3  # llama_dump.c's in bf16
BF16_FAULTS = ("round_res2", "rope_fp32", "hsw_fp32", "dresid_bf16")
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


def adamw(model, lr=LR):
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
                             lr=lr, betas=BETAS, eps=EPS, foreach=False)


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


# ------------------------------------------------------------------ bf16

def bf16r(x):
    """x rounded to bf16 (to nearest even), kept in x's dtype."""
    return x.to(torch.bfloat16).to(x.dtype)


class RoundForward(torch.autograd.Function):
    """Rounds to bf16 (a stored bf16 tensor); its gradient passes as is."""
    @staticmethod
    def forward(ctx, x):
        return bf16r(x)

    @staticmethod
    def backward(ctx, g):
        return g


class RoundBackward(torch.autograd.Function):
    """The identity; the gradient through it is rounded to bf16 (a
    product's incoming gradient, which it takes as a bf16 operand)."""
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return bf16r(g)


def causal(T):
    return torch.tril(torch.ones(T, T, dtype=torch.bool))


class PolicyAttention(torch.autograd.Function):
    """remat's attention on bf16 operands (kernels/attention_bf16.c) for
    T <= 64, one tile of keys: q, k, v (B, NH, T, hs) hold bf16 values (k
    and v repeated for the query heads); S = scale q k^T, m its row max,
    O = round(exp(S - m)) v / l with l the sum of the unrounded exp, lse =
    m + log l. The backward recomputes P = exp(S - lse), dP = round(dO) v^T,
    D = rowsum(dO O) on the output as stored (bf16), dS = P (dP - D), and
    takes round(dS) for dq = scale dS k and dk = scale dS^T q, round(P) and
    round(dO) for dv = P^T dO."""
    @staticmethod
    def forward(ctx, q, k, v):
        T, scale = q.shape[-2], 1.0 / math.sqrt(q.shape[-1])
        assert T <= 64, "remat's kernel tiles the keys past 64 (REMAT__ATT16_BK)"
        S = (q @ k.transpose(-2, -1) * scale).masked_fill(~causal(T), float("-inf"))
        m = S.amax(dim=-1, keepdim=True)
        e = torch.exp(S - m)
        l = e.sum(dim=-1, keepdim=True)
        out = bf16r(e) @ v / l
        ctx.save_for_backward(q, k, v, bf16r(out), m + torch.log(l))
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        T, scale = q.shape[-2], 1.0 / math.sqrt(q.shape[-1])
        S = (q @ k.transpose(-2, -1) * scale).masked_fill(~causal(T), float("-inf"))
        P, dO = torch.exp(S - lse), bf16r(dout)
        D = (dout * out).sum(dim=-1, keepdim=True)
        dS = bf16r(P * (dO @ v.transpose(-2, -1) - D))
        return dS @ k * scale, dS.transpose(-2, -1) @ q * scale, bf16r(P).transpose(-2, -1) @ dO


def policy_block(b, x, cos, sin, faults):
    """A block as remat's bf16 path runs it (model/llama_block.c): bf16
    operands and fp32 accumulation in every product, whose incoming
    gradient is rounded (rb); the norms' outputs, q, k, v, h1, h3, the
    attention's and the SwiGLU's outputs stored in bf16 (rf); the rotary
    embedding on the bf16 q and k, rounded, its gradient rounded before and
    after; the residual stream, the norms' statistics and backwards in
    fp32. faults names deliberate mistakes (check_bf16's controls)."""
    rf, rb = RoundForward.apply, RoundBackward.apply
    Bb, Tt, C = x.shape
    NH, NKV, hs = b.NH, b.NKV, b.hs

    def product(inp, lin):
        return rb(inp @ rf(lin.weight).t())

    if "dresid_bf16" in faults:
        x = rb(x)
    xn = rf(b.attention_norm(x))
    q = rf(product(xn, b.wq)).view(Bb, Tt, NH, hs)
    k = rf(product(xn, b.wk)).view(Bb, Tt, NKV, hs)
    v = rf(product(xn, b.wv)).view(Bb, Tt, NKV, hs)
    q, k = rb(apply_rotary(q, cos, sin, 1.0)), rb(apply_rotary(k, cos, sin, 1.0))
    if "rope_fp32" not in faults:
        q, k = rf(q), rf(k)
    rep = NH // NKV
    k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    y = PolicyAttention.apply(*(t.transpose(1, 2) for t in (q, k, v)))
    y = rf(y.transpose(1, 2).contiguous().view(Bb, Tt, C))
    x = x + product(y, b.wo)
    if "round_res2" in faults:
        x = rf(x)
    xn = rf(b.ffn_norm(x))
    hsw = F.silu(rf(product(xn, b.w1))) * rf(product(xn, b.w3))
    if "hsw_fp32" not in faults:
        hsw = rf(hsw)
    return x + product(hsw, b.w2)


def policy_loss(model, idx, targets, faults=()):
    """The loss under remat's bf16 policy: the embedding in fp32, the
    blocks, the final norm's output in bf16, the logits (on the head's bf16
    copy) in bf16 with their gradient rounded, cross-entropy in fp32."""
    rf, rb = RoundForward.apply, RoundBackward.apply
    Tt = idx.shape[1]
    x = model.tok_embeddings(idx)
    for blk in model.layers:
        x = policy_block(blk, x, model.cos[:Tt], model.sin[:Tt], faults)
    logits = rf(rb(rf(model.norm(x)) @ rf(model.head()).t()))
    return F.cross_entropy(logits.reshape(-1, model.s["V"]), targets.reshape(-1))


def bf16_loss(model, idx, tgt, mode):
    if mode == "policy":
        return policy_loss(model, idx, tgt)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "autocast"):
        return model(idx, tgt)


def bf16_train(s, ckpt, idx, tgt, mode, swap=False):
    """BF16_STEPS losses of PyTorch trained from the checkpoint: mode
    "fp32", "autocast" or "policy"; swap exchanges the batch's sequences."""
    model = Llama(s)
    load(model, ckpt)
    if swap:
        idx, tgt = idx.flip(0), tgt.flip(0)
    opt = adamw(model, BF16_LR)
    out = []
    for _ in range(BF16_STEPS):
        opt.zero_grad(set_to_none=False)
        loss = bf16_loss(model, idx, tgt, mode)
        loss.backward()
        out.append(loss.item())
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
    return np.array(out)


def at_remat_params(s, work, idx, tgt, exact=False, faults=()):
    """The policy model's loss and gradient at the parameters remat took
    each of its steps at; exact: in float64 between the roundings."""
    model = Llama(s).double() if exact else Llama(s)
    losses, grads = [], []
    for step in range(BF16_STEPS):
        assign(model, np.fromfile(os.path.join(work, f"params_{step}.bin"), dtype=np.float32))
        model.zero_grad(set_to_none=False)
        loss = policy_loss(model, idx, tgt, faults)
        loss.backward()
        losses.append(loss.item())
        grads.append(flatten(model, "grad").astype(np.float64))
    return np.array(losses), grads


def away(la, ga, lb, gb):
    """How far (la, ga) is from (lb, gb) over the steps: the median of the
    loss differences and the root mean square of the gradients' relative
    differences (|ga - gb| / |gb| per step)."""
    rel = [np.linalg.norm(a - b) / np.linalg.norm(b) for a, b in zip(ga, gb)]
    return float(np.median(np.abs(la - lb))), float(np.sqrt(np.mean(np.square(rel))))


def check_bf16(dump, work, label, spec, policies):
    """remat's bf16 against PyTorch (see the top); returns the failures."""
    work = os.path.join(work, label + "-bf16")
    os.makedirs(work, exist_ok=True)
    r = subprocess.run([dump, work, spec, policies, "bf16"])
    if r.returncode == 3:
        print(f"{label} bf16: not checked, this CPU has no bf16 products")
        return 0
    if r.returncode != 0:
        print(f"{label} bf16: llama_dump failed")
        return 1
    s = parse_spec(spec)
    ckpt = read_v1(os.path.join(work, "model.bin"), s)
    idx, tgt = batch(work, s)
    remat = np.fromfile(os.path.join(work, "losses.bin"), dtype=np.float32).astype(np.float64)
    failures = 0

    # trained apart, as torch_reference.py's bf16 check
    fp32, auto, pol = (bf16_train(s, ckpt, idx, tgt, m) for m in ("fp32", "autocast", "policy"))
    spread = max(np.abs(auto - bf16_train(s, ckpt, idx, tgt, "autocast", True)).max(),
                 np.abs(pol - bf16_train(s, ckpt, idx, tgt, "policy", True)).max())
    d_pol, d_auto, d_between = (float(np.abs(a - b).max()) for a, b in
                                ((remat, pol), (remat, auto), (pol, auto)))
    first_pol, first_fp32 = abs(remat[0] - pol[0]), abs(remat[0] - fp32[0])
    for st in range(BF16_STEPS):
        print(f"{label} bf16 step {st + 1}: remat {remat[st]:.6f} policy {pol[st]:.6f} "
              f"autocast {auto[st]:.6f} fp32 {fp32[st]:.6f}")
    ok = (spread > 0 and d_pol <= 3 * spread and d_auto <= d_between + spread
          and first_pol * 10 <= first_fp32)
    print(f"{label} bf16 trained apart: summation-order spread s = {spread:.2e}; |remat - "
          f"policy| {d_pol:.2e} (tol 3 s = {3 * spread:.2e}); |remat - autocast| {d_auto:.2e} "
          f"(tol |policy - autocast| + s = {d_between + spread:.2e}); step 1: {first_pol:.1e} "
          f"from the policy, {first_fp32:.1e} from fp32{'' if ok else '  FAILED'}")
    failures += not ok

    # at remat's parameters: the tight check, and the faults it must catch
    grads = [np.fromfile(os.path.join(work, f"grads_{st}.bin"), dtype=np.float32)
             for st in range(BF16_STEPS)]
    lp, gp = at_remat_params(s, work, idx, tgt)
    le, ge = at_remat_params(s, work, idx, tgt, exact=True)
    ulp = float(np.spacing(np.float32(np.abs(remat).max())))
    yard_l, yard_g = away(lp, gp, le, ge)
    tol_l, tol_g = 3 * max(yard_l, ulp), 3 * yard_g
    dl, dg = away(remat, grads, lp, gp)
    ok = dl <= tol_l and dg <= tol_g
    print(f"{label} bf16 at remat's parameters, {BF16_STEPS} steps: loss median |diff| {dl:.1e} "
          f"(tol {tol_l:.1e}), gradients rms relative {dg:.1e} (tol {tol_g:.1e}); the policy in "
          f"float64 from the policy in fp32: {yard_l:.1e}, {yard_g:.1e}{'' if ok else '  FAILED'}")
    failures += not ok
    for fault in BF16_FAULTS:
        lf, gf = at_remat_params(s, work, idx, tgt, faults=(fault,))
        fl, fg = away(remat, grads, lf, gf)
        caught = fl > tol_l or fg > tol_g
        print(f"{label} bf16 control {fault}: loss {fl:.1e}, gradients {fg:.1e}: "
              f"{'caught' if caught else 'NOT CAUGHT'}")
        failures += not caught
    return failures


def main():
    dump, work = sys.argv[1], sys.argv[2]
    sys.stdout.reconfigure(line_buffering=True)  # in order with llama_dump's lines
    torch.manual_seed(0)
    torch.set_num_threads(1)
    failures = sum(check_shape(dump, work, *shape) for shape in SHAPES)
    failures += sum(check_bf16(dump, work, *shape) for shape in SHAPES)
    print("torch_llama:", "ok" if failures == 0 else f"{failures} FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

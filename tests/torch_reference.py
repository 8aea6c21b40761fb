"""Compares remat's GPT-2 with a PyTorch GPT-2 built from the same llm.c
checkpoint: nn.LayerNorm, F.gelu(approximate='tanh'), F.cross_entropy and
torch.optim.AdamW (decay on matrices and embeddings only), global-norm
clipping. Checks the loss, every gradient, and the parameters after three
optimizer steps, to float32 rounding.

Then, where the CPU has bf16 products, remat's mixed precision over 10
steps (lr 1e-3, from the same weights and tokens) against PyTorch run two
ways: under torch.autocast("cpu", dtype=torch.bfloat16), and as an fp32
model that rounds where remat's policy rounds (bf16 operands and fp32
accumulation in every product, the product's incoming gradient rounded to
bf16; ln, qkv, attention output, fc, GELU output and logits stored in bf16;
the attention's probabilities and its gradients rounded for its products;
the residual stream, statistics, softmax and loss in fp32). The tolerance
is measured, not chosen: the spread s between two runs of the same PyTorch
model that differ only in summation order (the batch's two sequences
swapped, which reorders every weight gradient's sum). remat must be within
3 s of the policy's model at every step, and no farther from autocast than
that model is (plus s): two bf16 policies differ by that much. And the
first step's loss (forward only, before training can diverge) must sit at
least 10 times closer to the policy's model than to fp32's: it fails if
remat's products silently ran in fp32 (remat's fp32 run there is 8e-5 from
the policy's model and 5e-7 from PyTorch fp32).

usage: torch_reference.py REF_DUMP WORKDIR
"""
import math
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

B, T, STEPS = 2, 16, 3
LR, WD, CLIP, BETAS, EPS = 1e-2, 0.1, 1.0, (0.9, 0.95), 1e-8
BF16_STEPS, BF16_LR = 10, 1e-3  # as ref_dump's BF16_STEPS and BF16_LR


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_fcproj = nn.Linear(4 * C, C)

    def forward(self, x):
        Bb, Tt, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        hs = C // self.NH
        q = q.view(Bb, Tt, self.NH, hs).transpose(1, 2)
        k = k.view(Bb, Tt, self.NH, hs).transpose(1, 2)
        v = v.view(Bb, Tt, self.NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.tril(torch.ones(Tt, Tt, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(Bb, Tt, C)
        x = x + self.c_proj(y)
        return x + self.c_fcproj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, maxT, V, Vp, L, NH, C):
        super().__init__()
        self.V = V
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(maxT, C)
        self.h = nn.ModuleList([Block(C, NH) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C, eps=1e-5)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1])
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.h:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        logits = logits[:, :, : self.V]
        return F.cross_entropy(logits.reshape(-1, self.V), targets.reshape(-1))


def load(path):
    hdr = np.fromfile(path, dtype=np.int32, count=256)
    assert hdr[0] == 20240326 and hdr[1] == 3, "bad checkpoint header"
    maxT, V, L, NH, C, Vp = (int(v) for v in hdr[2:8])
    flat = np.fromfile(path, dtype=np.float32, offset=1024)
    model = GPT(maxT, V, Vp, L, NH, C)
    shapes = [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C),
              (L, C), (L, C), (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]
    tensors, off = [], 0
    for s in shapes:
        n = int(np.prod(s))
        tensors.append(torch.from_numpy(flat[off:off + n].reshape(s).copy()))
        off += n
    assert off == flat.size, "checkpoint size mismatch"
    # views into the torch model, in llm.c's order, as (tensor list, per-layer?)
    order = [
        (lambda: [model.wte.weight], False), (lambda: [model.wpe.weight], False),
        (lambda: [b.ln_1.weight for b in model.h], True), (lambda: [b.ln_1.bias for b in model.h], True),
        (lambda: [b.c_attn.weight for b in model.h], True), (lambda: [b.c_attn.bias for b in model.h], True),
        (lambda: [b.c_proj.weight for b in model.h], True), (lambda: [b.c_proj.bias for b in model.h], True),
        (lambda: [b.ln_2.weight for b in model.h], True), (lambda: [b.ln_2.bias for b in model.h], True),
        (lambda: [b.c_fc.weight for b in model.h], True), (lambda: [b.c_fc.bias for b in model.h], True),
        (lambda: [b.c_fcproj.weight for b in model.h], True), (lambda: [b.c_fcproj.bias for b in model.h], True),
        (lambda: [model.ln_f.weight], False), (lambda: [model.ln_f.bias], False),
    ]
    with torch.no_grad():
        for (get, per_layer), t in zip(order, tensors):
            ps = get()
            for i, p in enumerate(ps):
                p.copy_(t[i] if per_layer else t)
    return model, order


def adamw(model, lr):
    """remat's AdamW: weight decay on the matrices and embeddings only."""
    decay = [model.wte.weight, model.wpe.weight] + [
        p for b in model.h for p in (b.c_attn.weight, b.c_proj.weight, b.c_fc.weight, b.c_fcproj.weight)]
    ids = {id(p) for p in decay}
    no_decay = [p for p in model.parameters() if id(p) not in ids]
    return torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=BETAS, eps=EPS, foreach=False)


def flatten(order, attr):
    out = []
    for get, _ in order:
        for p in get():
            v = getattr(p, attr) if attr else p
            out.append((torch.zeros_like(p) if v is None else v).detach().reshape(-1))
    return torch.cat(out).numpy()


class RoundForward(torch.autograd.Function):
    """Rounds to bf16 (a stored bf16 tensor); its gradient passes as is."""
    @staticmethod
    def forward(ctx, x):
        return x.to(torch.bfloat16).to(torch.float32)

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
        return g.to(torch.bfloat16).to(torch.float32)


def policy_linear(x, m, out_bf16):
    """A product under remat's bf16 policy: bf16 operands (x is stored in
    bf16 already), fp32 accumulation and bias, the output fp32 or bf16."""
    y = RoundBackward.apply(x @ RoundForward.apply(m.weight).t() + m.bias)
    return RoundForward.apply(y) if out_bf16 else y


def policy_block(b, x):
    Bb, Tt, C = x.shape
    rf = RoundForward.apply
    qkv = policy_linear(rf(b.ln_1(x)), b.c_attn, True)
    q, k, v = qkv.split(C, dim=2)
    hs = C // b.NH
    q, k, v = [t.view(Bb, Tt, b.NH, hs).transpose(1, 2) for t in (q, k, v)]
    # the attention's products on bf16 operands (remat's tiles on AVX512-BF16,
    # which every CPU with bf16 products has): exp(s - max) rounded for P v
    # and the sum divided out after (the online softmax), the output's
    # gradient rounded for dO v^T and P^T dO, the scores' gradient for dS k
    # and dS^T q (the scale, 1/4 here, is exact)
    att = RoundBackward.apply((q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs)))
    mask = torch.tril(torch.ones(Tt, Tt, dtype=torch.bool))
    att = att.masked_fill(~mask, float("-inf"))
    e = torch.exp(att - att.amax(dim=-1, keepdim=True).detach())
    att = rf(e) / e.sum(dim=-1, keepdim=True)
    y = rf(RoundBackward.apply(att @ v).transpose(1, 2).contiguous().view(Bb, Tt, C))
    x = x + policy_linear(y, b.c_proj, False)
    h = policy_linear(rf(b.ln_2(x)), b.c_fc, True)
    return x + policy_linear(rf(F.gelu(h, approximate="tanh")), b.c_fcproj, False)


def policy_loss(model, idx, targets):
    x = model.wte(idx) + model.wpe(torch.arange(idx.shape[1]))
    for blk in model.h:
        x = policy_block(blk, x)
    lnf = RoundForward.apply(model.ln_f(x))
    wte = RoundForward.apply(model.wte.weight)
    logits = RoundForward.apply(RoundBackward.apply(lnf @ wte.t()))[:, :, : model.V]
    return F.cross_entropy(logits.reshape(-1, model.V), targets.reshape(-1))


def train_losses(work, mode, swap=False):
    """BF16_STEPS losses of PyTorch from the checkpoint: mode "fp32",
    "autocast" or "policy"; swap exchanges the batch's two sequences."""
    model, _ = load(os.path.join(work, "model.bin"))
    tok = np.fromfile(os.path.join(work, "tokens.bin"), dtype=np.int32).astype(np.int64)
    idx = torch.from_numpy(tok[: B * T].reshape(B, T))
    tgt = torch.from_numpy(tok[B * T:].reshape(B, T))
    if swap:
        idx, tgt = idx.flip(0), tgt.flip(0)
    opt = adamw(model, BF16_LR)
    out = []
    for _ in range(BF16_STEPS):
        opt.zero_grad(set_to_none=False)
        if mode == "policy":
            loss = policy_loss(model, idx, tgt)
        else:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "autocast"):
                loss = model(idx, tgt)
        loss.backward()
        out.append(loss.item())
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
    return np.array(out)


def check_bf16(ref_dump, work):
    """The bf16 comparisons (see the top); returns the failures."""
    r = subprocess.run([ref_dump, work, "bf16"])
    if r.returncode == 3:
        print("bf16: not checked, this CPU has no bf16 products")
        return 0
    if r.returncode != 0:
        print("bf16: ref_dump failed")
        return 1
    remat16 = np.fromfile(os.path.join(work, "losses_bf16.bin"), dtype=np.float32)
    remat32 = np.fromfile(os.path.join(work, "losses_fp32_long.bin"), dtype=np.float32)
    fp32, auto, pol = (train_losses(work, m) for m in ("fp32", "autocast", "policy"))
    spread = max(np.abs(auto - train_losses(work, "autocast", True)).max(),
                 np.abs(pol - train_losses(work, "policy", True)).max())
    d_pol, d_auto, d_between = (float(np.abs(a - b).max()) for a, b in
                                ((remat16, pol), (remat16, auto), (pol, auto)))
    first_pol, first_fp32 = abs(remat16[0] - pol[0]), abs(remat16[0] - fp32[0])
    for s in range(BF16_STEPS):
        print(f"bf16 step {s + 1}: remat {remat16[s]:.6f} policy {pol[s]:.6f} "
              f"autocast {auto[s]:.6f} fp32 {fp32[s]:.6f} (remat fp32 {remat32[s]:.6f})")
    print(f"bf16: summation-order spread s = {spread:.2e}; |remat - policy| {d_pol:.2e} "
          f"(tol 3 s = {3 * spread:.2e}); |remat - autocast| {d_auto:.2e} (tol |policy - "
          f"autocast| + s = {d_between + spread:.2e}); step 1: {first_pol:.1e} from the "
          f"policy, {first_fp32:.1e} from fp32")
    failures = 0
    failures += not (spread > 0 and d_pol <= 3 * spread)
    failures += not d_auto <= d_between + spread
    failures += not first_pol * 10 <= first_fp32
    failures += not abs(remat32[0] - fp32[0]) < 1e-5 * abs(fp32[0])  # the fp32 twin is fp32's
    return failures


def main():
    ref_dump, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    subprocess.run([ref_dump, work], check=True)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model, order = load(os.path.join(work, "model.bin"))
    tok = np.fromfile(os.path.join(work, "tokens.bin"), dtype=np.int32).astype(np.int64)
    idx = torch.from_numpy(tok[: B * T].reshape(B, T))
    tgt = torch.from_numpy(tok[B * T:].reshape(B, T))
    remat_grads = np.fromfile(os.path.join(work, "grads.bin"), dtype=np.float32)
    remat_losses = np.fromfile(os.path.join(work, "losses.bin"), dtype=np.float32)
    remat_after = np.fromfile(os.path.join(work, "params_after.bin"), dtype=np.float32)

    opt = adamw(model, LR)
    failures = 0
    torch_losses = []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=False)
        loss = model(idx, tgt)
        loss.backward()
        torch_losses.append(loss.item())
        if step == 0:
            g = flatten(order, "grad")
            scale = float(np.abs(g).max())
            err = float(np.abs(g - remat_grads).max()) / scale
            print(f"gradients: max |remat - torch| / max |g| = {err:.3e} over {g.size} values")
            if not err < 1e-5:
                failures += 1
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
    for s in range(STEPS):
        d = abs(torch_losses[s] - float(remat_losses[s]))
        print(f"step {s + 1}: loss torch {torch_losses[s]:.7f} remat {remat_losses[s]:.7f} diff {d:.2e}")
        if not d < 1e-5 * max(1.0, abs(torch_losses[s])):
            failures += 1
    after = flatten(order, None)
    diff = np.abs(after - remat_after)
    # AdamW divides by sqrt(v): where a gradient is tiny, a rounding
    # difference moves its parameter by up to lr per step. A wrong bias
    # correction, decay or clipping would move most elements by ~lr (1e-2),
    # so the bound is on the typical element, with a hard cap on the worst.
    med, p99 = float(np.median(diff)), float(np.quantile(diff, 0.99))
    print(f"parameters after {STEPS} steps: median diff {med:.3e}, 99th pct {p99:.3e}, "
          f"max {diff.max():.3e} (lr {LR})")
    if not (med < 1e-7 and p99 < 1e-5 and diff.max() < 2 * LR * STEPS):
        failures += 1
    failures += check_bf16(ref_dump, work)
    print("torch_reference:", "ok" if failures == 0 else f"{failures} FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

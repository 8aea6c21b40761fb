"""A Llama-style model in plain PyTorch (no download): RMSNorm, rotary
position embeddings, SwiGLU, grouped-query attention; written as a chain
for remat.profile: an embedding, n blocks, a head (final norm, untied
output projection).

The attention core (scores, causal mask, softmax, weighted sum, after the
rotary embedding and the repetition of the key/value heads) is the
submodule ``attn.core``, which the selective policy checkpoints.

    REMAT_CLI=build/app/remat ~/.venvs/remat/bin/python examples/llama_block.py
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight. The mean is taken as a sum scaled
    by add's alpha (torch 1.13's mean saves its input for the backward; a
    sum does not), so the norm saves x, r = 1/sqrt(mean + eps) and x * r."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.register_buffer("eps", torch.tensor(eps), persistent=False)
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        ss = (x * x).sum(-1, keepdim=True)
        r = torch.rsqrt(torch.add(self.eps, ss, alpha=1.0 / x.shape[-1]))
        return (x * r) * self.weight


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class CoreAttention(nn.Module):
    """q (B, H, T, D), k and v (B, Hkv, T, D) -> y (B, T, H*D): each key/value
    head serves H/Hkv query heads (grouped-query attention)."""

    def __init__(self, block_size):
        super().__init__()
        mask = torch.full((block_size, block_size), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, q, k, v):
        B, H, T, D = q.shape
        g = H // k.shape[1]
        q = q.reshape(B * H, T, D)  # contiguous already: a view
        k = k[:, :, None].expand(B, k.shape[1], g, T, D).reshape(B * H, T, D)  # a copy
        v = v[:, :, None].expand(B, v.shape[1], g, T, D).reshape(B * H, T, D)  # a copy
        att = torch.baddbmm(self.mask[:T, :T], q, k.transpose(1, 2), alpha=1.0 / math.sqrt(D))
        att = torch.softmax(att, dim=-1)
        y = torch.bmm(att, v)
        return y.reshape(B, H, T, D).transpose(1, 2).reshape(B, T, H * D)


class Attention(nn.Module):
    def __init__(self, dim, n_head, n_kv_head, block_size, theta=10000.0):
        super().__init__()
        self.n_head, self.n_kv_head = n_head, n_kv_head
        self.head_dim = dim // n_head
        self.wq = nn.Linear(dim, n_head * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_head * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_head * self.head_dim, bias=False)
        self.wo = nn.Linear(n_head * self.head_dim, dim, bias=False)
        self.core = CoreAttention(block_size)
        D = self.head_dim
        inv = 1.0 / theta ** (torch.arange(0, D, 2).float() / D)
        ang = torch.outer(torch.arange(block_size).float(), inv)  # (T, D/2)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def rope(self, x):
        T = x.shape[2]
        return x * self.cos[:T] + rotate_half(x) * self.sin[:T]

    def forward(self, x):
        B, T, _ = x.shape
        D = self.head_dim
        q = self.wq(x).view(B, T, self.n_head, D).transpose(1, 2)
        k = self.wk(x).view(B, T, self.n_kv_head, D).transpose(1, 2)
        v = self.wv(x).view(B, T, self.n_kv_head, D).transpose(1, 2)
        return self.wo(self.core(self.rope(q), self.rope(k), v))


class SwiGLU(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim, n_head, n_kv_head, hidden, block_size):
        super().__init__()
        self.attn_norm = RMSNorm(dim)
        self.attn = Attention(dim, n_head, n_kv_head, block_size)
        self.mlp_norm = RMSNorm(dim)
        self.mlp = SwiGLU(dim, hidden)

    def forward(self, x):
        h = x + self.attn(self.attn_norm(x))
        return h + self.mlp(self.mlp_norm(h))


class Head(nn.Module):
    def __init__(self, dim, vocab):
        super().__init__()
        self.norm = RMSNorm(dim)
        self.out = nn.Linear(dim, vocab, bias=False)

    def forward(self, x):
        return self.out(self.norm(x))


class Llama(nn.Module):
    def __init__(self, n_layer=4, dim=64, n_head=4, n_kv_head=2, hidden=172, vocab=128,
                 block_size=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, n_head, n_kv_head, hidden, block_size)
                                    for _ in range(n_layer))
        self.head = Head(dim, vocab)

    def forward(self, idx):
        x = self.embed(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def block_bytes(B, T, C, H, Hkv, F_, elem=4):
    """Bytes a block saves for its backward, by hand: keep, full, selective.

    keep, per token: x (saved by the norm's pow and product), x * r, the
    norm's output (saved once by wq, wk, wv: one storage); the same three for
    h; q after the rotary embedding, the repeated k and v (H heads each), the
    attention output y: 10 C; w1's output (silu's input), silu's output,
    w3's output, their product: 4 F; the two norms' r: 2; and the softmax
    output (B*H, T, T).
    full: the input x.
    selective: the core saves its inputs q, k, v (k, v with Hkv heads: the
    rotary output of k, and v, a view of wv's output) instead of q, the
    repeated k and v and the softmax output."""
    D = C // H
    keep = elem * B * T * (10 * C + 4 * F_ + 2) + elem * B * H * T * T
    full = elem * B * T * C
    selective = keep - elem * B * T * 2 * C - elem * B * H * T * T + elem * B * T * 2 * Hkv * D
    return keep, full, selective


if __name__ == "__main__":
    # Profile, plan and verify a small Llama-style model on this machine.
    # Needs the remat command: on PATH, or REMAT_CLI=build/app/remat; and
    # the package installed (pip install ./python, docs/profile.md).
    import remat

    torch.manual_seed(0)
    model = Llama(n_layer=8, dim=64, n_head=4, n_kv_head=2, hidden=172, vocab=256, block_size=64)
    idx = torch.randint(0, 256, (4, 64))
    prof = remat.profile(model, (idx, idx), layers="blocks", embedding="embed", head="head",
                         selective=["attn.core"])
    keep, full, sel = block_bytes(4, 64, 64, 4, 2, 172)
    print(f"a block saves {prof.layers[1]['act_bytes']} bytes kept ({keep} by hand), "
          f"{prof.layers[1]['ckpt_bytes']} checkpointed ({full} + the RNG state), "
          f"{prof.layers[1]['middle_bytes']} with attn.core checkpointed")
    plan = remat.plan(prof, stages=4, microbatches=8, memory="9MB")
    print(plan)
    flags, notes = plan.megatron()
    print(" ".join(flags))
    print(remat.verify(model, plan, (idx, idx)))

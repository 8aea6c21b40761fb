"""A GPT-2 model in plain PyTorch (no download), written as a chain that
remat.profile can measure: an embedding, n blocks, a head.

The attention core (scores, causal mask, softmax, weighted sum) is a
submodule of its own, ``attn.core``, so it can be checkpointed alone: the
selective policy (remat's middle) that Megatron calls selective
recomputation. The causal mask is a buffer added to the scores by baddbmm,
which also scales them, so the block saves only what its backward needs.

    REMAT_CLI=build/app/remat ~/.venvs/remat/bin/python examples/gpt2_block.py
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CoreAttention(nn.Module):
    """qkv (B, T, 3C) -> y (B, T, C): softmax(q k^T / sqrt(D) + mask) v per head."""

    def __init__(self, n_head, block_size):
        super().__init__()
        self.n_head = n_head
        mask = torch.full((block_size, block_size), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, qkv):
        B, T, C3 = qkv.shape
        C, H = C3 // 3, self.n_head
        D = C // H
        q, k, v = qkv.split(C, dim=2)
        # (B, T, C) views -> (B*H, T, D) contiguous copies
        q = q.reshape(B, T, H, D).transpose(1, 2).reshape(B * H, T, D)
        k = k.reshape(B, T, H, D).transpose(1, 2).reshape(B * H, T, D)
        v = v.reshape(B, T, H, D).transpose(1, 2).reshape(B * H, T, D)
        att = torch.baddbmm(self.mask[:T, :T], q, k.transpose(1, 2), alpha=1.0 / math.sqrt(D))
        att = torch.softmax(att, dim=-1)  # (B*H, T, T)
        y = torch.bmm(att, v)  # (B*H, T, D)
        return y.reshape(B, H, T, D).transpose(1, 2).reshape(B, T, C)


class Attention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.core = CoreAttention(n_head, block_size)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(self.core(self.c_attn(x)))


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.act = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(self.act(self.c_fc(x)))


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln_1(x)), then h + mlp(ln_2(h))."""

    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = Attention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        h = x + self.attn(self.ln_1(x))
        return h + self.mlp(self.ln_2(h))


class Embedding(nn.Module):
    def __init__(self, vocab, n_embd, block_size):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.wte(idx) + self.wpe(pos)


class Head(nn.Module):
    """Final layernorm and the language-model head, its weight tied to wte."""

    def __init__(self, wte, n_embd):
        super().__init__()
        self.ln_f = nn.LayerNorm(n_embd)
        self.wte = wte  # shared with the embedding

    def forward(self, x):
        return F.linear(self.ln_f(x), self.wte.weight)


class GPT2(nn.Module):
    def __init__(self, n_layer=4, n_embd=64, n_head=4, vocab=128, block_size=32):
        super().__init__()
        self.embed = Embedding(vocab, n_embd, block_size)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, block_size) for _ in range(n_layer))
        self.head = Head(self.embed.wte, n_embd)

    def forward(self, idx):
        x = self.embed(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def block_bytes(B, T, C, H, elem=4):
    """Bytes a block saves for its backward, by hand (element size elem; the
    layernorms' statistics are fp32): keep, full (checkpointed: its input),
    selective (attn.core checkpointed).

    keep: x, ln_1(x), q, k, v, attention output y, h, ln_2(h): 8 (B,T,C);
    the MLP's c_fc output and GELU output: 2 (B,T,4C); softmax output
    (B*H,T,T); two layernorms' mean and rstd: 4 (B,T) fp32.
    selective: the core saves its input qkv (3 (B,T,C)) instead of q, k, v
    and the softmax output."""
    keep = elem * B * T * (16 * C) + elem * B * H * T * T + 4 * 4 * B * T
    full = elem * B * T * C
    selective = keep - elem * B * H * T * T
    return keep, full, selective


if __name__ == "__main__":
    # Profile, plan and verify a small GPT-2 on this machine. Needs the remat
    # command: on PATH, or REMAT_CLI=build/app/remat; and the package
    # installed (pip install ./python, docs/profile.md).
    import remat

    torch.manual_seed(0)
    model = GPT2(n_layer=8, n_embd=64, n_head=4, vocab=256, block_size=64)
    idx = torch.randint(0, 256, (4, 64))  # one micro-batch: 4 sequences of 64 tokens
    prof = remat.profile(model, (idx, idx), layers="blocks", embedding="embed", head="head",
                         selective=["attn.core"])
    keep, full, sel = block_bytes(4, 64, 64, 4)
    print(f"a block saves {prof.layers[1]['act_bytes']} bytes kept ({keep} by hand), "
          f"{prof.layers[1]['ckpt_bytes']} checkpointed ({full} + the RNG state), "
          f"{prof.layers[1]['middle_bytes']} with attn.core checkpointed")
    plan = remat.plan(prof, stages=4, microbatches=8, memory="8MB")
    print(plan)
    print(plan.colossalai()[1])
    print(remat.verify(model, plan, (idx, idx)))

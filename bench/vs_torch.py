#!/usr/bin/env python3
"""vs_torch.py: remat against PyTorch on the same training step, side by side.

Two roles in one file:

  vs_torch.py compare REMAT [--reps N] [--steps N] [--threads N] [--shapes a,b]
                      [--quiet-cpus X [--patience S]] [--precision fp32|bf16]
      --reps times: for each shape, for no recompute (ratio 0) and full
      recompute (ratio 1), runs `REMAT train` and this file's PyTorch GPT-2,
      one process each, alternating which goes first. Each run's
      tokens/s comes from the median step time over its steps after the
      first (a warm-up); its peak RSS from the kernel's accounting of the
      child (wait4's ru_maxrss). Prints one key=value line per run, then
      medians and the ratios remat / PyTorch, and for each system the full
      recompute step time over the no-recompute one. On a shared machine
      the fastest step of all runs is the least disturbed figure; it is
      reported beside the medians, and each system's MFU: remat's model
      FLOPs per token (from its log) at the median tokens/s over remat's
      peak (its kept figure for the precision and threads, or --peak-gflops,
      raised to remat's fastest step's rate where a step beat it, as remat
      train raises it: no MFU exceeds 100%), the same count for PyTorch. (bench_train's slowdown_vs_ratio0, from
      alternating steps in one process, is the steadier recompute figure.)
      Each remat run's line quotes its threads header: the thread policy it
      chose and the CPUs it found idle at start, a measure of the load.
      With --quiet-cpus X each run first waits (up to --patience seconds)
      until X CPUs are idle over 2 s, and its line says how many were.
      --precision bf16: remat --precision bf16 against PyTorch under
      torch.autocast("cpu", dtype=torch.bfloat16), PyTorch's mixed precision
      on the CPU; remat in fp32 joins the alternation (system remat_fp32),
      for remat's bf16 speed over its own fp32. A shape remat refuses at
      the precision (tried on llama-tiny for a Llama in bf16) prints a skip
      line and is left out.

  vs_torch.py torch --config L,C,NH,V,T|llama:L,C,NH,NKV,H,V,T[,theta[,tied]]
                    --batch B --seq T --steps N
                    [--threads N] [--ckpt-ratio R] [--precision fp32|bf16]
                    [--device cpu|cuda] [--compile] [--warmup N]
      Trains a PyTorch GPT-2 or Llama of that shape in fp32 (or with the forward and
      the loss under autocast to bf16) on synthetic tokens:
      forward, cross-entropy, backward, global-norm clipping at 1.0, AdamW
      (lr 1e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices and
      embeddings; foreach=True, PyTorch's faster multi-tensor CPU path), as
      `remat train` does. The vocabulary is padded to a
      multiple of 128 as in remat (and llm.c); the LM head is tied to the
      token embedding. --ckpt-ratio R recomputes the first floor(R*L) blocks
      with torch.utils.checkpoint. Attention is
      F.scaled_dot_product_attention(is_causal=True) where this PyTorch has
      it (2.0 and later), else the matmul-mask-softmax-matmul of GPT-2.
      The Llama (remat's "llama:" shape, as tests/torch_llama.py writes it):
      RMSNorm (eps 1e-5), bias-free q, k, v and o, the rotary embedding on
      adjacent pairs (x[2i], x[2i+1]), grouped-query attention by repeating
      each key/value head for its query heads, SwiGLU w2(silu(w1 x) * w3 x),
      a head of its own (or the embedding, with tied 1), the vocabulary not
      padded; trained as the GPT-2 is.
      --device cuda trains on the GPU (autocast to bf16 there), its steps
      timed between synchronisations, and adds the caching allocator's
      figures: max_memory_reserved, max_memory_allocated, and its reserved
      bytes no tensor used at the end of each step (the largest, the last).
      --compile trains through torch.compile (a PyTorch without it prints
      a "torch skip" line); --warmup N leaves the first N steps out of the
      median. bench/gpu_check.sh runs these against remat on the GPU.

Shapes: gpt2-124m (L12 C768 NH12 V50257) at B=4 T=64, and seq-long
(L6 C256 NH8 V8192) at B=4 T=1024; on request gpt2-124m-long, gpt2-124m at
B=4 T=1024, and llama-124m (remat's llama-124m: L12 C768 NH12 NKV4 H2048
V32000, untied) at B=4 T=64. --ratios 0 skips the full-recompute runs, --no-fp32-beside the
remat fp32 runs beside bf16 ones.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

SHAPES = {
    "gpt2-124m": ("12,768,12,50257,1024", 4, 64),
    "seq-long": ("6,256,8,8192,1024", 4, 1024),
    "gpt2-124m-long": ("12,768,12,50257,1024", 4, 1024),
    # remat's llama-124m: GPT-2 small's depth and width, 4 key/value heads,
    # SwiGLU width 2048, V=32000, untied head, rotary base 10000
    "llama-124m": ("llama:12,768,12,4,2048,32000,1024", 4, 64),
}


# ------------------------------------------------------------ PyTorch side

def torch_train(a):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    torch.set_num_threads(a.threads)
    B, T = a.batch, a.seq
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("vs_torch: --device cuda: this PyTorch sees no CUDA device")
    if a.compile and not hasattr(torch, "compile"):
        print(f"torch skip: PyTorch {torch.__version__} has no torch.compile (2.0 and later)",
              flush=True)
        return
    sdpa = hasattr(F, "scaled_dot_product_attention")
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=dev))

    def attend(q, k, v, hs):
        """q, k, v (B, heads, T, hs): causal softmax(q k^T / sqrt(hs)) v."""
        if sdpa:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        return att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v

    def blocks(x, layers, n_ckpt, *extra):
        """The first n_ckpt blocks recomputed in the backward."""
        for i, blk in enumerate(layers):
            if i < n_ckpt:
                x = checkpoint(blk, x, *extra, use_reentrant=False)
            else:
                x = blk(x, *extra)
        return x

    def init_normal(model, L, scaled):
        """Matrices N(0, 0.02), those that write the residual stream (names
        ending in one of `scaled`) N(0, 0.02/sqrt(2L)); biases zero."""
        for n, p in model.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith(scaled) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif n.endswith(".bias"):
                nn.init.zeros_(p)

    class Block(nn.Module):
        def __init__(self, C, NH):
            super().__init__()
            self.C, self.NH = C, NH
            self.ln_1 = nn.LayerNorm(C)
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            self.ln_2 = nn.LayerNorm(C)
            self.c_fc = nn.Linear(C, 4 * C)
            self.c_fcproj = nn.Linear(4 * C, C)

        def attn(self, x):
            C, NH = self.C, self.NH
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            hs = C // NH
            q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
            y = attend(q, k, v, hs)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

        def forward(self, x):
            x = x + self.attn(x)
            return x + self.c_fcproj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        """GPT-2: "L,C,NH,V,T", the vocabulary padded to a multiple of 128,
        the head tied to the token embedding."""
        def __init__(self, spec):
            super().__init__()
            L, C, NH, V, maxT = (int(x) for x in spec.split(","))
            self.V, self.Vp = V, (V + 127) // 128 * 128
            self.wte = nn.Embedding(self.Vp, C)
            self.wpe = nn.Embedding(maxT, C)
            self.h = nn.ModuleList(Block(C, NH) for _ in range(L))
            self.ln_f = nn.LayerNorm(C)
            init_normal(self, L, ("proj.weight",))

        def forward(self, idx, targets, n_ckpt):
            x = blocks(self.wte(idx) + self.wpe(torch.arange(T, device=idx.device)), self.h,
                       n_ckpt)
            logits = self.ln_f(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.view(-1, self.Vp), targets.view(-1))

    class RMSNorm(nn.Module):
        def __init__(self, C, eps=1e-5):  # remat's eps for a "llama:" shape
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(C))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def rotary(x, cos, sin):
        """x (B, T, heads, hs), each adjacent pair (x[2i], x[2i+1]) turned by
        the angle pos * theta^(-2i/hs); cos, sin (T, hs/2)."""
        xr, xi = x.reshape(x.shape[:-1] + (-1, 2)).unbind(-1)
        cos, sin = cos[None, :, None, :], sin[None, :, None, :]
        return torch.stack([xr * cos - xi * sin, xr * sin + xi * cos], dim=-1).flatten(3)

    class LlamaBlock(nn.Module):
        def __init__(self, C, NH, NKV, H):
            super().__init__()
            self.C, self.NH, self.NKV, self.hs = C, NH, NKV, C // NH
            self.attention_norm = RMSNorm(C)
            self.wq = nn.Linear(C, C, bias=False)
            self.wk = nn.Linear(C, NKV * self.hs, bias=False)
            self.wv = nn.Linear(C, NKV * self.hs, bias=False)
            self.wo = nn.Linear(C, C, bias=False)
            self.ffn_norm = RMSNorm(C)
            self.w1 = nn.Linear(C, H, bias=False)
            self.w2 = nn.Linear(H, C, bias=False)
            self.w3 = nn.Linear(C, H, bias=False)

        def forward(self, x, cos, sin):
            xn = self.attention_norm(x)
            q = rotary(self.wq(xn).view(B, T, self.NH, self.hs), cos, sin)
            k = rotary(self.wk(xn).view(B, T, self.NKV, self.hs), cos, sin)
            v = self.wv(xn).view(B, T, self.NKV, self.hs)
            rep = self.NH // self.NKV  # query head h reads key/value head h // rep
            k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            y = attend(q, k, v, self.hs).transpose(1, 2).contiguous().view(B, T, self.C)
            x = x + self.wo(y)
            xn = self.ffn_norm(x)
            return x + self.w2(F.silu(self.w1(xn)) * self.w3(xn))

    class Llama(nn.Module):
        """Llama: remat's "llama:L,C,NH,NKV,H,V,T[,theta[,tied]]" (tests/
        torch_llama.py checks this model against remat's bit for bit)."""
        def __init__(self, spec):
            super().__init__()
            f = spec.split(":", 1)[1].split(",")
            L, C, NH, NKV, H, V, maxT = (int(x) for x in f[:7])
            theta = float(f[7]) if len(f) > 7 else 10000.0
            self.tied = len(f) > 8 and int(f[8]) == 1
            self.V = V
            self.tok_embeddings = nn.Embedding(V, C)
            self.h = nn.ModuleList(LlamaBlock(C, NH, NKV, H) for _ in range(L))
            self.norm = RMSNorm(C)
            self.output = None if self.tied else nn.Linear(C, V, bias=False)
            hs = C // NH
            ang = torch.outer(torch.arange(maxT, dtype=torch.float64),
                              theta ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs))
            self.register_buffer("cos", torch.cos(ang).float()[:T], persistent=False)
            self.register_buffer("sin", torch.sin(ang).float()[:T], persistent=False)
            init_normal(self, L, ("wo.weight", "w2.weight"))

        def forward(self, idx, targets, n_ckpt):
            x = blocks(self.tok_embeddings(idx), self.h, n_ckpt, self.cos, self.sin)
            head = self.tok_embeddings.weight if self.tied else self.output.weight
            logits = self.norm(x) @ head.t()
            return F.cross_entropy(logits.view(-1, self.V), targets.view(-1))

    torch.manual_seed(1)
    model = Llama(a.config) if a.config.startswith("llama:") else GPT(a.config)
    model.to(dev)
    V = model.V
    n_ckpt = int(math.floor(a.ckpt_ratio * len(model.h)))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8, foreach=True)
    run = torch.compile(model) if a.compile else model
    g = torch.Generator().manual_seed(2)
    times, frag = [], []
    for step in range(a.steps):
        idx = torch.randint(0, V, (B, T), generator=g).to(dev)
        tgt = torch.randint(0, V, (B, T), generator=g).to(dev)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = run(idx, tgt, n_ckpt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if cuda:
            torch.cuda.synchronize()
            # the caching allocator's reserved bytes it holds but no tensor uses
            frag.append(torch.cuda.memory_reserved() - torch.cuda.memory_allocated())
        times.append(time.perf_counter() - t0)
    timed = times[a.warmup:] if len(times) > a.warmup else times
    med = statistics.median(timed)
    mem = ""
    if cuda:
        mem = (f" gpu={torch.cuda.get_device_name(dev).replace(' ', '_')} "
               f"max_memory_reserved={torch.cuda.max_memory_reserved()} "
               f"max_memory_allocated={torch.cuda.max_memory_allocated()} "
               f"unused_reserved_max={max(frag)} unused_reserved_last={frag[-1]}")
    print(f"torch version={torch.__version__} threads={torch.get_num_threads()} "
          f"attention={'sdpa' if sdpa else 'matmul-softmax'} config={a.config} B={B} T={T} "
          f"precision={a.precision} device={dev.type} compile={int(a.compile)} "
          f"ratio={a.ckpt_ratio} recomputed={n_ckpt} steps={a.steps} step_s_median={med:.4f} "
          f"step_s_min={min(timed):.4f} tokens_per_s={B * T / med:.1f} loss={loss.item():.4f}"
          + mem, flush=True)


# ------------------------------------------------------------ the driver

def idle_cpus(seconds):
    """CPUs idle over `seconds`, from /proc/stat (steal time counts as busy)."""
    def ticks():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        return v[3] + v[4], sum(v)
    i0, t0 = ticks()
    time.sleep(seconds)
    i1, t1 = ticks()
    return os.cpu_count() * (i1 - i0) / max(t1 - t0, 1)


def wait_quiet(want, patience):
    """Waits (up to `patience` seconds) until `want` CPUs are idle over 2 s;
    returns the idle CPUs last seen. On a machine shared with other jobs this
    starts each run in a quiet moment, so that runs compare."""
    t0 = time.time()
    while True:
        idle = idle_cpus(2.0)
        if idle >= want or time.time() - t0 > patience:
            return idle
        time.sleep(3)


def run_measured(cmd, env):
    """Runs cmd; returns (stdout, peak RSS bytes of the child, wall seconds)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                         text=True)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"vs_torch: {' '.join(cmd)} failed ({p.returncode}):\n{out}")
    return out, ru.ru_maxrss * 1024, time.perf_counter() - t0


def remat_run(a, cfg, B, T, ratio, env, precision=None):
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "log.jsonl")
        cmd = [a.remat, "train", "--config", cfg, "--batch", str(B), "--seq", str(T),
               "--steps", str(a.steps), "--threads", str(a.threads), "--ckpt-ratio",
               str(ratio), "--quiet", "--peak-gflops", f"{a.peak[precision or a.precision]:.6g}",
               "--log", log, "--precision", precision or a.precision]
        out, rss, _ = run_measured(cmd, env)
        recs = [json.loads(line) for line in open(log)]
    steps = [r["step_s"] for r in recs]
    timed = steps[1:] if len(steps) > 1 else steps
    policy = [x[8:] for x in out.splitlines() if x.startswith("threads ")]
    # the model's FLOPs per token as remat counts them (remat_flops_per_token)
    fpt = recs[0]["flops_per_token"]
    return {"step": statistics.median(timed), "best": min(timed), "rss": rss,
            "threads": policy[0] if policy else "?", "flops_per_token": fpt}


def remat_fp32_run(a, cfg, B, T, ratio, env):
    return remat_run(a, cfg, B, T, ratio, env, "fp32")


def torch_run(a, cfg, B, T, ratio, env):
    cmd = [sys.executable, os.path.abspath(__file__), "torch", "--config", cfg, "--batch",
           str(B), "--seq", str(T), "--steps", str(a.steps), "--threads", str(a.threads),
           "--ckpt-ratio", str(ratio), "--precision", a.precision]
    out, rss, _ = run_measured(cmd, env)
    line = [x for x in out.splitlines() if x.startswith("torch ")][-1]
    kv = dict(f.split("=", 1) for f in line.split()[1:])
    return {"step": float(kv["step_s_median"]), "best": float(kv["step_s_min"]), "rss": rss}


def remat_peak(a, precision, env):
    """The peak FLOP rate remat measures MFU against (GFLOP/s), for this
    precision and thread count: the figure it keeps per machine (measured on
    the first call), read from a one-step run of the tiny config."""
    cmd = [a.remat, "train", "--config", "tiny", "--steps", "1", "--quiet", "--threads",
           str(a.threads), "--precision", precision]
    out, _, _ = run_measured(cmd, env)
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "peak" and "GFLOP/s" in f:
            return float(f[f.index("GFLOP/s") - 1])
    sys.exit(f"vs_torch: no peak line in the output of {' '.join(cmd)}:\n{out}")


def refused(a, shape, env):
    """remat's one-line refusal of this shape's family at this precision, or
    None: a Llama in bf16 is tried on llama-tiny for one step."""
    if not SHAPES[shape][0].startswith("llama:") or a.precision != "bf16":
        return None
    p = subprocess.run([a.remat, "train", "--config", "llama-tiny", "--steps", "1", "--quiet",
                        "--peak-gflops", "1", "--threads", str(a.threads), "--precision", "bf16"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    if p.returncode == 0:
        return None
    lines = [x for x in p.stdout.splitlines() if x.strip()]
    return lines[-1] if lines else f"exit status {p.returncode}"


def compare(a):
    env = dict(os.environ)
    env.setdefault("OPENBLAS_NUM_THREADS", str(a.threads))  # PyTorch's OpenBLAS pool
    env.setdefault("OMP_NUM_THREADS", str(a.threads))
    shapes = []
    for shape in a.shapes.split(","):
        if shape not in SHAPES:
            sys.exit(f"vs_torch: unknown shape {shape}: one of {', '.join(SHAPES)}")
        why = refused(a, shape, env)
        if why:
            print(f"skip shape={shape} precision={a.precision}: remat refuses it ({why})",
                  flush=True)
        else:
            shapes.append(shape)
    if not shapes:
        print("vs_torch: no shape left to run")
        return
    precisions = {a.precision} | ({"fp32"} if a.precision == "bf16" and a.fp32_beside else set())
    a.peak = {p: a.peak_gflops or remat_peak(a, p, env) for p in sorted(precisions)}
    source = "given" if a.peak_gflops else "remat's kept figure"
    for p, x in a.peak.items():
        print(f"peak precision={p} gflops={x:.1f} ({source}, {a.threads} threads; "
              f"MFU below is against it)", flush=True)
    ratios = [float(x) for x in a.ratios.split(",")]
    res = {}  # (shape, ratio, system) -> one dict per rep: step, best (seconds), rss (bytes)
    for rep in range(a.reps):
        for shape in shapes:
            cfg, B, T = SHAPES[shape]
            for ratio in ratios:
                order = [("remat", remat_run), ("torch", torch_run)]
                if a.precision == "bf16" and a.fp32_beside:
                    order.append(("remat_fp32", remat_fp32_run))
                if (rep + int(ratio)) % 2:
                    order.reverse()
                for name, fn in order:
                    idle = wait_quiet(a.quiet_cpus, a.patience) if a.quiet_cpus > 0 else -1
                    r = fn(a, cfg, B, T, ratio, env)
                    r["idle"] = idle
                    res.setdefault((shape, ratio, name), []).append(r)
                    print(f"run shape={shape} B={B} T={T} ratio={ratio:.0f} rep={rep} "
                          f"system={name} tokens_per_s={B * T / r['step']:.1f} "
                          f"step_s_median={r['step']:.4f} step_s_min={r['best']:.4f} "
                          f"peak_rss_bytes={r['rss']} idle_cpus_before={r['idle']:.2f}"
                          + (f" threads=\"{r['threads']}\"" if "threads" in r else ""),
                          flush=True)

    def tokens(shape, ratio, name, key):
        """tokens/s from the median over runs of each run's median step
        (key "step"), or from the fastest step of all runs (key "best")."""
        runs = res[(shape, ratio, name)]
        step = statistics.median(r["step"] for r in runs) if key == "step" else \
            min(r["best"] for r in runs)
        return SHAPES[shape][1] * SHAPES[shape][2] / step

    def rss(shape, ratio, name):
        return statistics.median(r["rss"] for r in res[(shape, ratio, name)])

    def fpt(shape, ratio):
        return statistics.median(r["flops_per_token"] for r in res[(shape, ratio, "remat")])

    # A remat step faster than the kept peak is the better bound, as remat
    # train takes it (its MFU never exceeds 100%): the peak is raised to the
    # fastest step's model FLOP rate over every remat run of the precision.
    fastest = max(fpt(s, r) * tokens(s, r, "remat", "best") / 1e9 for s in shapes
                  for r in ratios)
    if fastest > a.peak[a.precision]:
        print(f"peak precision={a.precision} gflops={fastest:.1f} (raised from "
              f"{a.peak[a.precision]:.1f}: remat's fastest step ran at that model FLOP rate; "
              f"MFU below is against it)", flush=True)
        a.peak[a.precision] = fastest

    def mfu(shape, ratio, name):
        """Model FLOPs (remat's count, recomputation not counted) at the median
        tokens/s over the peak: the same count for both systems."""
        return fpt(shape, ratio) * tokens(shape, ratio, name, "step") / (a.peak[a.precision] * 1e9)

    print()
    print(f"precision {a.precision}: remat --precision {a.precision}, PyTorch "
          f"{'under autocast to bf16' if a.precision == 'bf16' else 'in fp32'}")
    print(f"{a.reps} alternated runs of {a.steps} steps each (the first step of a run excluded), "
          f"{a.threads} threads; tokens/s from the median step, and in brackets from the fastest "
          f"step; RSS medians")
    print(f"{'shape':14} {'ratio':>5} {'remat tok/s':>20} {'torch tok/s':>20} {'x':>12} "
          f"{'remat RSS':>12} {'torch RSS':>12} {'x':>6} {'remat MFU':>10} {'torch MFU':>10}")
    for shape in shapes:
        for ratio in ratios:
            rt, tt = tokens(shape, ratio, "remat", "step"), tokens(shape, ratio, "torch", "step")
            rb, tb = tokens(shape, ratio, "remat", "best"), tokens(shape, ratio, "torch", "best")
            rr, tr = rss(shape, ratio, "remat"), rss(shape, ratio, "torch")
            print(f"{shape:14} {ratio:5.0f} {rt:10.1f} [{rb:7.1f}] {tt:10.1f} [{tb:7.1f}] "
                  f"{rt / tt:5.2f} [{rb / tb:4.2f}] {rr / 2**20:8.0f} MiB {tr / 2**20:8.0f} MiB "
                  f"{rr / tr:6.2f} {100 * mfu(shape, ratio, 'remat'):9.1f}% "
                  f"{100 * mfu(shape, ratio, 'torch'):9.1f}%")
    for shape in shapes:
        for ratio in ratios:
            rt, tt = tokens(shape, ratio, "remat", "step"), tokens(shape, ratio, "torch", "step")
            rb, tb = tokens(shape, ratio, "remat", "best"), tokens(shape, ratio, "torch", "best")
            rr, tr = rss(shape, ratio, "remat"), rss(shape, ratio, "torch")
            print(f"summary shape={shape} ratio={ratio:.0f} remat_tokens_per_s={rt:.1f} "
                  f"torch_tokens_per_s={tt:.1f} tokens_ratio={rt / tt:.3f} "
                  f"remat_best_tokens_per_s={rb:.1f} torch_best_tokens_per_s={tb:.1f} "
                  f"best_tokens_ratio={rb / tb:.3f} remat_peak_rss_bytes={rr:.0f} "
                  f"torch_peak_rss_bytes={tr:.0f} rss_ratio={rr / tr:.3f} "
                  f"remat_mfu={mfu(shape, ratio, 'remat'):.4f} "
                  f"torch_mfu={mfu(shape, ratio, 'torch'):.4f}")
    for shape in shapes:
        for ratio in ratios:
            if a.precision != "bf16" or not a.fp32_beside:
                break
            # remat bf16 over remat fp32, from runs of one rep side by side
            runs = zip(res[(shape, ratio, "remat")], res[(shape, ratio, "remat_fp32")])
            x = statistics.median(f["step"] / b["step"] for b, f in runs)
            print(f"summary shape={shape} ratio={ratio:.0f} remat_bf16_over_fp32={x:.3f} "
                  f"(remat fp32 step time / bf16 step time, median over reps) "
                  f"rss_bf16_over_fp32={rss(shape, ratio, 'remat') / rss(shape, ratio, 'remat_fp32'):.3f}")
    # a rep's ratio-0 and ratio-1 runs of one system are adjacent in time
    for shape in shapes if ratios == [0.0, 1.0] else []:
        for name in ("remat", "torch"):
            r0, r1 = res[(shape, 0.0, name)], res[(shape, 1.0, name)]
            slow = statistics.median(y["step"] / x["step"] for x, y in zip(r0, r1))
            best = min(y["best"] for y in r1) / min(x["best"] for x in r0)
            print(f"summary shape={shape} system={name} recompute_slowdown={slow:.3f} "
                  f"best_step_slowdown={best:.3f} (full-recompute step time / no-recompute "
                  f"step time: median over reps; fastest steps)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare")
    c.add_argument("remat", help="path of the remat binary")
    c.add_argument("--reps", type=int, default=3)
    c.add_argument("--steps", type=int, default=5)
    c.add_argument("--threads", type=int, default=os.cpu_count())
    c.add_argument("--shapes", default="gpt2-124m,seq-long")
    c.add_argument("--ratios", default="0,1", help="recompute ratios to run (0,1)")
    c.add_argument("--no-fp32-beside", dest="fp32_beside", action="store_false",
                   help="bf16: no remat fp32 runs beside")
    c.add_argument("--quiet-cpus", type=float, default=0.0,
                   help="before each run, wait until this many CPUs are idle (0: never wait)")
    c.add_argument("--patience", type=float, default=600.0,
                   help="the longest wait for --quiet-cpus, seconds")
    c.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    c.add_argument("--peak-gflops", type=float, default=0.0,
                   help="the peak for MFU (0: remat's kept figure for the precision and threads)")
    t = sub.add_parser("torch")
    t.add_argument("--config", required=True)
    t.add_argument("--batch", type=int, required=True)
    t.add_argument("--seq", type=int, required=True)
    t.add_argument("--steps", type=int, default=5)
    t.add_argument("--threads", type=int, default=os.cpu_count())
    t.add_argument("--ckpt-ratio", type=float, default=0.0)
    t.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    t.add_argument("--device", default="cpu", help="cpu, or cuda for a GPU (bench/gpu_check.sh)")
    t.add_argument("--compile", action="store_true",
                   help="train the model through torch.compile (PyTorch 2.0 and later)")
    t.add_argument("--warmup", type=int, default=1,
                   help="leading steps left out of the median (compilation, caches)")
    a = ap.parse_args()
    if a.cmd == "torch":
        torch_train(a)
    else:
        compare(a)


if __name__ == "__main__":
    main()

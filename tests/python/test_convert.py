"""remat.convert: a model that `remat train` saved, written with Hugging Face
GPT-2's names and layouts. A GPT-2 written here by hand with those names
(Conv1D's (in, out) weights, lm_head tied to transformer.wte; no
transformers package) loads pytorch_model.bin with load_state_dict(strict=
True) and the safetensors file, read here by the format's specification;
its logits equal tests/torch_reference.py's GPT-2 loaded from the same file
to float32 rounding, and its loss on a window equals the loss remat's engine
reports for that window (`remat train --lr 0 --log`, one step on a shard of
one window). A bf16 file converts to its values widened; bad inputs are
refused with one line."""
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile
import unittest

import common
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(common.ROOT, "tests"))
import torch_reference  # noqa: E402  (llm.c's file read by PyTorch on its own)

L, C, NH, V, MAXT, T = 2, 64, 4, 200, 64, 32  # V=200 is padded to 256 in the file


# ----------------------------------------------- Hugging Face's GPT-2, by hand
class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: weight (in, out)."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        out = torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight)
        return out.view(x.shape[:-1] + (self.nf,))


class GPT2Attention(nn.Module):
    def __init__(self, C, NH, maxT):
        super().__init__()
        self.NH = NH
        self.c_attn = Conv1D(3 * C, C)
        self.c_proj = Conv1D(C, C)
        self.register_buffer("bias", torch.tril(torch.ones(maxT, maxT, dtype=torch.bool)),
                             persistent=False)

    def forward(self, x):
        B, Tt, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        hs = C // self.NH
        q, k, v = (t.view(B, Tt, self.NH, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hs)
        att = att.masked_fill(~self.bias[:Tt, :Tt], float("-inf")).softmax(-1)
        return self.c_proj((att @ v).transpose(1, 2).reshape(B, Tt, C))


class GPT2MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = Conv1D(4 * C, C)
        self.c_proj = Conv1D(C, 4 * C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))  # gelu_new


class GPT2Block(nn.Module):
    def __init__(self, C, NH, maxT):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = GPT2Attention(C, NH, maxT)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = GPT2MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg["n_embd"]
        self.wte = nn.Embedding(cfg["vocab_size"], C)
        self.wpe = nn.Embedding(cfg["n_positions"], C)
        self.h = nn.ModuleList([GPT2Block(C, cfg["n_head"], cfg["n_positions"])
                                for _ in range(cfg["n_layer"])])
        self.ln_f = nn.LayerNorm(C, eps=cfg["layer_norm_epsilon"])

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.h:
            x = b(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.transformer = GPT2Model(cfg)
        self.lm_head = nn.Linear(cfg["n_embd"], cfg["vocab_size"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, idx):
        return self.lm_head(self.transformer(idx))


# ------------------------------------------------------------- helpers
def write_shard(path, toks):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
        f.write(struct.pack(f"<{len(toks)}H", *toks))


def remat(*args):
    r = subprocess.run([common.CLI] + list(args) + ["--precision", "fp32", "--quiet",
                                                    "--peak-gflops", "100", "--threads", "1"],
                       capture_output=True, text=True)
    if r.returncode:
        raise AssertionError(f"remat {' '.join(args)}: {r.stderr}")


def convert(*args):
    return subprocess.run([sys.executable, "-m", "remat.convert"] + list(args),
                          capture_output=True, text=True)


def read_safetensors(path):
    """By the specification (huggingface/safetensors, README "Format"): u64
    LE N; N bytes of UTF-8 JSON; data. Offsets are relative to the data."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    assert raw[8:8 + n].decode().startswith("{"), "the header starts with {"
    data = raw[8 + n:]
    meta = header.pop("__metadata__", None)
    out, spans = {}, []
    for name, e in header.items():
        assert e["dtype"] == "F32", (name, e["dtype"])
        a, b = e["data_offsets"]
        count = 1
        for d in e["shape"]:
            count *= d
        assert b - a == 4 * count, name
        spans.append((a, b))
        out[name] = torch.tensor(struct.unpack(f"<{count}f", data[a:b])).reshape(e["shape"])
    spans.sort()
    assert spans[0][0] == 0 and spans[-1][1] == len(data), "the data is covered exactly"
    assert all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1)), "no gaps"
    return out, meta


class Convert(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.dir = cls.tmp.name
        rnd = random.Random(1)
        write_shard(os.path.join(d, "train.bin"), [rnd.randrange(V) for _ in range(4000)])
        cls.window = [rnd.randrange(V) for _ in range(T + 1)]
        write_shard(os.path.join(d, "one.bin"), cls.window)
        cls.model = os.path.join(d, "m.bin")
        # a few steps, so the weights are trained ones, not the initial ones
        remat("train", "--config", f"{L},{C},{NH},{V},{MAXT}", "--data",
              os.path.join(d, "train.bin"), "--steps", "4", "--batch", "2", "--seq", "32",
              "--lr", "1e-2", "--save", cls.model)
        # remat's loss on the one window of one.bin: a step at lr 0 logs it
        log = os.path.join(d, "one.jsonl")
        remat("train", "--model", cls.model, "--data", os.path.join(d, "one.bin"), "--steps", "1",
              "--batch", "1", "--seq", str(T), "--lr", "0", "--log", log)
        with open(log) as f:
            cls.remat_loss = json.loads(f.readline())["loss"]
        cls.out = os.path.join(d, "hf")
        r = convert(cls.model, cls.out)
        assert r.returncode == 0, r.stderr
        cls.stdout = r.stdout
        with open(os.path.join(cls.out, "config.json")) as f:
            cls.cfg = json.load(f)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def hf_model(self, sd):
        m = GPT2LMHeadModel(self.cfg)
        m.load_state_dict(sd, strict=True)
        return m.eval()

    def reference_logits(self, idx):
        ref, _ = torch_reference.load(self.model)
        with torch.no_grad():
            x = ref.wte(idx) + ref.wpe(torch.arange(idx.shape[1]))
            for b in ref.h:
                x = b(x)
            return (ref.ln_f(x) @ ref.wte.weight.t())[:, :, :V]

    def test_config(self):
        want = {"vocab_size": V, "n_positions": MAXT, "n_embd": C, "n_layer": L, "n_head": NH,
                "model_type": "gpt2", "activation_function": "gelu_new",
                "tie_word_embeddings": True}
        self.assertEqual({k: self.cfg[k] for k in want}, want)
        self.assertIn("pytorch_model.bin", self.stdout)

    def test_names_and_layouts(self):
        sd = torch.load(os.path.join(self.out, "pytorch_model.bin"))
        ours = GPT2LMHeadModel(self.cfg).state_dict()
        self.assertEqual(list(sd), list(ours))
        for k, v in ours.items():
            self.assertEqual(tuple(sd[k].shape), tuple(v.shape), k)
            self.assertEqual(sd[k].dtype, torch.float32, k)
        self.assertEqual(tuple(sd["transformer.h.0.attn.c_attn.weight"].shape), (C, 3 * C))
        self.assertEqual(tuple(sd["transformer.h.1.mlp.c_proj.weight"].shape), (4 * C, C))
        self.assertEqual(tuple(sd["transformer.wte.weight"].shape), (V, C))  # padding cut
        # the head is the embedding itself, as GPT2LMHeadModel ties them
        self.assertEqual(sd["lm_head.weight"].data_ptr(), sd["transformer.wte.weight"].data_ptr())

    def test_logits_and_loss(self):
        sd = torch.load(os.path.join(self.out, "pytorch_model.bin"))
        m = self.hf_model(sd)
        idx = torch.tensor([self.window[:T]])
        tgt = torch.tensor([self.window[1:]])
        with torch.no_grad():
            logits = m(idx)
        ref = self.reference_logits(idx)
        scale = ref.abs().max().item()
        self.assertLess((logits - ref).abs().max().item(), 1e-5 * max(scale, 1.0))
        loss = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1)).item()
        # remat's engine and PyTorch sum in different orders: float32 rounding
        self.assertLess(abs(loss - self.remat_loss), 1e-5 * abs(self.remat_loss), (loss, self.remat_loss))
        # and a batch of two other windows
        rnd = random.Random(2)
        idx2 = torch.tensor([[rnd.randrange(V) for _ in range(MAXT)] for _ in range(2)])
        with torch.no_grad():
            d = (m(idx2) - self.reference_logits(idx2)).abs().max().item()
        self.assertLess(d, 1e-5 * max(scale, 1.0))

    def test_safetensors(self):
        st, meta = read_safetensors(os.path.join(self.out, "model.safetensors"))
        self.assertEqual(meta["format"], "pt")
        sd = torch.load(os.path.join(self.out, "pytorch_model.bin"))
        self.assertNotIn("lm_head.weight", st)  # tied: left out, as Hugging Face does
        self.assertEqual(set(st) | {"lm_head.weight"}, set(sd))
        for k, v in st.items():
            self.assertTrue(torch.equal(v, sd[k]), k)
        st["lm_head.weight"] = st["transformer.wte.weight"]
        m = self.hf_model(st)
        idx = torch.tensor([self.window[:T]])
        with torch.no_grad():
            self.assertTrue(torch.equal(m(idx), self.hf_model(sd)(idx)))
        # the package's own reader agrees
        from remat.convert import load_safetensors
        again, _ = load_safetensors(os.path.join(self.out, "model.safetensors"))
        self.assertEqual(list(again), list(st)[:-1])

    def test_bf16_file(self):
        m16 = os.path.join(self.dir, "m16.bin")
        remat("train", "--model", self.model, "--data", os.path.join(self.dir, "one.bin"),
              "--steps", "0", "--batch", "1", "--seq", str(T), "--save", m16,
              "--save-precision", "bf16")
        out = os.path.join(self.dir, "hf16")
        r = convert(m16, out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("(bf16)", r.stdout)
        a = torch.load(os.path.join(out, "pytorch_model.bin"))
        b = torch.load(os.path.join(self.out, "pytorch_model.bin"))
        for k in b:
            self.assertEqual(a[k].dtype, torch.float32)
            self.assertTrue(torch.equal(a[k], b[k].bfloat16().float()), k)

    def test_refusals(self):
        bad = os.path.join(self.dir, "bad.bin")
        with open(bad, "wb") as f:
            f.write(b"\0" * 2048)
        r = convert(bad, os.path.join(self.dir, "x"))
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr.strip(), "remat.convert: 'PATH' is not a remat (llm.c GPT-2) "
                         "model file: magic number is 0, expected 20240326".replace("PATH", bad))
        cut = os.path.join(self.dir, "cut.bin")
        with open(self.model, "rb") as f, open(cut, "wb") as g:
            g.write(f.read()[:-4])
        r = convert(cut, os.path.join(self.dir, "x"))
        self.assertEqual(r.returncode, 2)
        self.assertRegex(r.stderr, r"^remat\.convert: model file '.*cut\.bin' has \d+ bytes; its "
                         r"header \(L=2 C=64 NH=4 V=200 Vp=256 maxT=64, fp32\) needs \d+\n$")
        r = convert(os.path.join(self.dir, "missing.bin"), os.path.join(self.dir, "x"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot read model file", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1)
        r = convert(self.model, os.path.join(self.dir, "one.bin"))  # a file, not a directory
        self.assertEqual(r.returncode, 2)
        self.assertIn("is not a directory", r.stderr)
        r = convert("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("Hugging Face", r.stdout)


if __name__ == "__main__":
    unittest.main()

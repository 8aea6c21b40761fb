"""remat.profile's saved bytes against bytes computed by hand from the
blocks' shapes (fp32), for the GPT-2 and the Llama-style example; the
embedding and head of GPT-2 by hand; state bytes, by hand and as the C
library's `remat state` gives them; and the problem JSON it writes, read by
the real `remat plan`."""
import json
import os
import subprocess
import tempfile
import unittest

import common
import torch

import gpt2_block
import llama_block
import remat

RNG_STATE = torch.get_rng_state().numel()  # bytes a checkpoint context keeps on the CPU


def profile_gpt2(B, T, C, H, selective=True, preserve=False, n_layer=2, vocab=96):
    torch.manual_seed(0)
    model = gpt2_block.GPT2(n_layer=n_layer, n_embd=C, n_head=H, vocab=vocab, block_size=T)
    idx = torch.randint(0, vocab, (B, T))
    return model, idx, remat.profile(model, (idx, idx), layers="blocks", embedding="embed",
                                     head="head", selective=["attn.core"] if selective else None,
                                     repeats=1, preserve_rng_state=preserve)


def profile_llama(B, T, C, H, Hkv, F, preserve=False, n_layer=2, vocab=96):
    torch.manual_seed(0)
    model = llama_block.Llama(n_layer=n_layer, dim=C, n_head=H, n_kv_head=Hkv, hidden=F,
                              vocab=vocab, block_size=T)
    idx = torch.randint(0, vocab, (B, T))
    return model, idx, remat.profile(model, (idx, idx), layers="blocks", embedding="embed",
                                     head="head", selective=["attn.core"], repeats=1,
                                     preserve_rng_state=preserve)


def gpt2_by_hand(B, T, C, H, e=4):
    """A GPT-2 block (elements of e bytes; layernorm statistics fp32).
    keep: x, ln_1(x), q, k, v (head-major copies), attention output, h,
    ln_2(h): 8 (B,T,C); c_fc's and GELU's outputs: 2 (B,T,4C); the softmax
    output (B*H,T,T); mean and rstd of two layernorms: 4 (B,T).
    full: x. selective (attn.core checkpointed): qkv instead of q, k, v and
    the softmax output."""
    keep = e * B * T * (8 * C + 2 * 4 * C) + e * B * H * T * T + 4 * 4 * B * T
    return keep, e * B * T * C, keep - e * B * H * T * T


def llama_by_hand(B, T, C, H, Hkv, F, e=4):
    """A Llama-style block. keep: per norm x, x*r and its output (saved by
    the projections), for both norms 6 (B,T,C); q after rotary, k and v
    repeated to H heads, attention output: 4 (B,T,C); SwiGLU's w1 output,
    silu output, w3 output, product: 4 (B,T,F); the norms' r: 2 (B,T); the
    softmax output (B*H,T,T). full: x. selective: q, k (Hkv heads) and v
    (Hkv heads) instead of q, repeated k and v and the softmax output."""
    D = C // H
    keep = e * B * T * (10 * C + 4 * F + 2) + e * B * H * T * T
    sel = keep - e * B * T * 2 * C - e * B * H * T * T + e * B * T * 2 * Hkv * D
    return keep, e * B * T * C, sel


class GPT2Bytes(unittest.TestCase):
    def check(self, B, T, C, H):
        _, _, prof = profile_gpt2(B, T, C, H)
        keep, full, sel = gpt2_by_hand(B, T, C, H)
        self.assertEqual((keep, full, sel), gpt2_block.block_bytes(B, T, C, H))
        for row in prof.layers[1:-1]:
            self.assertEqual(row["act_bytes"], keep)
            self.assertEqual(row["ckpt_bytes"], full)
            self.assertEqual(row["middle_bytes"], sel)
        return prof

    def test_block_2x32_c64_h4(self):
        prof = self.check(2, 32, 64, 4)
        # the figures themselves: 4*2*32*16*64 + 4*2*4*32*32 + 16*2*32
        self.assertEqual(prof.layers[1]["act_bytes"], 295936)
        self.assertEqual(prof.layers[1]["ckpt_bytes"], 16384)
        self.assertEqual(prof.layers[1]["middle_bytes"], 263168)

    def test_block_3x16_c48_h6(self):
        self.check(3, 16, 48, 6)

    def test_embedding_and_head(self):
        B, T, C, V = 2, 32, 64, 96
        _, _, prof = profile_gpt2(B, T, C, 4, selective=False, vocab=V)
        emb, head = prof.layers[0], prof.layers[-1]
        # token ids and position ids (int64), saved by the two embeddings
        self.assertEqual(emb["act_bytes"], 8 * B * T + 8 * T)
        # head: its input, ln_f's output, mean and rstd; log_softmax's output;
        # the targets (int64) and nll_loss's total weight (one fp32)
        self.assertEqual(head["act_bytes"], 4 * B * T * 2 * C + 2 * 4 * B * T + 4 * B * T * V + 8 * B * T + 4)
        self.assertEqual(head["ckpt_bytes"], head["act_bytes"])
        self.assertFalse(emb["recomputable"])
        self.assertFalse(head["recomputable"])

    def test_rng_state_kept_by_checkpoint(self):
        # torch.utils.checkpoint keeps the CPU RNG state on its context: one
        # per checkpointed block (full) or checkpointed submodule (selective)
        B, T, C, H = 2, 16, 32, 2
        _, _, prof = profile_gpt2(B, T, C, H, preserve=True)
        keep, full, sel = gpt2_by_hand(B, T, C, H)
        self.assertEqual(prof.layers[1]["act_bytes"], keep)
        self.assertEqual(prof.layers[1]["ckpt_bytes"], full + RNG_STATE)
        self.assertEqual(prof.layers[1]["middle_bytes"], sel + RNG_STATE)

    def test_state_bytes(self):
        _, _, prof = profile_gpt2(2, 16, 32, 2, selective=False)
        C = 32
        params = 2 * 2 * C + (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) + (4 * C * C + C)
        blk = prof.layers[1]
        self.assertEqual(blk["params"], params)
        # fp32 AdamW: 16 bytes per parameter, plus the causal mask buffer (T x T fp32)
        self.assertEqual(blk["state_bytes"], 16 * params + 4 * 16 * 16)


class LlamaBytes(unittest.TestCase):
    def check(self, B, T, C, H, Hkv, F):
        _, _, prof = profile_llama(B, T, C, H, Hkv, F)
        keep, full, sel = llama_by_hand(B, T, C, H, Hkv, F)
        self.assertEqual((keep, full, sel), llama_block.block_bytes(B, T, C, H, Hkv, F))
        for row in prof.layers[1:-1]:
            self.assertEqual(row["act_bytes"], keep)
            self.assertEqual(row["ckpt_bytes"], full)
            self.assertEqual(row["middle_bytes"], sel)
        return prof

    def test_block_2x32_c64_h4_kv2(self):
        prof = self.check(2, 32, 64, 4, 2, 172)
        # 4*2*32*(10*64 + 4*172 + 2) + 4*2*4*32*32
        self.assertEqual(prof.layers[1]["act_bytes"], 373248)
        self.assertEqual(prof.layers[1]["ckpt_bytes"], 16384)
        self.assertEqual(prof.layers[1]["middle_bytes"], 324096)

    def test_block_3x16_c96_h6_kv3(self):
        self.check(3, 16, 96, 6, 3, 256)

    def test_embedding(self):
        _, _, prof = profile_llama(2, 32, 64, 4, 2, 172)
        self.assertEqual(prof.layers[0]["act_bytes"], 8 * 2 * 32)  # the token ids


class StateBytes(unittest.TestCase):
    def test_table(self):
        n = 1000
        self.assertEqual(remat.state_bytes(n), 16 * n)  # fp32 AdamW
        self.assertEqual(remat.state_bytes(n, "bf16"), 16 * n)  # 2 + 2 + 12
        self.assertEqual(remat.state_bytes(n, "bf16", zero=1, dp=4), 4 * n + 3 * n)
        self.assertEqual(remat.state_bytes(n, "bf16", zero=2, dp=4), 2 * n + n // 2 + 3 * n)
        self.assertEqual(remat.state_bytes(n, "bf16", zero=3, dp=4), 4 * n)
        self.assertEqual(remat.state_bytes(n, "fp32", "sgd"), 8 * n)
        self.assertEqual(remat.state_bytes(n, tp=2), 8 * n)
        with self.assertRaises(ValueError):
            remat.state_bytes(n, "int3")
        with self.assertRaisesRegex(ValueError, "ZeRO stage 4"):
            remat.state_bytes(n, zero=4)

    def test_equals_the_library(self):
        # remat.state_bytes is the C library's figure (remat_state_bytes,
        # whose table test_replicas checks by hand), as `remat state` prints it
        for args in [("fp32", "adamw", 0, 1, 1), ("bf16", "adamw", 1, 8, 2),
                     ("fp16", "sgd-momentum", 2, 3, 1), ("bf16", "none", 3, 5, 4),
                     ("fp32", "adam", 3, 7, 3), ("bf16", "sgd", 2, 6, 1)]:
            for n in (0, 1, 999, 124475904):
                out = subprocess.run([common.CLI, "state", "--params", str(n), "--precision",
                                      args[0], "--optimizer", args[1], "--zero", str(args[2]),
                                      "--dp", str(args[3]), "--tp", str(args[4])],
                                     capture_output=True, text=True, check=True).stdout
                c = json.loads(out)
                self.assertEqual(remat.state_bytes(n, *args), c["bytes"])
                self.assertEqual(c["bytes"], c["weights"] + c["grads"] + c["optimizer_state"])

    def test_no_table_of_its_own(self):
        # a remat command that answers otherwise changes the figure: Python
        # only asks
        with tempfile.TemporaryDirectory() as d:
            fake = os.path.join(d, "remat")
            with open(fake, "w") as f:
                f.write('#!/bin/sh\necho \'{"weights": 1, "grads": 2, "optimizer_state": 3, '
                        '"bytes": 6}\'\n')
            os.chmod(fake, 0o755)
            self.assertEqual(remat.state_bytes(1000, cli=fake), 6)
            self.assertEqual(remat.state(1000, cli=fake)["grads"], 2)


class ProblemFile(unittest.TestCase):
    def test_cli_reads_it(self):
        _, _, prof = profile_llama(2, 16, 32, 4, 2, 64, n_layer=3)
        with tempfile.TemporaryDirectory() as d:
            path = prof.write(os.path.join(d, "llama.json"), stages=2, microbatches=4, memory="1GiB")
            with open(path) as f:
                pb = json.load(f)
            self.assertEqual([g["count"] for g in pb["layers"]], [1, 3, 1])
            self.assertEqual(pb["layers"][1]["act_bytes"], llama_by_hand(2, 16, 32, 4, 2, 64)[0])
            r = subprocess.run([common.CLI, "plan", path], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("plan: 5 layers, 2 stages", r.stdout)


if __name__ == "__main__":
    unittest.main()

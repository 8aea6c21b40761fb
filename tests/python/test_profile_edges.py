"""remat.profile on models as people write them, and on the inputs a hostile
user gives it:

- a post-norm encoder with nn.MultiheadAttention called with keyword
  arguments (attn_mask=, need_weights=) under the selective policy, its
  mask a side input given once to profile (held once: not in the saved
  bytes, in stage_bytes); verify's saved bytes equal the plan's and no
  stage peaks above its plan, at every budget from the least to keeping
  all (its blocks do not save their input, which a stage holds anyway);
- blocks returning tuples (the Hugging Face style) measured as the same
  block returning its tensor; a tuple without a tensor first refused in one
  line naming the layer;
- a model too large to build: one block and num_layers=N give the problem
  file that profiling all N blocks gives (a fixed clock makes the times
  equal too), with the model or without it (embedding, block and head
  alone; the rest of the model on the meta device);
- the meta device and an empty batch refused;
- profile leaves the model as it was (BatchNorm's running statistics and
  num_batches_tracked, gradients, training flags, the RNG state);
- a block that returns its input refused, naming it;
- tp: the whole layers' activations as an upper bound (noted), their state
  divided by tp; shard=True, the modules a rank's: state and activations as
  measured."""
import itertools
import json
import math
import unittest
from unittest import mock

import common
import torch
import torch.nn as nn

import gpt2_block
import remat
from remat import measure

B, T, C, H, V = 2, 8, 32, 4, 64


class Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, C)

    def forward(self, idx):
        return self.tok(idx)


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = nn.Linear(C, V)

    def forward(self, x):
        return self.out(x)


class EncoderBlock(nn.Module):
    """Post-norm (BERT-style): attention through nn.MultiheadAttention with
    keyword arguments, then an MLP."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(C, H, batch_first=True)
        self.ln1 = nn.LayerNorm(C)
        self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C))
        self.ln2 = nn.LayerNorm(C)

    def forward(self, x, mask=None):
        a, _ = self.attn(x, x, x, attn_mask=mask, need_weights=False)
        x = self.ln1(x + a)
        return self.ln2(x + self.mlp(x))


class Encoder(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.embed = Embed()
        self.blocks = nn.ModuleList([EncoderBlock() for _ in range(n)])
        self.head = Head()


def causal_mask():
    return torch.triu(torch.full((T, T), float("-inf")), diagonal=1)


def batch():
    torch.manual_seed(1)
    idx = torch.randint(0, V, (B, T))
    return idx, idx


class Keywords(unittest.TestCase):
    def test_multihead_attention_with_a_mask(self):
        torch.manual_seed(0)
        model, mask = Encoder(), causal_mask()
        sample = batch()
        prof = remat.profile(model, sample, layers="blocks", embedding="embed", head="head",
                             selective=["attn", "mlp"], side_inputs={"mask": mask}, repeats=1,
                             preserve_rng_state=False, cli=common.CLI)
        blk = prof.layers[1]
        self.assertLess(blk["middle_bytes"], blk["act_bytes"])
        self.assertLess(blk["ckpt_bytes"], blk["middle_bytes"])
        self.assertEqual(blk["ckpt_bytes"], 4 * B * T * C)  # the block's input only
        mask_bytes = mask.numel() * mask.element_size()
        self.assertEqual(prof.stage_bytes, prof.boundary_bytes + mask_bytes)
        self.assertTrue(any("side inputs (mask)" in n for n in prof.notes))
        # the mask is held once, not per layer: the saved bytes do not change
        # when the mask is another tensor of the same shape
        again = remat.profile(model, sample, layers="blocks", embedding="embed", head="head",
                              selective=["attn", "mlp"], side_inputs={"mask": causal_mask()},
                              repeats=1, preserve_rng_state=False, cli=common.CLI)
        self.assertEqual([r["act_bytes"] for r in again.layers], [r["act_bytes"] for r in prof.layers])
        for memory in ("1GiB", None):
            if memory is None:  # the smallest budget: recompute and middle
                memory = remat.plan(prof, 2, 4, 1, cli=common.CLI).data["min_budget_bytes"]
            plan = remat.plan(prof, 2, 4, memory, cli=common.CLI)
            v = remat.verify(model, plan, sample)
            self.assertTrue(v.saved_equal, str(v))
            for st in v.stages:  # a plan is never below what is measured
                self.assertLessEqual(st["measured_peak_bytes"], st["planned_peak_bytes"], str(v))
        # the stage modules compute the model's loss with the mask bound
        mods = plan.stage_modules()
        x = sample[0]
        for m in mods:
            x = m(x)
        ref = model.embed(sample[0])
        for b in model.blocks:
            ref = b(ref, mask=mask)
        self.assertTrue(torch.allclose(x, model.head(ref), atol=1e-6))


    def test_layers_as_a_list(self):
        # a plain list of blocks and modules for embedding and head: the
        # model is not needed
        torch.manual_seed(0)
        model = Encoder(2)
        kw = dict(side_inputs={"mask": causal_mask()}, repeats=1, cli=common.CLI)
        a = remat.profile(model, batch(), layers="blocks", embedding="embed", head="head", **kw)
        b = remat.profile(None, batch(), layers=list(model.blocks), embedding=model.embed,
                          head=model.head, **kw)
        self.assertEqual([r["act_bytes"] for r in a.layers], [r["act_bytes"] for r in b.layers])


class PostNorm(unittest.TestCase):
    def test_never_below_what_is_measured(self):
        # a post-norm block saves a copy of its input, not the input: the
        # tensor a stage receives is still held (a leaf autograd keeps), so
        # the block counts it as kept; every stage's peak is within its plan
        torch.manual_seed(0)
        model, sample = Encoder(4), batch()
        prof = remat.profile(model, sample, layers="blocks", embedding="embed", head="head",
                             selective=["mlp"], side_inputs={"mask": causal_mask()}, repeats=1,
                             preserve_rng_state=False, cli=common.CLI)
        self.assertEqual(prof.layers[1]["act_bytes"] - prof.layers[1]["middle_bytes"], 16384)
        lo = remat.plan(prof, 3, 4, 1, cli=common.CLI).data["min_budget_bytes"]
        hi = remat.plan(prof, 3, 4, 1 << 40, cli=common.CLI).data["max_memory_bytes"]
        for memory in (lo, (lo + hi) // 2, hi - 1, hi):
            plan = remat.plan(prof, 3, 4, memory, cli=common.CLI)
            v = remat.verify(model, plan, sample)
            self.assertTrue(v.saved_equal, str(v))
            for st in v.stages:
                self.assertLessEqual(st["measured_peak_bytes"], st["planned_peak_bytes"], str(v))


class TupleBlock(EncoderBlock):
    """Returns (hidden, None), as Hugging Face's layers do."""

    def forward(self, x, mask=None):
        return (super().forward(x, mask), None)


class BadTupleBlock(EncoderBlock):
    def forward(self, x, mask=None):
        return (None, super().forward(x, mask))


class Tuples(unittest.TestCase):
    def profile(self, cls):
        torch.manual_seed(0)
        model = Encoder()
        model.blocks = nn.ModuleList([cls() for _ in range(3)])
        prof = remat.profile(model, batch(), layers="blocks", embedding="embed", head="head",
                             selective=["mlp"], side_inputs={"mask": causal_mask()}, repeats=1,
                             preserve_rng_state=False, cli=common.CLI)
        return model, prof

    def test_first_element(self):
        _, plain = self.profile(EncoderBlock)
        model, prof = self.profile(TupleBlock)
        keys = ("act_bytes", "ckpt_bytes", "middle_bytes", "out_bytes", "state_bytes")
        for a, b in zip(plain.layers, prof.layers):
            self.assertEqual({k: a.get(k) for k in keys}, {k: b.get(k) for k in keys})
        plan = remat.plan(prof, 2, 2, "1GiB", cli=common.CLI)
        v = remat.verify(model, plan, batch())
        self.assertTrue(v.saved_equal, str(v))

    def test_refused_naming_the_layer(self):
        with self.assertRaises(TypeError) as cm:
            self.profile(BadTupleBlock)
        msg = str(cm.exception)
        self.assertEqual(msg.count("\n"), 0)
        self.assertIn("block0 (BadTupleBlock) returns a tuple whose first element is NoneType, "
                      "not a tensor", msg)


def fixed_clock():
    """time.perf_counter advancing 2^-10 s a call (exact in binary): the
    times are the same in every run that makes the same calls."""
    c = itertools.count()
    return mock.patch.object(measure.time, "perf_counter", lambda: math.ldexp(next(c), -10))


class Repeated(unittest.TestCase):
    N = 4

    def gpt2(self):
        torch.manual_seed(0)
        return gpt2_block.GPT2(n_layer=self.N, n_embd=C, n_head=H, vocab=V, block_size=T)

    def problem(self, prof):
        return json.loads(json.dumps(prof.problem(2, 4, "1GiB")))

    def test_one_block_for_n(self):
        model = self.gpt2()
        sample = batch()
        kw = dict(selective=["attn.core"], repeats=2, cli=common.CLI)
        with fixed_clock():
            full = remat.profile(model, sample, layers="blocks", embedding="embed", head="head", **kw)
        with fixed_clock():
            one = remat.profile(model, sample, layers=model.blocks[0], embedding="embed",
                                head="head", num_layers=self.N, **kw)
        self.assertEqual(self.problem(one), self.problem(full))
        self.assertEqual(len(one.layers), self.N + 2)
        # the plans are the same too
        a = remat.plan(full, 2, 4, "1GiB", cli=common.CLI)
        b = remat.plan(one, 2, 4, "1GiB", cli=common.CLI)
        self.assertEqual(a.data["stages"], b.data["stages"])
        with self.assertRaisesRegex(ValueError, "num_layers"):
            remat.verify(model, b, sample)
        with self.assertRaisesRegex(ValueError, "num_layers"):
            b.stage_modules()
        self.assertEqual(len(b.stage_modules(full.chain.modules())), 2)

    def test_tensor_parallel_shard(self):
        model = self.gpt2()
        sample = batch()
        kw = dict(layers="blocks", embedding="embed", head="head", repeats=1, cli=common.CLI)
        one = remat.profile(model, sample, **kw)
        whole = remat.profile(model, sample, tp=2, **kw)
        shard = remat.profile(model, sample, tp=2, shard=True, **kw)
        for a, w, s in zip(one.layers, whole.layers, shard.layers):
            self.assertEqual(a["act_bytes"], w["act_bytes"])
            self.assertEqual(a["act_bytes"], s["act_bytes"])
            self.assertEqual(a["state_bytes"], s["state_bytes"])  # a shard's own parameters
            self.assertLess(w["state_bytes"], a["state_bytes"])  # the whole layer's, over tp
        self.assertTrue(any("upper bound" in n for n in whole.notes))
        self.assertTrue(any("one tensor rank's shard" in n for n in shard.notes))
        self.assertFalse(any("tp=" in n for n in one.notes))
        self.assertEqual(self.problem(whole)["tensor_parallel"], 2)

    def test_without_the_model(self):
        # what a user who cannot build the model has: the rest of it on the
        # meta device (no storage), one block, the embedding and the head
        big = self.gpt2()
        sample = batch()
        with fixed_clock():
            full = remat.profile(big, sample, layers="blocks", embedding="embed", head="head",
                                 repeats=1, cli=common.CLI)
        with torch.device("meta") if hasattr(torch, "device") and hasattr(torch.device, "__enter__") \
                else _meta_default():
            meta = gpt2_block.GPT2(n_layer=self.N, n_embd=C, n_head=H, vocab=V, block_size=T)
        self.assertTrue(next(meta.parameters()).is_meta)
        with self.assertRaisesRegex(ValueError, "meta device"):
            remat.profile(meta, sample, layers="blocks", embedding="embed", head="head",
                          repeats=1, cli=common.CLI)
        with fixed_clock():
            one = remat.profile(None, sample, layers=big.blocks[0], embedding=big.embed,
                                head=big.head, num_layers=self.N, repeats=1, cli=common.CLI)
        a, b = self.problem(full), self.problem(one)
        self.assertEqual(a.pop("comment").replace("of GPT2 on", "of Block on"), b.pop("comment"))
        self.assertEqual(a, b)
        for bad in (0, -1, 2.5, True):
            with self.assertRaisesRegex(ValueError, "num_layers: a positive number"):
                remat.profile(None, sample, layers=big.blocks[0], embedding=big.embed,
                              head=big.head, num_layers=bad, cli=common.CLI)
        with self.assertRaisesRegex(ValueError, "with num_layers, layers is one block"):
            remat.profile(big, sample, layers="blocks", num_layers=4, cli=common.CLI)
        with self.assertRaisesRegex(ValueError, "no model to find 'embed' in"):
            remat.profile(None, sample, layers=big.blocks[0], embedding="embed", num_layers=4,
                          cli=common.CLI)


class _meta_default:
    """torch 1.13 has no `with torch.device(...)`: build on meta through
    the default tensor factory's device argument instead."""

    def __enter__(self):
        self.orig = nn.Module.__init__
        self.patches = []
        for cls, names in ((nn.Linear, ("weight", "bias")), (nn.Embedding, ("weight",)),
                           (nn.LayerNorm, ("weight", "bias"))):
            init = cls.__init__

            def patched(self_, *a, _init=init, **k):
                k.setdefault("device", "meta")
                _init(self_, *a, **k)
            self.patches.append((cls, init))
            cls.__init__ = patched
        return self

    def __exit__(self, *exc):
        for cls, init in self.patches:
            cls.__init__ = init
        return False


class Refusals(unittest.TestCase):
    def test_empty_batch(self):
        model = Encoder()
        idx = torch.zeros((0, T), dtype=torch.long)
        with self.assertRaisesRegex(ValueError, r"sample_batch is empty \(shape \(0, 8\)\)"):
            remat.profile(model, (idx, idx), layers="blocks", embedding="embed", head="head",
                          cli=common.CLI)

    def test_meta_device(self):
        model = Encoder()
        with self.assertRaisesRegex(ValueError, "the device is on the meta device"):
            remat.profile(model, batch(), layers="blocks", embedding="embed", head="head",
                          device="meta", cli=common.CLI)
        idx = torch.zeros((B, T), dtype=torch.long, device="meta")
        with self.assertRaisesRegex(ValueError, "the sample batch is on the meta device"):
            remat.profile(model, (idx, idx), layers="blocks", embedding="embed", head="head",
                          cli=common.CLI)


class NormBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(C, C)
        self.bn = nn.BatchNorm1d(C)

    def forward(self, x):
        return x + self.bn(self.fc(x).transpose(1, 2)).transpose(1, 2)


class Untouched(unittest.TestCase):
    def test_batchnorm_grads_modes_rng(self):
        torch.manual_seed(0)
        model = Encoder()
        model.blocks = nn.ModuleList([NormBlock() for _ in range(3)])
        model.eval()
        model.blocks[1].train()
        for p in model.parameters():
            p.grad = torch.full_like(p, 0.5)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        modes = {n: m.training for n, m in model.named_modules()}
        sample = batch()
        torch.manual_seed(7)
        rng = torch.get_rng_state()
        prof = remat.profile(model, sample, layers="blocks", embedding="embed", head="head",
                             repeats=1, cli=common.CLI)
        self.assertTrue(torch.equal(torch.get_rng_state(), rng))
        after = model.state_dict()
        self.assertIn("blocks.0.bn.num_batches_tracked", after)
        for k, v in before.items():
            self.assertTrue(torch.equal(after[k], v), k)
        for n, p in model.named_parameters():
            self.assertTrue(torch.equal(p.grad, grads[n]), n)
        self.assertEqual({n: m.training for n, m in model.named_modules()}, modes)
        # a plan of it is never below what is measured
        plan = remat.plan(prof, 2, 2, "1GiB", cli=common.CLI)
        v = remat.verify(model, plan, batch())
        self.assertTrue(v.saved_equal, str(v))
        for st in v.stages:
            self.assertLessEqual(st["measured_peak_bytes"], st["planned_peak_bytes"], str(v))
        # verify leaves the model as it was too
        after = model.state_dict()
        for k, v in before.items():
            self.assertTrue(torch.equal(after[k], v), k)
        for n, p in model.named_parameters():
            self.assertTrue(torch.equal(p.grad, grads[n]), n)
        self.assertEqual({n: m.training for n, m in model.named_modules()}, modes)

    def test_identity_block_refused(self):
        model = Encoder()
        model.blocks = nn.ModuleList([EncoderBlock(), nn.Identity(), EncoderBlock()])
        with self.assertRaises(ValueError) as cm:
            remat.profile(model, batch(), layers="blocks", embedding="embed", head="head",
                          side_inputs={}, repeats=1, cli=common.CLI)
        self.assertIn("block1 (Identity) returns its input", str(cm.exception))

        class View(nn.Module):
            def forward(self, x):
                return x.view(x.shape)
        model.blocks = nn.ModuleList([EncoderBlock(), View()])
        with self.assertRaisesRegex(ValueError, r"block1 \(View\) returns its input \(or a view"):
            remat.profile(model, batch(), layers="blocks", embedding="embed", head="head",
                          repeats=1, cli=common.CLI)


if __name__ == "__main__":
    unittest.main()

"""remat.verify on the CPU: for plans of both examples (every policy:
keep, full, selective), each stage's saved bytes over the micro-batches it
holds equal the plan's exactly, and by hand; the plan's stage memory is the
sum of the profile's terms; the allocator's peak is the plan's; the torch
stage split computes the model's loss and gradients."""
import unittest

import common
import torch

import gpt2_block
import llama_block
import remat

B, T, C, H, V = 2, 16, 32, 4, 64
RNG_STATE = torch.get_rng_state().numel()


def fixed_times(prof):
    """Times set by hand (the measured ones vary from run to run), so that
    the plans below are always the same: a block's forward 1, backward 2,
    full recompute 1, selective rerun 0.1; embedding and head 0.5 and 1."""
    for r in prof.layers:
        if r["kind"] == "block":
            r.update(fwd=1e-3, bwd=2e-3, recompute=1e-3, middle_recompute=1e-4)
        else:
            r.update(fwd=5e-4, bwd=1e-3)


def plans(prof, stages, microbatches):
    """The plans at the smallest budget that fits (recomputing most), one
    between, one byte below what keeping everything needs (a selective
    layer is then the cheapest way to fit) and that (all kept)."""
    lo = remat.plan(prof, stages, microbatches, 1, cli=common.CLI).data["min_budget_bytes"]
    hi = remat.plan(prof, stages, microbatches, 1 << 40, cli=common.CLI).data["max_memory_bytes"]
    return [remat.plan(prof, stages, microbatches, m, cli=common.CLI)
            for m in (lo, lo + (hi - lo) // 2, hi - 1, hi)]


class Base:
    stages, microbatches = 3, 4

    def by_hand(self, l, policy):
        raise NotImplementedError

    def test_stages(self):
        seen, exact_peaks = set(), 0
        for plan in plans(self.prof, self.stages, self.microbatches):
            self.assertTrue(plan.feasible, plan.message)
            v = remat.verify(self.model, plan, (self.idx, self.idx))
            self.assertTrue(v.saved_equal, str(v))
            for s, st in enumerate(v.stages):
                n = plan.held(s)
                self.assertEqual(st["microbatches_held"], min(self.stages - s, self.microbatches))
                hand = n * sum(self.by_hand(l, p) for l, p in
                               zip(range(st["first_layer"], st["first_layer"] + st["layers"]),
                                   st["policies"]))
                self.assertEqual(st["measured_saved_bytes"], hand)
                self.assertEqual(st["planned_saved_bytes"], hand)
                self.assertEqual(st["recomposed_memory_bytes"], st["planned_memory_bytes"])
                # the allocator's peak (CPU profiler) is at most the plan's (less
                # state and the incoming gradient), and equal to it on a stage that
                # keeps every layer and receives its gradient: its peak is then all
                # its saved bytes plus the largest transient bytes of one layer.
                # (Recomputing, or the head, frees the current micro-batch's bytes
                # of later layers before an earlier layer's transient bytes peak.)
                self.assertLessEqual(st["measured_peak_bytes"], st["planned_peak_bytes"])
                self.assertGreater(st["measured_peak_bytes"], 0.7 * st["planned_peak_bytes"])
                if s < self.stages - 1 and set(st["policies"]) == {"keep"}:
                    self.assertEqual(st["measured_peak_bytes"], st["planned_peak_bytes"])
                    exact_peaks += 1
                seen.update(st["policies"])
        self.assertEqual(seen, {"keep", "full", "selective"})
        self.assertGreaterEqual(exact_peaks, 4)

    def test_split_computes_the_model(self):
        every = plans(self.prof, self.stages, self.microbatches)
        self.assertIn("full", every[0].policies)
        self.assertIn("selective", every[2].policies)
        for plan in (every[0], every[2]):
            self.split_matches(plan)

    def test_wrong_figure_is_seen(self):
        plan = plans(self.prof, self.stages, self.microbatches)[3]
        row = self.prof.layers[1]
        row["act_bytes"] += 4
        try:
            v = remat.verify(self.model, plan, (self.idx, self.idx))
        finally:
            row["act_bytes"] -= 4
        self.assertFalse(v.saved_equal)
        st = v.stages[0]
        self.assertEqual(st["planned_saved_bytes"] - st["measured_saved_bytes"], 4 * plan.held(0))

    def split_matches(self, plan):
        loss_fn = self.prof.chain.loss_fn
        self.model.zero_grad()
        loss = loss_fn(self.model(self.idx), self.idx)
        loss.backward()
        want = [p.grad.clone() for p in self.model.parameters()]
        self.model.zero_grad()
        x = self.idx
        for seq in plan.stage_modules():
            x = seq(x)
        got_loss = loss_fn(x, self.idx)
        got_loss.backward()
        self.assertTrue(torch.allclose(got_loss, loss, rtol=0, atol=1e-6))
        for a, b in zip(want, self.model.parameters()):
            self.assertTrue(torch.allclose(a, b.grad, rtol=1e-5, atol=1e-6))
        self.model.zero_grad(set_to_none=True)


class GPT2Verify(Base, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.manual_seed(0)
        cls.model = gpt2_block.GPT2(n_layer=4, n_embd=C, n_head=H, vocab=V, block_size=T)
        cls.idx = torch.randint(0, V, (B, T))
        cls.prof = remat.profile(cls.model, (cls.idx, cls.idx), layers="blocks", embedding="embed",
                                 head="head", selective=["attn.core"], repeats=1,
                                 preserve_rng_state=False)
        fixed_times(cls.prof)

    def by_hand(self, l, policy):
        if l == 0:
            return 8 * B * T + 8 * T
        if l == 5:
            return 4 * B * T * 2 * C + 2 * 4 * B * T + 4 * B * T * V + 8 * B * T + 4
        keep, full, sel = gpt2_block.block_bytes(B, T, C, H)
        return {"keep": keep, "full": full, "selective": sel}[policy]


class LlamaVerify(Base, unittest.TestCase):
    Hkv, F = 2, 88

    @classmethod
    def setUpClass(cls):
        torch.manual_seed(0)
        cls.model = llama_block.Llama(n_layer=4, dim=C, n_head=H, n_kv_head=cls.Hkv, hidden=cls.F,
                                      vocab=V, block_size=T)
        cls.idx = torch.randint(0, V, (B, T))
        cls.prof = remat.profile(cls.model, (cls.idx, cls.idx), layers="blocks", embedding="embed",
                                 head="head", selective=["attn.core"], repeats=1)
        fixed_times(cls.prof)

    def by_hand(self, l, policy):
        if l == 0:
            return 8 * B * T
        if l == 5:
            return 4 * B * T * (3 * C + 1) + 4 * B * T * V + 8 * B * T + 4
        keep, full, sel = llama_block.block_bytes(B, T, C, H, self.Hkv, self.F)
        # torch.utils.checkpoint keeps the RNG state (preserve_rng_state, the default)
        return {"keep": keep, "full": full + RNG_STATE, "selective": sel + RNG_STATE}[policy]



class GPipeBF16(unittest.TestCase):
    """A bf16 Llama-style model under GPipe: every stage holds all M
    micro-batches; bytes by hand with 2-byte elements."""

    def test_stages(self):
        torch.manual_seed(0)
        Hkv, F, M = 2, 64, 4
        model = llama_block.Llama(n_layer=3, dim=C, n_head=H, n_kv_head=Hkv, hidden=F, vocab=V,
                                  block_size=T).to(torch.bfloat16)
        idx = torch.randint(0, V, (B, T))
        prof = remat.profile(model, (idx, idx), layers="blocks", embedding="embed", head="head",
                             selective=["attn.core"], precision="bf16", zero=1, dp=4, repeats=1,
                             preserve_rng_state=False)
        fixed_times(prof)
        keep, full, sel = llama_block.block_bytes(B, T, C, H, Hkv, F, elem=2)
        # embedding: the ids; head: its input, x*r, the norm's output, r, the
        # log-softmax output (bf16), the targets and nll_loss's total weight (bf16)
        hand = {0: 8 * B * T, 4: 2 * B * T * (3 * C + 1) + 2 * B * T * V + 8 * B * T + 2}
        for mem in (1, 1 << 30):
            lo = remat.plan(prof, 2, M, mem, schedule="gpipe", cli=common.CLI)
            plan = lo if lo.feasible else remat.plan(prof, 2, M, lo.data["min_budget_bytes"],
                                                     schedule="gpipe", cli=common.CLI)
            v = remat.verify(model, plan, (idx, idx))
            for st in v.stages:
                self.assertEqual(st["microbatches_held"], M)
                want = M * sum(hand.get(l, {"keep": keep, "full": full, "selective": sel}[p])
                               for l, p in zip(range(st["first_layer"], st["first_layer"] + st["layers"]),
                                               st["policies"]))
                self.assertEqual(st["measured_saved_bytes"], want)
                self.assertEqual(st["planned_saved_bytes"], want)
                self.assertLessEqual(st["measured_peak_bytes"], st["planned_peak_bytes"])


if __name__ == "__main__":
    unittest.main()

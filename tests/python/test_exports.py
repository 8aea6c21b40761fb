"""remat's ColossalAI and Megatron-LM exports against the frameworks' own rules
(tests/python/frameworks/): for gpt2-350m (--config) and a Llama problem
(examples/llama2-7b.json), under 1f1b, gpipe, interleaved (v=2), zb-h1 and
zbv, at budgets that force recompute, with data- and tensor-parallel degrees,
with stages that hold no transformer layer, and at budgets that fit nothing.

Each ColossalAI snippet is run as pasted against the stand-in package, and
the layers its policy then recomputes (by the policy's rule) are compared
with what the export says ColossalAI runs, and with the plan where it says it
runs the plan. Each Megatron flag list is parsed and validated by Megatron's
rules, and the layers each virtual stage then builds and recomputes are
compared the same way."""
import copy
import json
import os
import shlex
import subprocess
import sys
import tempfile
import unittest

import common

sys.path.insert(0, os.path.join(common.HERE, "frameworks"))
import colossalai.booster.plugin as cplugin  # noqa: E402  the stand-in
import megatron_rules  # noqa: E402

import remat  # noqa: E402

LLAMA = os.path.join(common.ROOT, "examples", "llama2-7b.json")
GPT2 = ["--config", "gpt2-350m", "--batch", "4", "--seq", "1024", "--precision", "fp32"]
SCHEDULES = ["1f1b", "gpipe", "interleaved", "zb-h1", "zbv"]


def run(args, fmt):
    r = subprocess.run([common.CLI, "plan"] + args + ["--format", fmt], capture_output=True,
                       text=True)
    return r.returncode, r.stdout, r.stderr


def plan_json(args):
    rc, out, err = run(args, "json")
    if rc not in (0, 1) or not out:
        raise AssertionError(f"remat plan {' '.join(args)}: {err}")
    return rc, json.loads(out)


def forcing_budget(args, at=0.75):
    """A budget `at` of the way from the least that fits to the least that
    needs no recompute: the plan must recompute something."""
    _, lo = plan_json(args + ["--mem", "1"])
    _, hi = plan_json(args + ["--mem", "1024TiB"])
    lo, hi = lo["min_budget_bytes"], hi["max_memory_bytes"]
    assert lo < hi, "nothing to recompute"
    return str(int(lo + at * (hi - lo)))


def virtual_stage(schedule, p, r, c):
    if schedule == "zbv":
        return r if c == 0 else 2 * p - 1 - r
    return c * p + r


def plan_blocks(plan, problem_layers):
    """The plan's blocks and blocks not kept per virtual stage, model order,
    and the global index of each block."""
    isblk = []
    for g in problem_layers:
        isblk += [g.get("recomputable", True)] * int(g.get("count", 1))
    rec = set()
    for st in plan["stages"]:
        rec.update(st["recomputed"])
    spans = []
    for st in plan["stages"]:
        for ch in st.get("chunks", [{"virtual_stage": st["stage"], "first_layer": st["first_layer"],
                                     "layers": st["layers"]}]):
            spans.append((ch["virtual_stage"], ch["first_layer"], ch["layers"]))
    spans.sort()
    blocks, ckpt, first_k = [], [], True
    for _, f, n in spans:
        ls = [l for l in range(f, f + n) if isblk[l]]
        k = sum(l in rec for l in ls)
        first_k &= all(l in rec for l in ls[:k])
        blocks.append(len(ls))
        ckpt.append(k)
    return blocks, ckpt, first_k


class FakeModel:
    """What a Hugging Face model offers ColossalAI's policies here."""

    def __init__(self, num_layers, family):
        self.num_layers, self.family = num_layers, family
        self.gradient_checkpointing, self.use_reentrant = False, None

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        self.gradient_checkpointing = True
        self.use_reentrant = (gradient_checkpointing_kwargs or {}).get("use_reentrant", True)


def colossal_layers(result, schedule, p, v):
    """Blocks and recomputed blocks per virtual stage from boost()'s answer,
    checking each chunk starts where the one before it in model order ends
    and recomputes its first layers."""
    blocks, rec, spans = [0] * (p * v), [0] * (p * v), {}
    for (r, c), (start, end, recomputed) in result.items():
        vs = virtual_stage(schedule, p, r, c)
        blocks[vs], rec[vs] = end - start, len(recomputed)
        assert recomputed == list(range(start, start + len(recomputed)))
        spans[vs] = (start, end)
    at = 0
    for vs in range(p * v):
        assert spans[vs][0] == at, (vs, spans)
        at = spans[vs][1]
    return blocks, rec


class Exports(unittest.TestCase):
    checked = 0

    def check(self, args, family, world_extra=1, tp=1, expect_exact=None):
        """args: the problem and settings, with --mem; world_extra: the
        data-parallel degree."""
        args = args + ["--min-blocks", "1"] if "--min-blocks" not in args else args
        rc, plan = plan_json(args)
        self.assertEqual(rc, 0, "the budget should fit")
        problem = self.problem_layers(args)
        schedule, p = plan["schedule"], plan["num_stages"]
        v = plan.get("chunks", 1)
        blocks, ckpt, first_k = plan_blocks(plan, problem)
        self.assertGreater(sum(ckpt), 0, "the budget should force recompute")
        ex = plan["exports"]
        self.check_colossalai(args, plan, ex["colossalai"], family, blocks, ckpt, first_k,
                              world_extra, tp, expect_exact)
        self.check_megatron(args, plan, ex["megatron"], blocks, world_extra, tp)
        Exports.checked += 1

    def problem_layers(self, args):
        if "--config" in args:  # embedding, blocks, head
            return [{"recomputable": False}, {"count": 24}, {"recomputable": False}]
        with open(args[0]) as f:
            return json.load(f)["layers"]

    def check_colossalai(self, args, plan, ex, family, blocks, ckpt, first_k, dp, tp, expect_exact):
        schedule, p, v = plan["schedule"], plan["num_stages"], plan.get("chunks", 1)
        rc, text, err = run(args, "colossalai")
        self.assertEqual(rc, 0, err)
        cplugin.WORLD_SIZE = p * tp * dp
        model = FakeModel(sum(blocks), family)
        ns = {"model": model}
        exec(compile(text, "<colossalai snippet>", "exec"), ns)  # as pasted
        self.assertEqual(model.gradient_checkpointing, ex["gradient_checkpointing"])
        if schedule == "zbv" and model.gradient_checkpointing:
            self.assertIs(model.use_reentrant, False)  # the plugin's own warning
        fw_blocks, fw_rec = colossal_layers(ns["booster"].boost(model), schedule, p, v)
        runs = ex["runs"]
        self.assertEqual(fw_blocks, runs["blocks"])
        self.assertEqual(fw_rec, runs["recomputed_blocks"])
        if ex["exact"]:
            self.assertEqual((fw_blocks, fw_rec), (blocks, ckpt))
            self.assertTrue(first_k)
        if expect_exact is not None:
            self.assertEqual(ex["exact"], expect_exact, text)
        if family == "gpt2":  # gpt2's policy: every layer or none
            self.assertEqual(fw_rec, fw_blocks)
            self.assertIn("recomputes every layer or none", text)
        if "--config" in args:
            self.assertIn("remat's own engine's", text)

    def check_megatron(self, args, plan, ex, blocks, dp, tp):
        schedule, p, v = plan["schedule"], plan["num_stages"], plan.get("chunks", 1)
        rc, text, err = run(args, "megatron")
        self.assertEqual(rc, 0, err)
        flags = []
        for line in text.splitlines():
            if line.startswith("--"):
                flags += shlex.split(line)  # as a shell reads them
        self.assertEqual(flags, ex["flags"])
        if schedule == "zbv":
            self.assertFalse(ex["expressible"])
            self.assertEqual(flags, [])
            return
        a = megatron_rules.validate(megatron_rules.parse(flags), p * tp * dp)
        self.assertEqual(a.num_microbatches, plan["microbatches"])
        rec = megatron_rules.recomputed(a)
        fw_blocks, fw_rec = [0] * (p * v), [0] * (p * v)
        for (r, c), (n, how) in rec.items():
            fw_blocks[c * p + r] = a.layers[r][c]
            fw_rec[c * p + r] = n
        self.assertEqual(fw_blocks, blocks)  # Megatron takes every split
        self.assertEqual(fw_rec, ex["runs"]["recomputed_blocks"])
        if (a.vpp or 1) > 1:
            self.assertEqual(a.vpp, v)

    # ------------------------------------------------------------ the cases
    def test_llama_schedules(self):
        for sched in SCHEDULES:
            with self.subTest(schedule=sched):
                stages = ["--stages", "2", "--microbatches", "4"] if sched in ("interleaved", "zbv") \
                    else ["--stages", "4"]
                base = [LLAMA, "--schedule", sched, "--no-middle", "--min-blocks", "1"] + stages
                mem = forcing_budget(base, 0.2 if sched == "zbv" else 0.75)
                # the llama policy honours the counts: 1f1b-like splits run as planned
                exact = True if sched not in ("interleaved", "zbv") else None
                self.check(base + ["--mem", mem], "llama", world_extra=8, expect_exact=exact)
                if sched == "zbv":  # rank r's second chunk is read at r + P, not in model order
                    ex = plan_json(base + ["--mem", mem])[1]["exports"]["colossalai"]
                    self.assertNotEqual(ex["num_ckpt_layers_per_stage"], ex["runs"]["recomputed_blocks"])

    def test_llama_middle(self):
        base = [LLAMA, "--stages", "4", "--min-blocks", "1"]
        self.check(base + ["--mem", forcing_budget(base)], "llama", world_extra=8)

    def test_gpt2_schedules(self):
        for sched in SCHEDULES:
            with self.subTest(schedule=sched):
                base = GPT2 + ["--stages", "4", "--microbatches", "8", "--schedule", sched,
                               "--min-blocks", "1"]
                mem = forcing_budget(base + ["--no-middle"])
                self.check(base + ["--no-middle", "--mem", mem], "gpt2")

    def test_gpt2_replicas(self):
        base = GPT2 + ["--stages", "2", "--microbatches", "4", "--data-parallel", "2", "--zero", "1",
                       "--min-blocks", "1"]
        self.check(base + ["--mem", forcing_budget(base)], "gpt2", world_extra=2)

    def test_tensor_parallel(self):
        with open(LLAMA) as f:
            pb = json.load(f)
        pb["tensor_parallel"], pb["data_parallel"] = 2, 4
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tp.json")
            with open(path, "w") as f:
                json.dump(pb, f)
            base = [path, "--stages", "4", "--no-middle", "--min-blocks", "1"]
            self.check(base + ["--mem", forcing_budget(base)], "llama", world_extra=4, tp=2)
            _, text, _ = run(base + ["--mem", forcing_budget(base)], "colossalai")
            self.assertIn("tp_size=2,", text)

    def test_stage_without_blocks(self):
        """A head that outweighs the blocks: with --min-blocks 0 it takes a
        stage alone, which Megatron runs through the layout string and
        ColossalAI as a stage of no layers; with 1 it does not."""
        pb = {"stages": 3, "microbatches": 3, "memory": "1GB", "family": "llama",
              "micro_batch_size": 1, "seq_length": 128,
              "layers": [{"name": "embedding", "fwd": 1, "bwd": 1, "recomputable": False,
                          "act_bytes": 1e6, "ckpt_bytes": 1e6, "state_bytes": 0},
                         {"name": "block", "count": 6, "fwd": 1, "bwd": 2, "recompute": 1,
                          "act_bytes": 60e6, "ckpt_bytes": 4e6, "state_bytes": 0},
                         {"name": "head", "fwd": 20, "bwd": 40, "recomputable": False,
                          "act_bytes": 1e6, "ckpt_bytes": 1e6, "state_bytes": 0}]}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "head.json")
            with open(path, "w") as f:
                json.dump(pb, f)
            _, free = plan_json([path, "--min-blocks", "0", "--mem", "200MB"])
            self.assertEqual(free["stages"][-1]["layers"], 1)  # the head alone
            self.check([path, "--min-blocks", "0", "--mem", "200MB"], "llama")
            rc, text, _ = run([path, "--min-blocks", "0", "--mem", "200MB"], "megatron")
            self.assertIn('--pipeline-model-parallel-layout "Et*', text)
            self.assertIn('|L"', text)
            _, held = plan_json([path, "--min-blocks", "1", "--mem", "200MB"])
            self.assertTrue(all(b > 0 for b in plan_blocks(held, pb["layers"])[0]))
            rc, _, err = run([path, "--stages", "7", "--mem", "1GB"], "colossalai")
            self.assertEqual(rc, 1)
            self.assertIn("6 blocks cannot give each of the 7 stages one", err)

    def test_infeasible(self):
        rc, out, err = run(GPT2 + ["--stages", "4", "--microbatches", "8", "--mem", "1GiB"],
                           "colossalai")
        self.assertEqual((rc, out), (1, ""))
        self.assertIn("smallest budget that fits", err)
        p = remat.plan(LLAMA, memory="1GiB", cli=common.CLI)
        self.assertFalse(p.feasible)
        with self.assertRaises(remat.PlanError):
            p.colossalai()
        with self.assertRaises(remat.PlanError):
            p.megatron()


class PythonExports(unittest.TestCase):
    """remat.plan's exports: objects for HybridParallelPlugin(**kwargs), the
    full flag list, checkpoints that work with torch's zero-bubble schedules."""

    def test_colossalai_objects(self):
        for sched, stages, mb in (("1f1b", 4, 8), ("zbv", 2, 4), ("interleaved", 2, 4)):
            with self.subTest(schedule=sched):
                base = [LLAMA, "--schedule", sched, "--stages", str(stages), "--microbatches",
                        str(mb), "--no-middle", "--min-blocks", "1"]
                mem = int(forcing_budget(base))
                p = remat.plan(LLAMA, stages=stages, microbatches=mb, memory=mem, schedule=sched,
                               middle=False, cli=common.CLI, tp=1)
                model = FakeModel(32, "llama")
                kwargs, code = p.colossalai(model=model)
                self.assertTrue(model.gradient_checkpointing)
                self.assertEqual(kwargs["pp_style"], sched)
                cplugin.WORLD_SIZE = stages * 8
                plugin = cplugin.HybridParallelPlugin(**kwargs)
                from colossalai.booster import Booster
                got = colossal_layers(Booster(plugin=plugin).boost(model), sched, stages,
                                      kwargs.get("num_model_chunks", 1))
                ex = p.data["exports"]["colossalai"]
                self.assertEqual(list(got), [ex["runs"]["blocks"], ex["runs"]["recomputed_blocks"]])

    def test_bad_memory(self):
        """A budget that is not a number of bytes is refused with what to give."""
        for bad in (float("nan"), float("inf"), -1, 0):
            with self.assertRaisesRegex(ValueError, "positive number of bytes"):
                remat.plan(common.SEED, memory=bad, cli=common.CLI)

    def test_megatron_flags(self):
        p = remat.plan(LLAMA, stages=4, memory="24GiB", middle=False, cli=common.CLI, tp=2)
        flags, notes = p.megatron()
        pairs = dict(zip(flags[::2], flags[1::2]))
        self.assertEqual(pairs["--tensor-model-parallel-size"], "2")
        for f in ("--micro-batch-size", "--global-batch-size", "--seq-length", "--num-layers",
                  "--pipeline-model-parallel-size", "--recompute-granularity"):
            self.assertIn(f, pairs)
        megatron_rules.validate(megatron_rules.parse(flags), 4 * 2 * 8)
        zbv = remat.plan(LLAMA, stages=2, microbatches=4, memory="64GiB", schedule="zbv",
                         middle=False, cli=common.CLI)
        with self.assertRaises(remat.PlanError):
            zbv.megatron()

    def test_checkpoint_with_grad_inputs(self):
        """torch's zero-bubble schedules take input gradients apart with
        autograd.grad(inputs=...): the stage modules' checkpoint allows it."""
        import torch
        import torch.nn as nn
        p = remat.plan(common.SEED, cli=common.CLI)
        layers = [nn.Linear(4, 4) for _ in range(32)]
        stage = p.stage_modules(layers)[0]
        x = torch.randn(2, 4, requires_grad=True)
        (gx,) = torch.autograd.grad(stage(x).sum(), inputs=[x])
        self.assertEqual(gx.shape, x.shape)
        reentrant = p.stage_modules(layers, reentrant=True)[0]
        with self.assertRaises(RuntimeError):
            torch.autograd.grad(reentrant(x).sum(), inputs=[x])


if __name__ == "__main__":
    unittest.main()

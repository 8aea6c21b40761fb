"""remat.plan through the built `remat plan`: the seed example (ColossalAI
#5509) comes out as 7/8/8/9 layers with 4/3/0/0 recomputed, and its
ColossalAI, Megatron and torch stage-split exports; the remat command
found from cli=, remat.config.cli, REMAT_CLI and PATH; a budget of NaN
refused with a ValueError that says what to give."""
import json
import os
import sys
import tempfile
import unittest

import common
import torch.nn as nn

sys.path.insert(0, os.path.join(common.HERE, "frameworks"))  # ColossalAI's rules, stood in

import remat


class Seed(unittest.TestCase):
    def setUp(self):
        self.plan = remat.plan(common.SEED, cli=common.CLI, tp=2)

    def test_split(self):
        p = self.plan
        self.assertTrue(p.feasible)
        self.assertEqual(p.layers_per_stage, [7, 8, 8, 9])
        self.assertEqual(p.ckpt_layers_per_stage, [4, 3, 0, 0])
        self.assertEqual(p.data["bottleneck_time"], 27)
        self.assertEqual(p.data["slowdown"], 1.125)
        self.assertEqual([p.held(s) for s in range(4)], [4, 3, 2, 1])
        self.assertEqual([st["memory_bytes"] for st in p.stages],
                         [17000000000, 19875000000, 20000000000, 11250000000])

    def test_colossalai(self):
        kw, code = self.plan.colossalai()
        self.assertEqual(kw["tp_size"], 2)
        self.assertEqual(kw["pp_size"], 4)
        self.assertEqual(kw["num_microbatches"], 8)
        self.assertEqual(kw["pp_style"], "1f1b")
        self.assertEqual(kw["num_layers_per_stage"], [7, 8, 8, 9])
        self.assertEqual(kw["gradient_checkpoint_config"].num_ckpt_layers_per_stage, [4, 3, 0, 0])
        self.assertIn("model.gradient_checkpointing_enable(", code)
        self.assertIn("    tp_size=2,\n", code)
        self.assertIn("num_ckpt_layers_per_stage = [4, 3, 0, 0]", code)
        self.assertEqual(self.plan.colossalai(tp=8)[0]["tp_size"], 8)

    def test_megatron(self):
        flags, notes = self.plan.megatron()
        pairs = dict(zip(flags[::2], flags[1::2]))
        self.assertEqual(pairs["--tensor-model-parallel-size"], "2")
        self.assertEqual(pairs["--pipeline-model-parallel-size"], "4")
        self.assertEqual(pairs["--num-layers"], "32")
        self.assertEqual(pairs["--decoder-first-pipeline-num-layers"], "7")
        self.assertEqual(pairs["--decoder-last-pipeline-num-layers"], "9")
        self.assertEqual(pairs["--recompute-num-layers"], "4")
        said = " ".join(notes)
        self.assertIn("cannot be expressed", said)
        self.assertIn("bottleneck 31 (plan: 27, +14.8%)", said)

    def test_stage_modules(self):
        layers = [nn.Linear(4, 4) for _ in range(32)]
        stages = self.plan.stage_modules(layers)
        self.assertEqual([len(s) for s in stages], [7, 8, 8, 9])
        ck = [[isinstance(m, remat.Checkpointed) for m in s] for s in stages]
        self.assertEqual([sum(c) for c in ck], [4, 3, 0, 0])
        self.assertEqual(ck[0], [True] * 4 + [False] * 3)
        self.assertIs(stages[0][5], layers[5])  # the model's own modules
        self.assertIs(stages[0][0].module, layers[0])
        with self.assertRaises(ValueError):
            self.plan.stage_modules(layers[:31])


class Settings(unittest.TestCase):
    def test_overrides_and_dict(self):
        with open(common.SEED) as f:
            pb = json.load(f)
        p = remat.plan(pb, memory="40GB", cli=common.CLI)
        self.assertEqual(p.layers_per_stage, [8, 8, 8, 8])
        self.assertEqual(p.ckpt_layers_per_stage, [0, 0, 0, 0])
        p = remat.plan(pb, stages=2, microbatches=2, memory=[30e9, 30e9], cli=common.CLI)
        self.assertEqual(len(p.stages), 2)
        self.assertEqual(p.microbatches, 2)

    def test_infeasible(self):
        p = remat.plan(common.SEED, memory="1GB", cli=common.CLI)
        self.assertFalse(p.feasible)
        self.assertEqual(p.data["min_budget_bytes"], 2000000000)
        self.assertIn("smallest budget that fits is 2.00 GB", p.message)

    def test_memory_nan(self):
        """plan(memory=nan): a ValueError naming what to give, never Python's
        'cannot convert float NaN to integer', for every way a budget comes."""
        nan = float("nan")
        with open(common.SEED) as f:
            pb = json.load(f)
        said = "memory must be a positive number of bytes or a size such as '80GB', not nan"
        for memory in (nan, [30e9, nan], "nan", "inf", "-1"):
            with self.assertRaisesRegex(ValueError, "positive number of bytes"):
                remat.plan(common.SEED, memory=memory, cli=common.CLI)
        with self.assertRaisesRegex(ValueError, said):
            remat.plan(pb, memory=nan, cli=common.CLI)
        with self.assertRaisesRegex(ValueError, said):  # a problem's own budget
            remat.plan(dict(pb, memory=nan), cli=common.CLI)
        # a Profile: refused before its problem is written (none is measured here)
        prof = object.__new__(remat.Profile)
        with self.assertRaisesRegex(ValueError, said):
            remat.plan(prof, stages=2, microbatches=2, memory=nan, cli=common.CLI)

    def test_cli_from_environment(self):
        old = os.environ.get("REMAT_CLI")
        os.environ["REMAT_CLI"] = common.CLI
        try:
            self.assertEqual(remat.plan(common.SEED).layers_per_stage, [7, 8, 8, 9])
            os.environ["REMAT_CLI"] = os.path.join(tempfile.gettempdir(), "no-such-remat")
            with self.assertRaises(remat.PlanError):
                remat.plan(common.SEED)
        finally:
            if old is None:
                del os.environ["REMAT_CLI"]
            else:
                os.environ["REMAT_CLI"] = old

    def test_cli_from_config_and_path(self):
        # remat.config.cli before $REMAT_CLI, and `remat` on PATH after both
        old_env, old_path = os.environ.pop("REMAT_CLI", None), os.environ["PATH"]
        try:
            remat.config.cli = common.CLI
            os.environ["REMAT_CLI"] = os.path.join(tempfile.gettempdir(), "no-such-remat")
            self.assertEqual(remat.plan(common.SEED).layers_per_stage, [7, 8, 8, 9])
            remat.config.cli = None
            del os.environ["REMAT_CLI"]
            os.environ["PATH"] = os.path.dirname(os.path.abspath(common.CLI)) + os.pathsep + old_path
            self.assertEqual(remat.plan(common.SEED).layers_per_stage, [7, 8, 8, 9])
            os.environ["PATH"] = tempfile.gettempdir()
            with self.assertRaisesRegex(remat.PlanError, "remat.config.cli"):
                remat.plan(common.SEED)
        finally:
            remat.config.cli = None
            os.environ["PATH"] = old_path
            if old_env is not None:
                os.environ["REMAT_CLI"] = old_env


if __name__ == "__main__":
    unittest.main()

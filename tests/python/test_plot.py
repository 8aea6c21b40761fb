"""remat.plot: pictures of a run's log, a plan and a trace, read back. A PNG
has the figure's size in pixels, is not blank (many pixels not white) and
holds each series' colour; an SVG holds each series as a group with its id
(and its legend's text). The plan's stack (state, activations, workspace,
data) adds up to the plan's memory_bytes, with the activations n_s times
the layers' saved bytes under their policies. The log, plan and trace come
from real runs of the built remat (the pipeline's under mpirun, where there
is one); bad inputs are refused with one line."""
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

import common
import matplotlib

matplotlib.use("Agg")
import matplotlib.image as mpimg  # noqa: E402

import remat  # noqa: E402
from remat import plot  # noqa: E402

MPIRUN = shutil.which("mpirun")
ZB = os.path.join(common.ROOT, "tests", "data", "plan", "zb.json")


def run(*args, mpi=0):
    cmd = ([MPIRUN, "--oversubscribe", "-np", str(mpi)] if mpi else []) + [common.CLI] + list(args)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        raise AssertionError(f"{' '.join(cmd)}: {r.stderr}")
    return r.stdout


def cli(*args):
    """python3 -m remat.plot ARGS, run in this process (each new python
    would import torch again): (returncode, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = plot.main(list(args))
        except SystemExit as e:  # argparse's --help and usage errors
            rc = e.code
    return subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())


def cli_process(*args):
    return subprocess.run([sys.executable, "-m", "remat.plot"] + list(args), capture_output=True,
                          text=True)


def rgb(hexcol):
    return tuple(int(hexcol[i:i + 2], 16) for i in (1, 3, 5))


class Picture(unittest.TestCase):
    def check_png(self, path, size, colours):
        img = mpimg.imread(path)  # (H, W, 4) floats in [0, 1]
        self.assertEqual(img.shape[:2], (size[1], size[0]), path)
        px = (img[:, :, :3] * 255).round().astype("int64")
        white = (px == 255).all(axis=2)
        self.assertGreater((~white).mean(), 0.02, f"{path} is blank")
        flat = px.reshape(-1, 3)
        keys = flat[:, 0] * 65536 + flat[:, 1] * 256 + flat[:, 2]
        present = set(keys.tolist())
        self.assertGreater(len(present), 8, f"{path} has {len(present)} colours")
        for c in colours:
            r, g, b = rgb(plot.COLOURS[c])
            self.assertIn(r * 65536 + g * 256 + b, present, f"{path}: no {c} ({plot.COLOURS[c]})")

    def check_svg(self, path, ids, texts=()):
        root = ET.parse(path).getroot()
        have = {e.get("id") for e in root.iter() if e.get("id")}
        for i in ids:
            self.assertIn(i, have, f"{path}: no series {i}")
        words = " ".join(t for e in root.iter() for t in [e.text] if t)
        for t in texts:
            self.assertIn(t, words, f"{path}: no text {t!r}")


class Plots(Picture):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.d = cls.tmp.name
        cls.log = os.path.join(d, "run.jsonl")
        run("train", "--config", "tiny", "--steps", "6", "--eval-every", "2", "--threads", "1",
            "--precision", "fp32", "--quiet", "--peak-gflops", "100", "--log", cls.log)
        cls.pipe = None
        if MPIRUN:
            # a zb-h1 plan, and its run over two ranks: its log and trace
            cls.plan = os.path.join(d, "plan.json")
            run("plan", "--config", "tiny", "--batch", "8", "--seq", "64", "--stages", "2",
                "--microbatches", "4", "--mem", "20MiB", "--schedule", "zb-h1", "--precision",
                "fp32", "--format", "json", "-o", cls.plan)
            cls.pipe = os.path.join(d, "pipe.jsonl")
            cls.trace = os.path.join(d, "trace.json")
            run("train", "--config", "tiny", "--stages", "2", "--grad-accum", "4", "--plan",
                cls.plan, "--schedule", "zb-h1", "--steps", "2", "--threads", "1", "--precision",
                "fp32", "--quiet", "--peak-gflops", "100", "--log", cls.pipe, "--trace",
                cls.trace, mpi=2)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def out(self, name):
        return os.path.join(self.d, name)

    def test_log(self):
        png, svg = self.out("log.png"), self.out("log.svg")
        r = cli_process("log", self.log, "-o", png, "-o", svg)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("(loss, val_loss, tokens_per_s, mfu)", r.stdout)
        self.check_png(png, (800, 800), ["state", "budget", "activations", "workspace"])
        self.check_svg(svg, ["loss", "val_loss", "tokens_per_s", "mfu"],
                       ["training loss", "held-out loss", "tokens/s", "MFU (%)"])

    def test_log_cut_short(self):
        # a log whose last line a killed run left half written
        with open(self.log) as f:
            text = f.read()
        cut = self.out("cut.jsonl")
        with open(cut, "w") as f:
            f.write(text + text.splitlines()[0][:30])
        r = cli("log", cut, "-o", self.out("cut.png"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("cut short; left out", r.stderr)

    def test_plan_from_problem(self):
        # zb.json under 1F1B: the stack is the planner's formula, term by term
        pj = self.out("zb-plan.json")
        run("plan", ZB, "--schedule", "1f1b", "--format", "json", "-o", pj)
        with open(pj) as f:
            data = json.load(f)
        with open(ZB) as f:
            pb = json.load(f)
        parts = plot.stage_parts(data, pb)
        layers = plot._expand_layers(pb)
        for st, p in zip(data["stages"], parts):
            self.assertEqual(sum(p.values()), st["memory_bytes"])
            ids = range(st["first_layer"], st["first_layer"] + st["layers"])
            saved = sum(layers[l]["middle_bytes"] if l in st["middle"] else
                        layers[l]["ckpt_bytes"] if l in st["recomputed"] else
                        layers[l]["act_bytes"] for l in ids)
            self.assertEqual(p["activations"], st["microbatches_held"] * saved)
            self.assertEqual(p["state"], sum(layers[l]["state_bytes"] for l in ids))
        self.assertEqual(parts[0]["data"], pb["stage_bytes"] + pb["boundary_bytes"])
        self.assertEqual(parts[-1]["data"], pb["stage_bytes"])
        png, svg = self.out("zb.png"), self.out("zb.svg")
        r = cli("plan", pj, "--problem", ZB, "-o", png, "-o", svg)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check_png(png, (600, 500), ["state", "activations", "workspace", "data", "budget"])
        self.check_svg(svg, [f"planned-{k}-stage{s}" for k in plot.PLAN_PARTS for s in (0, 1)]
                       + ["budget"], ["planned state", "budget"])
        # the plan names its problem (source, as remat plan was given it):
        # found without --problem from where remat plan ran
        rel = self.out("zb-rel.json")
        subprocess.run([common.CLI, "plan", os.path.relpath(ZB, common.ROOT), "--schedule", "1f1b",
                        "--format", "json", "-o", rel], cwd=common.ROOT, check=True,
                       capture_output=True)
        cwd = os.getcwd()
        try:
            os.chdir(common.ROOT)
            r = cli("plan", rel, "-o", self.out("zb2.svg"))
        finally:
            os.chdir(cwd)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("planned-data", r.stdout)
        # and from elsewhere it says how to give it
        os.chdir(self.d)
        try:
            r = cli("plan", rel, "-o", self.out("zb3.svg"))
        finally:
            os.chdir(cwd)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("give --problem for the stack", r.stderr)
        self.assertIn("(planned, budget)", r.stdout)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_plan_measured_by_the_run(self):
        png, svg = self.out("pipe-plan.png"), self.out("pipe-plan.svg")
        r = cli("plan", self.plan, "--measured", self.pipe, "-o", png, "-o", svg)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check_png(png, (600, 500), ["planned", "measured", "budget"])
        self.check_svg(svg, ["planned-stage0", "planned-stage1", "measured-stage0",
                             "measured-stage1", "budget"], ["measured (remat train)"])
        # a log of three ranks for a plan of two stages is refused
        with open(self.pipe) as f:
            line = json.loads(f.read().splitlines()[-1])
        line["rank_measured_peak_bytes"].append(1)
        odd = self.out("odd.jsonl")
        with open(odd, "w") as f:
            f.write(json.dumps(line) + "\n")
        r = cli("plan", self.plan, "--measured", odd, "-o", self.out("x.png"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("has 3 ranks, which are not the plan's 2 stages", r.stderr)
        # planned = measured on each rank: the bars are the same height
        root = ET.parse(svg).getroot()

        def height(i):
            g = [e for e in root.iter() if e.get("id") == i][0]
            path = [e for e in g.iter() if e.tag.endswith("path")][0].get("d")
            ys = [float(v) for v in re.findall(r"-?[0-9.]+", path)[1::2]]
            return max(ys) - min(ys)
        for s in (0, 1):
            self.assertAlmostEqual(height(f"planned-stage{s}"), height(f"measured-stage{s}"),
                                   places=3)

    @unittest.skipUnless(MPIRUN, "mpirun not found")
    def test_trace(self):
        png, svg = self.out("trace.png"), self.out("trace.svg")
        r = cli("trace", self.trace, "-o", png, "-o", svg)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check_png(png, (1000, 500), ["F", "B", "W", "measured"])
        self.check_svg(svg, [f"{k}-rank{r}" for k in ("F", "B", "W", "arena") for r in (0, 1)],
                       ["rank 0: stage 0", "rank 1: stage 1"])

    def test_trace_by_hand(self):
        # a trace of three ranks written here: every rank a panel, every
        # kind of span its series (backward spans are B too)
        ev = []
        for r in range(3):
            ev.append({"name": "process_name", "ph": "M", "pid": r, "args": {"name": f"rank {r}"}})
            for k, t in enumerate((0, 1000, 2000)):
                ev.append({"name": "arena bytes", "ph": "C", "pid": r, "ts": t,
                           "args": {"bytes": (k + 1) * 1 << 20}})
            ev.append({"name": "forward mb 0", "cat": "forward", "ph": "X", "pid": r, "tid": 0,
                       "ts": 0, "dur": 500})
            ev.append({"name": "backward mb 0", "cat": "backward", "ph": "X", "pid": r, "tid": 0,
                       "ts": 600, "dur": 900})
            ev.append({"name": "recompute", "cat": "recompute", "ph": "X", "pid": r, "tid": 1,
                       "ts": 600, "dur": 100})
        path = self.out("hand.json")
        with open(path, "w") as f:
            json.dump({"traceEvents": ev}, f)
        svg, png = self.out("hand.svg"), self.out("hand.png")
        self.assertEqual(plot.plot_trace(path, [svg, png]),
                         [f"{k}-rank{r}" for r in range(3) for k in ("F", "B", "R", "arena")])
        self.check_svg(svg, ["F-rank2", "B-rank1", "R-rank0", "arena-rank2"])
        self.check_png(png, (1000, 700), ["F", "B", "R", "measured"])

    def test_plan_measured_by_verify(self):
        # a profiled model's plan, and what remat.verify measured on it
        import gpt2_block
        import torch
        torch.manual_seed(0)
        model = gpt2_block.GPT2(n_layer=3, n_embd=32, n_head=2, vocab=64, block_size=16)
        idx = torch.randint(0, 64, (2, 16))
        prof = remat.profile(model, (idx, idx), layers="blocks", embedding="embed", head="head",
                             repeats=1, preserve_rng_state=False)
        pl = remat.plan(prof, stages=2, microbatches=4, memory="1GiB")
        ver = remat.verify(model, pl, (idx, idx))
        vpath = ver.save(self.out("verify.json"))
        with open(self.out("p.json"), "w") as f:
            json.dump(pl.data, f)
        with open(self.out("pb.json"), "w") as f:
            json.dump(pl.problem, f)
        svg = self.out("verify.svg")
        r = cli("plan", self.out("p.json"), "--problem", self.out("pb.json"), "--measured", vpath,
                "-o", svg)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check_svg(svg, ["planned-activations-stage1", "measured-activations-stage0",
                             "measured-stage1"], ["measured (remat.verify)"])
        # the Plan object itself, and the Verification, draw the same series
        drawn = plot.plot_plan(pl, [self.out("verify2.png")], measured=ver)
        self.assertEqual(drawn, [f"planned-{k}" for k in plot.PLAN_PARTS]
                         + ["measured-activations", "measured", "budget"])
        # a stage's planned activations are its planned saved bytes
        parts = plot.stage_parts(pl.data, pl.problem)
        for p, s in zip(parts, ver.stages):
            self.assertEqual(p["activations"], s["planned_saved_bytes"])

    def test_measured_of_a_grid(self):
        # stages x replicas: world rank r is stage r // R; a stage's figure is
        # the largest of its replicas'
        log = self.out("grid.jsonl")
        with open(log, "w") as f:
            f.write(json.dumps({"step": 1, "loss": 1.0,
                                "rank_measured_peak_bytes": [10, 30, 20, 5]}) + "\n")
        tot, parts, what = plot._measured(log, 2)
        self.assertEqual((tot, parts), ({0: 30, 1: 20}, None))
        self.assertIn("the largest of 2 replicas", what)

    def test_refusals(self):
        bad = self.out("bad.json")
        with open(bad, "w") as f:
            f.write('{"x": 1}\n')
        cases = [
            (["log", self.log, "-o", self.out("x.pdf")], "name must end in .png or .svg"),
            (["log", self.log], "no output: give -o FILE.png or -o FILE.svg"),
            (["log", self.out("none.jsonl"), "-o", self.out("x.png")], "cannot read log"),
            (["log", ZB, "-o", self.out("x.png")], "is it a remat train --log file?"),
            (["plan", bad, "-o", self.out("x.png")], "has no stages"),
            (["plan", self.log, "-o", self.out("x.png")], "is not JSON"),
            (["trace", bad, "-o", self.out("x.png")], "has no traceEvents"),
            (["log", self.log, "-o", os.path.join(self.d, "no", "dir", "x.png")], "cannot write"),
        ]
        r = cli_process(*cases[0][0])  # as a command, too
        self.assertEqual((r.returncode, r.stderr.count("\n")), (2, 1), r.stderr)
        for args, msg in cases:
            r = cli(*args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertIn(msg, r.stderr, args)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertTrue(r.stderr.startswith(f"remat.plot {args[0]}: "), r.stderr)
        with open(ZB) as f:
            pb = json.load(f)
        pb["layers"][1]["count"] = 3
        with open(self.out("short.json"), "w") as f:
            json.dump(pb, f)
        pj = self.out("zb-plan2.json")
        run("plan", ZB, "--schedule", "1f1b", "--format", "json", "-o", pj)
        r = cli("plan", pj, "--problem", self.out("short.json"), "-o", self.out("x.png"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("the problem has 5 layers, the plan 8", r.stderr)
        for what in ("log", "plan", "trace"):
            r = cli(what, "--help")
            self.assertEqual(r.returncode, 0)
            self.assertIn("-o FILE.png|FILE.svg", r.stdout)
        r = cli_process("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("examples:", r.stdout)


if __name__ == "__main__":
    unittest.main()

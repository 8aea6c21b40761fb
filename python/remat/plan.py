"""remat.plan: runs remat's planner (the `remat plan` command) on a problem
and returns the plan with its exports for ColossalAI, Megatron-LM and a
plain-PyTorch pipeline split (what torch.distributed.pipelining takes)."""
import json
import os
import shutil
import subprocess
import tempfile

import torch.nn as nn

from .profile import Profile
from .wrap import wrap


class PlanError(RuntimeError):
    pass


def find_cli(cli=None):
    """The remat command: cli, else $REMAT_CLI, else `remat` on PATH."""
    path = cli or os.environ.get("REMAT_CLI") or shutil.which("remat")
    if not path or not os.path.exists(path):
        raise PlanError("the remat command was not found: pass cli=PATH, set REMAT_CLI, or put "
                        "remat on PATH (build it with cmake; it is build/app/remat)")
    return path


def _mem_arg(memory):
    if isinstance(memory, (list, tuple)):
        return ",".join(str(int(m)) if isinstance(m, (int, float)) else str(m) for m in memory)
    return str(int(memory)) if isinstance(memory, (int, float)) else str(memory)


def _run(cli, args):
    r = subprocess.run([cli, "plan"] + args, capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr.strip()


def plan(problem, stages=None, microbatches=None, memory=None, schedule=None, objective=None,
         middle=True, tp=None, cli=None, time_limit=None):
    """Plans a problem: a Profile (stages, microbatches and memory are then
    needed), a problem dict, or the path of a problem JSON file. Settings
    given here override the problem's. Returns a Plan; a budget too small
    for any arrangement gives a Plan with feasible False, the least-memory
    arrangement and the planner's message."""
    cli = find_cli(cli)
    prof = problem if isinstance(problem, Profile) else None
    if prof is not None:
        if stages is None or microbatches is None or memory is None:
            raise ValueError("planning a profile needs stages, microbatches and memory")
        problem = prof.problem(stages, microbatches, memory, schedule or "1f1b",
                               objective or "bottleneck", middle)
        tp = prof.info["tp"] if tp is None else tp
    tmp = None
    try:
        if isinstance(problem, dict):
            fd, tmp = tempfile.mkstemp(prefix="remat-problem-", suffix=".json")
            with os.fdopen(fd, "w") as f:
                json.dump(problem, f)
            path, pb = tmp, problem
        else:
            path = os.fspath(problem)
            with open(path) as f:
                pb = json.load(f)
        args = [path]
        if stages is not None:
            args += ["--stages", str(stages)]
        if microbatches is not None:
            args += ["--microbatches", str(microbatches)]
        if memory is not None:
            args += ["--mem", _mem_arg(memory)]
        if schedule is not None:
            args += ["--schedule", schedule]
        if objective is not None:
            args += ["--objective", objective]
        if not middle:
            args += ["--no-middle"]
        if time_limit is not None:
            args += ["--time-limit", str(time_limit)]
        rc, out, err = _run(cli, args + ["--format", "json"])
        if rc not in (0, 1) or not out.strip():
            raise PlanError(err or f"remat plan exited with status {rc}")
        data = json.loads(out)
        texts = {}
        for fmt in ("table", "colossalai", "megatron"):
            _, texts[fmt], _ = _run(cli, args + ["--format", fmt])
    finally:
        if tmp:
            os.unlink(tmp)
    return Plan(data, pb, prof, texts, 1 if tp is None else tp, err if rc else "")


class Plan:
    """A plan: ``data`` is the planner's JSON (docs/plan.md), ``problem`` the
    problem it solved, ``profile`` the Profile it came from (if any)."""

    def __init__(self, data, problem, profile, texts, tp, message):
        self.data, self.problem, self.profile = data, problem, profile
        self.texts, self.tp, self.message = texts, tp, message
        self.feasible = bool(data["feasible"])
        self.stages = data["stages"]
        self.microbatches = data["microbatches"]
        self.schedule = data["schedule"]
        L = data["num_layers"]
        self.policies = ["keep"] * L
        for st in self.stages:
            for l in st["recomputed"]:
                self.policies[l] = "full"
            for l in st.get("middle", []):
                self.policies[l] = "selective"
        self.recomputable = []
        for g in problem["layers"]:
            self.recomputable += [g.get("recomputable", True)] * int(g.get("count", 1))

    # ------------------------------------------------------------ summaries
    @property
    def layers_per_stage(self):
        return [st["layers"] for st in self.stages]

    @property
    def ckpt_layers_per_stage(self):
        """Layers not kept per stage (recomputed or middle), as remat counts."""
        return [st["ckpt_layers"] for st in self.stages]

    def __str__(self):
        return self.texts.get("table", "")

    def _contiguous(self, what):
        """The stage views below assume one run of layers per stage and
        1F1B's or GPipe's micro-batches in flight; the chunked and
        zero-bubble schedules are planned, exported and run by remat itself."""
        if self.schedule not in ("1f1b", "gpipe"):
            raise PlanError(f"{what} handles 1f1b and gpipe plans, not {self.schedule}; "
                            f"use remat plan --format colossalai, megatron or torch")

    def _blocks(self):
        """Transformer layers (recomputable groups) and those not kept, per stage."""
        self._contiguous("this view")
        blocks, ckpt = [], []
        for st in self.stages:
            ls = range(st["first_layer"], st["first_layer"] + st["layers"])
            blocks.append(sum(1 for l in ls if self.recomputable[l]))
            ckpt.append(sum(1 for l in ls if self.recomputable[l] and self.policies[l] != "keep"))
        return blocks, ckpt

    # ------------------------------------------------------------ exports
    def colossalai(self, tp=None):
        """HybridParallelPlugin keyword arguments (gradient_checkpoint_config
        as the keyword arguments of PipelineGradientCheckpointConfig) and the
        snippet `remat plan --format colossalai` prints, with this job's tp.
        ColossalAI counts transformer layers only (the embedding goes to the
        first stage, the head to the last) and recomputes the first k layers
        of a stage; middle layers count as recomputed."""
        tp = self.tp if tp is None else tp
        blocks, ckpt = self._blocks()
        kwargs = {"tp_size": tp, "pp_size": len(self.stages), "num_microbatches": self.microbatches,
                  "pp_style": "1f1b", "num_layers_per_stage": blocks,
                  "gradient_checkpoint_config": {"num_ckpt_layers_per_stage": ckpt}}
        code = self.texts.get("colossalai", "").replace("    tp_size=1,\n", f"    tp_size={tp},\n")
        return kwargs, code

    def megatron(self, tp=None):
        """(flags, notes): Megatron-LM's arguments from `remat plan --format
        megatron`, with --tensor-model-parallel-size; the notes say what
        Megatron cannot express (it recomputes the same number of layers,
        the first N, on every stage; uneven stages only as first/last counts
        or the experimental layout string) and what it would then run."""
        tp = self.tp if tp is None else tp
        flags, notes = ["--tensor-model-parallel-size", str(tp)], []
        for line in self.texts.get("megatron", "").splitlines():
            if line.startswith("--"):
                flags += line.split(" ", 1)
            elif line.startswith("#"):
                notes.append(line.lstrip("# ").rstrip())
        return [f.strip('"') for f in flags], notes

    def stage_modules(self, layers=None, selective=None, preserve_rng_state=True):
        """One nn.Sequential per stage over the chain's layers (the
        profile's, or `layers`: embedding, blocks, head in the plan's order),
        each layer wrapped as the plan says: kept as it is, Checkpointed
        (torch.utils.checkpoint) or Selective (its `selective` submodules
        checkpointed). The modules are the model's own (parameters shared);
        for torch.distributed.pipelining give stage s's Sequential to
        PipelineStage(..., stage_index=s, num_stages=P, device=...)."""
        self._contiguous("stage_modules")
        if layers is None:
            if self.profile is None:
                raise ValueError("stage_modules needs the layers (the plan has no profile)")
            layers = self.profile.chain.modules()
            selective = self.profile.chain.selective if selective is None else selective
            preserve_rng_state = self.profile.chain.preserve_rng_state
        layers = list(layers)
        if len(layers) != len(self.policies):
            raise ValueError(f"{len(layers)} layers given, the plan has {len(self.policies)}")
        out = []
        for st in self.stages:
            ls = range(st["first_layer"], st["first_layer"] + st["layers"])
            out.append(nn.Sequential(*[wrap(layers[l], self.policies[l], selective, preserve_rng_state)
                                       for l in ls]))
        return out

    def held(self, s):
        """Micro-batches stage s holds at its peak: min(P - s, M) under 1F1B,
        M under GPipe."""
        self._contiguous("held")
        P, M = len(self.stages), self.microbatches
        return M if self.schedule == "gpipe" else min(P - s, M)

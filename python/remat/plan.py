"""remat.plan: runs remat's planner (the `remat plan` command) on a problem
and returns the plan with its exports for ColossalAI, Megatron-LM and a
plain-PyTorch pipeline split (what torch.distributed.pipelining takes)."""
import json
import numbers
import os
import subprocess
import tempfile

import torch.nn as nn

from .config import PlanError, find_cli
from .profile import Profile
from .wrap import Layer, wrap


def _mem_arg(memory):
    """The --mem argument for a budget (bytes, a size such as '80GB', or one
    per stage); NaN, infinities, zero and negatives refused here, where the
    number is still the caller's."""
    items = list(memory) if isinstance(memory, (list, tuple)) else [memory]
    for m in items:
        if isinstance(m, str):
            try:
                x = float(m)  # "nan", "inf", "-1": numbers; "80GB" is not
            except ValueError:
                continue
        elif isinstance(m, numbers.Real) and not isinstance(m, bool):
            x = float(m)
        else:
            x = None
        if x is None or not (x == x and 0 < x < float("inf")):
            raise ValueError(f"memory must be a positive number of bytes or a size such as "
                             f"'80GB', not {m!r}")
    out = [str(m) if isinstance(m, str) else str(int(m)) for m in items]
    return ",".join(out)


def _run(cli, args):
    r = subprocess.run([cli, "plan"] + args, capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr.strip()


def plan(problem, stages=None, microbatches=None, memory=None, schedule=None, objective=None,
         middle=True, tp=None, cli=None, time_limit=None, min_blocks=1, family=None):
    """Plans a problem: a Profile (stages, microbatches and memory are then
    needed), a problem dict, or the path of a problem JSON file. Settings
    given here override the problem's. min_blocks 1 (the default) keeps
    every stage and chunk holding a transformer layer, as ColossalAI's and
    Megatron-LM's stages do; 0 lets the embedding or the head take a stage
    alone. family names the model family ("llama", "gpt2", ...) for the
    exports. Returns a Plan; a budget too small for any arrangement gives a
    Plan with feasible False, the least-memory arrangement and the planner's
    message."""
    cli = find_cli(cli)
    mem = None if memory is None else _mem_arg(memory)  # before anything is built
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
        if mem is None and isinstance(pb.get("memory"), (int, float, list)):
            _mem_arg(pb["memory"])  # a problem's own budget: JSON's NaN reads as a float
        if mem is not None:
            args += ["--mem", mem]
        if schedule is not None:
            args += ["--schedule", schedule]
        if objective is not None:
            args += ["--objective", objective]
        if not middle:
            args += ["--no-middle"]
        if time_limit is not None:
            args += ["--time-limit", str(time_limit)]
        if family is not None:
            args += ["--family", str(family)]
        args += ["--min-blocks", str(int(min_blocks))]
        rc, out, err = _run(cli, args + ["--format", "json"])
        if rc not in (0, 1) or not out.strip():
            raise PlanError(err or f"remat plan exited with status {rc}")
        data = json.loads(out)
        texts = {}
        for fmt in ("table", "colossalai", "megatron", "torch"):
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

    # ------------------------------------------------------------ exports
    def _export(self, name):
        if not self.feasible:
            raise PlanError(f"the plan does not fit its memory budget, so there is nothing to "
                            f"run in {name}: {self.message or 'raise the budget'}")
        ex = self.data.get("exports", {}).get(name)
        if ex is None:
            raise PlanError(f"the planner gave no {name} export (an older remat?)")
        return ex

    def colossalai(self, tp=None, model=None):
        """(kwargs, code): keyword arguments for ColossalAI's
        HybridParallelPlugin(**kwargs) with the plan's schedule, as objects
        (PipelineGradientCheckpointConfig, and for zbv the scheduler_nodes
        of PipelineGraph), and the snippet of `remat plan --format
        colossalai`. ColossalAI must be importable. With `model`, its
        gradient checkpointing is turned on as the plan needs (without it,
        ColossalAI's policies recompute nothing); otherwise do that yourself
        before booster.boost, as the snippet says. What ColossalAI cannot
        express (an uneven chunked split, per-stage counts under gpt2's
        policy, the middle policy) is in the snippet's comments and
        ``self.colossalai_notes``; an infeasible plan raises PlanError."""
        ex = self._export("colossalai")
        try:
            from colossalai.shardformer import PipelineGradientCheckpointConfig
        except ImportError as e:
            raise PlanError("plan.colossalai() builds ColossalAI's objects and needs colossalai "
                            "importable; without it, use plan.texts['colossalai'] (the snippet) "
                            f"({e})") from e
        tp = self.tp if tp is None else tp
        kwargs = {"tp_size": tp, "pp_size": ex["pp_size"], "num_microbatches": ex["num_microbatches"],
                  "pp_style": ex["pp_style"]}
        if ex["num_model_chunks"] > 1:
            kwargs["num_model_chunks"] = ex["num_model_chunks"]
        if ex["num_layers_per_stage"] is not None:
            kwargs["num_layers_per_stage"] = list(ex["num_layers_per_stage"])
        if ex["num_ckpt_layers_per_stage"] is not None:
            kwargs["gradient_checkpoint_config"] = PipelineGradientCheckpointConfig(
                num_ckpt_layers_per_stage=list(ex["num_ckpt_layers_per_stage"]))
        if ex["scheduler_graph"] is not None:
            from colossalai.pipeline.schedule.v_schedule import PipelineGraph
            kwargs["scheduler_nodes"] = PipelineGraph(**ex["scheduler_graph"]).get_v_schedule()
        if model is not None and ex["gradient_checkpointing"]:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        code = self.texts.get("colossalai", "").replace("    tp_size=1,\n", f"    tp_size={tp},\n")
        return kwargs, code

    @property
    def colossalai_notes(self):
        return list(self.data.get("exports", {}).get("colossalai", {}).get("notes", []))

    def megatron(self, tp=None):
        """(flags, notes): Megatron-LM's full argument list for the plan
        (layers, pipeline split, recompute, micro- and global-batch and
        sequence length where the problem knows them, tensor-parallel size
        tp), and the notes: what Megatron cannot express (it recomputes the
        same first N layers on every stage) and what it runs instead. A plan
        Megatron cannot run (zbv) or an infeasible one raises PlanError."""
        ex = self._export("megatron")
        if not ex.get("expressible", True):
            raise PlanError(" ".join(ex["notes"]))
        tp = self.tp if tp is None else tp
        flags = list(ex["flags"])
        k = flags.index("--tensor-model-parallel-size")
        flags[k + 1] = str(tp)
        return flags, list(ex["notes"])

    def stage_modules(self, layers=None, selective=None, preserve_rng_state=True, reentrant=False):
        """One nn.Sequential per stage over the chain's layers (the
        profile's, or `layers`: embedding, blocks, head in the plan's order),
        each layer wrapped as the plan says: kept as it is, Checkpointed
        (torch.utils.checkpoint) or Selective (its `selective` submodules
        checkpointed). The modules are the model's own (parameters shared);
        for torch.distributed.pipelining give stage s's Sequential to
        PipelineStage(..., stage_index=s, num_stages=P, device=...). The
        checkpoint is non-reentrant unless reentrant=True: torch's
        zero-bubble schedules call autograd.grad(inputs=...), which the
        reentrant form refuses."""
        self._contiguous("stage_modules")
        chain = self.profile.chain if self.profile is not None else None
        if layers is None:
            if chain is None:
                raise ValueError("stage_modules needs the layers (the plan has no profile)")
            if chain.repeated:
                raise ValueError("this plan's profile measured one block for all the layers "
                                 "(num_layers): pass the built model's layers (embedding, "
                                 "blocks, head)")
            layers = self.profile.chain.modules()
            selective = self.profile.chain.selective if selective is None else selective
            preserve_rng_state = self.profile.chain.preserve_rng_state
        layers = list(layers)
        if len(layers) != len(self.policies):
            raise ValueError(f"{len(layers)} layers given, the plan has {len(self.policies)}")
        out = []
        for st in self.stages:
            ls = range(st["first_layer"], st["first_layer"] + st["layers"])
            out.append(nn.Sequential(*[self._stage_layer(chain, l, layers[l], selective,
                                                         preserve_rng_state, reentrant)
                                       for l in ls]))
        return out

    def _stage_layer(self, chain, l, layer, selective, preserve_rng_state, reentrant):
        """Layer l under its policy; where the profile called it with side
        inputs, or saw it return a tuple, inside a Layer that binds them and
        passes the tuple's first element on."""
        m = wrap(layer, self.policies[l], selective, preserve_rng_state, reentrant)
        if chain is None or not (chain.kwargs(l) or l in chain.tuple_layers):
            return m
        return Layer(m, chain.kwargs(l), chain.entries[l][0])

    def held(self, s):
        """Micro-batches stage s holds at its peak: min(P - s, M) under 1F1B,
        M under GPipe."""
        self._contiguous("held")
        P, M = len(self.stages), self.microbatches
        return M if self.schedule == "gpipe" else min(P - s, M)

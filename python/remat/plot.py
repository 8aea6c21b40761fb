"""remat.plot: pictures of a run, a plan and a trace, as PNG or SVG (by the
output's extension), drawn with matplotlib:

    python3 -m remat.plot log RUN.jsonl -o run.png
    python3 -m remat.plot plan PLAN.json [--problem PROBLEM.json] [--measured RUN.jsonl|VERIFY.json] -o plan.svg
    python3 -m remat.plot trace TRACE.json -o trace.png

- log: what `remat train --log` writes, one JSON object a step: the
  training loss and the held-out loss (val_loss, where evaluated), tokens/s
  and MFU over the steps.
- plan: what `remat plan --format json` (or `-o`) writes: each stage's
  planned bytes stacked as state, activations, workspace and data, the
  measured bytes beside them, and the budget. The stack needs the problem
  the plan solved (its layers' bytes): --problem, else the file the plan's
  "source" names, if it is there; a plan of `--config` (remat's own GPT-2,
  no problem file) is drawn as one planned figure per stage. Measured is a
  `remat train --log` of the run (its last line's rank_measured_peak_bytes,
  one per stage) or what `remat.verify` measured (Verification.save).
- trace: what `remat train --trace` writes (Chrome's trace-event JSON):
  each rank's arena bytes over time, over the spans of the schedule's F
  (forward), B (backward, or input gradient under the zero-bubble
  schedules) and W (weight gradient).

Every series is an artist with a gid (series names: ``SERIES``), which SVG
keeps as the id of its group. The functions return the names of the series
drawn.
"""
import argparse
import json
import os
import sys

PLAN_PARTS = ("state", "activations", "workspace", "data")
SPAN_KINDS = {"forward": "F", "backward": "B", "input gradient (B)": "B",
              "weight gradient (W)": "W", "recompute": "R"}
COLOURS = {"state": "#4c72b0", "activations": "#dd8452", "workspace": "#55a868",
           "data": "#8172b3", "measured": "#333333", "budget": "#c44e52", "F": "#4c72b0",
           "B": "#dd8452", "W": "#55a868", "R": "#c44e52", "planned": "#999999"}


class PlotError(ValueError):
    """An input that cannot be drawn, or an output that cannot be written."""


def _pyplot():
    try:
        import matplotlib
    except ImportError as e:
        raise PlotError("remat.plot needs matplotlib: on Debian, apt-get install "
                        "python3-matplotlib (a venv made with --system-site-packages sees it)") from e
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text in an SVG
    matplotlib.rcParams["svg.hashsalt"] = "remat"  # the same SVG for the same input
    import matplotlib.pyplot as plt
    return plt


def _gid(bars, name):
    """Names each bar of a bar series NAME-stageS (an SVG keeps it as the
    id of the bar's group)."""
    for s, patch in enumerate(bars.patches):
        patch.set_gid(f"{name}-stage{s}")


def _check_outputs(outs):
    if not outs:
        raise PlotError("no output: give -o FILE.png or -o FILE.svg")
    for o in outs:
        if os.path.splitext(o)[1].lower() not in (".png", ".svg"):
            raise PlotError(f"output '{o}': the name must end in .png or .svg")


def _save(fig, outs):
    plt = _pyplot()
    try:
        for o in outs:
            try:
                fig.savefig(o, dpi=100, metadata={"Date": None} if o.lower().endswith(".svg") else None)
            except OSError as e:
                raise PlotError(f"cannot write '{o}': {e.strerror or e}") from e
    finally:
        plt.close(fig)


def _read_json(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise PlotError(f"cannot read {what} '{path}': {e.strerror or e}") from e
    except json.JSONDecodeError as e:
        raise PlotError(f"{what} '{path}' is not JSON: {e.msg} at line {e.lineno} column {e.colno}") from e


def read_log(path):
    """The log's objects, in order. A last line cut short (a run killed
    mid-write) is left out; any other line that is not a JSON object with
    a step is refused, naming its line."""
    try:
        with open(path) as f:
            lines = f.read().split("\n")
    except OSError as e:
        raise PlotError(f"cannot read log '{path}': {e.strerror or e}") from e
    while lines and not lines[-1].strip():
        lines.pop()
    out = []
    for k, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            if k == len(lines):
                print(f"remat.plot: note: the last line of '{path}' is cut short; left out",
                      file=sys.stderr)
                break
            raise PlotError(f"log '{path}' line {k} is not JSON ({e.msg}): is it a remat train "
                            f"--log file?") from e
        if not isinstance(obj, dict) or "step" not in obj:
            raise PlotError(f"log '{path}' line {k} has no \"step\": is it a remat train --log file?")
        out.append(obj)
    if not out:
        raise PlotError(f"log '{path}' has no steps")
    return out


# ---------------------------------------------------------------- log
def plot_log(log, outs, title=None):
    """Draws a `remat train --log` (a path or its list of objects): loss
    and held-out loss, tokens/s and MFU against the step."""
    _check_outputs(outs)
    path = log if isinstance(log, str) else None
    rows = read_log(log) if path else list(log)
    plt = _pyplot()
    steps = [r["step"] for r in rows]
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    drawn = []

    def series(ax, key, label, scale=1.0, **kw):
        pts = [(r["step"], r[key] * scale) for r in rows
               if isinstance(r.get(key), (int, float)) and r[key] == r[key]]
        if not pts:
            return
        (ln,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, **kw)
        ln.set_gid(key)
        drawn.append(key)

    series(ax1, "loss", "training loss", color=COLOURS["state"])
    series(ax1, "val_loss", "held-out loss", color=COLOURS["budget"], marker="o", markersize=4)
    if "loss" not in drawn:
        plt.close(fig)
        raise PlotError(f"log{' ' + repr(path) if path else ''} has no \"loss\" values")
    ax1.set_ylabel("loss")
    ax1.legend(loc="upper right")
    series(ax2, "tokens_per_s", "tokens/s", color=COLOURS["activations"])
    ax2.set_ylabel("tokens/s")
    series(ax3, "mfu", "MFU", scale=100.0, color=COLOURS["workspace"])
    ax3.set_ylabel("MFU (%)")
    ax3.set_xlabel("step")
    from matplotlib.ticker import MaxNLocator
    ax3.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in (ax1, ax2, ax3):
        ax.grid(True, alpha=0.3)
    fig.suptitle(title or f"remat train: {os.path.basename(path) if path else 'log'}, steps "
                          f"{steps[0]}-{steps[-1]}")
    fig.tight_layout()
    _save(fig, outs)
    return drawn


# ---------------------------------------------------------------- plan
def _expand_layers(problem):
    out = []
    for g in problem.get("layers", []):
        for _ in range(int(g.get("count", 1))):
            out.append(g)
    return out


def _plan_problem(plan, problem, plan_path):
    """The problem a plan solved: given, or the file the plan names."""
    if problem is not None:
        return problem if isinstance(problem, dict) else _read_json(problem, "problem")
    src = plan.get("source")
    if isinstance(src, str):
        for cand in ([src] if os.path.isabs(src) else
                     [src] + ([os.path.join(os.path.dirname(plan_path), src)] if plan_path else [])):
            if os.path.isfile(cand):
                return _read_json(cand, "problem")
    return None


def stage_parts(plan, problem):
    """Each stage's planned bytes as (state, activations, workspace, data):
    state the sum of its layers' state_bytes; workspace the largest of its
    kept layers' work_bytes and its recomputed (middle) layers' scratch;
    data the stage's stage_bytes and, for each chunk that sends to a next
    one, boundary_bytes; activations the rest of the plan's memory_bytes
    (n_s times the layers' saved bytes under their policies, and under
    zero-bubble schedules the deferred weight gradients' bytes)."""
    layers = _expand_layers(problem)
    if len(layers) != plan.get("num_layers", len(layers)):
        raise PlotError(f"the problem has {len(layers)} layers, the plan {plan.get('num_layers')}: "
                        f"give the problem this plan was made from (--problem)")
    rec = {l for st in plan["stages"] for l in st.get("recomputed", [])}
    mid = {l for st in plan["stages"] for l in st.get("middle", [])}
    nvs = plan["num_stages"] * max(1, len(plan["stages"][0].get("chunks", [None])))
    out = []
    for st in plan["stages"]:
        chunks = st.get("chunks") or [{"virtual_stage": st["stage"], "first_layer": st["first_layer"],
                                       "layers": st["layers"]}]
        ids = [l for c in chunks for l in range(c["first_layer"], c["first_layer"] + c["layers"])]
        state = sum(int(layers[l].get("state_bytes", 0)) for l in ids)
        work = 0
        for l in ids:
            g = layers[l]
            work = max(work, int(g.get("work_bytes", 0)))
            if l in mid:
                work = max(work, int(g.get("middle_recompute_bytes", 0)))
            elif l in rec:
                work = max(work, int(g.get("recompute_bytes", 0)))
        sends = sum(1 for c in chunks if c["virtual_stage"] < nvs - 1)
        data = int(problem.get("stage_bytes", 0)) + sends * int(problem.get("boundary_bytes", 0))
        act = int(st["memory_bytes"]) - state - work - data
        out.append({"state": state, "activations": act, "workspace": work, "data": data})
    return out


def _measured(measured, P):
    """Per-stage measured bytes from a `remat train --log` (a .jsonl path:
    its last line's rank_measured_peak_bytes; world rank r is stage r // R
    of R replicas each, and a stage's figure is its replicas' largest) or a
    remat.verify result (a Verification, its dict, or a JSON path):
    ({stage: total}, {stage: {'activations': saved}} or None, what)."""
    if measured is None:
        return None, None, None
    if isinstance(measured, str) and measured.endswith(".jsonl"):
        last = read_log(measured)[-1]
        ranks = last.get("rank_measured_peak_bytes")
        if not isinstance(ranks, list) or not ranks:
            raise PlotError(f"log '{measured}' has no rank_measured_peak_bytes")
        if len(ranks) % P:
            raise PlotError(f"log '{measured}' has {len(ranks)} ranks, which are not the plan's "
                            f"{P} stages (times replicas): is it the log of this plan's run?")
        R = len(ranks) // P
        return ({s: max(int(b) for b in ranks[s * R:(s + 1) * R]) for s in range(P)}, None,
                "measured (remat train)" + (f", the largest of {R} replicas" if R > 1 else ""))
    if isinstance(measured, str):
        measured = _read_json(measured, "verification")
    if hasattr(measured, "to_dict"):
        measured = measured.to_dict()
    if not isinstance(measured, dict) or not isinstance(measured.get("stages"), list):
        raise PlotError("measured: a remat train --log (.jsonl) or a remat.verify result "
                        "(Verification.save's JSON)")
    tot, parts = {}, {}
    for s in measured["stages"]:
        tot[s["stage"]] = int(s["measured_memory_bytes"])
        parts[s["stage"]] = {"activations": int(s["measured_saved_bytes"])}
    return tot, parts, "measured (remat.verify)"


def plot_plan(plan, outs, problem=None, measured=None, title=None):
    """Draws a plan (a path, its JSON as a dict, or a remat.Plan): per
    stage the planned bytes stacked as state, activations, workspace and
    data (with the problem), the measured bytes beside them (measured: see
    _measured), and each stage's budget."""
    _check_outputs(outs)
    plan_path = plan if isinstance(plan, str) else None
    if hasattr(plan, "data") and hasattr(plan, "problem"):  # a remat.Plan
        problem = plan.problem if problem is None else problem
        plan = plan.data
    elif plan_path:
        plan = _read_json(plan_path, "plan")
    if not isinstance(plan, dict) or not isinstance(plan.get("stages"), list) or not plan["stages"]:
        raise PlotError(f"plan{' ' + repr(plan_path) if plan_path else ''} has no stages: is it "
                        f"what remat plan --format json writes?")
    pb = _plan_problem(plan, problem, plan_path)
    if pb is None and plan.get("source") and not str(plan["source"]).startswith("GPT-2 "):
        print(f"remat.plot: note: the plan's problem '{plan['source']}' is not there (from here): "
              f"give --problem for the stack of state, activations, workspace and data",
              file=sys.stderr)
    parts = stage_parts(plan, pb) if pb is not None else None
    P = len(plan["stages"])
    m_tot, m_parts, m_what = _measured(measured, P)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * P + 3), 5))
    width = 0.38 if m_tot else 0.6
    xs = list(range(P))
    px = [x - width / 2 for x in xs] if m_tot else xs
    drawn = []
    MiB = 1024.0 * 1024.0
    unit, scale = ("MiB", MiB) if max(s["budget_bytes"] for s in plan["stages"]) >= MiB else ("bytes", 1.0)
    if parts:
        bottom = [0.0] * P
        for k in PLAN_PARTS:
            vals = [p[k] / scale for p in parts]
            bars = ax.bar(px, vals, width, bottom=bottom, color=COLOURS[k], label=f"planned {k}")
            _gid(bars, f"planned-{k}")
            drawn.append(f"planned-{k}")
            bottom = [b + v for b, v in zip(bottom, vals)]
    else:
        bars = ax.bar(px, [s["memory_bytes"] / scale for s in plan["stages"]], width,
                      color=COLOURS["planned"], label="planned (no problem file: no breakdown)")
        _gid(bars, "planned")
        drawn.append("planned")
    if m_tot:
        mx = [x + width / 2 for x in xs]
        vals = [m_tot.get(s, float("nan")) / scale for s in xs]
        if m_parts:  # the measured saved bytes at the bottom, the rest of the peak above
            act = [m_parts.get(s, {}).get("activations", 0) / scale for s in xs]
            b1 = ax.bar(mx, act, width, color=COLOURS["activations"], hatch="//", edgecolor="white",
                        label="measured saved (activations)")
            _gid(b1, "measured-activations")
            drawn.append("measured-activations")
            bars = ax.bar(mx, [v - a for v, a in zip(vals, act)], width, bottom=act,
                          color=COLOURS["measured"], label=m_what)
        else:
            bars = ax.bar(mx, vals, width, color=COLOURS["measured"], label=m_what)
        _gid(bars, "measured")
        drawn.append("measured")
    budgets = [s["budget_bytes"] / scale for s in plan["stages"]]
    lines = ax.hlines(budgets, [x - 0.45 for x in xs], [x + 0.45 for x in xs],
                      colors=COLOURS["budget"], linestyles="--", label="budget")
    lines.set_gid("budget")
    drawn.append("budget")
    ax.set_xticks(xs)
    ax.set_xticklabels([f"stage {s['stage']}\nlayers {s['first_layer']}-"
                        f"{s['first_layer'] + s['layers'] - 1}" for s in plan["stages"]])
    ax.set_ylabel(unit)
    ax.set_ylim(0, max(budgets + [s["memory_bytes"] / scale for s in plan["stages"]]
                       + [v / scale for v in (m_tot or {}).values()]) * 1.25)
    ax.legend(loc="upper right", fontsize="small", ncol=2)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title(title or f"remat plan: {plan.get('schedule', '')}, {P} stages, "
                          f"{plan.get('microbatches', '?')} micro-batches"
                          + ("" if plan.get("feasible", True) else " (infeasible)"))
    fig.tight_layout()
    _save(fig, outs)
    return drawn


# ---------------------------------------------------------------- trace
def read_trace(path):
    """(arena, spans, names): per rank (pid) the arena-bytes counter as
    [(seconds, bytes)], the spans as [(kind, start s, duration s)] with kind
    F, B, W or R, and the rank's name."""
    d = _read_json(path, "trace")
    ev = d.get("traceEvents") if isinstance(d, dict) else d
    if not isinstance(ev, list):
        raise PlotError(f"trace '{path}' has no traceEvents: is it what remat train --trace writes?")
    arena, spans, names = {}, {}, {}
    for e in ev:
        if not isinstance(e, dict):
            continue
        pid = e.get("pid")
        if e.get("ph") == "C" and e.get("name") == "arena bytes":
            arena.setdefault(pid, []).append((e["ts"] / 1e6, e["args"]["bytes"]))
        elif e.get("ph") == "X" and e.get("cat") in SPAN_KINDS and e.get("tid", 0) in (0, 1):
            spans.setdefault(pid, []).append((SPAN_KINDS[e["cat"]], e["ts"] / 1e6, e["dur"] / 1e6))
        elif e.get("ph") == "M" and e.get("name") == "process_name":
            names[pid] = e.get("args", {}).get("name", f"rank {pid}")
    if not arena and not spans:
        raise PlotError(f"trace '{path}' has no arena counter and no F, B or W spans")
    return arena, spans, names


def plot_trace(trace, outs, title=None):
    """Draws a `remat train --trace` file: a panel per rank with its arena
    bytes over time (a step line) over the F, B and W spans."""
    _check_outputs(outs)
    arena, spans, names = read_trace(trace)
    plt = _pyplot()
    ranks = sorted(set(arena) | set(spans))
    fig, axes = plt.subplots(len(ranks), 1, figsize=(10, 1.0 + 2.0 * len(ranks)), sharex=True,
                             squeeze=False)
    drawn = []
    MiB = 1024.0 * 1024.0
    for ax, r in zip(axes[:, 0], ranks):
        pts = sorted(arena.get(r, []))
        top = max([b for _, b in pts] or [1]) / MiB
        band = top * 0.12
        for kind in ("F", "B", "W", "R"):
            ss = [(t, d) for k, t, d in spans.get(r, []) if k == kind]
            if not ss:
                continue
            y0 = {"F": 0.0, "B": band, "W": 2 * band, "R": 3 * band}[kind]
            coll = ax.broken_barh(ss, (-(y0 + band) - band * 0.1, band * 0.9),
                                  facecolors=COLOURS[kind], label=kind)
            coll.set_gid(f"{kind}-rank{r}")
            drawn.append(f"{kind}-rank{r}")
        if pts:
            t_end = max([t + d for _, t, d in spans.get(r, [])] + [pts[-1][0]])
            xs = [t for t, _ in pts] + [t_end]
            ys = [b / MiB for _, b in pts] + [pts[-1][1] / MiB]
            (ln,) = ax.step(xs, ys, where="post", color=COLOURS["measured"], label="arena")
            ln.set_gid(f"arena-rank{r}")
            drawn.append(f"arena-rank{r}")
        ax.set_ylabel(f"{names.get(r, f'rank {r}')}\nMiB", fontsize="small")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", fontsize="x-small", ncol=5)
    axes[-1, 0].set_xlabel("seconds")
    fig.suptitle(title or f"remat train --trace: {os.path.basename(trace)} (arena bytes; "
                          f"F forward, B backward or input gradient, W weight gradient, R recompute)",
                 fontsize="small")
    fig.tight_layout()
    _save(fig, outs)
    return drawn


# ---------------------------------------------------------------- command
def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python3 -m remat.plot",
        description="Draws PNG or SVG pictures (by the output's extension) of a remat train "
                    "--log, a remat plan --format json plan, or a remat train --trace.",
        epilog="examples:\n"
               "  python3 -m remat.plot log run.jsonl -o run.png\n"
               "  python3 -m remat.plot plan plan.json --problem problem.json "
               "--measured run.jsonl -o plan.svg\n"
               "  python3 -m remat.plot trace trace.json -o trace.png\n"
               "See docs/plot.md.", formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", metavar="log|plan|trace")
    sub.required = True
    p = sub.add_parser("log", help="training and held-out loss, tokens/s and MFU over the steps",
                       description="Training and held-out loss, tokens/s and MFU over the steps "
                                   "of a remat train --log file.")
    p.add_argument("input", metavar="RUN.jsonl")
    p = sub.add_parser("plan", help="each stage's planned bytes (state, activations, workspace, "
                                    "data), measured bytes and budget",
                       description="Each stage's planned bytes stacked as state, activations, "
                                   "workspace and data, the measured bytes beside them and the "
                                   "budget, from a remat plan --format json file.")
    p.add_argument("input", metavar="PLAN.json")
    p.add_argument("--problem", metavar="PROBLEM.json",
                   help="the problem the plan solved (default: the file the plan's source names)")
    p.add_argument("--measured", metavar="RUN.jsonl|VERIFY.json",
                   help="a remat train --log of the plan's run (per-rank measured peaks), or "
                        "remat.verify's result (Verification.save)")
    p = sub.add_parser("trace", help="each rank's arena bytes over time with the F, B and W spans",
                       description="Each rank's arena bytes over time, with the schedule's F, B "
                                   "and W spans, from a remat train --trace file.")
    p.add_argument("input", metavar="TRACE.json")
    for p in sub.choices.values():
        p.add_argument("-o", "--output", action="append", metavar="FILE.png|FILE.svg",
                       help="where to draw (repeat for both)")
        p.add_argument("--title", help="the picture's title")
    a = ap.parse_args(argv)
    try:
        if a.what == "log":
            drawn = plot_log(a.input, a.output, a.title)
        elif a.what == "plan":
            drawn = plot_plan(a.input, a.output, a.problem, a.measured, a.title)
        else:
            drawn = plot_trace(a.input, a.output, a.title)
    except PlotError as e:
        print(f"remat.plot {a.what}: {e}", file=sys.stderr)
        return 2
    for o in a.output:
        print(f"wrote   {o} ({', '.join(drawn)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

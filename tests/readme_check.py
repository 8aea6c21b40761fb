#!/usr/bin/env python3
"""readme_check.py: runs every command a markdown file (README.md, a page of
docs/) shows and checks that the lines it quotes under it are what the
command prints, numbers included, so the documentation cannot drift from the
program.

In the file's fenced blocks a line "$ COMMAND" is a command; the lines after it,
up to the next command or the end of the block, are what it prints (stdout
and stderr together). Each quoted line must appear in the output, in order;
the output may have more lines (progress lines, for instance). Figures that
depend on the machine's speed (seconds, tokens/s, GFLOP/s, MFU, ETA, the
process's RSS, a pipeline's predicted bubble) are masked on both sides before
comparing. A command whose
quoted output is empty is only checked to run.

remat train's default precision is the CPU's (bf16 where it has the
instructions, whose bits and oneDNN scratchpad depend on the CPU): where a
quoted block has a "precision " line and the command prints another one (a
CPU of another kind), the command is only checked to run, and the check says
so; pass --precision fp32 to quote figures that hold on every CPU.
Commands run without a shell, in REPO_ROOT. Besides remat (./build/app/remat,
or "remat" as an installed one is called) and mpirun ... remat, a block may
set up its own files with mkdir, cp and rm, and run python3 (the package in
REPO_ROOT/python, with the interpreter --python names: one that imports torch
and matplotlib, and REMAT_CLI naming the remat checked; without --python
those commands are listed as not run); these must exit 0. A line
"$ cd DIR" runs the block's later commands in DIR, until the block ends.
A block right after a line "<!-- not run: REASON -->" is shown but not run
(a command that takes minutes, or more MPI ranks than a test machine has);
the check lists it as skipped with the reason. A block right after
"<!-- recorded on VENDOR: REASON -->" (VENDOR as /proc/cpuinfo's vendor_id
names it: GenuineIntel, AuthenticAMD) quotes bits that depend on the CPU's
kernels: it is compared on a CPU of that vendor and only run on another, and
the check says so.

Every picture the file shows (![ALT](PATH), PATH relative to the file) must
be a PNG or SVG file that is there.

usage: readme_check.py [--none-ok] [--python PY] FILE.md REMAT_BINARY REPO_ROOT
  --none-ok   a file without commands passes (README must have some)
  --python PY the python3 that runs the files' python3 commands
"""
import os
import re
import shlex
import subprocess
import sys

MASKS = [
    (re.compile(r"\b\d+(\.\d+)? s\b"), "<sec> s"),
    (re.compile(r"\b\d+ (tok/s|tokens/s)"), r"<rate> \1"),
    (re.compile(r"\b\d+(\.\d+)? GFLOP/s"), "<rate> GFLOP/s"),
    (re.compile(r"MFU \d+(\.\d+)?%"), "MFU <pct>%"),
    (re.compile(r"MFU \(model FLOPs utilisation\) \d+(\.\d+)?%"), "MFU (model FLOPs utilisation) <pct>%"),
    (re.compile(r"ETA [\d:]+"), "ETA <eta>"),
    (re.compile(r"RSS peak [\d.]+ \w+"), "RSS peak <bytes>"),
    (re.compile(r"recompute \d+(\.\d+)?% of step time"), "recompute <pct>% of step time"),
    (re.compile(r"on \d+ threads"), "on <n> threads"),
    (re.compile(r"iteration [0-9.]+ s measured, [0-9.]+ s predicted"), "iteration <t> s measured, <t> s predicted"),
    (re.compile(r"waited [0-9.]+%"), "waited <pct>%"),
    # a pipeline's bubble, simulated at this machine's layer times
    (re.compile(r"\(bubble [0-9.]+%\)"), "(bubble <pct>%)"),
    (re.compile(r"[0-9.]+% of its step time"), "<pct>% of its step time"),
    (re.compile(r"\b\d+(\.\d+)? ms\b"), "<t> ms"),
    (re.compile(r"(all|gathers)(?: \d+%)+"), r"\1 <pcts>"),
]


def mask(line):
    line = line.rstrip()
    for rx, rep in MASKS:
        line = rx.sub(rep, line)
    return line


NOT_RUN = re.compile(r"^<!-- not run: (.*) -->$")
RECORDED = re.compile(r"^<!-- recorded on (\w+): (.*) -->$")


def cpu_vendor():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def examples(readme):
    """(command, [quoted lines], reason not run or None, block number) for
    every '$ ' line in a fenced block."""
    out, in_block, cur, skip, prev, block = [], False, None, None, "", 0
    for raw in open(readme, encoding="utf-8"):
        line = raw.rstrip("\n")
        if line.startswith("```"):
            in_block = not in_block
            block += 1
            m = NOT_RUN.match(prev.strip())
            skip = m.group(1) if in_block and m else None
            rec = RECORDED.match(prev.strip())
            if in_block and rec and rec.group(1) != cpu_vendor():
                skip = ("ran only", f"recorded on {rec.group(1)}, this CPU is {cpu_vendor()}: "
                        f"{rec.group(2)}")
            cur = None
            prev = line
            continue
        prev = line
        if not in_block:
            continue
        if line.startswith("$ "):
            cur = (line[2:], [], skip, block)
            out.append(cur)
        elif cur is not None:
            cur[1].append(line)
    return out


def other_cpu(want, got):
    """The quoted precision line when the output's differs (a CPU of
    another kind), else None."""
    q = [l for l in want if l.startswith("precision ")]
    g = [l for l in got if l.startswith("precision ")]
    return q[0] if q and g and q[0] != g[0] else None


# what a block may run besides remat: its own files, and the python package
SETUP = ("mkdir", "cp", "rm")


IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def images(page):
    """(path, why) for each picture the page shows, ![ALT](PATH) with PATH
    relative to the page: why is None for a PNG or SVG file that is there
    and not empty, else what is wrong."""
    out, here = [], os.path.dirname(os.path.abspath(page))
    with open(page) as f:
        text = f.read()
    for path in IMAGE.findall(text):
        if "://" in path:
            continue
        full = os.path.join(here, path)
        try:
            with open(full, "rb") as f:
                head = f.read(512)
        except OSError as e:
            out.append((path, f"no such picture ({e.strerror})"))
            continue
        if head.startswith(b"\x89PNG\r\n\x1a\n") or (path.endswith(".svg") and b"<svg" in head):
            out.append((path, None))
        else:
            out.append((path, "neither a PNG nor an SVG file"))
    return out


def main():
    args = sys.argv[1:]
    none_ok = "--none-ok" in args
    python = None
    if "--python" in args:
        i = args.index("--python")
        python = args[i + 1]
        del args[i:i + 2]
    readme, remat, root = [a for a in args if a != "--none-ok"][:3]
    name = os.path.basename(readme)
    cases = examples(readme)
    passed = failed = skipped = 0
    for path, why in images(readme):
        if why:
            print(f"FAIL [![]({path})]: {why}")
            failed += 1
        else:
            print(f"ok   [![]({path})]")
            passed += 1
    cwd, cwd_block = root, None
    for cmd, quoted, skip, block in cases:
        if block != cwd_block:
            cwd, cwd_block = root, block  # a cd holds to the end of its block
        run_only = skip[1] if isinstance(skip, tuple) else None
        if skip is not None and run_only is None:
            print(f"skip [{cmd}] (not run: {skip})")
            skipped += 1
            continue
        argv = shlex.split(cmd)
        if argv[0] == "cd" and len(argv) == 2:
            cwd = os.path.join(cwd, argv[1])
            if os.path.isdir(cwd):
                print(f"ok   [{cmd}]")
                passed += 1
            else:
                print(f"FAIL [{cmd}]: no such directory")
                failed += 1
            continue
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        at = [i for i, a in enumerate(argv) if a in ("remat", "./build/app/remat")]
        must_succeed = argv[0] == "python3" or argv[0] in SETUP
        if argv[0] == "python3":
            if python is None:
                print(f"skip [{cmd}] (not run: no --python, a python3 with torch and matplotlib)")
                skipped += 1
                continue
            argv[0] = python
            env["PYTHONPATH"] = os.pathsep.join(
                [os.path.join(root, "python")] + [p for p in [env.get("PYTHONPATH")] if p])
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            env["REMAT_CLI"] = remat
        elif argv[0] not in SETUP:
            if not at or (at[0] != 0 and argv[0] != "mpirun"):
                print(f"FAIL [{cmd}]: {name} commands run ./build/app/remat (or mpirun ... it), "
                      f"{', '.join(SETUP)}, cd or python3")
                failed += 1
                continue
            argv[at[0]] = remat
        r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
        if must_succeed and r.returncode != 0:
            print(f"FAIL [{cmd}]: exit {r.returncode}: {(r.stdout + r.stderr)[-300:]}")
            failed += 1
            continue
        got = [mask(l) for l in (r.stdout + r.stderr).splitlines()]
        want = [mask(l) for l in quoted if l.strip()]
        other = other_cpu(want, got) or run_only
        if other is not None:
            if r.returncode == 0:
                print(f"ok   [{cmd}] (quoted on another CPU: {other}; ran, not compared)")
                passed += 1
            else:
                print(f"FAIL [{cmd}]: exit {r.returncode}: {(r.stdout + r.stderr)[-300:]}")
                failed += 1
            continue
        i, missing = 0, None
        for w in want:
            while i < len(got) and got[i] != w:
                i += 1
            if i == len(got):
                missing = w
                break
            i += 1
        if missing is not None:
            print(f"FAIL [{cmd}]: {name} quotes a line the command did not print (in order):")
            print(f"  {name}: {missing}")
            print("  output:")
            for l in got:
                print(f"    {l}")
            failed += 1
        else:
            print(f"ok   [{cmd}] ({len(want)} lines)")
            passed += 1
    if not cases and not none_ok:
        print(f"FAIL: no commands found in {name}")
        failed += 1
    print(f"{passed} passed, {failed} failed" + (f", {skipped} not run" if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

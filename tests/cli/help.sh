#!/usr/bin/env bash
# Every flag README.md and docs/*.md show on a `remat train`, `remat plan`,
# `remat tokenize`, `remat sample` or `remat state` command line (in a fenced block or an
# inline `remat ...` span) appears in that command's --help; and README
# tells, once, what Open MPI needs to run as root.
# usage: help.sh REMAT SOURCE_DIR
set -u
remat=$1
src=$2
fails=0
for cmd in train plan tokenize sample state; do
  "$remat" "$cmd" --help >"/tmp/remat-help-$$-$cmd" 2>&1 || { echo "FAIL [remat $cmd --help exits non-zero]"; fails=$((fails + 1)); }
done
python3 - "$src" "/tmp/remat-help-$$" <<'PY' || fails=$((fails + 1))
import glob, re, sys
src, helps = sys.argv[1], sys.argv[2]
cmds = ("train", "plan", "tokenize", "sample", "state")
help_flags = {c: set(re.findall(r"--[a-z][a-z0-9-]*", open(f"{helps}-{c}").read())) for c in cmds}
files = [f"{src}/README.md"] + sorted(glob.glob(f"{src}/docs/*.md"))
shown = {c: {} for c in cmds}
for path in files:
    text = open(path, encoding="utf-8").read()
    # command lines: "$ ..." in fenced blocks (with their continuation lines)
    # and inline `...remat CMD ...` spans
    spans = re.findall(r"`([^`\n]*remat (?:%s)\b[^`\n]*)`" % "|".join(cmds), text)
    spans += re.findall(r"^\$ (.*(?:\\\n.*)*)$", text, re.M)
    for span in spans:
        for part in re.split(r"[|;&]|\bthen\b", span):
            m = re.search(r"remat (%s)\b(.*)" % "|".join(cmds), part)
            if not m:
                continue
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", m.group(2)):
                shown[m.group(1)].setdefault(flag, path.replace(src + "/", ""))
bad = 0
for c in cmds:
    missing = sorted(f for f in shown[c] if f not in help_flags[c])
    for f in missing:
        print(f"FAIL [remat {c} {f} ({shown[c][f]}) is not in remat {c} --help]")
    bad += len(missing)
    print(f"ok   [remat {c}: {len(shown[c])} flags shown in the docs, "
          f"{len(shown[c]) - len(missing)} in --help]")
readme = open(f"{src}/README.md", encoding="utf-8").read()
n = readme.count("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
print(("ok  " if n >= 1 else "FAIL") + f" [README says what Open MPI needs as root ({n} times)]")
sys.exit(1 if bad or n < 1 else 0)
PY
rm -f /tmp/remat-help-$$-*
[[ $fails -eq 0 ]] && echo "all passed" || echo "$fails failed"
[[ $fails -eq 0 ]]

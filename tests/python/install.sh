#!/usr/bin/env bash
# The Python tests' setup (CTest fixture python_install): installs the
# package with pip, as a user does (docs/profile.md), into a fresh venv in
# the build tree that sees Debian's torch (--system-site-packages), from a
# copy of python/ (pip builds in the directory it is given, and the source
# tree stays clean); no index is asked (torch, the one dependency, is
# Debian's). Then checks that `import remat` finds the installed copy.
# usage: install.sh PYTHON SOURCE_DIR/python WORK_DIR
set -euo pipefail
python=$1
src=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
cp -r "$src" "$work/src"
rm -rf "$work/src/build" "$work"/src/*.egg-info
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
"$python" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --no-cache-dir --no-index --no-build-isolation \
  --disable-pip-version-check "$work/src"
cd "$work"
"$work/venv/bin/python" - "$work/venv" <<'PY'
import os, sys
import remat
where = os.path.realpath(remat.__file__)
assert where.startswith(os.path.realpath(sys.argv[1]) + os.sep), f"remat imported from {where}"
print(f"remat installed at {os.path.dirname(where)}")
PY

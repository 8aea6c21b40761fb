#!/usr/bin/env python3
"""long_files.py: lists the C source files longer than a limit, so a file
that holds several concerns is named before it grows further (as
long_functions.py names a long function).

usage: long_files.py [--limit N] [--allow FILE]... ROOT DIR...

Every .c and .h file under each DIR (relative to ROOT) counts its lines; one
over the limit fails the check unless --allow names it (a file awaiting its
split; it is listed, and an --allow that no longer matches a long file is
named so it can be dropped). Exit status 1 on a failure.
"""
import argparse
import os
import sys

from long_functions import c_files  # the same files, walked the same way


def scan(root, dirs):
    rows = []
    for path in c_files(root, dirs):
        with open(path, encoding="utf-8", errors="replace") as fh:
            n = sum(1 for _ in fh)
        rows.append((n, os.path.relpath(path, root)))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=800)
    ap.add_argument("--allow", action="append", default=[], metavar="FILE")
    ap.add_argument("root")
    ap.add_argument("dirs", nargs="+")
    a = ap.parse_args()
    long = sorted((r for r in scan(a.root, a.dirs) if r[0] > a.limit), reverse=True)
    over = [r for r in long if r[1] not in a.allow]
    allowed = [r for r in long if r[1] in a.allow]
    for n, path in over:
        print(f"FAIL {n:5d} lines  {path}")
    for n, path in allowed:
        print(f"allowed {n:5d} lines  {path}")
    for stale in sorted(set(a.allow) - {r[1] for r in allowed}):
        print(f"note --allow {stale} is not over {a.limit} lines: drop it")
    print(f"{len(over)} files over {a.limit} lines in {', '.join(a.dirs)}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())

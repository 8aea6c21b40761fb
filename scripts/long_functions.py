#!/usr/bin/env python3
"""long_functions.py: lists the C functions longer than a limit, so a function
that no longer reads at once is named before it grows further.

A function's length runs from the line that names it (its signature) to the
line of its closing brace, both counted. The scan is lexical: comments,
strings and character constants are blanked, preprocessor lines skipped, and
a top-level brace opens a function when the declaration before it has a
parameter list and no '=' (so struct bodies and initialisers are not counted).

usage: long_functions.py [--limit N] [--report DIR]... [--allow FILE:NAME]...
                         ROOT DIR...

Functions over the limit under each DIR (relative to ROOT) fail the check;
those under a --report DIR are listed but do not, nor does a function named
by --allow (one awaiting its split elsewhere; it is listed, and an --allow
that no longer matches a long function is named so it can be dropped).
Exit status 1 on a failure.
"""
import argparse
import os
import re
import sys

IDENT_CALL = re.compile(r"([A-Za-z_]\w*)\s*\($")


def blank(text):
    """The text with comments, strings, character constants and preprocessor
    lines replaced by spaces, newlines kept so line numbers still hold."""
    out, i, n = [], 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#":
            # A directive runs to an unescaped newline.
            while i < n and not (text[i] == "\n" and text[i - 1] != "\\"):
                out.append("\n" if text[i] == "\n" else " ")
                i += 1
            continue
        if c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.extend("\n" if ch == "\n" else " " for ch in text[i:end])
            i = end
            continue
        if c == "/" and text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + c)
            i = j + 1
            continue
        out.append(c)
        if c == "\n":
            at_line_start = True
        elif not c.isspace():
            at_line_start = False
        i += 1
    return "".join(out)


def functions(path):
    """(name, first line, last line) of every function defined in a C file."""
    text = blank(open(path, encoding="utf-8", errors="replace").read())
    found, depth, decl_start, line = [], 0, 0, 1
    open_at = None  # (name, signature line) of the function being read
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c == "{":
            if depth == 0:
                open_at = signature(text, decl_start, i)
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                if open_at:
                    found.append((open_at[0], open_at[1], line))
                open_at = None
                decl_start = i + 1
        elif c == ";" and depth == 0:
            decl_start = i + 1
    return found


def signature(text, start, brace):
    """(name, line) when text[start:brace] declares a function, else None."""
    decl = text[start:brace]
    if "(" not in decl or "=" in decl.split("(")[0]:
        return None
    if "=" in decl and decl.index("=") < decl.rindex(")"):
        return None
    depth, cut = 0, None
    for k, c in enumerate(decl):  # the last parameter list at depth 0 follows the name
        if c == "(" and depth == 0:
            cut = k
        depth += c == "("
        depth -= c == ")"
    m = IDENT_CALL.search(decl[: cut + 1])
    if not m or m.group(1) in ("if", "while", "for", "switch", "sizeof"):
        return None
    return m.group(1), text.count("\n", 0, start + m.start(1)) + 1


def c_files(root, dirs):
    """Every .c and .h file under each of dirs (relative to root), in order."""
    for d in dirs:
        for base, _, files in os.walk(os.path.join(root, d)):
            for f in sorted(files):
                if f.endswith((".c", ".h")):
                    yield os.path.join(base, f)


def scan(root, dirs):
    rows = []
    for path in c_files(root, dirs):
        for name, first, last in functions(path):
            rows.append((last - first + 1, os.path.relpath(path, root), first, name))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--report", action="append", default=[], metavar="DIR")
    ap.add_argument("--allow", action="append", default=[], metavar="FILE:NAME")
    ap.add_argument("root")
    ap.add_argument("dirs", nargs="+")
    a = ap.parse_args()
    long = sorted((r for r in scan(a.root, a.dirs) if r[0] > a.limit), reverse=True)
    over = [r for r in long if f"{r[1]}:{r[3]}" not in a.allow]
    allowed = [r for r in long if f"{r[1]}:{r[3]}" in a.allow]
    seen = sorted((r for r in scan(a.root, a.report) if r[0] > a.limit), reverse=True)
    for n, path, first, name in over:
        print(f"FAIL {n:4d} lines  {path}:{first}  {name}")
    for n, path, first, name in allowed:
        print(f"allowed {n:4d} lines  {path}:{first}  {name}")
    for n, path, first, name in seen:
        print(f"note {n:4d} lines  {path}:{first}  {name}")
    for stale in sorted(set(a.allow) - {f"{r[1]}:{r[3]}" for r in allowed}):
        print(f"note --allow {stale} is not over {a.limit} lines: drop it")
    print(f"{len(over)} functions over {a.limit} lines in {', '.join(a.dirs)}; "
          f"{len(seen)} in {', '.join(a.report) or 'nothing reported'}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())

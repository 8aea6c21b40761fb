#!/usr/bin/env python3
"""layering.py: fails when the code crosses the layering docs/architecture.md
draws.

The rule is the fenced ```layering block of docs/architecture.md, read from
there (so the document and the check cannot drift apart): one line per
library, its name, the libraries it uses directly, and after a "|" the
private headers it offers the libraries above it. A library may use those it
names and, through them, everything they may use. Checked:

  includes  every #include "..." of src/<lib>/*.c|h, app/*.c|h and
            include/remat/*.h names the library's own headers, a public
            header remat/X.h of a library it may use, or an interface header
            of one; the umbrella remat.h only where every library may be used
  links     each remat_library(remat_X SOURCES ... LIBS ...) of
            src/CMakeLists.txt compiles files of src/X/ only and links only
            libraries X may use; every folder of src/ is a library of the table
  symbols   (with --build) every remat_ symbol libremat_X.a needs is defined
            by it or by a library X may use
  files     (with --build) no two files of one library call each other,
            directly or round a longer cycle

usage: layering.py SOURCE_DIR [--build BUILD_DIR]
Prints one line per violation and exits 1 if there is any.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read_table(doc):
    """{library: (set of direct uses, set of interface headers)} from the doc."""
    text = open(doc, encoding="utf-8").read()
    m = re.search(r"^```layering\n(.*?)^```", text, re.S | re.M)
    if not m:
        sys.exit(f"layering: no ```layering block in {doc}")
    table = {}
    for line in m.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        deps, _, iface = line.partition("|")
        words = deps.split()
        if words[0] in table:
            sys.exit(f"layering: {words[0]} is in the table twice")
        table[words[0]] = (set(words[1:]), set(iface.split()))
    for lib, (uses, _) in table.items():
        for u in uses:
            if u not in table:
                sys.exit(f"layering: {lib} uses {u}, which the table does not list")
    return table


def closures(table):
    """{library: every library it may use}, refusing a cycle in the table."""
    out = {}

    def visit(lib, path):
        if lib in path:
            sys.exit("layering: the table has a cycle: " + " -> ".join(path + [lib]))
        if lib not in out:
            below = set()
            for u in table[lib][0]:
                below |= {u} | visit(u, path + [lib])
            out[lib] = below
        return out[lib]

    for lib in table:
        visit(lib, [])
    return out


def check_includes(src, table, below, errors):
    libs = set(table) - {"app"}
    files = []
    for lib in sorted(libs):
        files += [(lib, f) for f in sorted(glob.glob(os.path.join(src, "src", lib, "*.[ch]")))]
    files += [("app", f) for f in sorted(glob.glob(os.path.join(src, "app", "*.[ch]")))]
    for f in sorted(glob.glob(os.path.join(src, "include", "remat", "*.h"))):
        files.append((os.path.basename(f)[:-2], f))
    for lib, f in files:
        rel = os.path.relpath(f, src)
        public = rel.startswith("include" + os.sep)
        if lib not in table:
            errors.append(f"{rel}: {lib} is not in the table of docs/architecture.md")
            continue
        text = open(f, encoding="utf-8").read()
        for n, line in enumerate(text.splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            inc, where = m.group(1), f"{rel}:{n}: #include \"{m.group(1)}\""
            parts = inc.split("/")
            if inc == "remat.h":
                if public or below[lib] != set(table) - {lib, "app"}:
                    errors.append(f"{where}: the umbrella header is for app/ and tests; "
                                  f"include the remat/X.h that {lib} uses")
            elif len(parts) == 2 and parts[0] == "remat":
                other = parts[1][:-2] if parts[1].endswith(".h") else parts[1]
                if other not in table or not os.path.exists(os.path.join(src, "include", inc)):
                    errors.append(f"{where}: no such public header of a library")
                elif other != lib and other not in below[lib]:
                    errors.append(f"{where}: {lib} may not use {other}")
            elif public:
                errors.append(f"{where}: a public header includes only public headers")
            elif len(parts) == 2 and parts[0] in libs:
                other = parts[0]
                if other == lib:
                    continue
                if other not in below[lib]:
                    errors.append(f"{where}: {lib} may not use {other}")
                elif inc not in table[other][1]:
                    errors.append(f"{where}: a private header of {other}; use "
                                  f"remat/{other}.h or an interface header the table lists")
            elif len(parts) == 1 and os.path.exists(os.path.join(os.path.dirname(f), inc)):
                continue  # a header beside it, in the same folder
            else:
                errors.append(f"{where}: not a header of a library in the table")
    for lib, (_, iface) in table.items():
        for h in iface:
            if not os.path.exists(os.path.join(src, "src", h)) or h.split("/")[0] != lib:
                errors.append(f"docs/architecture.md: {lib} offers {h}, which is not a "
                              f"header of src/{lib}/")


def check_links(src, table, below, errors):
    cmake = os.path.join(src, "src", "CMakeLists.txt")
    text = re.sub(r"#[^\n]*", "", open(cmake, encoding="utf-8").read())
    seen = set()
    for m in re.finditer(r"\bremat_library\s*\(([^)]*)\)", text):
        words = m.group(1).split()
        if not words or not words[0].startswith("remat_"):
            continue
        lib = words[0][len("remat_"):]
        where = f"src/CMakeLists.txt: remat_library({words[0]} ...)"
        if lib not in table or lib == "app":
            errors.append(f"{where}: {lib} is not a library of the table")
            continue
        seen.add(lib)
        key = None
        for w in words[1:]:
            if w in ("SOURCES", "LIBS"):
                key = w
            elif key == "SOURCES" and not w.startswith(lib + "/"):
                errors.append(f"{where}: compiles {w}, which is not in src/{lib}/")
            elif key == "LIBS" and w.startswith("remat_") and w[6:] in table:
                if w[6:] == lib or w[6:] not in below[lib]:
                    errors.append(f"{where}: links {w}, which {lib} may not use")
    folders = {d for d in os.listdir(os.path.join(src, "src"))
               if os.path.isdir(os.path.join(src, "src", d))}
    for d in sorted(folders - seen):
        errors.append(f"src/{d}/: no remat_library(remat_{d} ...) in src/CMakeLists.txt")
    for lib in sorted(set(table) - {"app"} - folders):
        errors.append(f"docs/architecture.md: {lib} is in the table but src/{lib}/ does not exist")


def nm(archive):
    """{member: (defined remat_ symbols, needed remat_ symbols)} of a static library."""
    out = subprocess.run(["nm", "-A", archive], capture_output=True, text=True,
                         check=True).stdout
    files = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) != 3 or not parts[2].startswith("remat_"):
            continue
        member = parts[0].split(":")[1]
        d, u = files.setdefault(member, (set(), set()))
        if parts[1] == "U":
            u.add(parts[2])
        elif parts[1].isupper():
            d.add(parts[2])
    return files


def check_symbols(build, table, below, errors):
    if not shutil.which("nm"):
        print("layering: nm not found; symbols and files not checked")
        return
    libs = {}
    for lib in sorted(set(table) - {"app"}):
        a = os.path.join(build, "src", f"libremat_{lib}.a")
        if os.path.exists(a):
            libs[lib] = nm(a)
    owner = {}
    for lib, files in libs.items():
        for member, (d, _) in files.items():
            for s in d:
                owner[s] = (lib, member)
    for lib, files in libs.items():
        calls = {}
        for member, (_, u) in files.items():
            for s in sorted(u):
                if s not in owner:
                    continue  # defined outside the libraries (or nowhere: the link says)
                other, where = owner[s]
                if other == lib:
                    if where != member:
                        calls.setdefault(member, {}).setdefault(where, s)
                elif other not in below[lib]:
                    errors.append(f"libremat_{lib}.a: {member} calls {s} of {other}, "
                                  f"which {lib} may not use")
        # cycles among the library's files
        state = {}

        def visit(f, path):
            state[f] = 1
            for g, s in sorted(calls.get(f, {}).items()):
                if state.get(g) == 1:
                    cyc = path[path.index(g):] + [f, g] if g in path else [f, g]
                    errors.append(f"libremat_{lib}.a: files call each other in a cycle: "
                                  + " -> ".join(cyc) + f" ({f} calls {s})")
                elif g not in state:
                    visit(g, path + [f])
            state[f] = 2

        for f in sorted(files):
            if f not in state:
                visit(f, [])


def main():
    args = sys.argv[1:]
    build = None
    if "--build" in args:
        i = args.index("--build")
        build = args[i + 1]
        del args[i:i + 2]
    if len(args) != 1:
        sys.exit(__doc__)
    src = args[0]
    table = read_table(os.path.join(src, "docs", "architecture.md"))
    below = closures(table)
    errors = []
    check_includes(src, table, below, errors)
    check_links(src, table, below, errors)
    if build:
        check_symbols(build, table, below, errors)
    for e in errors:
        print(e)
    if errors:
        print(f"layering: {len(errors)} crossing(s) of the layering in docs/architecture.md")
        return 1
    print(f"layering: {len(table)} libraries, no crossing")
    return 0


if __name__ == "__main__":
    sys.exit(main())

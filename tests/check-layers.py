#!/usr/bin/env python3
"""Keeps the layering of docs/ARCHITECTURE.md true.

Fails when a file in lib/ includes a header of a layer above it or of another
op family (core <- runtime <- families <- embed, which calls the families
through the public API only; CPU twins see only the core; lib/mpi, the separate
libclvarlen-mpi, sees its own headers and the core's, and libclvarlen through
its public API), when a
.c file in lib/ declares a non-static function it does not define (a call
around the headers), when a file in lib/ or cl/ passes 900 lines or one in
tools/ or tests/ passes 1,000, or when a function body in lib/, tools/ or
tests/ passes 120 lines (data tables are not function bodies: their opening
brace is not alone at column 0).

Usage: check-layers.py SOURCE_ROOT
"""
import os
import re
import sys

FAMILIES = ("segment", "attention", "gated-delta")
FILE_LIMITS = {"lib": 900, "cl": 900, "tools": 1000, "tests": 1000}
FUNCTION_LIMIT = 120
SOURCE_EXT = (".c", ".h", ".cl", ".clh", ".cpp", ".py", ".sh")

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
PROTO_RE = re.compile(r"^(?!static\b)[A-Za-z_][\w \*]*\b(cv_\w+)\s*\([^;{]*\)\s*;", re.M)


def family_of_name(name):
    """The op family a lib/cpu file or a family header belongs to (by prefix)."""
    for fam in FAMILIES:
        if name == fam or name.startswith(fam + "-") or name.startswith(fam + "."):
            return fam
    return None


def layer_of(rel):
    """(layer, family) of a path relative to lib/."""
    parts = rel.split("/")
    if len(parts) == 1:
        return ("lib", None)
    top = parts[0]
    if top == "core":
        return ("core", None)
    if top == "runtime":
        return ("runtime", None)
    if top == "embed":
        return ("embed", None)
    if top == "cpu":
        return ("cpu", family_of_name(parts[-1]))
    if top in FAMILIES:
        return ("family", top)
    return (top, None)


def allowed_include(src_rel, inc):
    """Whether lib/<src_rel> may include "inc"."""
    layer, fam = layer_of(src_rel)
    if inc in ("config.h", "cv-shared.h"):
        return True
    # a header next to the file
    here = os.path.dirname(src_rel)
    target = os.path.normpath(os.path.join(here, inc)) if "/" not in inc else inc
    t_layer, t_fam = layer_of(target)
    if t_layer == "core":
        return True
    if layer == "core":
        return False
    if layer == "cpu":
        return t_layer == "cpu" and t_fam == fam
    if layer == "runtime":
        return t_layer == "runtime"
    if layer == "embed":  # the hooks spanning the families: the public API and the core
        return t_layer == "core"
    if layer == "mpi":  # libclvarlen-mpi: its own headers (and the core's, above)
        return t_layer == "mpi"
    if layer == "family":
        if t_layer == "runtime":
            return True
        if t_layer in ("family", "cpu"):
            return t_fam == fam
        return False
    return False


def check_includes(root, errors):
    lib = os.path.join(root, "lib")
    for dirpath, _, files in os.walk(lib):
        for name in sorted(files):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, lib)
            layer, fam = layer_of(rel)
            if layer == "lib":
                errors.append(f"lib/{rel}: a source file outside the layer directories "
                              "(core, runtime, cpu, embed, " + ", ".join(FAMILIES) + ")")
                continue
            if layer in ("cpu", "family") and fam is None:
                errors.append(f"lib/{rel}: belongs to no op family ({', '.join(FAMILIES)})")
                continue
            text = open(path, encoding="utf-8").read()
            for inc in INCLUDE_RE.findall(text):
                if not allowed_include(rel, inc):
                    errors.append(f"lib/{rel}: includes \"{inc}\", a layer above it or "
                                  "another family")
            if name.endswith(".c"):
                for m in PROTO_RE.finditer(text):
                    errors.append(f"lib/{rel}: declares {m.group(1)}() itself instead of "
                                  "including its layer's header")


def check_lengths(root, errors):
    for top, limit in FILE_LIMITS.items():
        base = os.path.join(root, top)
        for dirpath, _, files in os.walk(base):
            for name in sorted(files):
                if not name.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                lines = open(path, encoding="utf-8").read().split("\n")
                if lines and lines[-1] == "":
                    lines.pop()
                if len(lines) > limit:
                    errors.append(f"{rel}: {len(lines)} lines (at most {limit})")
                if top != "cl" and name.endswith((".c", ".cpp")):
                    check_functions(rel, lines, errors)


def check_functions(rel, lines, errors):
    """Function bodies open with '{' alone at column 0 and close with '}' at column 0."""
    start = None
    for i, line in enumerate(lines):
        if line.rstrip() == "{" and start is None:
            start = i
        elif line.startswith("}") and start is not None:
            length = i - start + 1
            if length > FUNCTION_LIMIT:
                header = next((lines[j].strip() for j in range(start - 1, -1, -1)
                               if "(" in lines[j]), "?")
                errors.append(f"{rel}:{start + 1}: function of {length} lines (at most "
                              f"{FUNCTION_LIMIT}): {header[:70]}")
            start = None


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().split("\n")[-1], file=sys.stderr)
        return 2
    root = sys.argv[1]
    errors = []
    check_includes(root, errors)
    check_lengths(root, errors)
    for e in errors:
        print(e)
    print(f"layers: {len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

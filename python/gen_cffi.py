#!/usr/bin/env python3
"""Generate the cffi binding of clvarlen from its public headers (build time).

The declarations handed to cffi are the headers themselves, run through the C
preprocessor of the build: every function, enum and struct of
<clvarlen/clvarlen.h> (and <clvarlen/clvarlen-cl.h> where OpenCL is built),
nothing written by hand. cffi's API mode then compiles the module against the
same headers, so the C compiler checks every declaration and lays out every
struct. A second output is a C program that prints each struct's size and
field offsets as the compiler sees them; tests/python/test_binding.py (test_layout) compares
it with what the module reports.

usage: gen_cffi.py [--with-cl] --include DIR --out-c FILE --out-layout FILE -- CC...
"""
import argparse
import re
import subprocess
import sys

import cffi

CL_TYPES = """
typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef struct _cl_platform_id *cl_platform_id;
typedef struct _cl_device_id *cl_device_id;
typedef struct _cl_context *cl_context;
typedef struct _cl_command_queue *cl_command_queue;
typedef struct _cl_mem *cl_mem;
typedef struct _cl_event *cl_event;
"""
SKIP_DEFINES = {"CLVARLEN_H", "CLVARLEN_CL_H", "CLVARLEN_API"}
DEFINE_RE = re.compile(r"#define\s+(CLVARLEN_[A-Z0-9_]+)(\(?)\s*(.*)")
MARKER_RE = re.compile(r'#\s+\d+\s+"([^"]*)"')


def preprocess(cc, include, with_cl):
    src = "#include <clvarlen/clvarlen.h>\n"
    if with_cl:
        src += "#include <clvarlen/clvarlen-cl.h>\n"
    out = subprocess.run(cc + ["-E", "-dD", "-I", include, "-x", "c", "-"], input=src,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit("gen_cffi.py: the preprocessor failed:\n" + out.stderr)
    return out.stdout


def ours(path):
    return re.search(r"clvarlen/clvarlen(-cl)?\.h$", path) is not None


def header_cdef(text):
    """The lines of our headers: declarations as written, integer macros as `...`."""
    keep, current, defines = [], "", []
    for line in text.splitlines():
        marker = MARKER_RE.match(line)
        if marker:
            current = marker.group(1)
            continue
        if not ours(current):
            continue
        if line.startswith("#"):
            m = DEFINE_RE.match(line)
            if m and not m.group(2) and m.group(1) not in SKIP_DEFINES and m.group(3):
                defines.append("#define %s ..." % m.group(1))
            continue
        keep.append(line)
    body = "\n".join(keep)
    body = re.sub(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)", "", body)
    return body + "\n" + "\n".join(defines) + "\n"


def layout_program(ffi, includes):
    lines = ["#include <stddef.h>", "#include <stdio.h>"] + includes
    lines += ["int main(void)", "{"]
    for name in sorted(ffi.list_types()[0]):
        t = ffi.typeof(name)
        if t.kind != "struct" or t.fields is None:
            continue
        lines.append('    printf("%%s %%zu\\n", "%s", sizeof(%s));' % (name, name))
        for field, _ in t.fields:
            lines.append('    printf("%%s.%%s %%zu\\n", "%s", "%s", offsetof(%s, %s));'
                         % (name, field, name, field))
    lines += ["    return 0;", "}"]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--with-cl", action="store_true")
    ap.add_argument("--include", required=True)
    ap.add_argument("--out-c", required=True)
    ap.add_argument("--out-layout", required=True)
    ap.add_argument("cc", nargs="+")
    args = ap.parse_args()

    cdef = header_cdef(preprocess(args.cc, args.include, args.with_cl))
    if args.with_cl:
        cdef = CL_TYPES + cdef
    includes = ["#include <clvarlen/clvarlen.h>"]
    if args.with_cl:
        includes.append("#include <clvarlen/clvarlen-cl.h>")
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    ffi.set_source("clvarlen._clvarlen", "\n".join(includes) + "\n")
    ffi.emit_c_code(args.out_c)
    with open(args.out_layout, "w", encoding="utf-8") as f:
        f.write(layout_program(ffi, includes))


if __name__ == "__main__":
    main()

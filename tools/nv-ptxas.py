#!/usr/bin/env python3
"""ptxas's view of an NVIDIA kernel program, without the NVIDIA machine.

    tools/nv-ptxas.py cl/attention-nv.cl -DCV_DTYPE=2 -DHEAD_DIM=128 -DBLOCK_M=64 \\
        -DBLOCK_N=64 -DCV_WGMMA=1 -DCV_WG_SW=1 -DCV_WG_QS=1 [--ptx out.ptx]

The options are the program's own: CLVARLEN_LOG=info prints them as the library
compiles each program ("compiling FILE [options]"). Joins the program as the kernel
loader does (lib/runtime/kernel-source.c: cv-shared.h, common.clh, the family prelude,
the file with its `// clvarlen-include:` headers spliced in), or takes a source that
CLVARLEN_SOURCE_DUMP wrote (its first line's options are used, and any given here are
added). Then compiles it with clang 16 for
nvptx64-nvidia-nvcl (with -DCV_NV_PTX=1, and -DCV_SM90A=1 for wgmma programs), links
libclc's nvptx64--nvidiacl.bc, optimises (opt -O3) and lowers it (llc -mcpu=sm_90). It
applies the loader's PTX patch step (lib/runtime/ptx-patch.c: the `// CVW ` markers
removed, the target sm_90a; with -DCV_PTX_MAXNREG=N, .maxnreg N for each kernel) and
runs `ptxas -arch=sm_90a -v`. Prints each kernel's registers and local memory, and
ptxas's warnings, such as C7514/C7515 (wgmma products serialized because the code
touches their accumulators while they are in flight).

The PTX is clang's, not the NVIDIA driver's: register counts differ (the driver's are
what run), but it reproduced the driver's serialization verdicts on the forward's
pipelined loop (docs/PERFORMANCE.md, 2026-11-29). A developer tool: needs the
Debian packages clang-16, llvm-16 and libclc-16, and ptxas from a CUDA toolkit
(PATH, or /usr/local/cuda/bin). Exit status 0, 1 when a step fails.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLVM = "/usr/lib/llvm-16/bin"
LIBCLC = "/usr/lib/clc/nvptx64--nvidiacl.bc"
INCLUDE = re.compile(r"^// clvarlen-include: (\S+)$", re.M)


def joined_source(path):
    """The program text the loader builds from a kernel file in cl/."""
    cl = os.path.dirname(path)
    name = os.path.basename(path)
    parts = [open(os.path.join(cl, p)).read() for p in ("cv-shared.h", "common.clh")]
    family = os.path.join(cl, re.split(r"[-.]", name, 1)[0] + ".clh")
    if os.path.exists(family):
        parts.append(open(family).read())
    text = open(path).read()
    parts.append(INCLUDE.sub(lambda m: open(os.path.join(cl, m.group(1))).read(), text))
    return "\n".join(parts) + "\n"


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = "\n".join(line for line in r.stdout.splitlines() if "Linking two modules" not in line)
    if r.returncode != 0:
        sys.stderr.write(out + "\nnv-ptxas: failed: %s\n" % " ".join(cmd[:2]))
        sys.exit(1)
    return out


def main():
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    ptx_out = None
    if "--ptx" in args:
        i = args.index("--ptx")
        ptx_out = args[i + 1]
        del args[i:i + 2]
    src, defs = args[0], [a for a in args[1:] if a.startswith("-D")]
    first = open(src).readline()
    if "clvarlen-build-options:" in first:  # a CLVARLEN_SOURCE_DUMP file
        text = open(src).read()
        defs = [o for o in first.split(":", 1)[1].split() if o.startswith("-D")] + defs
    else:
        text = joined_source(src)
    defs.append("-DCV_NV_PTX=1")
    if "-DCV_WGMMA=1" in defs:
        defs.append("-DCV_SM90A=1")
    ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    for tool in ("clang-16", LIBCLC, os.path.join(LLVM, "llc"), ptxas):
        if not (shutil.which(tool) or os.path.exists(tool)):
            sys.exit("nv-ptxas: %s not found (see the header)" % tool)
    with tempfile.TemporaryDirectory() as tmp:
        f = lambda n: os.path.join(tmp, n)
        open(f("k.cl"), "w").write(text)
        # The OpenCL kernels' helpers are C99 `inline` functions, which clang
        # emits nowhere: make them static and always inlined, as NVIDIA's
        # compiler treats them.
        run(["clang-16", "-x", "cl", "-cl-std=CL1.2", "-target", "nvptx64-nvidia-nvcl",
             "-Xclang", "-finclude-default-header", "-O3", "-emit-llvm", "-c", "-march=sm_90",
             "-Dasm=__asm__", "-Dinline=static inline __attribute__((always_inline))"] + defs +
            [f("k.cl"), "-o", f("k.bc")])
        run([os.path.join(LLVM, "llvm-link"), f("k.bc"), LIBCLC, "--only-needed", "-o", f("l.bc")])
        run([os.path.join(LLVM, "opt"), "-O3", f("l.bc"), "-o", f("o.bc")])
        run([os.path.join(LLVM, "llc"), "-O3", "-march=nvptx64", "-mcpu=sm_90", f("o.bc"),
             "-o", f("k.ptx")])
        ptx = open(f("k.ptx")).read().replace("// CVW ", "")
        ptx = re.sub(r"\.target sm_90\b", ".target sm_90a", ptx)
        ptx = re.sub(r"^\.version \d+\.\d+", ".version 8.0", ptx, flags=re.M)
        cap = [d.split("=", 1)[1] for d in defs if d.startswith("-DCV_PTX_MAXNREG=")]
        if cap:  # the loader's register cap: .maxnreg after each kernel's parameters
            ptx = re.sub(r"^((?:\.visible\s+)?\.entry\s+\w+\s*\([^)]*\))",
                         lambda m: m.group(1) + "\n.maxnreg " + cap[-1], ptx, flags=re.M)
        open(f("p.ptx"), "w").write(ptx)
        if ptx_out:
            shutil.copy(f("p.ptx"), ptx_out)
        out = run([ptxas, "-arch=sm_90a", "-v", f("p.ptx"), "-o", f("k.cubin")])
    for line in out.splitlines():
        if "Compiling entry" in line or "Used" in line or "warning" in line or "C75" in line:
            print(line.replace("ptxas info    : ", ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Compile-only check of the NVIDIA forms of the tensor-core kernels.

On PoCL the NVIDIA kernels run their emulated forms; their inline-PTX forms
(-DCV_NV_PTX, and the wgmma form's sm_90a helpers of cl/nv-wgmma.clh; the
gated delta scan's L2 prefetch, -DCV_GDN_L2PRE) are
compiled only by NVIDIA's driver, so a C-level error in them (a parameter
named like an OpenCL type, a wrong operand list) would first show on a GPU.
This runs `clvarlen-test check --quick` on an OpenCL device of this machine
with the tensor-core kernels forced (CLVARLEN_ATTENTION_KERNEL=mma, then
wgmma; CLVARLEN_GDN_TUNING=mma=1, then with the scan's wgmma form) and CLVARLEN_SOURCE_DUMP set, then compiles
every dumped NVIDIA program with clang for nvptx64 (-fsyntax-only, the
program's own options plus -DCV_NV_PTX=1): clang checks the OpenCL C and the
inline-asm operand constraints; the PTX text inside the asm strings is
NVIDIA's to check (the device run does). Any clang error or warning fails.
Exit 77 (skipped) without clang or without an OpenCL device.

usage: check-nv-ptx.py CLVARLEN_TEST WORKDIR
"""
import glob
import os
import shutil
import subprocess
import sys

# Programs whose kernels carry inline PTX with -DCV_NV_PTX.
NV_FILES = ("attention-nv", "attention-bwd-nv", "attention-paged-nv", "gated-delta-mma",
            "gated-delta-scan")


def find_clang():
    for name in ("clang-16", "clang-15", "clang-14", "clang"):
        path = shutil.which(name)
        if path:
            return path
    return None


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    tool, work = sys.argv[1], sys.argv[2]
    clang = find_clang()
    if not clang:
        print("check-nv-ptx: no clang: skipped")
        return 77
    shutil.rmtree(work, ignore_errors=True)
    dump = os.path.join(work, "dump")
    os.makedirs(dump)
    # (kernel, op, CLVARLEN_ATTENTION_TUNING, CLVARLEN_ATTN_BWD_TUNING,
    # CLVARLEN_GDN_TUNING): the forward's wgmma form with Q's tile in local
    # memory (its default), in registers, and pipelined; the backward's with its
    # products paired in dk/dv (the default) and in dq only; the gated delta
    # scan on mma.sync and on wgmma
    runs = [("mma", "attention", "", "", "mma=1"), ("wgmma", "attention", "", "", "mma=1"),
            ("wgmma", "attention", "wgqs=0", "", "mma=1"),
            ("wgmma", "attention-bf16", "pipe=1", "", "mma=1"),
            ("wgmma", "attention-bwd-bf16", "", "pair=2", "mma=1"),
            ("mma", "paged", "", "", "mma=1"), ("mma", "gated-delta", "", "", "mma=1,wgmma=0"),
            ("mma", "gated-delta", "", "", "mma=1,wgmma=1")]
    # The programs are built and run only to be dumped (the dump is written
    # before the cache is looked up). The test setup runs this with
    # CLVARLEN_BUILD_OPTIONS=-cl-opt-disable (121 s against 292 s cold for the
    # wgmma form's attention check on PoCL on 2 cores, 2026-11-30), as the op
    # tests build the emulated forms (tu_emulated_forms), and with the tests'
    # caches (the library's off, PoCL's shared: tests/meson.build), so that a
    # program both build is built once: the option is part of PoCL's cache
    # key. Run alone, the library's kernel cache is the check's own.
    cache = os.environ.get("CLVARLEN_CACHE_DIR") or os.path.join(work, "cache")
    for kernel, op, tuning, bwd_tuning, gdn_tuning in runs:
        env = dict(os.environ, CLVARLEN_SOURCE_DUMP=dump, CLVARLEN_ATTENTION_KERNEL=kernel,
                   CLVARLEN_ATTENTION_TUNING=tuning, CLVARLEN_ATTN_BWD_TUNING=bwd_tuning,
                   CLVARLEN_GDN_TUNING=gdn_tuning, CLVARLEN_CACHE_DIR=cache)
        r = subprocess.run([tool, "check", "--quick", "--device", "opencl", "--op", op], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode == 3 and "no OpenCL" in r.stdout:
            print("check-nv-ptx: no OpenCL device: skipped")
            return 77
        if r.returncode != 0:
            print(r.stdout)
            print("check-nv-ptx: clvarlen-test check failed (%s, %s)" % (kernel, op))
            return 1
    files = sorted(f for f in glob.glob(os.path.join(dump, "*.cl"))
                   if os.path.basename(f).rsplit("-", 1)[0] in NV_FILES)
    if not files:
        print("check-nv-ptx: no NVIDIA program was dumped")
        return 1
    failed = 0
    seen_wgmma = False
    for path in files:
        with open(path) as f:
            first = f.readline()
        options = first.split("clvarlen-build-options:", 1)[1].split()
        options = [o for o in options if o.startswith("-D")]
        options.append("-DCV_NV_PTX=1")
        if os.path.basename(path).startswith("gated-delta-scan-"):
            # the scan's L2 prefetch, on by default on NVIDIA only (the host
            # passes it with -DCV_NV_PTX)
            options.append("-DCV_GDN_L2PRE=1")
        if "-DCV_WGMMA=1" in options or "-DCV_GDN_WG=1" in options:
            seen_wgmma = True
            options.append("-DCV_SM90A=1")
        cmd = [clang, "-x", "cl", "-cl-std=CL1.2", "-target", "nvptx64-nvidia-nvcl",
               "-Xclang", "-finclude-default-header", "-fsyntax-only", "-Wall",
               "-Wno-unused-function", "-Dasm=__asm__"] + options + [path]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        bad = r.returncode != 0 or "warning:" in r.stdout
        print("%-60s %s" % (os.path.basename(path) + " " + " ".join(options[:3]),
                            "FAIL" if bad else "ok"))
        if bad:
            print(r.stdout[:4000])
            failed += 1
    if not seen_wgmma:
        print("check-nv-ptx: the wgmma form was not among the dumped programs")
        return 1
    print("check-nv-ptx: %d programs, %d failed" % (len(files), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

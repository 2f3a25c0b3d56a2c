#!/usr/bin/env python3
"""Compile-only checks of every portable kernel for AMD GPU ISAs and SPIR-V.

For each device profile of lib/runtime/device-db.c (AMD CDNA gfx90a, AMD RDNA
gfx1100, Intel Xe-HPG, Intel Xe-HPC, a generic OpenCL 1.2 GPU), runs
`clvarlen-test precompile --heads 4:1` on an OpenCL device of this machine
(PoCL) with CLVARLEN_DEVICE_PROFILE set, so that the device table and every
launcher pick the kernels and -D options that device would get, and
CLVARLEN_SOURCE_DUMP keeps each program's joined source. (4 query heads to 1
key/value head pick the same programs as the default 32 to 8, and the tiny
runs that pick them take a sixth of the time on PoCL.) A second run, of the
gated delta rule only, with CLVARLEN_GDN_TUNING=min=1,blas=0 adds the chunked
gated delta kernel (the CHUNKED algorithm); the check kernels
(lib/runtime/device-check.c: no options) are joined here.
Then every program is compiled for the profile's targets:

  AMD   clang -target amdgcn-amd-amdhsa -mcpu=gfx90a / gfx1100 (gfx1030, the
        RDNA2 part, where the clang predates gfx1100), object code
  Intel and generic: clang -target spir64, llvm-spirv, spirv-val

Any error or warning of clang (-Wall), llvm-spirv or spirv-val fails the
check, and so does an NVIDIA-only option (inline PTX: CV_NV_PTX, CV_NV_SHFL)
in a program built for a non-NVIDIA profile. Exit 77 (skipped) where no
OpenCL device runs the precompile or no compiler for any target is found.

usage: check-targets.py CLVARLEN_TEST WORKDIR [--profile NAME]...
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys

SKIP = 77
PROFILES = {
    # profile: [(target label, kind, cpu)]
    'amd-gfx90a': [('amdgcn gfx90a (CDNA2)', 'amdgcn', 'gfx90a')],
    'amd-gfx1100': [('amdgcn gfx1100 (RDNA3)', 'amdgcn', 'gfx1100')],
    'intel-xe-hpg': [('spir64 SPIR-V', 'spirv', None)],
    'intel-xe-hpc': [('spir64 SPIR-V', 'spirv', None)],
    'generic': [('spir64 SPIR-V', 'spirv', None)],
}
NV_ONLY = re.compile(r'-DCV_NV_(PTX|SHFL)\b')
CL_FLAGS = ['-x', 'cl', '-cl-std=CL1.2', '-Xclang', '-finclude-default-header', '-Wall',
            '-Werror']


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def find_clangs():
    """clang binaries, newest first: [(path, major)]."""
    found = []
    for name in ['clang-19', 'clang-18', 'clang-17', 'clang-16', 'clang-15', 'clang-14',
                 'clang']:
        path = shutil.which(name)
        if not path:
            continue
        m = re.search(r'version (\d+)', run([path, '--version']).stdout)
        if m and all(os.path.realpath(path) != os.path.realpath(p) for p, _ in found):
            found.append((path, int(m.group(1))))
    return found


def clang_takes(clang, args, workdir):
    """Whether clang compiles an empty kernel with these target arguments."""
    src = os.path.join(workdir, 'probe.cl')
    with open(src, 'w') as f:
        f.write('__kernel void k(__global int *a) { a[0] = 1; }\n')
    return run([clang] + CL_FLAGS + args + ['-c', src, '-o', src + '.o']).returncode == 0


def amdgcn_clang(clangs, cpu, workdir):
    """(clang, cpu actually used) for an AMD target, or None."""
    for clang, _ in clangs:
        if clang_takes(clang, ['-target', 'amdgcn-amd-amdhsa', '-mcpu=' + cpu, '-nogpulib'],
                       workdir):
            return clang, cpu
    if cpu == 'gfx1100':  # clang before 16: the RDNA2 part, also wave32
        return amdgcn_clang(clangs, 'gfx1030', workdir)
    return None


def spirv_tools(clangs):
    """(clang, llvm-spirv, spirv-val) of one LLVM version, or None."""
    val = shutil.which('spirv-val')
    for clang, major in clangs:
        tr = shutil.which('llvm-spirv-%d' % major)
        if val and tr:
            return clang, tr, val
    return None


def dump_programs(tool, profile, outdir, env_extra, args):
    os.makedirs(outdir, exist_ok=True)
    # The programs are built and run on PoCL only to pick and dump them: PoCL
    # compiles without optimisation (-cl-opt-disable), which takes a sixth of
    # the time (about 85 s a profile against 500 s on 2 cores, 2026-11-28).
    # The dumped options are the library's, without this flag. PoCL's cache is
    # the check's own, so no other test loads these binaries; the library's
    # program cache is off (tests/meson.build says why).
    flags = (os.environ.get('POCL_EXTRA_BUILD_FLAGS', '') + ' -cl-opt-disable').strip()
    caches = os.path.join(os.path.dirname(outdir), 'caches')
    os.makedirs(os.path.join(caches, 'pocl'), mode=0o700, exist_ok=True)
    env = dict(os.environ, CLVARLEN_DEVICE_PROFILE=profile, CLVARLEN_SOURCE_DUMP=outdir,
               POCL_EXTRA_BUILD_FLAGS=flags, POCL_CACHE_DIR=os.path.join(caches, 'pocl'),
               CLVARLEN_CACHE_DIR='off', **env_extra)
    device = os.environ.get('CLVARLEN_TEST_DEVICE') or 'pocl'
    r = run([tool, 'precompile', '--device', device, '--heads', '4:1'] + args, env=env)
    return r.returncode, r.stdout + r.stderr


def programs_of(outdir):
    """[(path, options)] of the dumped programs."""
    out = []
    for name in sorted(os.listdir(outdir)):
        path = os.path.join(outdir, name)
        with open(path) as f:
            first = f.readline()
        m = re.match(r'// clvarlen-build-options: (.*)$', first.rstrip('\n'))
        out.append((path, m.group(1).split() if m else []))
    return out


def join_check(source_dir, workdir):
    """cl/check.cl joined as lib/runtime/kernel-source.c joins it (cv-shared.h,
    common.clh, then the file; it names no header): the device checks are not
    built by a precompile, and take no options (lib/runtime/device-check.c)."""
    path = os.path.join(workdir, 'check-joined.cl')
    with open(path, 'w') as out:
        for name in ('cv-shared.h', 'common.clh', 'check.cl'):
            with open(os.path.join(source_dir, name)) as f:
                out.write(f.read() + '\n')
    return path


def compile_one(kind, tools, path, options, workdir):
    """'' on success, else the diagnostics."""
    obj = os.path.join(workdir, 'out')
    if kind == 'amdgcn':
        clang, cpu = tools
        r = run([clang] + CL_FLAGS + ['-target', 'amdgcn-amd-amdhsa', '-mcpu=' + cpu,
                                      '-nogpulib'] + options + ['-c', path, '-o', obj + '.o'])
        return (r.stdout + r.stderr).strip() or ('' if r.returncode == 0 else 'failed')
    clang, translator, validator = tools
    # -O0: the translator of LLVM 14 cannot take what the optimiser emits (freeze)
    r = run([clang] + CL_FLAGS + ['-target', 'spir64', '-O0', '-emit-llvm'] + options +
            ['-c', path, '-o', obj + '.bc'])
    if r.returncode != 0 or (r.stdout + r.stderr).strip():
        return (r.stdout + r.stderr).strip() or 'clang failed'
    for cmd in ([translator, obj + '.bc', '-o', obj + '.spv'], [validator, obj + '.spv']):
        r = run(cmd)
        if r.returncode != 0 or (r.stdout + r.stderr).strip():
            return '%s: %s' % (os.path.basename(cmd[0]), (r.stdout + r.stderr).strip())
    return ''


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    tool, workdir = argv[1], os.path.abspath(argv[2])
    chosen = [argv[i + 1] for i in range(3, len(argv) - 1) if argv[i] == '--profile']
    profiles = chosen or list(PROFILES)
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    clangs = find_clangs()
    targets = {}
    for profile in profiles:
        for label, kind, cpu in PROFILES[profile]:
            tools = amdgcn_clang(clangs, cpu, workdir) if kind == 'amdgcn' \
                else spirv_tools(clangs)
            if tools is None:
                print('%-13s %-24s SKIPPED: no %s' % (profile, label,
                      'clang with the amdgcn target' if kind == 'amdgcn'
                      else 'clang with its llvm-spirv, or spirv-val'))
                continue
            if kind == 'amdgcn' and tools[1] != cpu:
                label = 'amdgcn %s (RDNA2: %s predates %s)' % (tools[1],
                                                                os.path.basename(tools[0]), cpu)
            targets.setdefault(profile, []).append((label, kind, tools))
    if not targets:
        print('no compiler for any target: skipped')
        return SKIP
    source_dir = os.environ.get('CLVARLEN_KERNEL_PATH', '').split(':')[0]
    failed = 0
    compiled = {}  # (target, program digest) -> failed
    for profile, tlist in targets.items():
        outdir = os.path.join(workdir, profile)
        for extra, args in (({}, []), ({'CLVARLEN_GDN_TUNING': 'min=1,blas=0'}, ['--op', 'gdn'])):
            rc, log = dump_programs(tool, profile, outdir, extra, args)
            if rc == 3 and not os.listdir(outdir):  # no such device: nothing to compile
                print('%s: no OpenCL device runs the precompile:\n%s' % (profile, log))
                return SKIP
            if rc != 0:
                print('%s: precompile failed (exit %d):\n%s' % (profile, rc, log))
                failed += 1
        programs = programs_of(outdir)
        if source_dir:
            programs.append((join_check(source_dir, workdir), []))
        for path, options in programs:
            if NV_ONLY.search(' '.join(options)):
                print('FAIL %s: NVIDIA-only option in %s: %s' % (profile, path,
                                                                  ' '.join(options)))
                failed += 1
        files = sorted({re.sub(r'-([0-9a-f]{32}|joined)\.cl$', '.cl', os.path.basename(p))
                        for p, _ in programs})
        for label, kind, tools in tlist:
            bad = 0
            for path, options in programs:
                with open(path, 'rb') as f:  # the same program for the same target: once
                    key = (label, hashlib.sha256(f.read()).hexdigest())
                if key in compiled:
                    bad += compiled[key]
                    continue
                msg = compile_one(kind, tools, path, options, workdir)
                compiled[key] = 1 if msg else 0
                if msg:
                    bad += 1
                    print('FAIL %s %s: %s [%s]\n%s' % (profile, label, os.path.basename(path),
                                                       ' '.join(options), msg[:4000]))
            failed += bad
            print('%-13s %-24s %3d programs (%s): %s' % (profile, label, len(programs),
                  ', '.join(files), 'ok' if not bad else '%d FAILED' % bad), flush=True)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))

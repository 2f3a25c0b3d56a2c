#!/usr/bin/env bash
# Runs oclgrind-cases on Oclgrind's simulated OpenCL device with its checks
# (--check-api --data-races --uninitialized) and fails on anything Oclgrind
# reports: an out-of-bounds access, a data race, a use of an uninitialised
# value, an API error, a fatal error. Also fails when a case fails (device
# and CPU fallback disagree) or, with no filter, when a kernel of cl/*.cl was
# never launched (apart from those listed below, with the reason).
#
# Usage: run-oclgrind.sh --cases PATH --shim PATH [--keep DIR] [--slow] [--jobs N]
#                         [FILTER...]
#   --cases  the oclgrind-cases binary (build/tests/oclgrind/oclgrind-cases)
#   --shim   oclgrind-fill-shim.so from the same build (fill-shim.c says why)
#   --keep   keep the log (stderr of the run) in DIR
#   --slow   also the cases listed in $slow_cases below (left out by default)
#   --jobs   Oclgrind processes side by side (default OCLGRIND_JOBS, else the
#            CPUs, at most 4): Oclgrind runs on one core, so on 2 cores two
#            processes take about half the time of one (CI: 743 s in one);
#            with --slow mind the memory (one slow case held 11 GiB)
#   FILTER   only the cases whose names contain one of them (no coverage check)
#
# The slow cases: the emulated tensor-core gated delta path (gdn_chunk_prep,
# gdn_chunk_scan, gdn_chunked_mma) took more than 10 minutes a case under
# Oclgrind on 2 cores (2026-11-28; the case gdn-chunked-mma-bf16 had not
# finished after 12 minutes and 11 GiB), which CI's time limit cannot hold. By
# default they are left out and their three kernels are reported as not
# covered here (no other case launches them); PoCL runs the same
# emulated kernels against the CPU fallback in test-gated-delta-cl, and
# `run-oclgrind.sh ... --slow` runs them under Oclgrind. Two more are left to
# --slow for time (110 s and 70 s of the 586 s the rest took in CI): the
# portable chunked kernel in the K x V layout over a long sequence, and the
# emulated tensor-core backward with q_pos on cl_mem; other cases launch
# their kernels.
# Exit status: 0 clean, 1 a finding, 77 oclgrind is not installed (skip).
#
# Oclgrind is preloaded directly (LD_PRELOAD of liboclgrind-rt.so, as the
# `oclgrind` wrapper does; the wrapper would drop the shim) and configured
# through its environment variables, the wrapper's equivalents of
# --check-api --data-races --uninitialized --inst-counts --max-errors 100
# --build-options -cl-opt-disable --local-mem-size 49152. The local memory
# is NVIDIA's 48 KiB rather than Oclgrind's 32: the tensor-core gated delta
# path, emulated here, runs natively only there, and its first stage
# (gdn_chunk_prep) needs 38 KiB emulated; on 32 KiB the library would run
# the fused kernel instead. Kernels are built without optimisation:
# Oclgrind 21.10's --uninitialized aborts on LLVM's `freeze` instruction,
# which the optimiser emits. The library selects the device by its platform
# name (CLVARLEN_DEVICE=oclgrind) and compiles into a fresh program cache.
set -euo pipefail

cases='' shim='' keep='' with_slow=0 jobs=${OCLGRIND_JOBS:-}
slow_cases='gdn-chunked-mma-bf16 gdn-chunked-mma-bf16-kv-long-clmem gdn-chunked-mma-fused-f16'
slow_cases="$slow_cases gdn-chunked-bf16-kv-long attn-bwd-mma-f16-d16-qpos-clmem"
slow_kernels='gdn_chunk_prep gdn_chunk_scan gdn_chunked_mma'
while [ $# -gt 0 ]; do
    case "$1" in
    --cases) cases=$2; shift 2 ;;
    --shim) shim=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --slow) with_slow=1; shift ;;
    --jobs) jobs=$2; shift 2 ;;
    *) break ;;
    esac
done
if [ -z "$cases" ] || [ -z "$shim" ]; then
    echo "usage: $0 --cases PATH --shim PATH [--keep DIR] [--slow] [--jobs N] [FILTER...]" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
cl_dir=${CLVARLEN_KERNEL_PATH:-$here/../../cl}

oclgrind=$(command -v oclgrind || true)
if [ -z "$oclgrind" ]; then
    echo "run-oclgrind.sh: oclgrind is not installed: skipped" >&2
    exit 77
fi
rt=${OCLGRIND_RT:-}
if [ -z "$rt" ]; then
    prefix=$(dirname "$(dirname "$(readlink -f "$oclgrind")")")
    for d in "$prefix/lib/oclgrind" "$prefix/lib64/oclgrind" "$prefix/lib" \
             "$prefix/lib/$(uname -m)-linux-gnu/oclgrind"; do
        if [ -f "$d/liboclgrind-rt.so" ]; then rt=$d/liboclgrind-rt.so; break; fi
    done
fi
if [ -z "$rt" ] || [ ! -f "$rt" ]; then
    echo "run-oclgrind.sh: liboclgrind-rt.so not found next to $oclgrind (set OCLGRIND_RT)" >&2
    exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/clvarlen-oclgrind.XXXXXX")
trap 'rm -rf "$work"' EXIT
log=$work/oclgrind.log  # stderr: Oclgrind's reports, the case names
out=$work/cases.out     # stdout: the case table, Oclgrind's instruction counts

echo "run-oclgrind.sh: $("$oclgrind" --version | grep -m1 Oclgrind), runtime $rt"
# The cases to run, by full name: with no filter every case, less the slow
# ones unless --slow; otherwise those whose names contain a filter. Each name
# is passed as a filter; none is part of another name that is left out.
check_coverage=0
[ $# -eq 0 ] && check_coverage=1
run_list=''
for c in $("$cases" --list); do
    take=0
    if [ "$check_coverage" = 1 ]; then
        case " $slow_cases " in
        *" $c "*) [ "$with_slow" = 1 ] && take=1 ;;
        *) take=1 ;;
        esac
    else
        for f in "$@"; do
            case "$c" in *"$f"*) take=1 ;; esac
        done
    fi
    [ "$take" = 1 ] && run_list="$run_list $c"
done
if [ "$check_coverage" = 1 ] && [ "$with_slow" = 0 ]; then
    echo "run-oclgrind.sh: left out (--slow runs them): $slow_cases"
fi
if [ -z "$run_list" ]; then
    echo "run-oclgrind.sh: no case matches: $*" >&2
    exit 1
fi

# The cases in $jobs groups of about equal time, longest first into the group
# with the least so far. The seconds are a CI run's (2 cores, 2026-11-30) for
# the cases over 3 s, estimates for the slow ones; any other case counts 1.
# Keep them current: a case missing here counts 1, and one such (366 s) had
# left the two processes at 829 s and 470 s.
if [ -z "$jobs" ]; then
    jobs=$(nproc 2>/dev/null || echo 1)
    [ "$jobs" -gt 4 ] && jobs=4
fi
case "$jobs" in
''|*[!0-9]*|0) echo "run-oclgrind.sh: --jobs takes a positive number" >&2; exit 2 ;;
esac
# shellcheck disable=SC2086 # the list is case names
groups=$(python3 - "$jobs" $run_list <<'PYEND'
import sys
secs = {"attn-bwd-wgmma-bf16-d64-causal": 366, "gdn-chunked-f32-k16": 238,
        "attention-wgmma-bf16-d64-gqa-causal": 196, "attn-bwd-mma-bf16-d16-causal": 64,
        "attention-mma-bf16-d32-causal": 88, "paged-mma-gather-prefill-bf16-d16": 52,
        "attn-bwd-f16-d32-f32grad": 46, "attention-mma-f16-d16": 42,
        "attn-bwd-bf16-d16-drop-qpos-clmem": 32, "attn-bwd-f32-d16-causal": 29,
        "paged-mma-prefill-bf16-d16-ps1": 27, "gdn-chunked-f16-gpu-tiles": 25,
        "paged-mma-decode-bf16-d16-split": 24, "segment-cp-unfused": 5,
        "attention-bf16-d64-window-softcap": 4, "paged-mma-decode-f16-d16-mha-split-clmem": 4,
        "gdn-chunked-mma-bf16": 900, "gdn-chunked-mma-bf16-kv-long-clmem": 900,
        "gdn-chunked-mma-fused-f16": 900, "gdn-chunked-bf16-kv-long": 110,
        "attn-bwd-mma-f16-d16-qpos-clmem": 70}
n, names = int(sys.argv[1]), sys.argv[2:]
bins = [[0, []] for _ in range(min(n, len(names)))]
for c in sorted(names, key=lambda c: -secs.get(c, 1)):
    b = min(bins, key=lambda b: b[0])
    b[0] += secs.get(c, 1)
    b[1].append(c)
for _, cs in bins:
    print(" ".join(cs))
PYEND
)

# One Oclgrind process per group, each with its own program cache, stdout and
# stderr, joined afterwards (in group order) for the checks below.
start=$(date +%s)
njobs=0
pids=''
while IFS= read -r group; do
    njobs=$((njobs + 1))
    mkdir -p "$work/job$njobs"
    # shellcheck disable=SC2086 # the group is a list of case names
    env LD_PRELOAD="$(readlink -f "$shim") $rt${LD_PRELOAD:+ $LD_PRELOAD}" \
        OCLGRIND_CHECK_API=1 OCLGRIND_DATA_RACES=1 OCLGRIND_UNINITIALIZED=1 \
        OCLGRIND_INST_COUNTS=1 OCLGRIND_MAX_ERRORS=100 \
        OCLGRIND_BUILD_OPTIONS=-cl-opt-disable OCLGRIND_LOCAL_MEM_SIZE=49152 \
        CLVARLEN_DEVICE=oclgrind CLVARLEN_KERNEL_PATH="$cl_dir" \
        CLVARLEN_CACHE_DIR="$work/job$njobs/cache" \
        "$cases" $group >"$work/job$njobs/out" 2>"$work/job$njobs/log" &
    pids="$pids $!"
done <<<"$groups"
# The run's exit status: the first process's that did not pass, else 0; 77
# (no Oclgrind device) only when every process said so.
rc=0
skipped=0
for p in $pids; do
    r=0
    wait "$p" || r=$?
    if [ "$r" = 77 ]; then
        skipped=$((skipped + 1))
    elif [ "$r" != 0 ] && [ "$rc" = 0 ]; then
        rc=$r
    fi
done
[ "$rc" = 0 ] && [ "$skipped" = "$njobs" ] && rc=77
for j in $(seq 1 "$njobs"); do
    cat "$work/job$j/out" >>"$out"
    cat "$work/job$j/log" >>"$log"
done
grep -v -E '^(Instructions executed|  |$)' "$out" || true
echo "run-oclgrind.sh: $(($(date +%s) - start)) s in $njobs process(es), exit status $rc"
if [ -n "$keep" ]; then
    mkdir -p "$keep"
    cp "$log" "$keep/oclgrind.log"
    cp "$out" "$keep/cases.out"
fi
if [ "$rc" = 77 ]; then
    echo "run-oclgrind.sh: no Oclgrind device: skipped" >&2
    tail -n 5 "$log" >&2
    exit 77
fi

# Oclgrind's reports: every error found in a kernel names the kernel on a
# line of its own ("\tKernel: NAME"); API errors, fatal errors and the
# error-count notice have their own headings.
findings=$(grep -c -E \
    -e $'^\tKernel: ' \
    -e 'OpenCL runtime error detected' \
    -e 'OCLGRIND FATAL ERROR' \
    -e 'Invalid (read|write)|data race|[Uu]ninitiali[sz]ed|divergence|Unsupported' \
    -e 'errors generated' "$log" || true)
status=0
if [ "$findings" != 0 ]; then
    echo "run-oclgrind.sh: Oclgrind reported $findings finding line(s); the first reports:" >&2
    grep -v -E "^(Instructions executed|  )" "$log" | grep -v '^$' | head -n 80 >&2
    status=1
fi
if [ "$rc" != 0 ]; then
    echo "run-oclgrind.sh: oclgrind-cases failed (exit status $rc); its stderr ends:" >&2
    grep -v -E "^(Instructions executed|  )" "$log" | grep -v '^$' | tail -n 20 >&2
    status=1
fi

# Kernel coverage: the kernels Oclgrind ran (--inst-counts names each one on stdout)
# against every __kernel in cl/*.cl. Not coverable on Oclgrind:
#   segment_gen_seq_lens: needs a correctly rounded f32 divide
#     (CL_DEVICE_SINGLE_FP_CONFIG), which Oclgrind does not report, so the
#     library computes gen_seq_lens on the host and writes the result.
# The slow cases' kernels (above) are left out unless --slow.
uncoverable='segment_gen_seq_lens'
[ "$with_slow" = 1 ] && slow_kernels=''
if [ "$check_coverage" = 1 ]; then
    python3 - "$cl_dir" "$out" "$uncoverable" "$slow_kernels" <<'EOF' || status=1
import glob, os, re, sys
cl_dir, log = sys.argv[1], sys.argv[2]
uncoverable, slow = set(sys.argv[3].split()), set(sys.argv[4].split())
defined = {}
for path in sorted(glob.glob(os.path.join(cl_dir, "*.cl"))):
    src = open(path).read()
    for name in re.findall(r"__kernel\b[^;{]*?\bvoid\s+(\w+)\s*\(", src, re.S):
        defined[name] = os.path.basename(path)
ran = set(re.findall(r"Instructions executed for kernel '(\w+)'", open(log).read()))
missing = sorted(set(defined) - ran - uncoverable - slow)
print("run-oclgrind.sh: %d kernels in cl/, %d launched under Oclgrind" %
      (len(defined), len(ran & set(defined))))
for name in sorted(defined):
    state = ("ran" if name in ran else "not coverable" if name in uncoverable else
             "left out (--slow)" if name in slow else "MISSING")
    print("  %-28s %-18s %s" % (name, defined[name], state))
if missing:
    print("run-oclgrind.sh: kernels never launched: " + " ".join(missing), file=sys.stderr)
    sys.exit(1)
EOF
fi
[ "$status" = 0 ] && echo "run-oclgrind.sh: PASS (no Oclgrind findings)"
exit "$status"

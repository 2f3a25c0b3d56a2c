#!/bin/sh
# if-device.sh SPEC [--fail-on REGEX] [--fresh-mesa-cache] CLVARLEN_TEST ARGS...:
# runs `CLVARLEN_TEST ARGS...` when `CLVARLEN_TEST list` shows a device
# matching SPEC (a platform or device name, any case), else exits 77
# (skipped): a second OpenCL implementation (rusticl) is optional on a
# developer's machine. With --fail-on, output (stdout and stderr) matching the
# extended regular expression fails the run even when the command passed: a
# compiler warning of the implementation, say. With --fresh-mesa-cache, Mesa's
# shader cache is an empty directory of this run's own (removed afterwards):
# every distinct kernel is compiled once, so its warnings show, and a kernel
# built again in the run is not recompiled (rusticl's check --quick: 108 s
# for attention-bf16 with the cache disabled, 73 s with a fresh one).
spec=$1
shift
pattern=
if [ "$1" = --fail-on ]; then
    pattern=$2
    shift 2
fi
mesa_cache=
if [ "$1" = --fresh-mesa-cache ]; then
    shift
    mesa_cache=$(mktemp -d "${TMPDIR:-/tmp}/clvarlen-mesa-cache.XXXXXX") || exit 1
    trap 'rm -rf "$mesa_cache"' EXIT
    MESA_SHADER_CACHE_DIR=$mesa_cache
    export MESA_SHADER_CACHE_DIR
    unset MESA_SHADER_CACHE_DISABLE
fi
if ! "$1" list 2>/dev/null | grep -qi -- "$spec"; then
    echo "no OpenCL device matching '$spec': skipped"
    exit 77
fi
if [ -z "$pattern" ]; then
    [ -n "$mesa_cache" ] || exec "$@"
    "$@"
    exit $? # the trap removes the cache
fi
out=$(mktemp)
trap 'rm -f "$out"; [ -z "$mesa_cache" ] || rm -rf "$mesa_cache"' EXIT
"$@" >"$out" 2>&1
rc=$?
cat "$out"
if grep -Eq -- "$pattern" "$out"; then
    echo "if-device.sh: the output matches '$pattern':"
    grep -E -- "$pattern" "$out" | sort | uniq -c | head -20
    exit 1
fi
exit $rc

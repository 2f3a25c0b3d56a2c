#!/bin/sh
# if-device.sh SPEC [--fail-on REGEX] CLVARLEN_TEST ARGS...: runs
# `CLVARLEN_TEST ARGS...` when `CLVARLEN_TEST list` shows a device matching SPEC
# (a platform or device name, any case), else exits 77 (skipped): a second
# OpenCL implementation (rusticl) is optional on a developer's machine. With
# --fail-on, output (stdout and stderr) matching the extended regular
# expression fails the run even when the command passed: a compiler warning
# of the implementation, say.
spec=$1
shift
pattern=
if [ "$1" = --fail-on ]; then
    pattern=$2
    shift 2
fi
if ! "$1" list 2>/dev/null | grep -qi -- "$spec"; then
    echo "no OpenCL device matching '$spec': skipped"
    exit 77
fi
[ -n "$pattern" ] || exec "$@"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$@" >"$out" 2>&1
rc=$?
cat "$out"
if grep -Eq -- "$pattern" "$out"; then
    echo "if-device.sh: the output matches '$pattern':"
    grep -E -- "$pattern" "$out" | sort | uniq -c | head -20
    exit 1
fi
exit $rc

#!/bin/sh
# if-device.sh SPEC CLVARLEN_TEST ARGS...: runs `CLVARLEN_TEST ARGS...` when
# `CLVARLEN_TEST list` shows a device matching SPEC (a platform or device name,
# any case), else exits 77 (skipped): a second OpenCL implementation (rusticl)
# is optional on a developer's machine.
spec=$1
shift
if ! "$1" list 2>/dev/null | grep -qi -- "$spec"; then
    echo "no OpenCL device matching '$spec': skipped"
    exit 77
fi
exec "$@"

#!/bin/sh
# check-abi.sh LIBRARY.so BASELINE.abi HEADERS_DIR
#
# abidiff (Debian's abigail-tools) between the committed ABI baseline
# (lib/abi/libclvarlen.abi, written by abidw from a build of the release) and
# this build, public types only. What abidiff calls incompatible (a function
# or variable removed) fails; type changes (which abidiff leaves to a person:
# a field appended under the struct_size rule of clvarlen.h is fine, a field
# moved or retyped is not) are printed for review and pass, as do added
# functions. Skips (77) without abidiff.
#
# Refresh the baseline when a release's ABI is settled:
#   abidw --headers-dir include/clvarlen --drop-private-types --no-corpus-path --no-show-locs \
#       build/lib/libclvarlen.so.0.* > lib/abi/libclvarlen.abi
#
# SPDX-License-Identifier: MIT
set -u
[ $# -eq 3 ] || { echo "usage: $0 LIBRARY.so BASELINE.abi HEADERS_DIR" >&2; exit 2; }
command -v abidiff >/dev/null 2>&1 || { echo "check-abi: abidiff not found (abigail-tools); skipping" >&2; exit 77; }
abidiff --headers-dir2 "$3" --drop-private-types --no-added-syms "$2" "$1"
rc=$?
# abidiff's status bits: 1 error, 2 usage, 4 ABI change, 8 incompatible ABI change.
if [ $((rc & 3)) -ne 0 ]; then
    echo "check-abi: abidiff failed (status $rc)" >&2
    exit 1
fi
if [ $((rc & 8)) -ne 0 ]; then
    echo "check-abi: incompatible ABI change against $2" >&2
    exit 1
fi
[ $((rc & 4)) -ne 0 ] && echo "check-abi: compatible changes (above) against $2"
echo "check-abi: no incompatible change against $2"
exit 0

#!/bin/sh
# check-exports.sh LIBRARY.so INCLUDE_DIR [HEADER...]
#
# The dynamic symbols the library defines must be exactly the functions the
# public headers declare with CLVARLEN_API: nothing internal leaks out (the
# cv_ helpers, static inline copies, third-party code), and nothing declared
# is missing. The OpenCL header's functions are expected only when the
# library links libOpenCL (a -Dopencl=disabled build has none).
#
# SPDX-License-Identifier: MIT
set -eu

if [ $# -lt 2 ]; then
    echo "usage: $0 LIBRARY.so INCLUDE_DIR [HEADER...]" >&2
    exit 2
fi
lib=$1
incdir=$2
shift 2
for tool in nm readelf perl; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "check-exports: $tool not found; skipping" >&2
        exit 77
    fi
done
[ -f "$lib" ] || { echo "check-exports: no library at $lib" >&2; exit 1; }
[ -d "$incdir" ] || { echo "check-exports: no include directory $incdir" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/check-exports.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# Both headers in every configuration: a build without OpenCL exports the
# clvarlen-cl.h entry points too (stubs returning CLVARLEN_ERROR_NO_OPENCL).
# Another library names its own headers (libclvarlen-mpi: clvarlen-mpi.h).
headers="$incdir/clvarlen.h $incdir/clvarlen-cl.h"
if [ $# -gt 0 ]; then
    headers=""
    for h in "$@"; do headers="$headers $incdir/$h"; done
fi

# Declarations: comments and preprocessor lines removed, then every
# "CLVARLEN_API <type> name(" gives name.
# shellcheck disable=SC2086
perl -0777 -ne '
    s{/\*.*?\*/}{}gs;          # block comments
    s{//[^\n]*}{}g;            # line comments
    s{^[ \t]*#(?:[^\n]*\\\n)*[^\n]*}{}gm;  # preprocessor lines, with continuations
    while (/\bCLVARLEN_API\b([^;{]*?)\b([A-Za-z_][A-Za-z0-9_]*)\s*\(/g) { print "$2\n"; }
' $headers | sort -u > "$tmp/declared"

# Exports: defined dynamic symbols, without the version node (type A).
nm -D --defined-only "$lib" | awk '$2 != "A" && $2 != "a" { sub(/@.*/, "", $3); print $3 }' \
    | sort -u > "$tmp/exported"

if [ ! -s "$tmp/declared" ]; then
    echo "check-exports: no CLVARLEN_API declarations found in $headers" >&2
    exit 1
fi

status=0
extra=$(comm -13 "$tmp/declared" "$tmp/exported")
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
if [ -n "$extra" ]; then
    echo "exported but not declared CLVARLEN_API in the public headers:"
    echo "$extra" | sed 's/^/  /'
    status=1
fi
if [ -n "$missing" ]; then
    echo "declared CLVARLEN_API but not exported by $lib:"
    echo "$missing" | sed 's/^/  /'
    status=1
fi
if [ $status -eq 0 ]; then
    echo "check-exports: $(wc -l < "$tmp/exported") symbols, all declared ($headers)"
fi
exit $status

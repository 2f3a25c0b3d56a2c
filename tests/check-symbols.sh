#!/bin/sh
# check-symbols.sh LIBRARY.so SYMBOLS_FILE
#
# The library's exported clvarlen_* symbols must be exactly those of the
# Debian symbols file (debian/libclvarlen0.symbols, which dpkg-gensymbols also
# checks when the package is built): a symbol added to
# the API is added there (with the version that brings it), and one that
# disappears is an ABI break this check reports. Every build configuration
# exports the same symbols (without OpenCL, the clvarlen_cl_* ones are stubs).
#
# SPDX-License-Identifier: MIT
set -eu
[ $# -eq 2 ] || { echo "usage: $0 LIBRARY.so SYMBOLS_FILE" >&2; exit 2; }
lib=$1
symbols=$2
for tool in nm; do
    command -v "$tool" >/dev/null 2>&1 || { echo "check-symbols: $tool not found; skipping" >&2; exit 77; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/check-symbols.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
nm -D --defined-only "$lib" | awk '$3 ~ /^clvarlen_/ {sub(/@.*/, "", $3); print $3}' | sort -u \
    > "$tmp/exported"
sed -n 's/^ \(clvarlen_[A-Za-z0-9_]*\)@CLVARLEN[A-Z0-9_]* .*/\1/p' "$symbols" | sort -u > "$tmp/listed"
status=0
missing=$(comm -23 "$tmp/listed" "$tmp/exported")
extra=$(comm -13 "$tmp/listed" "$tmp/exported")
if [ -n "$missing" ]; then
    echo "check-symbols: listed in $symbols but not exported (an ABI break):" >&2
    echo "$missing" | sed 's/^/  /' >&2
    status=1
fi
if [ -n "$extra" ]; then
    echo "check-symbols: exported but not in $symbols (add them, with their version):" >&2
    echo "$extra" | sed 's/^/  /' >&2
    status=1
fi
[ $status -eq 0 ] && echo "check-symbols: $(wc -l < "$tmp/exported") symbols match $symbols"
exit $status

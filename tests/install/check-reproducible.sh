#!/bin/sh
# check-reproducible.sh WORK_DIR
#
# Two clones of this repository's HEAD at different absolute paths (and
# depths), each built with its build directory at the same place inside it:
# the libraries must be identical bytes (no source or build path kept: the
# kernels are compiled in, -ffile-prefix-map maps the roots; meson.build).
#
# SPDX-License-Identifier: MIT
set -eu
[ $# -eq 1 ] || { echo "usage: $0 WORK_DIR" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$1
rm -rf "$work" && mkdir -p "$work/a" "$work/b/deeper"
work=$(cd "$work" && pwd)
for dir in "$work/a/clvarlen" "$work/b/deeper/clvarlen"; do
    git clone -q "$repo" "$dir"
    (cd "$dir" && meson setup build -Dtests=disabled -Dtools=disabled >/dev/null &&
     ninja -C build >/dev/null)
done
lib=build/lib/libclvarlen.so.0.1.0
if cmp "$work/a/clvarlen/$lib" "$work/b/deeper/clvarlen/$lib"; then
    echo "check-reproducible: identical libraries from $work/a and $work/b/deeper"
else
    echo "check-reproducible: the two builds differ" >&2
    exit 1
fi

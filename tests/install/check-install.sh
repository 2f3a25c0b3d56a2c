#!/bin/sh
# check-install.sh BUILD_DIR WORK_DIR
#
# Installs BUILD_DIR into a staging prefix, moves the prefix elsewhere (a
# relocated package, a container layer), and builds and runs
# tests/install/consumer.c against the moved prefix through pkg-config, shared
# and static. The library must find its kernels (compiled into it) with no
# kernel directory configured: CLVARLEN_KERNEL_PATH is unset and the build
# tree is not where the library is loaded from.
#
# SPDX-License-Identifier: MIT
set -eu
[ $# -eq 2 ] || { echo "usage: $0 BUILD_DIR WORK_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd)
work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
work=$(cd "$work" && pwd)
DESTDIR="$work/stage" meson install -C "$build" --quiet --no-rebuild
prefix=$(meson introspect "$build" --buildoptions |
         python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"][0])')
mv "$work/stage$prefix" "$work/moved"
pc=$(find "$work/moved" -name clvarlen.pc | head -1)
[ -n "$pc" ] || { echo "check-install: no clvarlen.pc installed" >&2; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")"
libdir=$(pkg-config --variable=libdir clvarlen)
case "$libdir" in "$work/moved"*) ;; *) echo "check-install: pkg-config libdir $libdir is not under the moved prefix" >&2; exit 1 ;; esac
unset CLVARLEN_KERNEL_PATH
export CLVARLEN_CACHE_DIR="$work/cache"
# shellcheck disable=SC2046
cc -o "$work/consumer" "$here/consumer.c" $(pkg-config --cflags --libs clvarlen) -lm
LD_LIBRARY_PATH="$libdir" "$work/consumer"
# Static: the archive and its private dependencies.
if [ -f "$libdir/libclvarlen.a" ]; then
    # shellcheck disable=SC2046
    cc -o "$work/consumer-static" "$here/consumer.c" \
        $(pkg-config --static --cflags clvarlen) "$libdir/libclvarlen.a" \
        $(pkg-config --static --libs-only-l --libs-only-other clvarlen |
          sed 's/-lclvarlen//') -lm
    "$work/consumer-static"
fi
echo "check-install: the moved prefix works (shared$([ -f "$libdir/libclvarlen.a" ] && echo ' and static'))"

#!/usr/bin/env bash
# Shows the Oclgrind fault that fill-shim.c works around for released buffers
# (slot-reuse-repro.c): under `oclgrind --uninitialized`, "fresh" is clean,
# "reuse" gets false "uninitialized" reports, and "reuse" with the shim is
# clean again. Fails if the shim stops curing it; says so (and passes) when
# Oclgrind no longer has the fault, so the workaround can go.
# Usage: check-slot-reuse.sh REPRO SHIM. Exit status 77: no oclgrind.
set -uo pipefail
repro=$1 shim=$(readlink -f "$2")
command -v oclgrind >/dev/null || { echo "oclgrind is not installed: skipped"; exit 77; }
reports() { grep -c 'uninitialized value' <<<"$1" || true; }
fresh=$(oclgrind --uninitialized "$repro" fresh 2>&1)
reuse=$(oclgrind --uninitialized "$repro" reuse 2>&1)
# the shim preloaded ahead of Oclgrind's runtime, as run-oclgrind.sh does (the wrapper would drop it)
rt=$(dirname "$(dirname "$(readlink -f "$(command -v oclgrind)")")")/lib/oclgrind/liboclgrind-rt.so
shimmed=$(env LD_PRELOAD="$shim $rt" OCLGRIND_UNINITIALIZED=1 "$repro" reuse 2>&1)
echo "fresh: $(reports "$fresh") reports; reuse: $(reports "$reuse"); reuse with the shim: $(reports "$shimmed")"
status=0
for out in "$fresh" "$reuse" "$shimmed"; do
    grep -q 'results right' <<<"$out" || { echo "a run failed:"; echo "$out" | tail -5; status=1; }
done
[ "$(reports "$fresh")" = 0 ] || { echo "fresh run reported"; status=1; }
[ "$(reports "$shimmed")" = 0 ] || { echo "the shim no longer hides the slot-reuse fault"; status=1; }
[ "$(reports "$reuse")" != 0 ] ||
    echo "note: this Oclgrind no longer has the slot-reuse fault; fill-shim.c's clReleaseMemObject can go"
exit $status

#!/bin/bash
# Test wrapper for CI's AddressSanitizer stage (.ci/run: meson test --wrapper).
#
# Runs the test. If it failed only because LeakSanitizer's own stop-the-world
# tracer crashed at the process's exit ("Tracer caught signal 11" followed by
# "LeakSanitizer has encountered a fatal error"), after every Check case had
# passed and with no sanitizer report, it runs the test once more and that run
# decides. The crash is in the sanitizer, not a leak report: it was seen with
# PoCL's worker threads alive at exit in test-segment-cl (forked cases),
# test-concurrency-cl and test-gated-delta-cl (1 CI run in 2 to 1 in 10, all
# checks passed each time; google/sanitizers issue 1353 describes the same
# intermittent crash elsewhere). A real leak is reported the same way on every
# run, so it still fails; any other failure is not retried.
out=$(mktemp) || exit 99
err=$(mktemp) || { rm -f "$out"; exit 99; }
trap 'rm -f "$out" "$err"' EXIT

"$@" >"$out" 2>"$err"
rc=$?
cat "$out"
cat "$err" >&2
[ "$rc" -eq 0 ] && exit 0

if grep -q '^Tracer caught signal' "$err" &&
   grep -q 'LeakSanitizer has encountered a fatal error' "$err" &&
   ! grep -q -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$err" &&
   grep -q -E '^100%: Checks: [0-9]+, Failures: 0, Errors: 0' "$out"; then
    echo "lsan-retry: LeakSanitizer's tracer crashed at exit after all checks" \
         "passed (not a leak report); running the test once more" >&2
    "$@"
    exit $?
fi
exit "$rc"

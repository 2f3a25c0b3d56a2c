#!/bin/sh
# check-tool-usage.sh CLVARLEN_TEST: the precompile command's --op and --heads
# (on the CPU fallback, which compiles nothing): a step filter and heads that
# run, and every malformed value a usage error (exit 2) that names the option.
tool=$1
fail=0
expect() { # expect RC PATTERN ARGS...: exit status RC, output matching PATTERN
    want=$1 pattern=$2
    shift 2
    out=$("$tool" "$@" 2>&1)
    rc=$?
    if [ "$rc" != "$want" ] || ! printf '%s\n' "$out" | grep -Eq -- "$pattern"; then
        echo "FAIL: clvarlen-test $*: exit $rc (want $want), output:"
        printf '%s\n' "$out" | head -5
        fail=1
    else
        echo "ok: clvarlen-test $*"
    fi
}
# --op gdn: the gated delta steps only (3 dtypes x 2 head dims)
expect 0 '\[6/6\] gated delta rule f32 D 64' precompile --device cpu --op gdn --heads 4:1
expect 0 '\[1/1\] attention backward bf16 D 128' precompile --device cpu --quick \
    --op attention-bwd --heads 8:8
out=$("$tool" precompile --device cpu --op =attention 2>&1)
if printf '%s\n' "$out" | grep -Eq 'backward|paged|segment|gated'; then
    echo "FAIL: --op =attention ran other steps:"; printf '%s\n' "$out"; fail=1
fi
expect 2 "--op 'nope' matches no precompile step" precompile --device cpu --op nope
for bad in 4:3 0:0 4: :1 4:-1 -4:1 4:0 x 4:1x 5000:5 4 "4: 1" " 4:1" 4::1; do
    expect 2 "--heads: '$bad' is not Q:KV" precompile --device cpu --heads "$bad"
done
expect 2 "--heads applies to 'precompile' only" check --heads 4:1
expect 2 "'precompile' takes --device, --op, --heads" precompile --device cpu --seed 3
exit $fail

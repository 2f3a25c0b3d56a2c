#!/usr/bin/env bash
# The CP-over-MPI run on the lent GPU machine (issue 18; issue 20 on several GPUs).
# From the project root, after the recipe's setup and Open MPI's:
#
#   source .gpu/setup.sh && source .gpu/mpi-setup.sh && tools/gpu/run-cp.sh $OUT
#
# (.gpu/ from ../shared/gpu/fetch-debs.sh and tools/gpu/fetch-mpi-debs.sh, carried
# along.) Builds clvarlen with libclvarlen-mpi, runs the MPI test on the GPU at 2
# and 3 ranks, then clvarlen-cp for each case and rank count, logging under OUTDIR.
#   RANKS   rank counts (default "1 2": two ranks share one GPU)
#   CASES   "docs:tokens" pairs (default "16:131072 64:262144", the seed's sizes)
#   DEVICE  clvarlen device spec per rank (default nvidia; %r = the rank on its host,
#           for one GPU per rank)
#   ITERS   timed layers per run (default 5)
#   EXTRA   more clvarlen-cp options (e.g. --exchange ring)
set -euo pipefail
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out"
build=${BUILD:-build-gpu-mpi}
[ -d "$build" ] || meson setup "$build" -Dbuildtype=release -Dpython=disabled -Dmpi=enabled \
    > "$out/setup.log"
ninja -C "$build" > "$out/build.log"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>/dev/null || true
git log -1 --format=%H > "$out/commit.txt" 2>/dev/null || true
"$build/tools/clvarlen-test" list > "$out/devices.txt" 2>&1 || true
if [ -z "${SKIP_TEST:-}" ]; then
    for np in 2 3; do
        mpirun -np $np "$build/tests/mpi/test-cp-mpi" nvidia 2>&1 | tail -5 \
            | tee "$out/test-np$np.log" || echo "test-cp-mpi -np $np failed" | tee -a "$out/test-np$np.log"
    done
fi
for c in ${CASES:-16:131072 64:262144}; do
    for mode in "" "--backward"; do
        for np in ${RANKS:-1 2}; do
            # shellcheck disable=SC2086
            mpirun -np "$np" "$build/tools/clvarlen-cp" --device "${DEVICE:-nvidia}" \
                --docs "${c%%:*}" --tokens "${c##*:}" $mode --iters "${ITERS:-5}" ${EXTRA:-} 2>&1 \
                | tee -a "$out/cp.log" || echo "clvarlen-cp -np $np failed" | tee -a "$out/cp.log"
        done
    done
done

#!/usr/bin/env bash
# The CP-over-MPI run on the lent GPU machine (issues 18 and 20). From the
# project root, after the recipe's setup and Open MPI's:
#
#   source .gpu/setup.sh && source .gpu/mpi-setup.sh && tools/gpu/run-cp.sh $OUT/cp
#
# (.gpu/ from ../shared/gpu/fetch-debs.sh and tools/gpu/fetch-mpi-debs.sh, carried
# along.) Builds clvarlen with libclvarlen-mpi (once), runs the MPI test on the GPU
# at 2 and 3 ranks, then clvarlen-cp for each case, mode and rank count. Writes
# three files under OUTDIR (appending): info.txt (GPUs, driver, commit, devices,
# shared memory), test.log, cp.log. Environment:
#   RANKS   rank counts (default "1 2")
#   CASES   "docs:tokens" pairs (default "16:131072 64:262144", the seed's sizes)
#   MODES   "fwd", "bwd" (forward+backward) or both (default "fwd bwd")
#   DEVICE  clvarlen device spec of each rank (default %r: the rank's index on its
#           host, one GPU per rank; 0: every rank on the first GPU)
#   ITERS   timed layers per run (default 5)
#   EXTRA   more clvarlen-cp options (--probe: the exchange's ceilings)
#   SKIP_TEST=1 skips the MPI test; LABEL is written above the runs in cp.log
set -euo pipefail
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out"
build=${BUILD:-build-gpu-mpi}
if [ ! -d "$build" ]; then
    meson setup "$build" -Dbuildtype=release -Dpython=disabled -Dmpi=enabled > /tmp/cp-setup.log 2>&1 \
        || { tail -30 /tmp/cp-setup.log; exit 1; }
fi
ninja -C "$build" > /tmp/cp-build.log 2>&1 || { tail -30 /tmp/cp-build.log; exit 1; }
{
    echo "== $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>/dev/null || true
    git log -1 --format='commit %H' 2>/dev/null || true
    "$build/tools/clvarlen-test" list 2>&1 | grep -E '^\[' || true
    df -h /dev/shm | tail -1; echo "cores: $(nproc)"
} >> "$out/info.txt"
if [ -z "${SKIP_TEST:-}" ]; then
    for np in 2 3; do
        for shm in 1 0; do
            echo "== test-cp-mpi -np $np on nvidia, CLVARLEN_MPI_SHM=$shm" >> "$out/test.log"
            CLVARLEN_MPI_SHM=$shm mpirun -np $np "$build/tests/mpi/test-cp-mpi" nvidia 2>&1 \
                | tail -3 >> "$out/test.log" || echo "failed" >> "$out/test.log"
        done
    done
    cat "$out/test.log"
fi
[ -n "${LABEL:-}" ] && echo "#### $LABEL" | tee -a "$out/cp.log"
for c in ${CASES:-16:131072 64:262144}; do
    for mode in ${MODES:-fwd bwd}; do
        flag=""; [ "$mode" = bwd ] && flag=--backward
        for np in ${RANKS:-1 2}; do
            # shellcheck disable=SC2086
            mpirun -np "$np" "$build/tools/clvarlen-cp" --device "${DEVICE:-%r}" \
                --docs "${c%%:*}" --tokens "${c##*:}" $flag --iters "${ITERS:-5}" ${EXTRA:-} 2>&1 \
                | tee -a "$out/cp.log" || echo "clvarlen-cp -np $np failed" | tee -a "$out/cp.log"
        done
    done
done

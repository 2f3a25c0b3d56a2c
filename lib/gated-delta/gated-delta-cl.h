/* The gated delta rule on OpenCL: the launchers of gated-delta-cl.c, called
 * by the validated entry points of gated-delta.c. Private to lib/gated-delta/.
 */
#ifndef CLVARLEN_GATED_DELTA_CL_H
#define CLVARLEN_GATED_DELTA_CL_H

#include "runtime/runtime.h"

#include "cpu/gated-delta.h"

#if CLVARLEN_HAVE_OPENCL

/* A buffer and its byte offset; m == NULL: absent. */
typedef struct cv_gdn_mem {
    cl_mem m;
    cl_ulong off;
} cv_gdn_mem;

/* The operation's buffers, in kernel argument order. */
typedef struct cv_gdn_bufs {
    cv_gdn_mem A_log, dt_bias, a, b, q, k, v, cu, pool, sidx, inter, cidx, o;
} cv_gdn_bufs;

/** Runs the operation on validated device buffers after the wait list (the
 * cl_mem entry point); with device checks on, the checks run first and a
 * raised bit becomes the status. */
clvarlen_status cv_gdn_cl_run(clvarlen_context *ctx, const char *fn, const clvarlen_gdn_params *pa,
                              const cv_gdn_problem *p, const cv_gdn_bufs *d, cl_uint num_events,
                              const cl_event *wait_list, cl_event *event);

/** The host-memory entry point on an OpenCL context (inputs validated, n_seqs
 * and total_tokens > 0); outputs and states are written only on success. */
clvarlen_status cv_gdn_cl_host(clvarlen_context *ctx, const char *fn, const clvarlen_gdn_params *pa,
                               const cv_gdn_problem *p);

/* gated-delta-cl.c: sets the arguments every kernel with GDN_ARGS takes first
 * (cl/gated.clh). */
void cv_gdn_set_args(cv_args *ar, const cv_gdn_problem *p, const cv_gdn_bufs *d, int flags,
                     cl_long chunk_min, cl_mem check);

/* wgmma-check.c: before the scan's wgmma form (*wgmma set) first runs for a
 * key dim and dtype on ctx, one sequence of 130 tokens with the call's K, V,
 * dtypes and state layout runs through it and through the CPU fallback. If
 * they differ by more than SPEC 4's chunked tolerances (or the run fails), the
 * failure is logged and *wgmma cleared for this and later calls, unless the
 * form was forced: then the error is returned. fail: fail the check whatever
 * the results (tests of the fallback). timing: the call runs one stage alone
 * for a tuning sweep (CLVARLEN_GDN_TUNING only=N; its results are wrong), so
 * no check runs, but a failed one still holds. */
clvarlen_status cv_gdn_wgmma_ready(clvarlen_context *ctx, const cv_gdn_problem *p, bool forced,
                                   bool fail, bool timing, int *wgmma);

/* gated-delta-blas.c, the portable chunked path: the V tile of its scan, the
 * local memory its kernels need for key_dim K, and its launcher. The launcher
 * takes heads in groups whose scratch fits scr_cap (scr_set: as given; else
 * up to an eighth of the device's memory); *fell_back: nothing but scratch was
 * written and the caller runs the fused kernel (no scratch, a kernel that
 * would not build, or CLBlast failed before any scan ran; after a CLBlast
 * failure the context keeps to the fused kernel). */
#define CV_GDN_BLAS_VT 16
size_t cv_gdn_blas_local_bytes(int K);
#if CLVARLEN_HAVE_CLBLAST
clvarlen_status cv_gdn_enqueue_blas(cv_chain *c, const cv_gdn_problem *p, const cv_gdn_bufs *d,
                                    size_t scr_cap, bool scr_set, int64_t chunk_min, int flags,
                                    int *fell_back);
#endif

#endif /* CLVARLEN_HAVE_OPENCL */

#endif /* CLVARLEN_GATED_DELTA_CL_H */

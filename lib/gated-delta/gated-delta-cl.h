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

#endif /* CLVARLEN_HAVE_OPENCL */

#endif /* CLVARLEN_GATED_DELTA_CL_H */

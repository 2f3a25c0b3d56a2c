/* Varlen attention on OpenCL: the launchers of attention-cl.c, called by the
 * validated entry points of attention.c. Private to lib/attention/.
 */
#ifndef CLVARLEN_ATTENTION_CL_H
#define CLVARLEN_ATTENTION_CL_H

#include "runtime/runtime.h"

#include "cpu/attention.h"

#if CLVARLEN_HAVE_OPENCL

/* The forward call's buffers, each with its byte offset; q_pos and lse may be NULL. */
typedef struct cv_attn_mem {
    cl_mem q, k, v, cu_q, cu_k, q_pos, o, lse;
    size_t q_off, k_off, v_off, cu_q_off, cu_k_off, q_pos_off, o_off, lse_off;
} cv_attn_mem;

/* The merge's buffers. Part p of the outputs is at o_a + p * part_stride
 * (N-way) unless o_b is set (two-way: part 1 is o_b, lse_b). */
typedef struct cv_attn_merge_mem {
    cl_mem o_a, o_b, lse_a, lse_b, o, lse;
    size_t o_a_off, o_b_off, lse_a_off, lse_b_off, o_off, lse_off;
} cv_attn_merge_mem;

/** Builds the work list and runs the forward kernel on the chain (n_seqs and
 * total_q > 0). With a check flag on the chain the kernels write nothing once
 * a check bit is set. */
clvarlen_status cv_attn_cl_forward(cv_chain *c, const char *fn, const cv_attn_desc *d,
                                   const cv_attn_mem *m);

/** The host-memory forward on an OpenCL context; outputs are written only on success. */
clvarlen_status cv_attn_cl_forward_host(clvarlen_context *ctx, const char *fn,
                                        const cv_attn_desc *d, const void *q, const void *k,
                                        const void *v, const int32_t *cu_q, const int32_t *cu_k,
                                        const int32_t *q_pos, void *o, float *lse);

/** Runs the merge kernel on the chain (tokens > 0). */
clvarlen_status cv_attn_cl_merge(cv_chain *c, clvarlen_dtype dtype, int64_t n_parts,
                                 int64_t tokens, int32_t heads, int32_t dv,
                                 const cv_attn_merge_mem *m);

/** The host-memory merge on an OpenCL context (o_b NULL: N-way from o_a, lse_a). */
clvarlen_status cv_attn_cl_merge_host(clvarlen_context *ctx, const char *fn, clvarlen_dtype dtype,
                                      int64_t n_parts, int64_t tokens, int32_t heads, int32_t dv,
                                      const void *o_a, const float *lse_a, const void *o_b,
                                      const float *lse_b, void *o, float *lse);

#endif /* CLVARLEN_HAVE_OPENCL */

#endif /* CLVARLEN_ATTENTION_CL_H */

/* Varlen attention on OpenCL: the launchers of attention-cl.c, called by the
 * validated entry points of attention.c. Private to lib/attention/.
 */
#ifndef CLVARLEN_ATTENTION_CL_H
#define CLVARLEN_ATTENTION_CL_H

#include "runtime/runtime.h"

#include "cpu/attention.h"

/* Paged KV cache (paged-cl.c). Rows of at most CV_PAGED_DECODE_ROWS query
 * rows (queries x query heads per KV head) run the decode kernel; it splits
 * a row's keys into at most CV_PAGED_MAX_SPLITS ranges. */
#define CV_PAGED_DECODE_ROWS 64
#define CV_PAGED_MAX_SPLITS 256

/* Validation shared by the packed (attention.c) and paged (paged.c) entry points. */
/** Shapes and options of a forward call; fills *d (strides, scale and head_dim_v resolved). */
clvarlen_status cv_attn_validate(clvarlen_context *ctx, const char *fn,
                                 const clvarlen_attention_params *p, cv_attn_desc *d);
/** Every length cu[s + 1] - cu[s] <= bound (bound 0: no check). */
clvarlen_status cv_attn_check_max_seqlen(clvarlen_context *ctx, const char *fn, const char *what,
                                         const int32_t *cu, int64_t n, int32_t bound);

#if CLVARLEN_HAVE_OPENCL

/* The forward call's buffers, each with its byte offset; q_pos and lse may be NULL. */
typedef struct cv_attn_mem {
    cl_mem q, k, v, cu_q, cu_k, q_pos, o, lse;
    size_t q_off, k_off, v_off, cu_q_off, cu_k_off, q_pos_off, o_off, lse_off;
    cl_mem pt; /* paged (d->page_size > 0): the page table; cu_k holds cache_seqlens */
    size_t pt_off;
} cv_attn_mem;

/* The merge's buffers. Part p of the outputs is at o_a + p * part_stride
 * (N-way) unless o_b is set (two-way: part 1 is o_b, lse_b). */
typedef struct cv_attn_merge_mem {
    cl_mem o_a, o_b, lse_a, lse_b, o, lse;
    size_t o_a_off, o_b_off, lse_a_off, lse_b_off, o_off, lse_off;
} cv_attn_merge_mem;

/* The tensor-core kernel with the query heads of a KV head packed into its
 * tiles' rows (-DCV_GQA_PACK): block_m rows per tile, each sequence's keys
 * split into `splits` ranges merged by attn_merge. */
typedef struct cv_attn_pack {
    int block_m, block_n, splits;
    bool one_tile; /* every sequence fits one tile: no work list */
} cv_attn_pack;

/** Appends the dropout arguments of d (CV_DROP_ARGS of cl/attention.clh) to a kernel's. */
void cv_attn_drop_args(cv_args *a, const cv_attn_desc *d);

/* The backward call's buffers (the forward's, plus do and the gradients). */
typedef struct cv_bwd_mem {
    cv_attn_mem f; /* q, k, v, cu_q, cu_k, q_pos, o, lse */
    cl_mem dout, dq, dk, dv;
    size_t do_off, dq_off, dk_off, dv_off;
} cv_bwd_mem;

/** The backward on the chain (backward-cl.c): delta, the dk/dv pass, the dq pass. */
clvarlen_status cv_attn_cl_backward(cv_chain *c, const char *fn, const cv_bwd_desc *bd,
                                    const cv_bwd_mem *m);

/** Knob `name` of a benchmark tuning variable var="name=N,..." (fallback when absent). */
int cv_attn_knob(const char *var, const char *name, int fallback);

/** Whether attention runs tensor-core kernels on this context where the shapes allow
 * (NVIDIA with mma, or CLVARLEN_ATTENTION_KERNEL=mma for the emulated form). */
bool cv_attn_mma_device(const clvarlen_context *ctx);

/** Whether the backward's tensor-core kernels would take their wgmma form (head dim 64
 * or 128; on NVIDIA compute capability 9.x by default at every length, as it measured
 * faster there at 64 queries per sequence too; CLVARLEN_ATTN_BWD_TUNING wgmma=0/1 there,
 * CLVARLEN_ATTENTION_KERNEL=wgmma anywhere, emulated off NVIDIA). */
bool cv_attn_bwd_wgmma_wanted(const clvarlen_context *ctx, const cv_attn_desc *d);

/** Whether CLVARLEN_ATTENTION_KERNEL=wgmma forces the wgmma forms (errors are then returned,
 * not answered by the mma.sync form). */
bool cv_attn_wgmma_forced(void);

/** Runs attn_wgmma_check of the program built with `options` (tiles of block_m query
 * rows, 64 or 128, and block_n keys) and compares its S = Q K^T and O = P V with exact
 * sums (wgmma-check.c). CLVARLEN_SUCCESS when they agree bit for bit; otherwise an
 * error whose message says what differed (the build failed, the run failed, or the
 * first wrong element). */
clvarlen_status cv_attn_wgmma_check(clvarlen_context *ctx, const cv_attn_desc *d, int block_m,
                                    int block_n, const char *options);

/** Builds and checks the forward's wgmma form for d's dtype and head dim once per
 * context (attn_wgmma_check); *ok says whether it passed. An error only when the
 * form is forced by CLVARLEN_ATTENTION_KERNEL=wgmma and failed. */
clvarlen_status cv_attn_wgmma_checked(clvarlen_context *ctx, const char *fn,
                                      const cv_attn_desc *d, bool *ok);

/** Whether the forward runs the tensor-core kernel (device, dtype, dims and alignment,
 * CLVARLEN_ATTENTION_KERNEL). */
bool cv_attn_use_mma(const clvarlen_context *ctx, const cv_attn_desc *d, const cv_attn_mem *m);

/** Builds the work list and runs the forward kernel on the chain (n_seqs and
 * total_q > 0); pack (may be NULL) selects the packed tensor-core form. With
 * a check flag on the chain the kernels write nothing once a check bit is set. */
clvarlen_status cv_attn_cl_forward(cv_chain *c, const char *fn, const cv_attn_desc *d,
                                   const cv_attn_mem *m, const cv_attn_pack *pack);

/** The bytes of the context's temp buffer cv_attn_cl_forward(d, m, pack) uses, from byte 0
 * (the work list and a split call's partials); the rest of the buffer is left alone. */
clvarlen_status cv_attn_cl_forward_temp(clvarlen_context *ctx, const char *fn,
                                        const cv_attn_desc *d, const cv_attn_mem *m,
                                        const cv_attn_pack *pack, size_t *bytes);

/** The host-memory forward on an OpenCL context; outputs are written only on success.
 * Paged (d->page_size > 0): k, v are the caches, cu_k cache_seqlens, q_pos NULL. */
clvarlen_status cv_attn_cl_forward_host(clvarlen_context *ctx, const char *fn,
                                        const cv_attn_desc *d, const void *q, const void *k,
                                        const void *v, const int32_t *cu_q, const int32_t *cu_k,
                                        const int32_t *q_pos, const int32_t *page_table, void *o,
                                        float *lse);

/** Runs the merge kernel on the chain (tokens > 0): parts of part_dtype
 * (contiguous), o of dtype with its tokens o_tok_stride elements apart. */
clvarlen_status cv_attn_cl_merge(cv_chain *c, clvarlen_dtype dtype, clvarlen_dtype part_dtype,
                                 int64_t o_tok_stride, int64_t n_parts, int64_t tokens,
                                 int32_t heads, int32_t dv, const cv_attn_merge_mem *m);

/** The merge of a split call's f32 partials, at byte part_off of `part`: o [splits, total_q,
 * heads_q, head_dim_v], then lse [splits, heads_q, total_q]; into m->o and m->lse. */
clvarlen_status cv_attn_cl_merge_splits(cv_chain *c, const cv_attn_desc *d, const cv_attn_mem *m,
                                        cl_mem part, size_t part_off, int splits);

/** The host-memory merge on an OpenCL context (o_b NULL: N-way from o_a, lse_a). */
clvarlen_status cv_attn_cl_merge_host(clvarlen_context *ctx, const char *fn, clvarlen_dtype dtype,
                                      int64_t n_parts, int64_t tokens, int32_t heads, int32_t dv,
                                      const void *o_a, const float *lse_a, const void *o_b,
                                      const float *lse_b, void *o, float *lse);

/* The append's buffers. */
typedef struct cv_append_mem {
    cl_mem k, v, slot, kc, vc;
    size_t k_off, v_off, slot_off, kc_off, vc_off;
} cv_append_mem;

/** The append kernel on the chain (n_tokens > 0). */
clvarlen_status cv_paged_cl_append(cv_chain *c, const cv_append_desc *a, const cv_append_mem *m);
/** The device checks of a paged call (c->flag set): cu_seqlens_q, then cache_seqlens against
 * the query counts and the capacity, and the used page-table entries. */
clvarlen_status cv_paged_cl_check(cv_chain *c, const cv_attn_desc *d, const cv_attn_mem *m);
/** The paged forward on the chain (d->page_size > 0, n_seqs and total_q > 0). */
clvarlen_status cv_paged_cl_forward(cv_chain *c, const char *fn, const cv_attn_desc *d,
                                    const cv_attn_mem *m);

#endif /* CLVARLEN_HAVE_OPENCL */

#endif /* CLVARLEN_ATTENTION_CL_H */

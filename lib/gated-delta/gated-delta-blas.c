/* The gated delta rule's portable chunked path on OpenCL: CLBlast's strided
 * batched SGEMM for the chunk-parallel products, the kernels of
 * cl/gated-delta-blas.cl for the rest (that file lists the steps). Called by
 * gdn_enqueue (gated-delta-cl.c) for CHUNKED on devices whose tuning selects
 * it, in a library built with CLBlast.
 */
#include "gated-delta/gated-delta-cl.h"

#include <stdio.h>

#if CLVARLEN_HAVE_OPENCL

/* Local memory of the portable chunked path's kernels (cl/gated-delta-blas.cl):
 * the scan's state slice, VN tile, row weights and W / KN tile, or the solve's T. */
size_t cv_gdn_blas_local_bytes(int K)
{
    const size_t tile = CV_MAX((size_t)GDN_CHUNK * 17, (size_t)8 * (size_t)K);
    const size_t scan = (size_t)(K * CV_GDN_BLAS_VT + GDN_CHUNK * CV_GDN_BLAS_VT + GDN_CHUNK) + tile;
    const size_t solve = (size_t)(GDN_CHUNK * (GDN_CHUNK + 1) + 2 * GDN_CHUNK);
    return (scan > solve ? scan : solve) * sizeof(float);
}

#if CLVARLEN_HAVE_CLBLAST
/* What every kernel of a head group takes after the shared arguments. */
typedef struct blas_group {
    const cv_gdn_problem *p;
    const cv_gdn_bufs *d;
    int flags;
    cl_long chunk_min;
    cl_mem scr;
    cl_long n_slots;
    cl_int h0, hc;
} blas_group;

/* One of the path's kernels over `groups` work-groups of 64; with_args: it
 * takes GDN_ARGS first (all but the solve). */
static clvarlen_status blas_kernel(cv_chain *c, const blas_group *g, cl_kernel k, const char *name,
                                   bool with_args, size_t groups)
{
    cv_args ar = cv_args_begin(k);
    if (with_args)
        cv_gdn_set_args(&ar, g->p, g->d, g->flags, g->chunk_min, c->flag);
    CV_ARG(ar, g->scr);
    CV_ARG(ar, g->n_slots);
    if (with_args)
        CV_ARG(ar, g->h0);
    CV_ARG(ar, g->hc);
    clvarlen_status st = cv_cl_check(c->ctx, ar.err, name);
    if (st != CLVARLEN_SUCCESS)
        return st;
    const size_t local = GDN_CHUNK, global = groups * local;
    return cv_chain_run(c, k, name, 1, &global, &local);
}

/* The portable chunked path (cl/gated-delta-blas.cl has the whole sequence of
 * steps): per group of heads whose scratch fits the cap, the pack, CLBlast's
 * K K^T and Q K^T, the solve, T KB and T VE, the scan, Q H + P VN, and the
 * output. *fell_back: no scratch, a kernel that would not build, or CLBlast
 * failed before any scan ran (nothing but scratch written; the caller runs
 * the fused portable kernel, and after a CLBlast failure so does this
 * context from then on). */
clvarlen_status cv_gdn_enqueue_blas(cv_chain *c, const cv_gdn_problem *p, const cv_gdn_bufs *d,
                                    size_t scr_cap, bool scr_set, int64_t chunk_min, int flags,
                                    int *fell_back)
{
    clvarlen_status st;
    *fell_back = 0;
    clvarlen_context *ctx = c->ctx;
    const size_t K = (size_t)p->K, V = (size_t)p->V, C = GDN_CHUNK;
    const cl_long n_slots = p->total_tokens / GDN_CHUNK + p->n_seqs + 1;
    const size_t per_head = (size_t)n_slots * (size_t)GDN_BL_FLOATS(K, V) * sizeof(float);
    /* The scan runs over the heads of one group at a time, so a small group starves
     * it (H100, 4 x 32768 tokens in groups of 2 heads: 154 ms); its scratch may take
     * up to an eighth of the device's memory, within one allocation's limit. */
    size_t cap = scr_cap;
    if (!scr_set) {
        cl_ulong max_alloc = 0;
        if (clGetDeviceInfo(ctx->cl_dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc,
                            &max_alloc, NULL) != CL_SUCCESS)
            max_alloc = 0;
        const uint64_t eighth = ctx->device.global_mem_bytes / 8;
        const uint64_t want = CV_MIN(eighth, (uint64_t)max_alloc);
        if (want > cap && want <= SIZE_MAX)
            cap = (size_t)want;
    }
    cl_int hcount = (cl_int)CV_MAX((size_t)1, CV_MIN((size_t)p->HV, cap / per_head));
    cl_mem scr;
    if (cv_temp(ctx, per_head * (size_t)hcount, &scr) != CLVARLEN_SUCCESS) {
        cv_log(ctx, CLVARLEN_LOG_INFO,
               "gated delta: no scratch for the CLBlast chunked path, running it fused");
        cv_clear_error(ctx);
        *fell_back = 1;
        return CLVARLEN_SUCCESS;
    }
    char opts[200];
    snprintf(opts, sizeof opts, "-DCV_K=%d -DCV_V=%d -DCV_DT=%d -DCV_ST_DT=%d -DCV_BVT=%d",
             (int)K, (int)V, cv_dtype_kernel_code(p->dtype),
             cv_dtype_kernel_code(p->state_dtype), CV_GDN_BLAS_VT);
    static const char *const names[4] = {"gdn_blas_pack", "gdn_blas_solve", "gdn_blas_scan",
                                          "gdn_blas_out"};
    cl_kernel kn[4];
    for (int i = 0; i < 4; i++)
        if ((st = cv_get_kernel(ctx, "gated-delta-blas.cl", opts, names[i], &kn[i])) !=
            CLVARLEN_SUCCESS) {
            if (st != CLVARLEN_ERROR_KERNEL_BUILD)
                return st;
            ctx->gdn_blas_refused = 1;
            cv_log(ctx, CLVARLEN_LOG_INFO, "gated delta: CLBlast path's kernels refused: %s",
                   clvarlen_last_error(ctx));
            cv_clear_error(ctx);
            *fell_back = 1;
            return CLVARLEN_SUCCESS;
        }
    const size_t nvt = (V + CV_GDN_BLAS_VT - 1) / CV_GDN_BLAS_VT;
    int scanned = 0;
    for (cl_int h0 = 0; h0 < (cl_int)p->HV; h0 += hcount) {
        const cl_int hc = CV_MIN(hcount, (cl_int)p->HV - h0);
        const size_t nb = (size_t)n_slots * (size_t)hc;
        const blas_group g = {p, d, flags, (cl_long)chunk_min, scr, n_slots, h0, hc};
/* array X's first float in this group's scratch */
#define BL(X) (nb * (size_t)GDN_BL_##X(K, V))
/* C[X] = A[Y] B[Z](^T) (+ C[X] if acc) for every item: m, n, k and the leading dims */
#define GEMM(tb, m, n, k, Y, lda, Z, ldb, acc, X, ldc)                                         \
    cv_chain_sgemm_batched(c, tb, m, n, k, 1.0f, scr, BL(Y), lda, (m) * (lda), scr, BL(Z), ldb,  \
                           (tb ? (n) : (k)) * (ldb), acc ? 1.0f : 0.0f, scr, BL(X), ldc,          \
                           (m) * (ldc), nb)
#define KERNEL(i, groups)                                                                      \
    if ((st = blas_kernel(c, &g, kn[i], names[i], i != 1, groups)) != CLVARLEN_SUCCESS)       \
        return st;
#define PRODUCT(call)                                                                          \
    if ((st = (call)) != CLVARLEN_SUCCESS)                                                     \
        goto product_failed;
        KERNEL(0, nb)
        PRODUCT(GEMM(true, C, C, K, KN, K, KN, K, 0, KK, C))
        PRODUCT(GEMM(true, C, C, K, QS, K, KN, K, 0, QK, C))
        KERNEL(1, nb)
        PRODUCT(GEMM(false, C, K, C, KK, C, KB, K, 0, W, K))
        PRODUCT(GEMM(false, C, V, C, KK, C, VE, V, 0, U, V))
        KERNEL(2, (size_t)p->n_seqs * (size_t)hc * nvt)
        scanned = 1;
        PRODUCT(GEMM(false, C, V, K, QE, K, H, V, 0, O, V))
        PRODUCT(GEMM(false, C, V, C, QK, C, VN, V, 1, O, V))
        KERNEL(3, nb)
#undef PRODUCT
#undef KERNEL
#undef GEMM
#undef BL
    }
    return CLVARLEN_SUCCESS;

product_failed:
    if (scanned)
        return st; /* states already updated: no other path can take over */
    ctx->gdn_blas_refused = 1;
    cv_log(ctx, CLVARLEN_LOG_INFO, "gated delta: %s; running the fused kernel",
           clvarlen_last_error(ctx));
    cv_clear_error(ctx);
    *fell_back = 1;
    return CLVARLEN_SUCCESS;
}
#endif /* CLVARLEN_HAVE_CLBLAST */

#endif /* CLVARLEN_HAVE_OPENCL */

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
        cl_long ns = n_slots;
/* array X's first float in this group's scratch */
#define BL(X) (nb * (size_t)GDN_BL_##X(K, V))
/* C[X] = A[Y] B[Z](^T) (+ C[X] if acc) for every item: m, n, k and the leading dims */
#define GEMM(tb, m, n, k, Y, lda, Z, ldb, acc, X, ldc)                                         \
    cv_chain_sgemm_batched(c, tb, m, n, k, 1.0f, scr, BL(Y), lda, (m) * (lda), scr, BL(Z), ldb,  \
                           (tb ? (n) : (k)) * (ldb), acc ? 1.0f : 0.0f, scr, BL(X), ldc,          \
                           (m) * (ldc), nb)
        for (int step = 0; step < 7; step++) {
            const int kern = step == 0 ? 0 : step == 2 ? 1 : step == 4 ? 2 : step == 6 ? 3 : -1;
            if (kern < 0) {
                if (step == 1) {
                    st = GEMM(true, C, C, K, KN, K, KN, K, 0, KK, C);
                    if (st == CLVARLEN_SUCCESS)
                        st = GEMM(true, C, C, K, QS, K, KN, K, 0, QK, C);
                } else if (step == 3) {
                    st = GEMM(false, C, K, C, KK, C, KB, K, 0, W, K);
                    if (st == CLVARLEN_SUCCESS)
                        st = GEMM(false, C, V, C, KK, C, VE, V, 0, U, V);
                } else {
                    st = GEMM(false, C, V, K, QE, K, H, V, 0, O, V);
                    if (st == CLVARLEN_SUCCESS)
                        st = GEMM(false, C, V, C, QK, C, VN, V, 1, O, V);
                }
                if (st == CLVARLEN_SUCCESS)
                    continue;
                if (scanned)
                    return st; /* states already updated: no other path can take over */
                ctx->gdn_blas_refused = 1;
                cv_log(ctx, CLVARLEN_LOG_INFO, "gated delta: %s; running the fused kernel",
                       clvarlen_last_error(ctx));
                cv_clear_error(ctx);
                *fell_back = 1;
                return CLVARLEN_SUCCESS;
            }
            cv_args ar = cv_args_begin(kn[kern]);
            if (kern != 1)
                cv_gdn_set_args(&ar, p, d, flags, (cl_long)chunk_min, c->flag);
            CV_ARG(ar, scr);
            CV_ARG(ar, ns);
            if (kern != 1)
                CV_ARG(ar, h0);
            CV_ARG(ar, hc);
            if ((st = cv_cl_check(ctx, ar.err, names[kern])) != CLVARLEN_SUCCESS)
                return st;
            const size_t local = GDN_CHUNK;
            const size_t groups = kern == 2 ? (size_t)p->n_seqs * (size_t)hc * nvt : nb;
            const size_t global = groups * local;
            if ((st = cv_chain_run(c, kn[kern], names[kern], 1, &global, &local)) !=
                CLVARLEN_SUCCESS)
                return st;
            scanned |= kern == 2;
        }
#undef GEMM
#undef BL
    }
    return CLVARLEN_SUCCESS;
}
#endif /* CLVARLEN_HAVE_CLBLAST */

#endif /* CLVARLEN_HAVE_OPENCL */

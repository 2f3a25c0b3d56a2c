/* The gated delta rule on OpenCL: kernel specialisations and
 * the launchers of the token-by-token and chunked kernels (cl/gated-delta.cl),
 * shared by the host-memory and the cl_mem entry points. Every launch goes
 * through a cv_chain.
 */
#include "gated-delta/gated-delta-cl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if CLVARLEN_HAVE_OPENCL

/* AUTO on the cl_mem entry point (lengths stay on the device): the chunked
 * kernel runs only for batches of at least this many tokens per sequence. */
#define GDN_AUTO_MIN_AVG 16

/* The token kernel and the index check share one program, the chunked kernel
 * has its own: a call compiles only what it runs. */
static clvarlen_status gdn_kernel(clvarlen_context *ctx, const cv_gdn_problem *p,
                                  const cv_gdn_tiles *t, const char *name, cl_kernel *kernel)
{
    char opts[256];
    const bool scan = strcmp(name, "gdn_chunk_scan") == 0;
    if (scan || strcmp(name, "gdn_chunked_mma") == 0 || strcmp(name, "gdn_chunk_prep") == 0) {
        const int dt = cv_dtype_kernel_code(p->dtype);
        const bool prep = strcmp(name, "gdn_chunk_prep") == 0;
        const int pf = scan && t->ptx ? t->wgpre & 4 : 0;
        char preg[32] = "";
        if (prep && t->ptx && t->preg > 0)
            snprintf(preg, sizeof preg, " " CV_PTX_MAXNREG_OPTION "%d", t->preg);
        snprintf(opts, sizeof opts,
                 "-DCV_K=%d -DCV_V=%d -DCV_DT=%d -DCV_DTYPE=%d -DCV_ST_DT=%d -DCV_%s=%d "
                 "-DCV_MMA_SPLIT=%d%s%s%s%s%s",
                 (int)p->K, (int)p->V, dt, dt, cv_dtype_kernel_code(p->state_dtype),
                 scan ? "SW" : "MVT", scan ? t->sw : t->mvt, t->split,
                 t->ptx ? " -DCV_NV_PTX=1" : "", t->wgmma && prep ? " -DCV_GDN_ROWS=1" : "",
                 t->wgmma && scan ? (t->ptx ? " -DCV_GDN_WG=1 " CV_SM90A_OPTION : " -DCV_GDN_WG=1")
                                  : "",
                 pf & 4 ? " -DCV_GDN_L2PRE=1" : "", preg);
        return cv_get_kernel(ctx, scan ? "gated-delta-scan.cl" : "gated-delta-mma.cl", opts,
                             name, kernel);
    }
    if (strcmp(name, "gdn_chunked") == 0)
        snprintf(opts, sizeof opts,
                 "-DCV_GDN_CHUNKED=1 -DCV_K=%d -DCV_V=%d -DCV_DT=%d -DCV_ST_DT=%d -DCV_CWG=%d "
                 "-DCV_CVT=%d -DCV_KS=%d",
                 (int)p->K, (int)p->V, cv_dtype_kernel_code(p->dtype),
                 cv_dtype_kernel_code(p->state_dtype), t->cwg, t->cvt, t->ks);
    else
        snprintf(opts, sizeof opts,
                 "-DCV_K=%d -DCV_V=%d -DCV_DT=%d -DCV_ST_DT=%d -DCV_WG=%d -DCV_VT=%d -DCV_TK=%d%s%s",
                 (int)p->K, (int)p->V, cv_dtype_kernel_code(p->dtype),
                 cv_dtype_kernel_code(p->state_dtype), t->wg, t->vt, t->tk,
                 t->vec4 ? " -DCV_GDN_VEC4=1" : "", t->prefetch ? "" : " -DCV_GDN_NO_PREFETCH=1");
    /* NVIDIA: warp-shuffle reductions (inline PTX) in whole warps; should the
     * driver refuse them, the portable program serves this context from then on */
    const bool shfl = strncmp(name, "gdn_chunked", 11) != 0 &&
                      ctx->device.vendor == CLVARLEN_VENDOR_NVIDIA && !ctx->gdn_shfl_refused &&
                      t->wg % 32 == 0 && t->tk >= 2 && t->tk <= 32;
    if (shfl) {
        char nv[300];
        snprintf(nv, sizeof nv, "%s -DCV_NV_SHFL=1", opts);
        clvarlen_status st = cv_get_kernel(ctx, "gated-delta.cl", nv, name, kernel);
        if (st != CLVARLEN_ERROR_KERNEL_BUILD)
            return st;
        ctx->gdn_shfl_refused = 1;
        cv_log(ctx, CLVARLEN_LOG_INFO, "gated delta: warp shuffles refused, using local memory");
        cv_clear_error(ctx);
    }
    return cv_get_kernel(ctx, "gated-delta.cl", opts, name, kernel);
}

static int gdn_flags(const cv_gdn_bufs *d, const cv_gdn_problem *p, cl_mem check)
{
    int f = 0;
    if (d->cu.m)
        f |= GDN_HAS_CU;
    if (d->pool.m)
        f |= GDN_HAS_POOL;
    if (d->sidx.m)
        f |= GDN_HAS_SIDX;
    if (p->write_back)
        f |= GDN_WRITE_BACK;
    if (d->inter.m)
        f |= GDN_HAS_INTER;
    if (d->cidx.m)
        f |= GDN_HAS_CIDX;
    if (check)
        f |= GDN_HAS_CHECK;
    if (p->state_kv)
        f |= GDN_STATE_KV;
    if (p->l2norm)
        f |= GDN_L2NORM;
    if (p->bias_dtype == CLVARLEN_DTYPE_F16)
        f |= GDN_BIAS_F16;
    else if (p->bias_dtype == CLVARLEN_DTYPE_BF16)
        f |= GDN_BIAS_BF16;
    return f;
}
/* A buffer argument: the cl_mem, then its byte offset. */
static void gdn_arg_mem(cv_args *ar, const cv_gdn_mem *x)
{
    CV_ARG(*ar, x->m);
    CV_ARG(*ar, x->off);
}

/* The arguments of every kernel that takes GDN_ARGS. */
void cv_gdn_set_args(cv_args *ar, const cv_gdn_problem *p, const cv_gdn_bufs *d, int flags,
                     cl_long chunk_min, cl_mem check)
{
    cl_long a_stride = p->a_stride, b_stride = p->b_stride, q_stride = p->q_stride,
            k_stride = p->k_stride, v_stride = p->v_stride, o_stride = p->o_stride;
    cl_long fixed = p->fixed_seqlen, slots = p->slots, pitch = p->slot_pitch;
    cl_long cache_slots = p->cache_slots, n_seqs = p->n_seqs, total = p->total_tokens;
    cl_int cache_steps = p->cache_steps, HV = p->HV, group = p->HV / p->H, fl = flags;
    cl_float scale = p->scale, spb = p->sp_beta, spt = p->sp_threshold;
    gdn_arg_mem(ar, &d->A_log);
    gdn_arg_mem(ar, &d->dt_bias);
    gdn_arg_mem(ar, &d->a);
    CV_ARG(*ar, a_stride);
    gdn_arg_mem(ar, &d->b);
    CV_ARG(*ar, b_stride);
    gdn_arg_mem(ar, &d->q);
    CV_ARG(*ar, q_stride);
    gdn_arg_mem(ar, &d->k);
    CV_ARG(*ar, k_stride);
    gdn_arg_mem(ar, &d->v);
    CV_ARG(*ar, v_stride);
    gdn_arg_mem(ar, &d->cu);
    CV_ARG(*ar, fixed);
    gdn_arg_mem(ar, &d->pool);
    CV_ARG(*ar, slots);
    CV_ARG(*ar, pitch);
    gdn_arg_mem(ar, &d->sidx);
    gdn_arg_mem(ar, &d->inter);
    CV_ARG(*ar, cache_slots);
    CV_ARG(*ar, cache_steps);
    gdn_arg_mem(ar, &d->cidx);
    gdn_arg_mem(ar, &d->o);
    CV_ARG(*ar, o_stride);
    CV_ARG(*ar, n_seqs);
    CV_ARG(*ar, total);
    CV_ARG(*ar, HV);
    CV_ARG(*ar, group);
    CV_ARG(*ar, scale);
    CV_ARG(*ar, spb);
    CV_ARG(*ar, spt);
    CV_ARG(*ar, fl);
    CV_ARG(*ar, chunk_min);
    CV_ARG(*ar, check);
}

/* Which kernels run: the host decides from what it knows about the lengths. */
typedef struct gdn_plan {
    int recurrent;     /* launch the token kernel */
    int chunked;       /* launch the chunked kernel */
    int64_t chunk_min; /* sequences with at least this many tokens are the chunked kernel's */
} gdn_plan;

/* The device checks of the chain's flag: cu_seqlens, then the indices and
 * target-verify lengths (gdn_check). */
static clvarlen_status gdn_enqueue_checks(cv_chain *c, const cv_gdn_problem *p,
                                          const cv_gdn_bufs *d, const cv_gdn_tiles *t, int flags)
{
    clvarlen_status st;
    if (d->cu.m) {
        st = cv_chain_check_cu_seqlens(c, d->cu.m, (size_t)d->cu.off, p->n_seqs, p->total_tokens);
        if (st != CLVARLEN_SUCCESS)
            return st;
    }
    if (p->n_seqs == 0 || !(d->sidx.m || d->inter.m))
        return CLVARLEN_SUCCESS;
    cl_kernel kc;
    if ((st = gdn_kernel(c->ctx, p, t, "gdn_check", &kc)) != CLVARLEN_SUCCESS)
        return st;
    cv_args ar = cv_args_begin(kc);
    cl_long fixed = p->fixed_seqlen, n_seqs = p->n_seqs, total = p->total_tokens;
    cl_long slots = p->slots, cache_slots = p->cache_slots;
    cl_int cache_steps = p->cache_steps, fl = flags;
    gdn_arg_mem(&ar, &d->cu);
    CV_ARG(ar, fixed);
    CV_ARG(ar, n_seqs);
    CV_ARG(ar, total);
    gdn_arg_mem(&ar, &d->sidx);
    CV_ARG(ar, slots);
    gdn_arg_mem(&ar, &d->cidx);
    CV_ARG(ar, cache_slots);
    CV_ARG(ar, cache_steps);
    CV_ARG(ar, fl);
    CV_ARG(ar, c->flag);
    if ((st = cv_cl_check(c->ctx, ar.err, "gdn_check: clSetKernelArg")) != CLVARLEN_SUCCESS)
        return st;
    size_t local = 64, global = (size_t)p->n_seqs;
    return cv_chain_run(c, kc, "gdn_check", 1, &global, &local);
}

/* The two-stage tensor-core chunked path: per group of heads whose scratch
 * fits GDN_SCR_CAP (at least one head), gdn_chunk_prep over every (chunk
 * slot, head) and then gdn_chunk_scan over every (sequence, head, V tile).
 * *fell_back: the scratch could not be had, or the driver refused the kernels
 * (nothing enqueued; the caller runs the fused kernel instead). */
static clvarlen_status gdn_enqueue_scan(cv_chain *c, const cv_gdn_problem *p,
                                        const cv_gdn_bufs *d, const cv_gdn_tiles *t,
                                        const gdn_plan *plan, int flags, int *fell_back)
{
    clvarlen_status st;
    *fell_back = 0;
    const size_t slot_bytes = (size_t)GDN_SCR_FLOATS * sizeof(float);
    const cl_long n_slots = p->total_tokens / GDN_CHUNK + p->n_seqs + 1;
    const size_t per_head = (size_t)n_slots * slot_bytes;
    cl_int hcount = (cl_int)CV_MAX((size_t)1, CV_MIN((size_t)p->HV, t->scr_cap / per_head));
    cl_mem scr;
    if (cv_temp(c->ctx, per_head * (size_t)hcount, &scr) != CLVARLEN_SUCCESS) {
        cv_log(c->ctx, CLVARLEN_LOG_INFO,
               "gated delta: no scratch for the two-stage chunked path, running it fused");
        cv_clear_error(c->ctx);
        *fell_back = 1;
        return CLVARLEN_SUCCESS;
    }
    cl_kernel kp, ks;
    cv_gdn_tiles mma_sync;
    while ((st = gdn_kernel(c->ctx, p, t, "gdn_chunk_prep", &kp)) != CLVARLEN_SUCCESS ||
           (st = gdn_kernel(c->ctx, p, t, "gdn_chunk_scan", &ks)) != CLVARLEN_SUCCESS) {
        if (st != CLVARLEN_ERROR_KERNEL_BUILD || !t->ptx)
            return st;
        cv_log(c->ctx, CLVARLEN_LOG_INFO, "gated delta: %s refused (%s)",
               t->wgmma ? "the scan's wgmma form" : "two-stage tensor-core kernels",
               clvarlen_last_error(c->ctx));
        cv_clear_error(c->ctx);
        if (t->wgmma) { /* the driver or the PTX patch step: mma.sync from now on */
            c->ctx->gdn_wgmma_refused = 1;
            mma_sync = *t;
            mma_sync.wgmma = 0;
            t = &mma_sync;
            continue;
        }
        /* the driver refused their inline PTX: the fused kernel from now on (and
         * should it be refused too, the portable one, as gdn_enqueue does) */
        c->ctx->gdn_scan_refused = 1;
        *fell_back = 1;
        return CLVARLEN_SUCCESS;
    }
    const int vtiles = (int)((p->V + 16 * t->sw - 1) / (16 * t->sw));
    for (cl_int h0 = 0; h0 < (cl_int)p->HV; h0 += hcount) {
        cl_int hc = CV_MIN(hcount, (cl_int)p->HV - h0);
        /* a run of value heads per first-stage work-group, inside one key
         * head's group (and the heads' group of this pass) */
        const cl_int group = (cl_int)(p->HV / p->H);
        cl_int hper = (cl_int)CV_MIN(t->hper, hc);
        while (hper > 1 && (group % hper || hc % hper || h0 % hper))
            hper--;
        for (int stage = 0; stage < 2; stage++) {
            if (t->only && t->only != stage + 1)
                continue;
            cl_kernel kk = stage ? ks : kp;
            cv_args ar = cv_args_begin(kk);
            cv_gdn_set_args(&ar, p, d, flags, plan->chunk_min, c->flag);
            cl_long ns = n_slots;
            CV_ARG(ar, scr);
            CV_ARG(ar, ns);
            CV_ARG(ar, h0);
            CV_ARG(ar, hc);
            if (!stage)
                CV_ARG(ar, hper);
            const char *name = stage ? "gdn_chunk_scan" : "gdn_chunk_prep";
            if ((st = cv_cl_check(c->ctx, ar.err, name)) != CLVARLEN_SUCCESS)
                return st;
            const size_t local = stage ? (size_t)32 * t->sw : 128;
            const size_t groups = stage ? (size_t)p->n_seqs * (size_t)hc * (size_t)vtiles
                                        : (size_t)n_slots * (size_t)(hc / hper);
            const size_t global = groups * local;
            if ((st = cv_chain_run(c, kk, name, 1, &global, &local)) != CLVARLEN_SUCCESS)
                return st;
        }
    }
    return CLVARLEN_SUCCESS;
}

/* Enqueues the operation on device buffers (validated) on the chain. With a
 * check flag on the chain the checks run first and every kernel skips its
 * writes if a check bit is set. */
static clvarlen_status gdn_enqueue(cv_chain *c, const cv_gdn_problem *p, const cv_gdn_bufs *d,
                                   const cv_gdn_tiles *t, const gdn_plan *plan)
{
    clvarlen_status st;
    cv_gdn_tiles fallback;
    const int flags = gdn_flags(d, p, c->flag);
    if (c->flag && (st = gdn_enqueue_checks(c, p, d, t, flags)) != CLVARLEN_SUCCESS)
        return st;

    for (int pass = 0; pass < 2; pass++) {
        const int chunked = pass == 1;
        if (chunked ? !plan->chunked : !plan->recurrent)
            continue;
        if (chunked && t->mma && t->scan) {
            int fell_back;
            if ((st = gdn_enqueue_scan(c, p, d, t, plan, flags, &fell_back)) != CLVARLEN_SUCCESS)
                return st;
            if (!fell_back)
                continue;
        }
#if CLVARLEN_HAVE_CLBLAST
        if (chunked && !t->mma && t->blas) {
            int fell_back;
            if ((st = cv_gdn_enqueue_blas(c, p, d, t->scr_cap, t->scr_set, plan->chunk_min, flags,
                                          &fell_back)) != CLVARLEN_SUCCESS)
                return st;
            if (!fell_back)
                continue;
        }
#endif
        const char *name = chunked ? (t->mma ? "gdn_chunked_mma" : "gdn_chunked") : "gdn_recurrent";
        cl_kernel kernel;
        st = gdn_kernel(c->ctx, p, t, name, &kernel);
        if (st == CLVARLEN_ERROR_KERNEL_BUILD && chunked && t->mma && t->ptx && t->cvt) {
            /* the driver refused the inline PTX: the portable kernel from now on */
            c->ctx->gdn_mma_refused = 1;
            cv_log(c->ctx, CLVARLEN_LOG_INFO, "gated delta: tensor-core kernel refused");
            cv_clear_error(c->ctx);
            fallback = *t;
            fallback.mma = 0;
            t = &fallback;
            name = "gdn_chunked";
            st = gdn_kernel(c->ctx, p, t, name, &kernel);
        }
        if (st != CLVARLEN_SUCCESS)
            return st;
        cv_args ar = cv_args_begin(kernel);
        /* the token kernel leaves sequences of chunk_min tokens or more to the chunked one */
        cv_gdn_set_args(&ar, p, d, flags, plan->chunked ? plan->chunk_min : 0, c->flag);
        if ((st = cv_cl_check(c->ctx, ar.err, "gated delta: clSetKernelArg")) != CLVARLEN_SUCCESS)
            return st;
        const int tile = chunked ? (t->mma ? t->mvt : t->cvt) : t->vt;
        const size_t local = (size_t)(chunked ? (t->mma ? 128 : t->cwg) : t->wg);
        const size_t groups = (size_t)p->n_seqs * (size_t)p->HV * (size_t)((p->V + tile - 1) / tile);
        const size_t global = groups * local;
        if ((st = cv_chain_run(c, kernel, name, 1, &global, &local)) != CLVARLEN_SUCCESS)
            return st;
    }
    return CLVARLEN_SUCCESS;
}

/* The chunked kernel's threshold and whether it is allowed at all. */
static clvarlen_status gdn_chunk_policy(clvarlen_context *ctx, const char *fn,
                                        const clvarlen_gdn_params *pa, const cv_gdn_problem *p,
                                        int has_inter, const cv_gdn_tiles *t, int64_t *chunk_min)
{
    *chunk_min = 0; /* 0: never chunked */
    if (has_inter || pa->algorithm == CLVARLEN_GDN_RECURRENT)
        return CLVARLEN_SUCCESS;
    if (t->cvt == 0 && !t->mma) {
        if (pa->algorithm == CLVARLEN_GDN_CHUNKED)
            return cv_error(ctx, CLVARLEN_ERROR_UNSUPPORTED,
                            "%s: the chunked algorithm needs %zu bytes of local memory for K = "
                            "%d; the device has %llu",
                            fn, cv_gdn_chunk_local_bytes((int)p->K, 1, t->ks), (int)p->K,
                            (unsigned long long)ctx->device.local_mem_bytes);
        return CLVARLEN_SUCCESS;
    }
    *chunk_min = pa->algorithm == CLVARLEN_GDN_CHUNKED ? 1 : t->chunk_min; /* 0: never */
    /* AUTO with the tensor-core path on a batch averaging a chunk or more per
     * sequence: every sequence chunked, one path instead of the token kernel for
     * the short ones beside it (H100: 64 / 8192 1.13 ms so against 1.32 ms) */
    if (pa->algorithm == CLVARLEN_GDN_AUTO && t->mma && *chunk_min > 1 && p->n_seqs > 0 &&
        p->total_tokens >= p->n_seqs * (int64_t)GDN_MMA_CHUNK_MIN)
        *chunk_min = 1;
    return CLVARLEN_SUCCESS;
}

clvarlen_status cv_gdn_cl_run(clvarlen_context *ctx, const char *fn, const clvarlen_gdn_params *pa,
                              const cv_gdn_problem *p, const cv_gdn_bufs *d, cl_uint num_events,
                              const cl_event *wait_list, cl_event *event)
{
    const int64_t N = p->n_seqs, T = p->total_tokens;
    cv_gdn_tiles t;
    cv_gdn_resolve_tiles(ctx, p, &t);
    gdn_plan plan = {0};
    clvarlen_status st =
        gdn_chunk_policy(ctx, fn, pa, p, d->inter.m != NULL, &t, &plan.chunk_min);
    if (st != CLVARLEN_SUCCESS)
        return st;
    /* The lengths stay on the device, so the plan goes by what the host knows. */
    if (T > 0 && N > 0) {
        if (!d->cu.m) { /* fixed length: every sequence takes the same kernel */
            plan.chunked = plan.chunk_min > 0 && p->fixed_seqlen >= plan.chunk_min;
            plan.recurrent = !plan.chunked;
        } else {
            /* AUTO launches the chunked kernel only for batches of at least
             * GDN_AUTO_MIN_AVG tokens per sequence on average: its grid covers every
             * (sequence, head, V tile), and for decode batches (one token each) the
             * empty work-groups alone cost 12% of the call (H100, N 256: 507 against
             * 445 us). Without the tensor-core path (CLBlast's chunked path, PoCL)
             * the bar is the threshold itself: the batched products cover every
             * chunk slot whether or not its sequence is long enough, which doubled
             * the time of 2 x 256 tokens at a 512 threshold. A long sequence among
             * many short ones then runs token by token, which is slower for it but
             * the same result. */
            const int64_t avg = t.mma ? GDN_AUTO_MIN_AVG : plan.chunk_min;
            plan.chunked = plan.chunk_min > 0 && T >= plan.chunk_min &&
                           (plan.chunk_min == 1 || T >= N * avg);
            plan.recurrent = !(plan.chunk_min == 1);
        }
    }
    if (!plan.chunked)
        plan.chunk_min = 0;
    else if ((st = cv_gdn_wgmma_ready(ctx, p, t.wgforce, t.wgbad, t.only != 0, &t.wgmma)) !=
             CLVARLEN_SUCCESS)
        return st;

    const bool checks = ctx->device_checks && N > 0 && (d->cu.m || d->sidx.m || d->inter.m);
    cv_chain chain;
    st = cv_chain_begin(&chain, ctx, num_events, wait_list, event != NULL, checks);
    if (st == CLVARLEN_SUCCESS)
        st = gdn_enqueue(&chain, p, d, &t, &plan);
    return cv_chain_end(&chain, fn, st, event);
}

/* ------------------------------------------------------------------ host memory */

/* The host path's device side: only the pool and cache slots that the batch
 * uses travel, packed one per sequence (dsidx, dcidx: packed slot or -1). */
typedef struct gdn_host {
    cv_gdn_bufs d;
    int32_t *dsidx, *dcidx;
    int64_t n_pool, n_cache;
    size_t slot_bytes;  /* one state slot, HV * K * V elements */
} gdn_host;

/* Packs the slots and decides which kernels run (the host knows every length). */
static void gdn_pack_slots(const cv_gdn_problem *p, gdn_plan *plan, gdn_host *h)
{
    for (int64_t n = 0; n < p->n_seqs; n++) {
        int64_t bos, eos;
        cv_gdn_bounds(p, n, &bos, &eos);
        const int64_t L = eos - bos;
        if (L > 0 && plan->chunk_min > 0 && L >= plan->chunk_min)
            plan->chunked = 1;
        else if (L > 0)
            plan->recurrent = 1;
        int64_t s = p->state_pool ? (p->state_indices ? p->state_indices[n] : n) : -1;
        h->dsidx[n] = (s >= 0 && L > 0) ? (int32_t)h->n_pool++ : -1;
        int64_t c = p->inter ? (p->cache_indices ? p->cache_indices[n] : n) : -1;
        h->dcidx[n] = (c >= 0 && L > 0) ? (int32_t)h->n_cache++ : -1;
    }
    if (!plan->chunked)
        plan->chunk_min = 0;
}

/* A device buffer of the host path: filled from host when host != NULL,
 * skipped unless want. */
typedef struct gdn_upload_item {
    cv_gdn_mem *dst;
    size_t bytes;
    const void *host;
    bool want;
} gdn_upload_item;

/* Creates the device buffers, then writes the used pool slots into theirs. */
static clvarlen_status gdn_upload(clvarlen_context *ctx, const cv_gdn_problem *p, gdn_host *h)
{
    const int64_t N = p->n_seqs, T = p->total_tokens, HV = p->HV, K = p->K, V = p->V;
    const size_t es = cv_dtype_size(p->dtype), ses = cv_dtype_size(p->state_dtype);
    cv_gdn_bufs *d = &h->d;
    const gdn_upload_item up[] = {
        {&d->A_log, (size_t)HV * sizeof(float), p->A_log, true},
        {&d->dt_bias, (size_t)HV * cv_dtype_size(p->bias_dtype), p->dt_bias, true},
        {&d->a, cv_span_bytes(p->dtype, HV, T, p->a_stride), p->a, true},
        {&d->b, cv_span_bytes(p->dtype, HV, T, p->b_stride), p->b, true},
        {&d->q, cv_span_bytes(p->dtype, p->H * K, T, p->q_stride), p->q, true},
        {&d->k, cv_span_bytes(p->dtype, p->H * K, T, p->k_stride), p->k, true},
        {&d->v, cv_span_bytes(p->dtype, HV * V, T, p->v_stride), p->v, true},
        {&d->cu, (size_t)(N + 1) * sizeof(int32_t), p->cu_seqlens, p->cu_seqlens != NULL},
        {&d->pool, (size_t)h->n_pool * h->slot_bytes, NULL, h->n_pool > 0},
        {&d->sidx, (size_t)N * sizeof(int32_t), h->dsidx, h->n_pool > 0},
        {&d->inter, (size_t)h->n_cache * (size_t)p->cache_steps * h->slot_bytes, NULL,
         h->n_cache > 0},
        {&d->cidx, (size_t)N * sizeof(int32_t), h->dcidx, h->n_cache > 0},
        {&d->o, (size_t)T * (size_t)(HV * V) * es, NULL, true},
    };
    clvarlen_status st;
    for (size_t i = 0; i < sizeof up / sizeof up[0]; i++) {
        if (up[i].want && (st = cv_buffer(ctx, up[i].bytes, up[i].host, &up[i].dst->m)) !=
                              CLVARLEN_SUCCESS)
            return st;
    }
    for (int64_t n = 0; n < N && h->n_pool > 0; n++) {
        if (h->dsidx[n] < 0)
            continue;
        int64_t s = p->state_indices ? p->state_indices[n] : n;
        const char *src = (const char *)p->state_pool + (size_t)(s * p->slot_pitch) * ses;
        cl_int err = clEnqueueWriteBuffer(ctx->queue, d->pool.m, CL_FALSE,
                                          (size_t)h->dsidx[n] * h->slot_bytes, h->slot_bytes, src,
                                          0, NULL, NULL);
        if ((st = cv_cl_check(ctx, err, "clEnqueueWriteBuffer(state)")) != CLVARLEN_SUCCESS)
            return st;
    }
    return CLVARLEN_SUCCESS;
}

/* Reads the updated pool slots and the intermediate states back (after o's
 * blocking read, so after the kernels), then waits for them. */
static clvarlen_status gdn_read_states(clvarlen_context *ctx, const cv_gdn_problem *p,
                                       const gdn_host *h)
{
    const size_t ses = cv_dtype_size(p->state_dtype), slot_bytes = h->slot_bytes;
    for (int64_t n = 0; n < p->n_seqs; n++) {
        cl_int err = CL_SUCCESS;
        if (h->dsidx[n] >= 0 && p->write_back) {
            int64_t s = p->state_indices ? p->state_indices[n] : n;
            char *dst = (char *)p->state_pool + (size_t)(s * p->slot_pitch) * ses;
            err = clEnqueueReadBuffer(ctx->queue, h->d.pool.m, CL_FALSE,
                                      (size_t)h->dsidx[n] * slot_bytes, slot_bytes, dst, 0, NULL,
                                      NULL);
        }
        if (err == CL_SUCCESS && h->dcidx[n] >= 0) {
            int64_t c = p->cache_indices ? p->cache_indices[n] : n;
            int64_t bos, eos;
            cv_gdn_bounds(p, n, &bos, &eos);
            const size_t steps = (size_t)CV_MIN(eos - bos, (int64_t)p->cache_steps);
            const size_t cache_slot_bytes = (size_t)p->cache_steps * slot_bytes;
            err = clEnqueueReadBuffer(ctx->queue, h->d.inter.m, CL_FALSE,
                                      (size_t)h->dcidx[n] * cache_slot_bytes, steps * slot_bytes,
                                      (char *)p->inter + (size_t)c * cache_slot_bytes, 0, NULL,
                                      NULL);
        }
        clvarlen_status st = cv_cl_check(ctx, err, "clEnqueueReadBuffer(state)");
        if (st != CLVARLEN_SUCCESS)
            return st;
    }
    return cv_cl_check(ctx, clFinish(ctx->queue), "clFinish");
}

static void gdn_host_release(gdn_host *h)
{
    cl_mem *all[] = {&h->d.A_log.m, &h->d.dt_bias.m, &h->d.a.m,    &h->d.b.m,
                     &h->d.q.m,     &h->d.k.m,       &h->d.v.m,    &h->d.cu.m,
                     &h->d.pool.m,  &h->d.sidx.m,    &h->d.inter.m, &h->d.cidx.m,
                     &h->d.o.m};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        cv_release(all[i]);
    free(h->dsidx);
    free(h->dcidx);
}

/* Upload, run, read back; tiles and plan already chosen. */
static clvarlen_status gdn_host_run(clvarlen_context *ctx, const char *fn, const cv_gdn_problem *p,
                                    const cv_gdn_tiles *t, gdn_plan *plan)
{
    const int64_t N = p->n_seqs, HV = p->HV, K = p->K, V = p->V;
    const size_t es = cv_dtype_size(p->dtype);
    gdn_host h;
    memset(&h, 0, sizeof h);
    h.slot_bytes = (size_t)(HV * K * V) * cv_dtype_size(p->state_dtype);
    cv_chain chain;
    clvarlen_status st = cv_chain_begin(&chain, ctx, 0, NULL, false, false);
    if (st != CLVARLEN_SUCCESS)
        goto out;
    h.dsidx = malloc((size_t)N * sizeof *h.dsidx + 1);
    h.dcidx = malloc((size_t)N * sizeof *h.dcidx + 1);
    if (!h.dsidx || !h.dcidx) {
        st = cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "%s: out of memory", fn);
        goto out;
    }
    gdn_pack_slots(p, plan, &h);
    if ((st = gdn_upload(ctx, p, &h)) != CLVARLEN_SUCCESS)
        goto out;

    /* On the device: o packed, the pool and cache hold only the packed slots. */
    cv_gdn_problem dp = *p;
    dp.o_stride = HV * V;
    dp.slots = h.n_pool;
    dp.slot_pitch = HV * K * V;
    dp.cache_slots = h.n_cache;
    if ((st = gdn_enqueue(&chain, &dp, &h.d, t, plan)) != CLVARLEN_SUCCESS)
        goto out;
    /* outputs change only once the kernels succeeded: the read waits on them
     * and fails without writing if they failed */
    const size_t o_row_b = (size_t)(HV * V) * es;
    if ((st = cv_chain_read_rows(&chain, h.d.o.m, p->total_tokens, o_row_b, o_row_b, p->o,
                                 (size_t)p->o_stride * es)) != CLVARLEN_SUCCESS)
        goto out;
    st = gdn_read_states(ctx, p, &h);
out:
    if (st != CLVARLEN_SUCCESS)
        clFinish(ctx->queue); /* no pending transfer may outlive the call */
    st = cv_chain_end(&chain, fn, st, NULL);
    gdn_host_release(&h);
    return st;
}

clvarlen_status cv_gdn_cl_host(clvarlen_context *ctx, const char *fn, const clvarlen_gdn_params *pa,
                               const cv_gdn_problem *p)
{
    cv_gdn_tiles t;
    cv_gdn_resolve_tiles(ctx, p, &t);
    gdn_plan plan = {0};
    clvarlen_status st = gdn_chunk_policy(ctx, fn, pa, p, p->inter != NULL, &t, &plan.chunk_min);
    if (st == CLVARLEN_SUCCESS && t.wgmma && plan.chunk_min > 0) {
        /* checked (once) only when a sequence will run chunked */
        int64_t longest = p->cu_seqlens ? 0 : p->fixed_seqlen;
        for (int64_t n = 0; p->cu_seqlens && n < p->n_seqs; n++)
            longest = CV_MAX(longest, (int64_t)p->cu_seqlens[n + 1] - p->cu_seqlens[n]);
        if (longest >= plan.chunk_min)
            st = cv_gdn_wgmma_ready(ctx, p, t.wgforce, t.wgbad, t.only != 0, &t.wgmma);
    }
    if (st != CLVARLEN_SUCCESS)
        return st;
    return gdn_host_run(ctx, fn, p, &t, &plan);
}

#endif /* CLVARLEN_HAVE_OPENCL */

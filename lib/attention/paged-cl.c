/* Paged KV cache on OpenCL (SPEC 1.1): the cache append, the device check of
 * a paged call, and the paged forward's kernel choice. Rows of few queries
 * (decode, speculative verify) run attn_paged of cl/attention-paged.cl, which
 * reads each key once for all query heads of its KV head and splits a row's
 * keys over work-groups when rows x KV heads cannot fill the device (the f32
 * partials then go through attn_merge); longer rows (chunked prefill) run the
 * tiled kernels of attention-cl.c built with -DCV_PAGED, or, when the rows
 * are long enough, those kernels' packed form on the caches gathered into
 * packed K/V (gather_forward).
 */
#include "attention/attention-cl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if CLVARLEN_HAVE_OPENCL

/* The AUX program of cl/attention-paged.cl (append and check). */
static clvarlen_status aux_kernel(clvarlen_context *ctx, const char *name, cl_kernel *k)
{
    return cv_get_kernel(ctx, "attention-paged.cl", "-DCV_PAGED_AUX", name, k);
}

clvarlen_status cv_paged_cl_append(cv_chain *c, const cv_append_desc *a, const cv_append_mem *m)
{
    clvarlen_context *ctx = c->ctx;
    cl_kernel kernel = NULL;
    clvarlen_status st = aux_kernel(ctx, "kv_append", &kernel);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cl_long n = a->n_tokens, ks = a->k_stride, vs = a->v_stride;
    cl_long slots = a->num_pages * (int64_t)a->page_size;
    cl_int heads = a->heads_kv, dk = a->head_dim, dv = a->head_dim_v;
    cl_int in_dt = cv_dtype_kernel_code(a->dtype), cache_dt = cv_dtype_kernel_code(a->cache_dtype);
    /* 8 elements per work-item when every row start is 16-byte aligned. */
    const size_t ies = cv_dtype_size(a->dtype), ces = cv_dtype_size(a->cache_dtype);
    bool v8 = a->head_dim % 8 == 0 && a->head_dim_v % 8 == 0 && a->k_stride % 8 == 0 &&
              a->v_stride % 8 == 0 && (m->k_off % (8 * ies) | m->v_off % (8 * ies)) == 0 &&
              (m->kc_off % (8 * ces) | m->vc_off % (8 * ces)) == 0;
    cl_int vec = v8 ? 8 : 1;
    cl_ulong k_off = m->k_off, v_off = m->v_off, s_off = m->slot_off;
    cl_ulong kc_off = m->kc_off, vc_off = m->vc_off;
    cv_args g = cv_args_begin(kernel);
    CV_ARG(g, n);
    CV_ARG(g, heads);
    CV_ARG(g, dk);
    CV_ARG(g, dv);
    CV_ARG(g, in_dt);
    CV_ARG(g, cache_dt);
    CV_ARG(g, vec);
    CV_ARG(g, m->k);
    CV_ARG(g, k_off);
    CV_ARG(g, ks);
    CV_ARG(g, m->v);
    CV_ARG(g, v_off);
    CV_ARG(g, vs);
    CV_ARG(g, m->slot);
    CV_ARG(g, s_off);
    CV_ARG(g, slots);
    CV_ARG(g, m->kc);
    CV_ARG(g, kc_off);
    CV_ARG(g, m->vc);
    CV_ARG(g, vc_off);
    CV_ARG(g, c->flag);
    if (g.err != CL_SUCCESS)
        return cv_cl_check(ctx, g.err, "clSetKernelArg(kv_append)");
    size_t local[2] = {64, 1};
    size_t global[2] = {(size_t)heads * (size_t)(dk + dv) / (size_t)vec, (size_t)n};
    return cv_chain_run(c, kernel, "kv_append", 2, global, local);
}

clvarlen_status cv_paged_cl_check(cv_chain *c, const cv_attn_desc *d, const cv_attn_mem *m)
{
    clvarlen_context *ctx = c->ctx;
    clvarlen_status st = cv_chain_check_cu_seqlens(c, m->cu_q, m->cu_q_off, d->n_seqs, d->total_q);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cl_kernel kernel = NULL;
    if ((st = aux_kernel(ctx, "check_paged", &kernel)) != CLVARLEN_SUCCESS)
        return st;
    cl_long total_q = d->total_q, pt_stride = d->pt_stride;
    cl_ulong cu_off = m->cu_q_off, cs_off = m->cu_k_off, pt_off = m->pt_off;
    cl_int page_size = d->page_size, num_pages = (cl_int)d->num_pages;
    cl_int capacity = (cl_int)d->total_k, max_q = d->max_seqlen_q;
    cv_args g = cv_args_begin(kernel);
    CV_ARG(g, m->cu_q);
    CV_ARG(g, cu_off);
    CV_ARG(g, total_q);
    CV_ARG(g, max_q);
    CV_ARG(g, m->cu_k);
    CV_ARG(g, cs_off);
    CV_ARG(g, m->pt);
    CV_ARG(g, pt_off);
    CV_ARG(g, pt_stride);
    CV_ARG(g, page_size);
    CV_ARG(g, num_pages);
    CV_ARG(g, capacity);
    CV_ARG(g, c->flag);
    if (g.err != CL_SUCCESS)
        return cv_cl_check(ctx, g.err, "clSetKernelArg(check_paged)");
    size_t local = 64, global = (size_t)d->n_seqs * local;
    return cv_chain_run(c, kernel, "check_paged", 1, &global, &local);
}

/* Whether the rows are short enough for attn_paged: max_seqlen_q when the
 * caller gave it, else the average query count. */
static bool use_decode_kernel(const cv_attn_desc *d)
{
    const int64_t group = d->heads_q / d->heads_kv;
    if (d->max_seqlen_q > 0)
        return (int64_t)d->max_seqlen_q * group <= CV_PAGED_DECODE_ROWS;
    return d->total_q <= 4 * d->n_seqs;
}

/* CLVARLEN_PAGED_TUNING="name=N,..." (benchmarks): bn (keys per tile of
 * attn_paged, 32), wg and unr (attn_paged_nv's work-group size and keys per
 * work-item per step, 64 and 4), wave (the work-groups per compute unit
 * automatic splitting aims for, 4), splits (forces the split count of a call
 * with num_splits 0), pack, ppack (the packed tensor-core kernel for decode
 * and for longer rows, 1 and 0), pbn (its keys per tile, 64) and gather (long
 * rows through packed K/V: -1 automatic, 0 never, 1 when the scratch fits). */
static int tuning_knob(const char *name, int fallback)
{
    return cv_attn_knob("CLVARLEN_PAGED_TUNING", name, fallback);
}

typedef struct paged_cfg {
    int nv; /* attn_paged_nv of cl/attention-paged-nv.cl */
    int pr, rg, bn, splits, wg;
    char options[192];
} paged_cfg;

/* attn_paged_nv: 16-bit caches, D == Dv a power of two, 16-byte rows and
 * offsets, at most 8 query rows per KV head. Chosen on NVIDIA devices, or on
 * any device with CLVARLEN_ATTENTION_KERNEL=mma (its emulated shuffles). */
static bool nv_decode_fits(const clvarlen_context *ctx, const cv_attn_desc *d,
                           const cv_attn_mem *m, int64_t rows)
{
    const char *force = getenv("CLVARLEN_ATTENTION_KERNEL");
    bool want = force && strcmp(force, "mma") == 0
                    ? true
                    : !(force && strcmp(force, "portable") == 0) &&
                          ctx->device.vendor == CLVARLEN_VENDOR_NVIDIA;
    int64_t dim = d->head_dim;
    return want && d->dtype != CLVARLEN_DTYPE_F32 && d->head_dim == d->head_dim_v &&
           (dim & (dim - 1)) == 0 && rows <= 8 && (m->q_off | m->k_off | m->v_off) % 16 == 0 &&
           d->q_stride % 8 == 0;
}

/* Splits: forced, or, when rows x KV heads are fewer than two per compute
 * unit, about `wave` (4) work-groups per unit, each split at least 256 keys
 * of the capacity. The count is chosen so that the work-groups spread evenly:
 * 544 of them on 132 units (17 splits) leave some units a fifth one and cost
 * a fifth of the time, where 512 (16 splits) do not (measured on an H100). */
static int choose_splits(const clvarlen_context *ctx, const cv_attn_desc *d)
{
    int64_t units = d->n_seqs * d->heads_kv, cus = ctx->device.compute_units;
    int64_t splits = d->num_splits > 0 ? d->num_splits : tuning_knob("splits", 0);
    if (splits > 0)
        return (int)splits;
    if (cus <= 0 || units >= 2 * cus)
        return 1;
    int64_t by_keys = d->total_k / 256 > 1 ? d->total_k / 256 : 1;
    int64_t wave = tuning_knob("wave", 4);
    wave = wave > 0 ? wave : 4;
    double best_eff = 0.0;
    int64_t best = 1;
    for (int64_t t = wave; t >= 1; t--) { /* work-groups per unit, the fullest first */
        int64_t s = t * cus / units;
        s = s < by_keys ? s : by_keys;
        s = s < CV_PAGED_MAX_SPLITS ? s : CV_PAGED_MAX_SPLITS;
        if (s < 1)
            continue;
        double per_unit = (double)(units * s) / (double)cus;
        double eff = per_unit / (double)((units * s + cus - 1) / cus);
        if (eff > best_eff + 0.02) {
            best_eff = eff;
            best = s;
        }
    }
    return (int)best;
}

static clvarlen_status decode_cfg(clvarlen_context *ctx, const char *fn, const cv_attn_desc *d,
                                  const cv_attn_mem *m, paged_cfg *cfg)
{
    const int dv = d->head_dim_v, dk = d->head_dim;
    const int64_t group = d->heads_q / d->heads_kv;
    int64_t rows = d->max_seqlen_q > 0 ? (int64_t)d->max_seqlen_q * group : 16;
    cfg->splits = choose_splits(ctx, d);
    if (nv_decode_fits(ctx, d, m, rows)) {
        cfg->nv = 1;
        cfg->pr = (int)cv_pow2_ceil(rows < 1 ? 1 : rows);
        /* Measured on an H100 (bf16, Hq 32, Hk 8, D 128, B 64 x 4096): 64
         * work-items with 4 keys per step each beat 128 with 2 (0.64x against
         * 0.57x of the copy bandwidth); 8 keys per step take too many
         * registers. */
        cfg->wg = (int)cv_pow2_floor(tuning_knob("wg", 64));
        if (cfg->wg < 32 || cfg->wg < dk / 8)
            cfg->wg = dk / 8 > 64 ? dk / 8 : 64;
        int unr = tuning_knob("unr", 4);
        unr = unr < 1 ? 1 : unr > 8 ? 8 : unr;
        snprintf(cfg->options, sizeof cfg->options,
                 "-DCV_PAGED=1 -DCV_DTYPE=%d -DHEAD_DIM=%d -DPR=%d -DUNR=%d -DWG_SIZE=%d%s",
                 cv_dtype_kernel_code(d->dtype), dk, cfg->pr, unr, cfg->wg,
                 ctx->device.vendor == CLVARLEN_VENDOR_NVIDIA ? " -DCV_NV_PTX=1" : "");
        return CLVARLEN_SUCCESS;
    }
    int rg = dv >= 64 ? 1 : (64 + dv - 1) / dv;
    if (rg == 3)
        rg = 4; /* PR stays a multiple of RG */
    int pr = (int)cv_pow2_ceil(rows < 4 ? 4 : rows > 16 ? 16 : rows);
    int bn = (int)cv_pow2_floor(tuning_knob("bn", 32));
    bn = bn < 8 ? 8 : bn > 128 ? 128 : bn;
    uint64_t limit = ctx->device.local_mem_bytes ? ctx->device.local_mem_bytes : 32768;
    for (;;) {
        uint64_t floats = (uint64_t)pr * dk + (uint64_t)bn * (dk + 1) + (uint64_t)bn * dv +
                          (uint64_t)pr * bn + 3 * (uint64_t)pr;
        if (floats * 4 + 8 * (uint64_t)pr + 64 <= limit)
            break;
        if (bn > 8)
            bn /= 2;
        else if (pr > 4)
            pr /= 2;
        else
            return cv_error(ctx, CLVARLEN_ERROR_UNSUPPORTED,
                            "%s: head dims %d/%d need more local memory than the device has "
                            "(%llu bytes)",
                            fn, dk, dv, (unsigned long long)limit);
    }
    cfg->pr = pr;
    cfg->rg = rg;
    cfg->bn = bn;
    cfg->wg = dv * rg;
    snprintf(cfg->options, sizeof cfg->options,
             "-DCV_PAGED=1 -DCV_DTYPE=%d -DHEAD_DIM=%d -DHEAD_DIM_V=%d -DPR=%d -DRG=%d -DBN=%d",
             cv_dtype_kernel_code(d->dtype), dk, dv, pr, rg, bn);
    return CLVARLEN_SUCCESS;
}

static cl_int decode_args(cl_kernel kernel, const cv_attn_desc *d, const cv_attn_mem *m,
                          cl_mem part, int splits, cl_mem flag)
{
    cl_ulong q_off = m->q_off, k_off = m->k_off, v_off = m->v_off, cu_off = m->cu_q_off;
    cl_ulong cs_off = m->cu_k_off, pt_off = m->pt_off, o_off = m->o_off, lse_off = m->lse_off;
    cl_long q_stride = d->q_stride, pt_stride = d->pt_stride, o_stride = d->o_stride;
    cl_int page_size = d->page_size, num_pages = (cl_int)d->num_pages;
    cl_int capacity = (cl_int)d->total_k, n_splits = splits;
    cl_int heads_q = d->heads_q, heads_kv = d->heads_kv, total_q = (cl_int)d->total_q;
    cl_int causal = d->causal, wl = d->window_left, wr = d->window_right;
    cl_float scale = d->scale, softcap = d->softcap;
    cl_float scale_log2 = (cl_float)((double)d->scale * 1.4426950408889634);
    cv_args a = cv_args_begin(kernel);
    CV_ARG(a, m->q);
    CV_ARG(a, q_off);
    CV_ARG(a, q_stride);
    CV_ARG(a, m->k);
    CV_ARG(a, k_off);
    CV_ARG(a, m->v);
    CV_ARG(a, v_off);
    CV_ARG(a, m->cu_q);
    CV_ARG(a, cu_off);
    CV_ARG(a, m->cu_k);
    CV_ARG(a, cs_off);
    CV_ARG(a, m->pt);
    CV_ARG(a, pt_off);
    CV_ARG(a, pt_stride);
    CV_ARG(a, page_size);
    CV_ARG(a, num_pages);
    CV_ARG(a, capacity);
    CV_ARG(a, m->o);
    CV_ARG(a, o_off);
    CV_ARG(a, o_stride);
    CV_ARG(a, m->lse);
    CV_ARG(a, lse_off);
    CV_ARG(a, part);
    CV_ARG(a, n_splits);
    CV_ARG(a, heads_q);
    CV_ARG(a, heads_kv);
    CV_ARG(a, total_q);
    CV_ARG(a, scale_log2);
    CV_ARG(a, scale);
    CV_ARG(a, softcap);
    CV_ARG(a, causal);
    CV_ARG(a, wl);
    CV_ARG(a, wr);
    CV_ARG(a, flag);
    return a.err;
}

/* Chunked prefill through packed K/V: when the rows are long, each row's
 * cache is gathered into the context's scratch (paged_gather_cu, paged_gather
 * of the AUX program) and the contiguous kernels run on it, as fast as a
 * packed call: the tiled kernels built with -DCV_PAGED pay a page lookup per
 * key and registers for it, while the gather costs one read and one write of
 * each row's K/V rows (about 60 us for a 16384-token cache at Hk 8, D 128,
 * bf16 on an H100). Each gathered key serves every query row of its KV head,
 * so the gather pays when those are many: an average of CV_PAGED_GATHER_ROWS
 * queries x query heads per KV head and row. Measured on an H100 (bf16, Hq
 * 32, Hk 8, D 128, one row over a 16384-token cache, page 16; x contiguous
 * K/V, docs/PERFORMANCE.md): chunk 2048 0.96-0.99 gathered against 0.88-0.89
 * paged, 512 0.93 / 0.89-0.90, 256 0.89 / 0.78-0.79, 128 0.91 / 0.78-0.79.
 * CLVARLEN_PAGED_TUNING gather=0 never gathers, gather=1 always does (when
 * the scratch fits), decode rows included. */
#define CV_PAGED_GATHER_ROWS 512

static bool want_gather(const cv_attn_desc *d, bool decode)
{
    const int g = tuning_knob("gather", -1);
    if (g >= 0)
        return g > 0; /* forced: rows of a few queries too (the packed kernels take any) */
    const int64_t group = d->heads_q / d->heads_kv;
    return !decode && d->total_q * group >= CV_PAGED_GATHER_ROWS * d->n_seqs;
}

/* The scratch the gathered form may take: the caller's buffer as it is, or up
 * to an eighth of the device's memory within one allocation's limit. */
static uint64_t gather_limit(const clvarlen_context *ctx)
{
    if (ctx->temp_user)
        return ctx->temp_bytes;
    cl_ulong max_alloc = 0;
    if (clGetDeviceInfo(ctx->cl_dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc,
                        NULL) != CL_SUCCESS)
        max_alloc = 0;
    return CV_MIN(ctx->device.global_mem_bytes / 8, (uint64_t)max_alloc);
}

static size_t round256(size_t x)
{
    return (x + 255) / 256 * 256;
}

/* The gathered form on the chain; *done false (nothing enqueued) when its
 * scratch does not fit or cannot be had: the caller runs the paged kernels.
 * Scratch layout: the contiguous forward's own use from byte 0, then cu_k
 * [n + 1], the K rows [n * capacity bound, Hk, D] and the V rows. */
static clvarlen_status gather_forward(cv_chain *c, const char *fn, const cv_attn_desc *d,
                                      const cv_attn_mem *m, bool *done)
{
    clvarlen_context *ctx = c->ctx;
    *done = false;
    const int64_t tokens = d->n_seqs * d->total_k; /* every row at its capacity, at most */
    if (tokens > INT32_MAX)
        return CLVARLEN_SUCCESS;
    const size_t es = cv_dtype_size(d->dtype);
    const size_t k_row = (size_t)d->heads_kv * (size_t)d->head_dim * es;
    const size_t v_row = (size_t)d->heads_kv * (size_t)d->head_dim_v * es;
    cv_attn_desc g = *d;
    g.page_size = 0;
    g.max_pages = 0;
    g.num_pages = 0;
    g.pt_stride = 0;
    g.num_splits = 0;
    g.total_k = tokens;
    g.k_stride = (int64_t)d->heads_kv * d->head_dim;
    g.v_stride = (int64_t)d->heads_kv * d->head_dim_v;
    g.max_seqlen_k = (int32_t)d->total_k;
    cv_attn_mem gm = *m;
    gm.pt = NULL;
    gm.pt_off = gm.k_off = gm.v_off = gm.cu_k_off = 0; /* 256-byte aligned, as placed below */
    size_t fwd = 0;
    clvarlen_status st = cv_attn_cl_forward_temp(ctx, fn, &g, &gm, NULL, &fwd);
    if (st != CLVARLEN_SUCCESS)
        return st;
    const size_t cu_off = round256(fwd);
    const size_t k_off = round256(cu_off + (size_t)(d->n_seqs + 1) * 4);
    const size_t v_off = round256(k_off + (size_t)tokens * k_row);
    const size_t bytes = v_off + (size_t)tokens * v_row;
    if ((uint64_t)bytes > gather_limit(ctx)) {
        cv_log(ctx, CLVARLEN_LOG_INFO,
               "%s: %zu bytes of scratch for the gathered prefill are too many; running the "
               "paged kernels",
               fn, bytes);
        return CLVARLEN_SUCCESS;
    }
    cl_kernel kcu = NULL, kg = NULL;
    if ((st = aux_kernel(ctx, "paged_gather_cu", &kcu)) != CLVARLEN_SUCCESS ||
        (st = aux_kernel(ctx, "paged_gather", &kg)) != CLVARLEN_SUCCESS)
        return st;
    cl_mem scr = NULL;
    if (cv_temp(ctx, bytes, &scr) != CLVARLEN_SUCCESS) {
        cv_log(ctx, CLVARLEN_LOG_INFO,
               "%s: no scratch for the gathered prefill; running the paged kernels", fn);
        cv_clear_error(ctx);
        return CLVARLEN_SUCCESS;
    }
    cl_long n = d->n_seqs;
    cl_int capacity = (cl_int)d->total_k;
    cl_ulong cs_off = m->cu_k_off, cuo = cu_off;
    cv_args a = cv_args_begin(kcu);
    CV_ARG(a, m->cu_k);
    CV_ARG(a, cs_off);
    CV_ARG(a, n);
    CV_ARG(a, capacity);
    CV_ARG(a, scr);
    CV_ARG(a, cuo);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(ctx, a.err, "clSetKernelArg(paged_gather_cu)");
    size_t one = 64;
    if ((st = cv_chain_run(c, kcu, "paged_gather_cu", 1, &one, &one)) != CLVARLEN_SUCCESS)
        return st;

    /* 16-byte moves when every row and cache offset allows (D is a multiple of 16). */
    const bool wide = (k_row | v_row) % 16 == 0 && (m->k_off | m->v_off) % 16 == 0;
    cl_int unit = wide ? 16 : (cl_int)es;
    cl_int k_units = (cl_int)(k_row / (size_t)unit), units = k_units + (cl_int)(v_row / (size_t)unit);
    cl_ulong pt_off = m->pt_off, kc_off = m->k_off, vc_off = m->v_off, ko = k_off, vo = v_off;
    cl_long pt_stride = d->pt_stride;
    cl_int page_size = d->page_size, num_pages = (cl_int)d->num_pages;
    a = cv_args_begin(kg);
    CV_ARG(a, k_units);
    CV_ARG(a, units);
    CV_ARG(a, unit);
    CV_ARG(a, capacity);
    CV_ARG(a, m->cu_k);
    CV_ARG(a, cs_off);
    CV_ARG(a, m->pt);
    CV_ARG(a, pt_off);
    CV_ARG(a, pt_stride);
    CV_ARG(a, page_size);
    CV_ARG(a, num_pages);
    CV_ARG(a, m->k);
    CV_ARG(a, kc_off);
    CV_ARG(a, m->v);
    CV_ARG(a, vc_off);
    CV_ARG(a, scr);
    CV_ARG(a, cuo);
    CV_ARG(a, ko);
    CV_ARG(a, vo);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(ctx, a.err, "clSetKernelArg(paged_gather)");
    size_t local[3] = {64, 1, 1};
    size_t global[3] = {((size_t)units + 63) / 64 * 64, (size_t)d->total_k, (size_t)d->n_seqs};
    if ((st = cv_chain_run(c, kg, "paged_gather", 3, global, local)) != CLVARLEN_SUCCESS)
        return st;

    gm.k = gm.v = gm.cu_k = scr;
    gm.cu_k_off = cu_off;
    gm.k_off = k_off;
    gm.v_off = v_off;
    *done = true;
    return cv_attn_cl_forward(c, fn, &g, &gm, NULL);
}

clvarlen_status cv_paged_cl_forward(cv_chain *c, const char *fn, const cv_attn_desc *d,
                                    const cv_attn_mem *m)
{
    clvarlen_context *ctx = c->ctx;
    const bool decode = use_decode_kernel(d);
    if (want_gather(d, decode)) {
        bool done = false;
        clvarlen_status st = gather_forward(c, fn, d, m, &done);
        if (st != CLVARLEN_SUCCESS || done)
            return st;
    }
    if (cv_attn_use_mma(ctx, d, m) && d->heads_q > d->heads_kv &&
        tuning_knob(decode ? "pack" : "ppack", decode ? 1 : 0)) {
        /* Tensor cores with the group's query heads packed into the tile rows:
         * K and V read once per KV head. Decode rows fill one warp's 16. */
        const int64_t group = d->heads_q / d->heads_kv;
        const int64_t rows = d->max_seqlen_q > 0 ? (int64_t)d->max_seqlen_q * group : 64;
        int bn = (int)cv_pow2_floor(tuning_knob("pbn", 64));
        const int bm = decode && rows <= 16 ? 16 : 64;
        const cv_attn_pack pack = {.block_m = bm,
                                   .block_n = bn < 16 ? 16 : bn > 64 ? 64 : bn,
                                   .splits = decode ? choose_splits(ctx, d) : 1,
                                   .one_tile = d->max_seqlen_q > 0 && rows <= bm};
        return cv_attn_cl_forward(c, fn, d, m, &pack);
    }
    if (!decode)
        return cv_attn_cl_forward(c, fn, d, m, NULL);
    paged_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    clvarlen_status st = decode_cfg(ctx, fn, d, m, &cfg);
    if (st != CLVARLEN_SUCCESS)
        return st;
    const char *name = cfg.nv ? "attn_paged_nv" : "attn_paged";
    cl_kernel kernel = NULL;
    if ((st = cv_get_kernel(ctx, cfg.nv ? "attention-paged-nv.cl" : "attention-paged.cl",
                            cfg.options, name, &kernel)) != CLVARLEN_SUCCESS)
        return st;
    /* Partials of a split call: o [splits, Tq, Hq, Dv] and lse [splits, Hq, Tq], f32. */
    cl_mem part = NULL;
    const uint64_t rows = (uint64_t)d->total_q * (uint64_t)d->heads_q * (uint64_t)cfg.splits;
    const uint64_t part_bytes = rows * ((uint64_t)d->head_dim_v + 1) * 4;
    if (cfg.splits > 1 && (st = cv_temp(ctx, (size_t)part_bytes, &part)) != CLVARLEN_SUCCESS)
        return st;
    cl_int err = decode_args(kernel, d, m, part, cfg.splits, c->flag);
    if (err != CL_SUCCESS)
        return cv_cl_check(ctx, err, "clSetKernelArg(attn_paged)");
    size_t local = (size_t)cfg.wg;
    size_t global = (size_t)d->n_seqs * (size_t)d->heads_kv * (size_t)cfg.splits * local;
    if ((st = cv_chain_run(c, kernel, name, 1, &global, &local)) != CLVARLEN_SUCCESS ||
        cfg.splits == 1)
        return st;
    return cv_attn_cl_merge_splits(c, d, m, part, 0, cfg.splits);
}

#endif /* CLVARLEN_HAVE_OPENCL */

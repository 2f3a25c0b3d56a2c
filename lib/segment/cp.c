/* Context parallelism (SPEC 2.5): the per-document plan (a scan in
 * cl/segment-scan.cl, per-token arrays in cl/segment-maps.cl) and the CP row
 * gather and scatter (cl/segment.cl; fused with their scan up to
 * CV_SEG_FUSE_MAX documents). */
#include "segment/segment.h"

/* CP arguments: world >= 1 (2W fits int), 0 <= rank < world. */
static clvarlen_status check_cp(clvarlen_context *ctx, const char *fn, int32_t world, int32_t rank)
{
    if (world < 1 || world > (1 << 29))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: world %d is outside [1, 2^29]", fn, (int)world);
    if (rank < 0 || rank >= world)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: rank %d is outside [0, world %d)", fn, (int)rank, (int)world);
    return CLVARLEN_SUCCESS;
}

/* Local tokens of a rank for valid host cu_seqlens. */
static int64_t cp_local_total(const int32_t *cu, int64_t n, int32_t world, int32_t rank)
{
    int64_t C = 2 * (int64_t)world, total = 0;
    for (int64_t s = 0; s < n; s++) {
        int64_t L = cu[s + 1] - cu[s];
        total += cv_cp_chunk_len(L, C, rank) + cv_cp_chunk_len(L, C, C - 1 - rank);
    }
    return total;
}

#if CLVARLEN_HAVE_OPENCL

/* Outputs of segment_cp_scan (any may be NULL but local_cu). */
typedef struct cp_scan_out {
    cl_mem local_cu;
    size_t local_off;
    cl_mem head_cu;
    size_t head_off;
    cl_mem tail_cu;
    size_t tail_off;
    cl_mem total;
    size_t total_off;
} cp_scan_out;

static clvarlen_status enq_cp_scan(cv_chain *q, cl_mem cu, size_t cu_off, int64_t n, int32_t world,
                                   int32_t rank, int64_t capacity, const cp_scan_out *o,
                                   cl_mem scratch)
{
    cl_mem flag = q->flag;
    cl_int check = q->flag != NULL;
    cl_kernel k;
    SEG_TRY(cv_seg_kernel(q->ctx, SEG_PROG_SCANS, 0, -1, "segment_cp_scan", &k));
    cl_ulong co = cu_off, lo = o->local_off, ho = o->head_off, tlo = o->tail_off,
             to = o->total_off;
    cl_int nn = (cl_int)n, w = world, r = rank;
    cl_long cap = capacity;
    cv_args a = cv_args_begin(k);
    CV_ARG(a, cu);
    CV_ARG(a, co);
    CV_ARG(a, nn);
    CV_ARG(a, w);
    CV_ARG(a, r);
    CV_ARG(a, cap);
    CV_ARG(a, o->local_cu);
    CV_ARG(a, lo);
    CV_ARG(a, o->head_cu);
    CV_ARG(a, ho);
    CV_ARG(a, o->tail_cu);
    CV_ARG(a, tlo);
    CV_ARG(a, o->total);
    CV_ARG(a, to);
    CV_ARG(a, scratch);
    CV_ARG(a, flag);
    CV_ARG(a, check);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(q->ctx, a.err, "segment_cp_scan: clSetKernelArg");
    size_t wg = cv_seg_scan_wg(q->ctx);
    return cv_seg_run(q, k, "segment_cp_scan", wg, wg);
}

typedef struct plan_args {
    cl_mem cu;
    size_t cu_off;
    int64_t n;
    int32_t world, rank;
    cp_scan_out scan; /* local_cu, head_cu, tail_cu, local_tokens */
    int64_t capacity;
    cl_mem global_index;
    size_t gi_off;
    cl_mem position;
    size_t pos_off;
} plan_args;

/* The plan's per-token arrays (global index, position) from local_cu. */
static clvarlen_status enq_cp_plan_tokens(cv_chain *q, const plan_args *p, cl_kernel k,
                                          cl_mem scratch)
{
    cl_mem flag = q->flag;
    cl_int check = q->flag != NULL;
    cl_ulong co = p->cu_off, lo = p->scan.local_off, go = p->gi_off, po = p->pos_off;
    cl_int nn = (cl_int)p->n, w = p->world, r = p->rank;
    cl_long cap = p->capacity;
    cv_args a = cv_args_begin(k);
    CV_ARG(a, p->cu);
    CV_ARG(a, co);
    CV_ARG(a, nn);
    CV_ARG(a, w);
    CV_ARG(a, r);
    CV_ARG(a, p->scan.local_cu);
    CV_ARG(a, lo);
    CV_ARG(a, scratch);
    CV_ARG(a, cap);
    CV_ARG(a, p->global_index);
    CV_ARG(a, go);
    CV_ARG(a, p->position);
    CV_ARG(a, po);
    CV_ARG(a, flag);
    CV_ARG(a, check);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(q->ctx, a.err, "segment_cp_plan_tokens: clSetKernelArg");
    size_t global, local;
    cv_seg_elem_grid(q->ctx, p->capacity, &global, &local);
    return cv_seg_run(q, k, "segment_cp_plan_tokens", global, local);
}

/* With device checks, cu_seqlens is checked first (it is the caller's). */
static clvarlen_status enq_cp_plan(cv_chain *q, const plan_args *p)
{
    if (q->flag)
        SEG_TRY(cv_chain_check_cu_seqlens(q, p->cu, p->cu_off, p->n, -1));
    bool want_tokens = p->global_index || p->position;
    bool tokens = want_tokens && p->capacity > 0 && p->n > 0;
    cl_kernel k = NULL;
    if (tokens)
        SEG_TRY(cv_seg_kernel(q->ctx, SEG_PROG_MAPS, 0, -1, "segment_cp_plan_tokens", &k));
    cl_mem scratch = NULL; /* the local total, at byte 0 of the temp buffer */
    SEG_TRY(cv_seg_temp(q, 0, &scratch));
    SEG_TRY(enq_cp_scan(q, p->cu, p->cu_off, p->n, p->world, p->rank,
                        want_tokens ? p->capacity : -1, &p->scan, scratch));
    if (!tokens)
        return CLVARLEN_SUCCESS;
    return enq_cp_plan_tokens(q, p, k, scratch);
}

typedef struct cp_rows_args {
    clvarlen_dtype dtype;
    int64_t row_elems;
    cl_mem global;
    size_t g_off, g_stride_b;
    int64_t total_tokens;
    cl_mem cu;
    size_t cu_off;
    int64_t n;
    int32_t world, rank;
    cl_mem local;
    size_t l_off, l_stride_b;
    int64_t local_capacity;
    int to_local;
    clvarlen_scatter_mode mode;
    bool zero_rest;
} cp_rows_args;

/* The kernel arguments segment_cp_rows and segment_cp_rows_fused share,
 * set from index `from` on (the unfused kernel takes the scanned local
 * offsets and total before them). */
static void cp_rows_tail_args(cv_args *a, const cp_rows_args *c, const cv_seg_geo *g, cl_mem flag)
{
    cl_ulong go = c->g_off, gs = c->g_stride_b, lo = c->l_off, ls = c->l_stride_b;
    cl_long lcap = c->local_capacity, grows = c->total_tokens;
    cl_int og = !c->to_local && c->zero_rest, tl = c->to_local, check = flag != NULL;
    CV_ARG(*a, lcap);
    CV_ARG(*a, grows);
    CV_ARG(*a, og);
    CV_ARG(*a, tl);
    CV_ARG(*a, c->global);
    CV_ARG(*a, go);
    CV_ARG(*a, gs);
    CV_ARG(*a, c->local);
    CV_ARG(*a, lo);
    CV_ARG(*a, ls);
    CV_ARG(*a, g->row_units);
    CV_ARG(*a, g->lpr);
    CV_ARG(*a, flag);
    CV_ARG(*a, check);
}

/* Local offsets into a temporary, then one row kernel (over local rows, or
 * over global rows when the rest is zeroed); up to CV_SEG_FUSE_MAX documents,
 * each work-group scans the offsets itself (one launch). */
static clvarlen_status enq_cp_rows(cv_chain *q, const cp_rows_args *c)
{
    clvarlen_context *ctx = q->ctx;
    if (q->flag)
        SEG_TRY(cv_chain_check_cu_seqlens(q, c->cu, c->cu_off, c->n, c->total_tokens));
    if (c->n <= 0 || c->total_tokens <= 0)
        return CLVARLEN_SUCCESS;
    bool acc = !c->to_local && c->mode == CLVARLEN_SCATTER_ACCUMULATE;
    bool over_global = !c->to_local && c->zero_rest;
    size_t row_bytes = (size_t)c->row_elems * cv_dtype_size(c->dtype);
    int unit = 0;
    int64_t units = c->row_elems;
    if (!acc) {
        size_t v[4] = {c->g_off, c->l_off, c->g_stride_b, c->l_stride_b};
        unit = cv_seg_pick_unit(row_bytes, v, 4);
        units = (int64_t)(row_bytes / (size_t)unit);
    }
    bool fused = c->n <= CV_SEG_FUSE_MAX;
    const char *name = fused ? "segment_cp_rows_fused" : "segment_cp_rows";
    cl_kernel k;
    SEG_TRY(cv_seg_kernel(ctx, acc ? SEG_PROG_ACC : SEG_PROG_COPY, unit,
                          acc ? cv_dtype_kernel_code(c->dtype) : -1, name, &k));
    int64_t n_iter = over_global ? c->total_tokens : CV_MIN(c->local_capacity, c->total_tokens);
    cl_ulong co = c->cu_off, lco = SEG_TEMP_OFF;
    cl_int nn = (cl_int)c->n, w = c->world, r = c->rank;
    cl_mem temp = NULL;
    if (!fused) { /* temp: scratch word, then the local offsets [n + 1] */
        SEG_TRY(cv_seg_temp(q, (size_t)(c->n + 1) * sizeof(cl_int), &temp));
        cp_scan_out o = {.local_cu = temp, .local_off = SEG_TEMP_OFF};
        SEG_TRY(enq_cp_scan(q, c->cu, c->cu_off, c->n, c->world, c->rank, c->local_capacity,
                            &o, temp));
        if (n_iter <= 0)
            return CLVARLEN_SUCCESS;
    }
    cv_seg_geo g;
    if (fused)
        cv_seg_fused_geo(ctx, units, n_iter, &g);
    else
        cv_seg_row_geo(ctx, units, n_iter, &g);
    cv_args a = cv_args_begin(k);
    CV_ARG(a, c->cu);
    CV_ARG(a, co);
    CV_ARG(a, nn);
    CV_ARG(a, w);
    CV_ARG(a, r);
    if (!fused) {
        CV_ARG(a, temp);
        CV_ARG(a, lco);
        CV_ARG(a, temp);
    }
    cp_rows_tail_args(&a, c, &g, q->flag);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(ctx, a.err, fused ? "segment_cp_rows_fused: clSetKernelArg"
                                             : "segment_cp_rows: clSetKernelArg");
    return cv_seg_run(q, k, name, g.global, g.local);
}

#endif /* CLVARLEN_HAVE_OPENCL */

/* ================================================================ entry points */

#if CLVARLEN_HAVE_OPENCL
static clvarlen_status cp_plan_on_device(clvarlen_context *ctx, const int32_t *cu_seqlens,
                                         int64_t n, int32_t world, int32_t rank, int64_t local,
                                         clvarlen_cp_plan_out *plan)
{
    cv_chain q;
    cv_chain_begin(&q, ctx, 0, NULL, false, false);
    size_t cub = (size_t)(n + 1) * 4, tb = (size_t)local * 4;
    cl_mem d_cu = NULL, d_lcu = NULL, d_h = NULL, d_t = NULL, d_gi = NULL, d_pos = NULL;
    clvarlen_status st;
    SEG_TRY_OUT(cv_seg_upload(ctx, cu_seqlens, cub, &d_cu));
    SEG_TRY_OUT(cv_buffer(ctx, cub, NULL, &d_lcu));
    if (plan->head_cu)
        SEG_TRY_OUT(cv_buffer(ctx, cub, NULL, &d_h));
    if (plan->tail_cu)
        SEG_TRY_OUT(cv_buffer(ctx, cub, NULL, &d_t));
    if (plan->global_index && local > 0)
        SEG_TRY_OUT(cv_buffer(ctx, tb, NULL, &d_gi));
    if (plan->position && local > 0)
        SEG_TRY_OUT(cv_buffer(ctx, tb, NULL, &d_pos));
    plan_args p = {
        .cu = d_cu,
        .n = n,
        .world = world,
        .rank = rank,
        .scan = {.local_cu = d_lcu, .head_cu = d_h, .tail_cu = d_t},
        .capacity = local,
        .global_index = d_gi,
        .position = d_pos,
    };
    SEG_TRY_OUT(enq_cp_plan(&q, &p));
    SEG_TRY_OUT(cv_seg_read_bytes(&q, d_lcu, cub, plan->local_cu_seqlens));
    if (d_h)
        SEG_TRY_OUT(cv_seg_read_bytes(&q, d_h, cub, plan->head_cu));
    if (d_t)
        SEG_TRY_OUT(cv_seg_read_bytes(&q, d_t, cub, plan->tail_cu));
    if (d_gi)
        SEG_TRY_OUT(cv_seg_read_bytes(&q, d_gi, tb, plan->global_index));
    if (d_pos)
        SEG_TRY_OUT(cv_seg_read_bytes(&q, d_pos, tb, plan->position));
out:
    cv_chain_abort(&q);
    cv_release(&d_cu);
    cv_release(&d_lcu);
    cv_release(&d_h);
    cv_release(&d_t);
    cv_release(&d_gi);
    cv_release(&d_pos);
    return st;
}
#endif /* CLVARLEN_HAVE_OPENCL */

/* The plan on the caller's struct (read through its size, ABI growth) held in *plan. */
static clvarlen_status cp_plan(clvarlen_context *ctx, const char *fn, const int32_t *cu_seqlens,
                               int64_t n, int32_t world, int32_t rank, clvarlen_cp_plan_out *plan,
                               const void *caller, size_t caller_size);

clvarlen_status clvarlen_cp_plan_sized(clvarlen_context *ctx, const int32_t *cu_seqlens,
                                       int64_t n, int32_t world, int32_t rank,
                                       clvarlen_cp_plan_out *plan, size_t plan_size)
{
    static const char fn[] = "clvarlen_cp_plan";
    CV_ENTER(ctx);
    SEG_TRY(cv_seg_check_count(ctx, fn, "n", n));
    SEG_TRY(cv_check_cu_seqlens(ctx, fn, "cu_seqlens", cu_seqlens, n, -1));
    SEG_TRY(check_cp(ctx, fn, world, rank));
    SEG_TRY(cv_seg_need(ctx, fn, "plan", plan, true));
    if (plan_size < CLVARLEN_CP_PLAN_OUT_MIN_SIZE)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: plan_size %zu is below %zu",
                        fn, plan_size, (size_t)CLVARLEN_CP_PLAN_OUT_MIN_SIZE);
    clvarlen_cp_plan_out full;
    memset(&full, 0, sizeof full);
    memcpy(&full, plan, plan_size < sizeof full ? plan_size : sizeof full);
    clvarlen_status st = cp_plan(ctx, fn, cu_seqlens, n, world, rank, &full, plan, plan_size);
    if (st == CLVARLEN_SUCCESS)
        cv_struct_out(plan, plan_size, &full, sizeof full);
    return st;
}

static clvarlen_status cp_plan(clvarlen_context *ctx, const char *fn, const int32_t *cu_seqlens,
                               int64_t n, int32_t world, int32_t rank, clvarlen_cp_plan_out *plan,
                               const void *caller, size_t caller_size)
{
    SEG_TRY(cv_seg_need(ctx, fn, "plan->local_cu_seqlens", plan->local_cu_seqlens, true));
    bool tokens = plan->global_index || plan->position;
    int64_t local = cp_local_total(cu_seqlens, n, world, rank);
    if (tokens && plan->capacity < 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: plan->capacity is negative",
                        fn);
    if (tokens && local > plan->capacity)
        return cv_error(ctx, CLVARLEN_ERROR_BUFFER_TOO_SMALL,
                        "%s: %lld local tokens do not fit plan->capacity %lld", fn,
                        (long long)local, (long long)plan->capacity);
    const uint64_t cub = (uint64_t)(n + 1) * 4;
    const cv_region regions[] = {
        cv_seg_host("cu_seqlens", cu_seqlens, cub, false),
        cv_seg_host("plan", caller, caller_size, true),
        cv_seg_host("plan->local_cu_seqlens", plan->local_cu_seqlens, cub, true),
        cv_seg_host("plan->head_cu", plan->head_cu, cub, true),
        cv_seg_host("plan->tail_cu", plan->tail_cu, cub, true),
        cv_seg_host("plan->global_index", plan->global_index, (uint64_t)local * 4, true),
        cv_seg_host("plan->position", plan->position, (uint64_t)local * 4, true),
    };
    SEG_TRY(SEG_CHECK_HOST(ctx, fn, regions));
    if (!cv_use_cl(ctx)) {
        cv_cpu_cp_plan(ctx, cu_seqlens, n, world, rank, plan);
        return CLVARLEN_SUCCESS;
    }
#if CLVARLEN_HAVE_OPENCL
    int64_t C = 2 * (int64_t)world, max_h = 0, max_t = 0;
    for (int64_t s = 0; s < n; s++) {
        int64_t L = cu_seqlens[s + 1] - cu_seqlens[s];
        max_h = CV_MAX(max_h, cv_cp_chunk_len(L, C, rank));
        max_t = CV_MAX(max_t, cv_cp_chunk_len(L, C, C - 1 - rank));
    }
    SEG_TRY(cp_plan_on_device(ctx, cu_seqlens, n, world, rank, local, plan));
    plan->local_tokens = local;
    plan->max_head = (int32_t)max_h;
    plan->max_tail = (int32_t)max_t;
    return CLVARLEN_SUCCESS;
#else
    return CLVARLEN_ERROR_INTERNAL;
#endif
}

/* The host-memory CP gather (to_local) and scatter: arguments and what
 * validation found. */
typedef struct cp_host {
    clvarlen_dtype dtype;
    int64_t row_elems;
    void *global_rows;
    const int32_t *cu_seqlens;
    int64_t n;
    int32_t world, rank;
    void *local_rows;
    int to_local;
    clvarlen_scatter_mode mode;
    bool zero_rest;
    int64_t total, local; /* global and local rows */
    cv_seg_rows gr, lr;
} cp_host;

#if CLVARLEN_HAVE_OPENCL
static clvarlen_status cp_rows_on_device(clvarlen_context *ctx, const cp_host *h)
{
    cv_chain q;
    cv_chain_begin(&q, ctx, 0, NULL, false, false);
    /* global rows are read back whole, so they go up unless every one is rewritten */
    bool global_in = !h->to_local && !(h->mode == CLVARLEN_SCATTER_OVERWRITE && h->zero_rest);
    cl_mem d_cu = NULL, d_g = NULL, d_l = NULL;
    clvarlen_status st;
    SEG_TRY_OUT(cv_seg_upload(ctx, h->cu_seqlens, (size_t)(h->n + 1) * 4, &d_cu));
    SEG_TRY_OUT(cv_buffer(ctx, h->gr.span, h->to_local || global_in ? h->global_rows : NULL,
                          &d_g));
    SEG_TRY_OUT(cv_buffer(ctx, h->lr.span, h->to_local || h->local == 0 ? NULL : h->local_rows,
                          &d_l));
    cp_rows_args c = {
        .dtype = h->dtype,
        .row_elems = h->row_elems,
        .global = d_g,
        .g_stride_b = h->gr.stride_b,
        .total_tokens = h->total,
        .cu = d_cu,
        .n = h->n,
        .world = h->world,
        .rank = h->rank,
        .local = d_l,
        .l_stride_b = h->lr.stride_b,
        .local_capacity = h->local,
        .to_local = h->to_local,
        .mode = h->mode,
        .zero_rest = h->zero_rest,
    };
    SEG_TRY_OUT(enq_cp_rows(&q, &c));
    if (h->to_local)
        SEG_TRY_OUT(
            cv_seg_read_rows(&q, d_l, h->local, h->lr.row_bytes, h->lr.stride_b, h->local_rows));
    else
        SEG_TRY_OUT(
            cv_seg_read_rows(&q, d_g, h->total, h->gr.row_bytes, h->gr.stride_b, h->global_rows));
out:
    cv_chain_abort(&q);
    cv_release(&d_cu);
    cv_release(&d_g);
    cv_release(&d_l);
    return st;
}
#endif /* CLVARLEN_HAVE_OPENCL */

/* The host-memory CP gather and scatter share validation and the device path. */
static clvarlen_status cp_rows_host(clvarlen_context *ctx, const char *fn, cp_host *h,
                                    int64_t global_stride, int64_t local_stride,
                                    int64_t local_capacity, unsigned flags)
{
    CV_ENTER_FN(ctx, fn);
    SEG_TRY(cv_seg_check_count(ctx, fn, "n", h->n));
    SEG_TRY(cv_check_cu_seqlens(ctx, fn, "cu_seqlens", h->cu_seqlens, h->n, -1));
    SEG_TRY(check_cp(ctx, fn, h->world, h->rank));
    if (!h->to_local)
        SEG_TRY(cv_seg_check_scatter_mode(ctx, fn, h->dtype, h->mode, flags));
    h->total = h->cu_seqlens[h->n];
    h->local = cp_local_total(h->cu_seqlens, h->n, h->world, h->rank);
    SEG_TRY(cv_seg_rows_geom(ctx, fn, "global_rows", h->dtype, h->row_elems, h->total,
                             global_stride,
                             h->global_rows, &h->gr));
    SEG_TRY(cv_seg_rows_geom(ctx, fn, "local_rows", h->dtype, h->row_elems, h->local, local_stride,
                             h->local_rows, &h->lr));
    if (h->to_local && local_capacity < 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: local_capacity is negative",
                        fn);
    if (h->to_local && h->local > local_capacity)
        return cv_error(ctx, CLVARLEN_ERROR_BUFFER_TOO_SMALL,
                        "%s: %lld local rows do not fit local_capacity %lld", fn,
                        (long long)h->local, (long long)local_capacity);
    if (h->total == 0)
        return CLVARLEN_SUCCESS;
    const cv_region regions[] = {
        cv_seg_host_rows("global_rows", h->global_rows, &h->gr, h->total, !h->to_local),
        cv_seg_host("cu_seqlens", h->cu_seqlens, (uint64_t)(h->n + 1) * 4, false),
        cv_seg_host_rows("local_rows", h->local_rows, &h->lr, h->local, h->to_local != 0),
    };
    SEG_TRY(SEG_CHECK_HOST(ctx, fn, regions));
    h->zero_rest = !h->to_local && (flags & CLVARLEN_SCATTER_ZERO_REST);
    if (!cv_use_cl(ctx))
        return cv_cpu_cp_rows(ctx, h->dtype, h->row_elems, h->cu_seqlens, h->n, h->world,
                              h->rank, h->to_local, h->global_rows, h->gr.stride_b,
                              h->local_rows, h->lr.stride_b, h->mode, h->zero_rest);
#if CLVARLEN_HAVE_OPENCL
    SEG_TRY(cv_seg_check_cl_limits(ctx, fn, h->gr.row_bytes, h->total));
    return cp_rows_on_device(ctx, h);
#else
    return CLVARLEN_ERROR_INTERNAL;
#endif
}

clvarlen_status clvarlen_cp_gather(clvarlen_context *ctx, clvarlen_dtype dtype, int64_t row_elems,
                                   const void *global_rows, int64_t global_stride,
                                   const int32_t *cu_seqlens, int64_t n, int32_t world,
                                   int32_t rank, void *local_rows, int64_t local_stride,
                                   int64_t local_capacity)
{
    cp_host h = {
        .dtype = dtype,
        .row_elems = row_elems,
        .global_rows = (void *)(uintptr_t)global_rows, /* only read on this path */
        .cu_seqlens = cu_seqlens,
        .n = n,
        .world = world,
        .rank = rank,
        .local_rows = local_rows,
        .to_local = 1,
        .mode = CLVARLEN_SCATTER_OVERWRITE,
    };
    return cp_rows_host(ctx, __func__, &h, global_stride, local_stride, local_capacity, 0);
}

clvarlen_status clvarlen_cp_scatter(clvarlen_context *ctx, clvarlen_dtype dtype, int64_t row_elems,
                                    const void *local_rows, int64_t local_stride,
                                    const int32_t *cu_seqlens, int64_t n, int32_t world,
                                    int32_t rank, void *global_rows, int64_t global_stride,
                                    clvarlen_scatter_mode mode, unsigned flags)
{
    cp_host h = {
        .dtype = dtype,
        .row_elems = row_elems,
        .global_rows = global_rows,
        .cu_seqlens = cu_seqlens,
        .n = n,
        .world = world,
        .rank = rank,
        .local_rows = (void *)(uintptr_t)local_rows, /* only read on this path */
        .to_local = 0,
        .mode = mode,
    };
    return cp_rows_host(ctx, __func__, &h, global_stride, local_stride, INT64_MAX, flags);
}

#if CLVARLEN_HAVE_OPENCL

clvarlen_status clvarlen_cl_cp_plan(clvarlen_context *ctx, cl_mem cu_seqlens, size_t cu_offset,
                                    int64_t n, int32_t world, int32_t rank, cl_mem local_cu_seqlens,
                                    size_t local_cu_offset, cl_mem head_cu, size_t head_cu_offset,
                                    cl_mem tail_cu, size_t tail_cu_offset, int64_t capacity,
                                    cl_mem global_index, size_t global_index_offset,
                                    cl_mem position, size_t position_offset, cl_mem local_tokens,
                                    size_t local_tokens_offset, cl_uint num_events,
                                    const cl_event *wait_list, cl_event *event)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    SEG_TRY(cv_cl_enter(ctx, fn, num_events, wait_list));
    SEG_TRY(cv_seg_check_count(ctx, fn, "n", n));
    SEG_TRY(check_cp(ctx, fn, world, rank));
    if ((global_index || position) && (capacity < 0 || capacity > INT32_MAX))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: capacity %lld is outside [0, INT32_MAX]", fn, (long long)capacity);
    const uint64_t cub = (uint64_t)(n + 1) * 4, tb = (uint64_t)CV_MAX(capacity, 0) * 4;
    const cv_mem_arg args[] = {
        cv_seg_mem("cu_seqlens", cu_seqlens, cu_offset, 4, cub, true, false),
        cv_seg_mem("local_cu_seqlens", local_cu_seqlens, local_cu_offset, 4, cub, true, true),
        cv_seg_mem("head_cu", head_cu, head_cu_offset, 4, cub, false, true),
        cv_seg_mem("tail_cu", tail_cu, tail_cu_offset, 4, cub, false, true),
        cv_seg_mem("global_index", global_index, global_index_offset, 4, tb, false, true),
        cv_seg_mem("position", position, position_offset, 4, tb, false, true),
        cv_seg_mem("local_tokens", local_tokens, local_tokens_offset, 8, 8, false, true),
    };
    SEG_TRY(SEG_CHECK_MEM(ctx, fn, args));
    plan_args p = {
        .cu = cu_seqlens,
        .cu_off = cu_offset,
        .n = n,
        .world = world,
        .rank = rank,
        .scan = {
            .local_cu = local_cu_seqlens,
            .local_off = local_cu_offset,
            .head_cu = head_cu,
            .head_off = head_cu_offset,
            .tail_cu = tail_cu,
            .tail_off = tail_cu_offset,
            .total = local_tokens,
            .total_off = local_tokens_offset,
        },
        .capacity = capacity,
        .global_index = global_index,
        .gi_off = global_index_offset,
        .position = position,
        .pos_off = position_offset,
    };
    cv_chain q;
    clvarlen_status st = cv_chain_begin(&q, ctx, num_events, wait_list, event != NULL, ctx->device_checks != 0);
    if (st == CLVARLEN_SUCCESS)
        st = enq_cp_plan(&q, &p);
    return cv_chain_end(&q, fn, st, event);
}

/* The cl_mem CP gather and scatter share validation; c holds their
 * arguments (strides in elements until checked). */
static clvarlen_status cl_cp_rows(clvarlen_context *ctx, const char *fn, cp_rows_args *c,
                                  int64_t global_stride, int64_t local_stride, unsigned flags,
                                  cl_uint num_events, const cl_event *wait_list, cl_event *event)
{
    CV_ENTER_FN(ctx, fn);
    SEG_TRY(cv_cl_enter(ctx, fn, num_events, wait_list));
    cv_seg_rows gr, lr;
    size_t es = cv_dtype_size(c->dtype);
    SEG_TRY(cv_seg_check_count(ctx, fn, "n", c->n));
    SEG_TRY(check_cp(ctx, fn, c->world, c->rank));
    if (!c->to_local)
        SEG_TRY(cv_seg_check_scatter_mode(ctx, fn, c->dtype, c->mode, flags));
    if (c->total_tokens < 0 || c->total_tokens > INT32_MAX)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: total_tokens %lld is outside [0, INT32_MAX]", fn,
                        (long long)c->total_tokens);
    if (c->local_capacity < 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: local_capacity is negative",
                        fn);
    SEG_TRY(cv_seg_rows_geom(ctx, fn, "global_rows", c->dtype, c->row_elems, c->total_tokens,
                             global_stride, c->global, &gr));
    SEG_TRY(cv_seg_rows_geom(ctx, fn, "local_rows", c->dtype, c->row_elems,
                             CV_MIN(c->local_capacity, c->total_tokens), local_stride, c->local,
                             &lr));
    SEG_TRY(cv_seg_check_cl_limits(ctx, fn, gr.row_bytes, c->total_tokens));
    const cv_mem_arg args[] = {
        cv_seg_mem_rows("global_rows", c->global, c->g_off, es, &gr, c->total_tokens,
                        !c->to_local),
        cv_seg_mem("cu_seqlens", c->cu, c->cu_off, 4, (uint64_t)(c->n + 1) * 4, true, false),
        cv_seg_mem_rows("local_rows", c->local, c->l_off, es, &lr,
                        CV_MIN(c->local_capacity, c->total_tokens), c->to_local != 0),
    };
    SEG_TRY(SEG_CHECK_MEM(ctx, fn, args));
    c->g_stride_b = gr.stride_b;
    c->l_stride_b = lr.stride_b;
    c->zero_rest = !c->to_local && (flags & CLVARLEN_SCATTER_ZERO_REST);
    cv_chain q;
    clvarlen_status st = cv_chain_begin(&q, ctx, num_events, wait_list, event != NULL, ctx->device_checks != 0);
    if (st == CLVARLEN_SUCCESS)
        st = enq_cp_rows(&q, c);
    return cv_chain_end(&q, fn, st, event);
}

clvarlen_status clvarlen_cl_cp_gather(clvarlen_context *ctx, clvarlen_dtype dtype,
                                      int64_t row_elems, cl_mem global_rows, size_t global_offset,
                                      int64_t global_stride, int64_t total_tokens,
                                      cl_mem cu_seqlens, size_t cu_offset, int64_t n, int32_t world,
                                      int32_t rank, cl_mem local_rows, size_t local_offset,
                                      int64_t local_stride, int64_t local_capacity,
                                      cl_uint num_events, const cl_event *wait_list,
                                      cl_event *event)
{
    cp_rows_args c = {
        .dtype = dtype,
        .row_elems = row_elems,
        .global = global_rows,
        .g_off = global_offset,
        .total_tokens = total_tokens,
        .cu = cu_seqlens,
        .cu_off = cu_offset,
        .n = n,
        .world = world,
        .rank = rank,
        .local = local_rows,
        .l_off = local_offset,
        .local_capacity = local_capacity,
        .to_local = 1,
        .mode = CLVARLEN_SCATTER_OVERWRITE,
    };
    return cl_cp_rows(ctx, __func__, &c, global_stride, local_stride, 0, num_events, wait_list,
                      event);
}

clvarlen_status clvarlen_cl_cp_scatter(
    clvarlen_context *ctx, clvarlen_dtype dtype, int64_t row_elems, cl_mem local_rows,
    size_t local_offset, int64_t local_stride, int64_t local_capacity, cl_mem cu_seqlens,
    size_t cu_offset, int64_t n, int32_t world, int32_t rank, cl_mem global_rows,
    size_t global_offset, int64_t global_stride, int64_t total_tokens, clvarlen_scatter_mode mode,
    unsigned flags, cl_uint num_events, const cl_event *wait_list, cl_event *event)
{
    cp_rows_args c = {
        .dtype = dtype,
        .row_elems = row_elems,
        .global = global_rows,
        .g_off = global_offset,
        .total_tokens = total_tokens,
        .cu = cu_seqlens,
        .cu_off = cu_offset,
        .n = n,
        .world = world,
        .rank = rank,
        .local = local_rows,
        .l_off = local_offset,
        .local_capacity = local_capacity,
        .to_local = 0,
        .mode = mode,
    };
    return cl_cp_rows(ctx, __func__, &c, global_stride, local_stride, flags, num_events,
                      wait_list, event);
}

#endif /* CLVARLEN_HAVE_OPENCL */

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

static clvarlen_status enq_cp_scan(cv_chain *q, cl_mem cu,
                                   size_t cu_off, int64_t n, int32_t world, int32_t rank,
                                   int64_t capacity, cl_mem local_cu, size_t local_off,
                                   cl_mem head_cu, size_t head_off, cl_mem tail_cu,
                                   size_t tail_off, cl_mem total_out, size_t total_off,
                                   cl_mem scratch)
{
    cl_mem flag = q->flag;
    cl_int check = q->flag != NULL;
    cl_kernel k;
    clvarlen_status st = seg_kernel(q->ctx, SEC_SCANS, 0, -1, "segment_cp_scan", &k);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cl_ulong co = cu_off, lo = local_off, ho = head_off, tlo = tail_off, to = total_off;
    cl_int nn = (cl_int)n, w = world, r = rank;
    cl_long cap = capacity;
    cv_args a = cv_args_begin(k);
    CV_ARG(a, cu);
    CV_ARG(a, co);
    CV_ARG(a, nn);
    CV_ARG(a, w);
    CV_ARG(a, r);
    CV_ARG(a, cap);
    CV_ARG(a, local_cu);
    CV_ARG(a, lo);
    CV_ARG(a, head_cu);
    CV_ARG(a, ho);
    CV_ARG(a, tail_cu);
    CV_ARG(a, tlo);
    CV_ARG(a, total_out);
    CV_ARG(a, to);
    CV_ARG(a, scratch);
    CV_ARG(a, flag);
    CV_ARG(a, check);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(q->ctx, a.err, "segment_cp_scan: clSetKernelArg");
    size_t wg = seg_scan_wg(q->ctx);
    return seg_run(q, k, "segment_cp_scan", wg, wg);
}

typedef struct plan_args {
    cl_mem cu;
    size_t cu_off;
    int64_t n;
    int32_t world, rank;
    cl_mem local_cu;
    size_t local_off;
    cl_mem head_cu;
    size_t head_off;
    cl_mem tail_cu;
    size_t tail_off;
    int64_t capacity;
    cl_mem global_index;
    size_t gi_off;
    cl_mem position;
    size_t pos_off;
    cl_mem local_tokens;
    size_t lt_off;
} plan_args;

static clvarlen_status enq_cp_plan(cv_chain *q, const plan_args *p)
{
    cl_mem flag = q->flag;
    cl_int check = q->flag != NULL;
    clvarlen_context *ctx = q->ctx;
    bool tokens = (p->global_index || p->position) && p->capacity > 0 && p->n > 0;
    cl_kernel k = NULL;
    clvarlen_status st = CLVARLEN_SUCCESS;
    if (tokens)
        st = seg_kernel(ctx, SEC_MAPS, 0, -1, "segment_cp_plan_tokens", &k);
    cl_mem scratch = NULL;
    if (st == CLVARLEN_SUCCESS)
        st = seg_temp(q, 0, &scratch);
    if (st == CLVARLEN_SUCCESS)
        st = enq_cp_scan(q, p->cu, p->cu_off, p->n, p->world, p->rank,
                         (p->global_index || p->position) ? p->capacity : -1, p->local_cu,
                         p->local_off, p->head_cu, p->head_off, p->tail_cu, p->tail_off,
                         p->local_tokens, p->lt_off, scratch);
    if (st == CLVARLEN_SUCCESS && tokens) {
        cl_ulong co = p->cu_off, lo = p->local_off, go = p->gi_off, po = p->pos_off;
        cl_int nn = (cl_int)p->n, w = p->world, r = p->rank;
        cl_long cap = p->capacity;
        cv_args a = cv_args_begin(k);
        CV_ARG(a, p->cu);
        CV_ARG(a, co);
        CV_ARG(a, nn);
        CV_ARG(a, w);
        CV_ARG(a, r);
        CV_ARG(a, p->local_cu);
        CV_ARG(a, lo);
        CV_ARG(a, scratch);
        CV_ARG(a, cap);
        CV_ARG(a, p->global_index);
        CV_ARG(a, go);
        CV_ARG(a, p->position);
        CV_ARG(a, po);
        CV_ARG(a, flag);
        CV_ARG(a, check);
        if (a.err != CL_SUCCESS) {
            st = cv_cl_check(ctx, a.err, "segment_cp_plan_tokens: clSetKernelArg");
        } else {
            size_t global, local;
            seg_elem_grid(ctx, p->capacity, &global, &local);
            st = seg_run(q, k, "segment_cp_plan_tokens", global, local);
        }
    }
    return st;
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

/* Local offsets into a temporary, then one row kernel (over local rows, or
 * over global rows when the rest is zeroed). */
static clvarlen_status enq_cp_rows(cv_chain *q, const cp_rows_args *c)
{
    cl_mem flag = q->flag;
    cl_int check = q->flag != NULL;
    clvarlen_context *ctx = q->ctx;
    if (c->n <= 0 || c->total_tokens <= 0)
        return CLVARLEN_SUCCESS;
    bool acc = !c->to_local && c->mode == CLVARLEN_SCATTER_ACCUMULATE;
    bool over_global = !c->to_local && c->zero_rest;
    size_t es = cv_dtype_size(c->dtype);
    size_t row_bytes = (size_t)c->row_elems * es;
    int unit = 0;
    int64_t units = c->row_elems;
    if (!acc) {
        size_t v[4] = {c->g_off, c->l_off, c->g_stride_b, c->l_stride_b};
        unit = seg_pick_unit(row_bytes, v, 4);
        units = (int64_t)(row_bytes / (size_t)unit);
    }
    bool fused = c->n <= SEG_FUSE_MAX;
    cl_kernel k;
    clvarlen_status st =
        seg_kernel(ctx, acc ? SEC_ACC : SEC_COPY, unit, acc ? seg_acc_code(c->dtype) : -1,
                   fused ? "segment_cp_rows_fused" : "segment_cp_rows", &k);
    if (st != CLVARLEN_SUCCESS)
        return st;
    int64_t n_iter = over_global ? c->total_tokens : CV_MIN(c->local_capacity, c->total_tokens);
    cl_ulong co = c->cu_off, go = c->g_off, gs = c->g_stride_b, lo = c->l_off,
             ls = c->l_stride_b, lco = SEG_TEMP_OFF;
    cl_int nn = (cl_int)c->n, w = c->world, r = c->rank, og = over_global, tl = c->to_local;
    cl_long lcap = c->local_capacity, grows = c->total_tokens;
    if (fused) { /* the documents' local offsets are scanned per work-group */
        seg_geo g;
        seg_fused_geo(ctx, units, n_iter, &g);
        cv_args a = cv_args_begin(k);
        CV_ARG(a, c->cu);
        CV_ARG(a, co);
        CV_ARG(a, nn);
        CV_ARG(a, w);
        CV_ARG(a, r);
        CV_ARG(a, lcap);
        CV_ARG(a, grows);
        CV_ARG(a, og);
        CV_ARG(a, tl);
        CV_ARG(a, c->global);
        CV_ARG(a, go);
        CV_ARG(a, gs);
        CV_ARG(a, c->local);
        CV_ARG(a, lo);
        CV_ARG(a, ls);
        CV_ARG(a, g.row_units);
        CV_ARG(a, g.lpr);
        CV_ARG(a, flag);
        CV_ARG(a, check);
        if (a.err != CL_SUCCESS)
            return cv_cl_check(ctx, a.err, "segment_cp_rows_fused: clSetKernelArg");
        return seg_run(q, k, "segment_cp_rows_fused", g.global, g.local);
    }
    /* temp: scratch word, then the local offsets [n + 1] */
    cl_mem temp = NULL;
    st = seg_temp(q, (size_t)(c->n + 1) * sizeof(cl_int), &temp);
    if (st == CLVARLEN_SUCCESS)
        st = enq_cp_scan(q, c->cu, c->cu_off, c->n, c->world, c->rank,
                         c->local_capacity, temp, SEG_TEMP_OFF, NULL, 0, NULL, 0, NULL, 0, temp);
    if (st == CLVARLEN_SUCCESS) {
        if (n_iter > 0) {
            seg_geo g;
            seg_row_geo(ctx, units, n_iter, &g);
            cv_args a = cv_args_begin(k);
            CV_ARG(a, c->cu);
            CV_ARG(a, co);
            CV_ARG(a, nn);
            CV_ARG(a, w);
            CV_ARG(a, r);
            CV_ARG(a, temp);
            CV_ARG(a, lco);
            CV_ARG(a, temp);
            CV_ARG(a, lcap);
            CV_ARG(a, grows);
            CV_ARG(a, og);
            CV_ARG(a, tl);
            CV_ARG(a, c->global);
            CV_ARG(a, go);
            CV_ARG(a, gs);
            CV_ARG(a, c->local);
            CV_ARG(a, lo);
            CV_ARG(a, ls);
            CV_ARG(a, g.row_units);
            CV_ARG(a, g.lpr);
            CV_ARG(a, flag);
            CV_ARG(a, check);
            st = a.err != CL_SUCCESS ? cv_cl_check(ctx, a.err, "segment_cp_rows: clSetKernelArg")
                                     : seg_run(q, k, "segment_cp_rows", g.global, g.local);
        }
    }
    return st;
}

#endif /* CLVARLEN_HAVE_OPENCL */

/* ================================================================ context parallel */

clvarlen_status clvarlen_cp_plan(clvarlen_context *ctx, const int32_t *cu_seqlens, int64_t n,
                                 int32_t world, int32_t rank, clvarlen_cp_plan_out *plan)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    clvarlen_status st = seg_check_count(ctx, fn, "n", n);
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_cu_seqlens(ctx, fn, "cu_seqlens", cu_seqlens, n, -1);
    if (st == CLVARLEN_SUCCESS)
        st = check_cp(ctx, fn, world, rank);
    if (st == CLVARLEN_SUCCESS)
        st = seg_need(ctx, fn, "plan", plan, true);
    if (st == CLVARLEN_SUCCESS)
        st = seg_need(ctx, fn, "plan->local_cu_seqlens", plan->local_cu_seqlens, true);
    if (st != CLVARLEN_SUCCESS)
        return st;
    bool tokens = plan->global_index || plan->position;
    int64_t local = cp_local_total(cu_seqlens, n, world, rank);
    if (tokens && plan->capacity < 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: plan->capacity is negative",
                        fn);
    if (tokens && local > plan->capacity)
        return cv_error(ctx, CLVARLEN_ERROR_BUFFER_TOO_SMALL,
                        "%s: %lld local tokens do not fit plan->capacity %lld", fn,
                        (long long)local, (long long)plan->capacity);
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
    cv_chain q;
    cv_chain_begin(&q, ctx, 0, NULL, false);
    size_t cub = (size_t)(n + 1) * 4, tb = (size_t)local * 4;
    cl_mem d_cu = NULL, d_lcu = NULL, d_h = NULL, d_t = NULL, d_gi = NULL, d_pos = NULL;
    st = seg_upload(ctx, cu_seqlens, cub, &d_cu);
    if (st == CLVARLEN_SUCCESS)
        st = cv_buffer(ctx, cub, NULL, &d_lcu);
    if (st == CLVARLEN_SUCCESS && plan->head_cu)
        st = cv_buffer(ctx, cub, NULL, &d_h);
    if (st == CLVARLEN_SUCCESS && plan->tail_cu)
        st = cv_buffer(ctx, cub, NULL, &d_t);
    if (st == CLVARLEN_SUCCESS && plan->global_index && local > 0)
        st = cv_buffer(ctx, tb, NULL, &d_gi);
    if (st == CLVARLEN_SUCCESS && plan->position && local > 0)
        st = cv_buffer(ctx, tb, NULL, &d_pos);
    if (st == CLVARLEN_SUCCESS) {
        plan_args p = {d_cu, 0, n, world, rank, d_lcu, 0, d_h, 0, d_t, 0, local, d_gi, 0,
                       d_pos, 0, NULL, 0};
        st = enq_cp_plan(&q, &p);
    }
    if (st == CLVARLEN_SUCCESS)
        st = seg_read_bytes(&q, d_lcu, cub, plan->local_cu_seqlens);
    if (st == CLVARLEN_SUCCESS && d_h)
        st = seg_read_bytes(&q, d_h, cub, plan->head_cu);
    if (st == CLVARLEN_SUCCESS && d_t)
        st = seg_read_bytes(&q, d_t, cub, plan->tail_cu);
    if (st == CLVARLEN_SUCCESS && d_gi)
        st = seg_read_bytes(&q, d_gi, tb, plan->global_index);
    if (st == CLVARLEN_SUCCESS && d_pos)
        st = seg_read_bytes(&q, d_pos, tb, plan->position);
    cv_chain_abort(&q);
    cv_release(&d_cu);
    cv_release(&d_lcu);
    cv_release(&d_h);
    cv_release(&d_t);
    cv_release(&d_gi);
    cv_release(&d_pos);
    if (st == CLVARLEN_SUCCESS) {
        plan->local_tokens = local;
        plan->max_head = (int32_t)max_h;
        plan->max_tail = (int32_t)max_t;
    }
    return st;
#else
    return CLVARLEN_ERROR_INTERNAL;
#endif
}

/* The host-memory CP gather and scatter share validation and the device path. */
static clvarlen_status cp_rows_host(clvarlen_context *ctx, const char *fn, clvarlen_dtype dtype,
                                    int64_t row_elems, void *global_rows, int64_t global_stride,
                                    const int32_t *cu_seqlens, int64_t n, int32_t world,
                                    int32_t rank, void *local_rows, int64_t local_stride,
                                    int64_t local_capacity, int to_local,
                                    clvarlen_scatter_mode mode, unsigned flags)
{
    CV_ENTER_FN(ctx, fn);
    clvarlen_status st = seg_check_count(ctx, fn, "n", n);
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_cu_seqlens(ctx, fn, "cu_seqlens", cu_seqlens, n, -1);
    if (st == CLVARLEN_SUCCESS)
        st = check_cp(ctx, fn, world, rank);
    if (st == CLVARLEN_SUCCESS && !to_local)
        st = seg_check_scatter_mode(ctx, fn, dtype, mode, flags);
    if (st != CLVARLEN_SUCCESS)
        return st;
    int64_t total = cu_seqlens[n];
    int64_t local = cp_local_total(cu_seqlens, n, world, rank);
    seg_rows gr, lr;
    st = seg_rows_geom(ctx, fn, "global_rows", dtype, row_elems, total, global_stride, global_rows,
                   &gr);
    if (st == CLVARLEN_SUCCESS)
        st = seg_rows_geom(ctx, fn, "local_rows", dtype, row_elems, local, local_stride, local_rows,
                       &lr);
    if (st == CLVARLEN_SUCCESS && to_local && local_capacity < 0)
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: local_capacity is negative", fn);
    if (st == CLVARLEN_SUCCESS && to_local && local > local_capacity)
        st = cv_error(ctx, CLVARLEN_ERROR_BUFFER_TOO_SMALL,
                      "%s: %lld local rows do not fit local_capacity %lld", fn, (long long)local,
                      (long long)local_capacity);
    if (st != CLVARLEN_SUCCESS || total == 0)
        return st;
    bool zero_rest = !to_local && (flags & CLVARLEN_SCATTER_ZERO_REST);
    if (!cv_use_cl(ctx))
        return cv_cpu_cp_rows(ctx, dtype, row_elems, cu_seqlens, n, world, rank, to_local,
                              global_rows, gr.stride_b, local_rows, lr.stride_b, mode, zero_rest);
#if CLVARLEN_HAVE_OPENCL
    st = seg_check_cl_limits(ctx, fn, gr.row_bytes, total);
    cv_chain q;
    cv_chain_begin(&q, ctx, 0, NULL, false);
    bool global_in = !to_local && !(mode == CLVARLEN_SCATTER_OVERWRITE && zero_rest);
    cl_mem d_cu = NULL, d_g = NULL, d_l = NULL;
    if (st == CLVARLEN_SUCCESS)
        st = seg_upload(ctx, cu_seqlens, (size_t)(n + 1) * 4, &d_cu);
    if (st == CLVARLEN_SUCCESS)
        st = cv_buffer(ctx, gr.span, to_local || global_in ? global_rows : NULL, &d_g);
    if (st == CLVARLEN_SUCCESS)
        st = cv_buffer(ctx, lr.span, to_local || local == 0 ? NULL : local_rows, &d_l);
    if (st == CLVARLEN_SUCCESS) {
        cp_rows_args c = {dtype, row_elems, d_g, 0, gr.stride_b, total, d_cu, 0, n, world, rank,
                          d_l, 0, lr.stride_b, local, to_local, mode, zero_rest};
        st = enq_cp_rows(&q, &c);
    }
    if (st == CLVARLEN_SUCCESS)
        st = to_local ? seg_read_rows(&q, d_l, local, lr.row_bytes, lr.stride_b, local_rows)
                      : seg_read_rows(&q, d_g, total, gr.row_bytes, gr.stride_b, global_rows);
    cv_chain_abort(&q);
    cv_release(&d_cu);
    cv_release(&d_g);
    cv_release(&d_l);
    return st;
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
    /* global_rows is only read on this path */
    return cp_rows_host(ctx, __func__, dtype, row_elems, (void *)(uintptr_t)global_rows,
                        global_stride, cu_seqlens, n, world, rank, local_rows, local_stride,
                        local_capacity, 1, CLVARLEN_SCATTER_OVERWRITE, 0);
}

clvarlen_status clvarlen_cp_scatter(clvarlen_context *ctx, clvarlen_dtype dtype,
                                    int64_t row_elems, const void *local_rows,
                                    int64_t local_stride, const int32_t *cu_seqlens, int64_t n,
                                    int32_t world, int32_t rank, void *global_rows,
                                    int64_t global_stride, clvarlen_scatter_mode mode,
                                    unsigned flags)
{
    return cp_rows_host(ctx, __func__, dtype, row_elems, global_rows, global_stride, cu_seqlens,
                        n, world, rank, (void *)(uintptr_t)local_rows, local_stride, INT64_MAX, 0,
                        mode, flags);
}

#if CLVARLEN_HAVE_OPENCL

clvarlen_status clvarlen_cl_cp_plan(clvarlen_context *ctx, cl_mem cu_seqlens, size_t cu_offset,
                                    int64_t n, int32_t world, int32_t rank,
                                    cl_mem local_cu_seqlens, size_t local_cu_offset,
                                    cl_mem head_cu, size_t head_cu_offset, cl_mem tail_cu,
                                    size_t tail_cu_offset, int64_t capacity, cl_mem global_index,
                                    size_t global_index_offset, cl_mem position,
                                    size_t position_offset, cl_mem local_tokens,
                                    size_t local_tokens_offset, cl_uint num_events,
                                    const cl_event *wait_list, cl_event *event)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    clvarlen_status st = cv_cl_enter(ctx, fn, num_events, wait_list);
    if (st == CLVARLEN_SUCCESS)
        st = seg_check_count(ctx, fn, "n", n);
    if (st == CLVARLEN_SUCCESS)
        st = check_cp(ctx, fn, world, rank);
    if (st == CLVARLEN_SUCCESS && (global_index || position) &&
        (capacity < 0 || capacity > INT32_MAX))
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                      "%s: capacity %lld is outside [0, INT32_MAX]", fn, (long long)capacity);
    if (st == CLVARLEN_SUCCESS)
        st = seg_cl_arg(ctx, fn, "cu_seqlens", cu_seqlens, cu_offset, 4, true);
    if (st == CLVARLEN_SUCCESS)
        st = seg_cl_arg(ctx, fn, "local_cu_seqlens", local_cu_seqlens, local_cu_offset, 4, true);
    if (st == CLVARLEN_SUCCESS)
        st = seg_cl_arg(ctx, fn, "head_cu", head_cu, head_cu_offset, 4, false);
    if (st == CLVARLEN_SUCCESS)
        st = seg_cl_arg(ctx, fn, "tail_cu", tail_cu, tail_cu_offset, 4, false);
    if (st == CLVARLEN_SUCCESS)
        st = seg_cl_arg(ctx, fn, "global_index", global_index, global_index_offset, 4, false);
    if (st == CLVARLEN_SUCCESS)
        st = seg_cl_arg(ctx, fn, "position", position, position_offset, 4, false);
    if (st == CLVARLEN_SUCCESS)
        st = seg_cl_arg(ctx, fn, "local_tokens", local_tokens, local_tokens_offset, 8, false);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_chain q;
    st = cv_chain_begin(&q, ctx, num_events, wait_list, ctx->device_checks != 0);
    if (st == CLVARLEN_SUCCESS && q.flag)
        st = cv_chain_check_cu_seqlens(&q, cu_seqlens, cu_offset, n, -1);
    if (st == CLVARLEN_SUCCESS) {
        plan_args p = {cu_seqlens, cu_offset, n, world, rank, local_cu_seqlens, local_cu_offset,
                       head_cu, head_cu_offset, tail_cu, tail_cu_offset, capacity, global_index,
                       global_index_offset, position, position_offset, local_tokens,
                       local_tokens_offset};
        st = enq_cp_plan(&q, &p);
    }
    return cv_chain_end(&q, fn, st, event);
}

/* The cl_mem CP gather and scatter share validation. */
static clvarlen_status cl_cp_rows(clvarlen_context *ctx, const char *fn, clvarlen_dtype dtype,
                                  int64_t row_elems, cl_mem global_rows, size_t global_offset,
                                  int64_t global_stride, int64_t total_tokens, cl_mem cu_seqlens,
                                  size_t cu_offset, int64_t n, int32_t world, int32_t rank,
                                  cl_mem local_rows, size_t local_offset, int64_t local_stride,
                                  int64_t local_capacity, int to_local,
                                  clvarlen_scatter_mode mode, unsigned flags, cl_uint num_events,
                                  const cl_event *wait_list, cl_event *event)
{
    CV_ENTER_FN(ctx, fn);
    clvarlen_status st = cv_cl_enter(ctx, fn, num_events, wait_list);
    seg_rows gr, lr;
    size_t es = cv_dtype_size(dtype);
    if (st == CLVARLEN_SUCCESS)
        st = seg_check_count(ctx, fn, "n", n);
    if (st == CLVARLEN_SUCCESS)
        st = check_cp(ctx, fn, world, rank);
    if (st == CLVARLEN_SUCCESS && !to_local)
        st = seg_check_scatter_mode(ctx, fn, dtype, mode, flags);
    if (st == CLVARLEN_SUCCESS && (total_tokens < 0 || total_tokens > INT32_MAX))
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                      "%s: total_tokens %lld is outside [0, INT32_MAX]", fn,
                      (long long)total_tokens);
    if (st == CLVARLEN_SUCCESS && local_capacity < 0)
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: local_capacity is negative", fn);
    if (st == CLVARLEN_SUCCESS)
        st = seg_rows_geom(ctx, fn, "global_rows", dtype, row_elems, total_tokens, global_stride,
                       global_rows, &gr);
    if (st == CLVARLEN_SUCCESS)
        st = seg_rows_geom(ctx, fn, "local_rows", dtype, row_elems,
                       CV_MIN(local_capacity, total_tokens), local_stride, local_rows, &lr);
    if (st == CLVARLEN_SUCCESS)
        st = seg_check_cl_limits(ctx, fn, gr.row_bytes, total_tokens);
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_offset(ctx, fn, "global_rows", global_offset, es);
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_offset(ctx, fn, "local_rows", local_offset, es);
    if (st == CLVARLEN_SUCCESS)
        st = seg_cl_arg(ctx, fn, "cu_seqlens", cu_seqlens, cu_offset, 4, true);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_chain q;
    st = cv_chain_begin(&q, ctx, num_events, wait_list, ctx->device_checks != 0);
    if (st == CLVARLEN_SUCCESS && q.flag)
        st = cv_chain_check_cu_seqlens(&q, cu_seqlens, cu_offset, n, total_tokens);
    if (st == CLVARLEN_SUCCESS) {
        cp_rows_args c = {dtype, row_elems, global_rows, global_offset, gr.stride_b,
                          total_tokens, cu_seqlens, cu_offset, n, world, rank, local_rows,
                          local_offset, lr.stride_b, local_capacity, to_local, mode,
                          !to_local && (flags & CLVARLEN_SCATTER_ZERO_REST)};
        st = enq_cp_rows(&q, &c);
    }
    return cv_chain_end(&q, fn, st, event);
}

clvarlen_status clvarlen_cl_cp_gather(clvarlen_context *ctx, clvarlen_dtype dtype,
                                      int64_t row_elems, cl_mem global_rows, size_t global_offset,
                                      int64_t global_stride, int64_t total_tokens,
                                      cl_mem cu_seqlens, size_t cu_offset, int64_t n,
                                      int32_t world, int32_t rank, cl_mem local_rows,
                                      size_t local_offset, int64_t local_stride,
                                      int64_t local_capacity, cl_uint num_events,
                                      const cl_event *wait_list, cl_event *event)
{
    return cl_cp_rows(ctx, __func__, dtype, row_elems, global_rows, global_offset, global_stride,
                      total_tokens, cu_seqlens, cu_offset, n, world, rank, local_rows,
                      local_offset, local_stride, local_capacity, 1, CLVARLEN_SCATTER_OVERWRITE,
                      0, num_events, wait_list, event);
}

clvarlen_status clvarlen_cl_cp_scatter(clvarlen_context *ctx, clvarlen_dtype dtype,
                                       int64_t row_elems, cl_mem local_rows, size_t local_offset,
                                       int64_t local_stride, int64_t local_capacity,
                                       cl_mem cu_seqlens, size_t cu_offset, int64_t n,
                                       int32_t world, int32_t rank, cl_mem global_rows,
                                       size_t global_offset, int64_t global_stride,
                                       int64_t total_tokens, clvarlen_scatter_mode mode,
                                       unsigned flags, cl_uint num_events,
                                       const cl_event *wait_list, cl_event *event)
{
    return cl_cp_rows(ctx, __func__, dtype, row_elems, global_rows, global_offset, global_stride,
                      total_tokens, cu_seqlens, cu_offset, n, world, rank, local_rows,
                      local_offset, local_stride, local_capacity, 0, mode, flags, num_events,
                      wait_list, event);
}

#endif /* CLVARLEN_HAVE_OPENCL */

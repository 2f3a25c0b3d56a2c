#include "segment/segment.h"

#if CLVARLEN_HAVE_OPENCL

typedef struct expand_args {
    cl_mem kv_len;
    size_t kv_off;
    cl_mem q_len;
    size_t q_off;
    int32_t uniform_q;
    int64_t n;
    cl_mem page_table;
    size_t pt_off;
    int64_t pt_stride, col_limit, capacity;
    cl_mem seqlens;
    size_t se_off;
    cl_mem page_out;
    size_t po_off;
    int64_t out_stride;
    cl_mem total;
    size_t total_off;
} expand_args;

static clvarlen_status enq_expand(cv_chain *q, const expand_args *e)
{
    cl_mem flag = q->flag;
    cl_int check = q->flag != NULL;
    clvarlen_context *ctx = q->ctx;
    clvarlen_status st = CLVARLEN_SUCCESS;
    if (check)
        st = cv_chain_check_range(q, e->kv_len, NULL, e->kv_off, e->n, 0,
                             (int64_t)INT32_MAX + 1, false, CV_CHECK_VALUE);
    if (st == CLVARLEN_SUCCESS && check && e->q_len)
        st = cv_chain_check_range(q, e->q_len, NULL, e->q_off, e->n, 0, (int64_t)INT32_MAX + 1,
                             false, CV_CHECK_VALUE);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cl_kernel k;
    st = seg_kernel(ctx, SEC_EXPAND, 0, -1, "segment_seqlens_expand", &k);
    if (st != CLVARLEN_SUCCESS)
        return st;
    size_t wg = seg_expand_wg(ctx);
    cl_ulong ko = e->kv_off, qo = e->q_off, pto = e->pt_off, seo = e->se_off, poo = e->po_off,
             to = e->total_off;
    cl_int uq = e->uniform_q, nn = (cl_int)e->n, cl = (cl_int)e->col_limit;
    /* Page rows move as int4 when every row starts 16-byte aligned. */
    cl_int vec = e->col_limit % 4 == 0 && e->pt_stride % 4 == 0 && e->out_stride % 4 == 0 &&
                 e->pt_off % 16 == 0 && e->po_off % 16 == 0;
    size_t units = (size_t)CV_MAX(vec ? e->col_limit / 4 : e->col_limit, 1);
    cl_int plpr = (cl_int)CV_MIN(wg, (size_t)cv_pow2_ceil((int64_t)units));
    /* Output rows per work-group block: all wg without a page table, else
     * about one unit per work-item (each lane's loads go out together), so
     * the rows spread over many work-groups. */
    size_t blk = e->page_out ? (size_t)cv_pow2_floor((int64_t)(wg / units)) : wg;
    cl_int blk_rows = (cl_int)CV_MIN(blk, wg); /* cv_pow2_floor(0) is 1 */
    cl_long pts = e->pt_stride, cap = e->capacity, os = e->out_stride;
    cl_mem pt = e->page_out ? e->page_table : NULL;
    cv_args a = cv_args_begin(k);
    CV_ARG(a, e->kv_len);
    CV_ARG(a, ko);
    CV_ARG(a, e->q_len);
    CV_ARG(a, qo);
    CV_ARG(a, uq);
    CV_ARG(a, nn);
    CV_ARG(a, pt);
    CV_ARG(a, pto);
    CV_ARG(a, pts);
    CV_ARG(a, cl);
    CV_ARG(a, vec);
    CV_ARG(a, plpr);
    CV_ARG(a, blk_rows);
    CV_ARG(a, cap);
    CV_ARG(a, e->seqlens);
    CV_ARG(a, seo);
    CV_ARG(a, e->page_out);
    CV_ARG(a, poo);
    CV_ARG(a, os);
    CV_ARG(a, e->total);
    CV_ARG(a, to);
    CV_ARG(a, flag);
    CV_ARG(a, check);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(ctx, a.err, "segment_seqlens_expand: clSetKernelArg");
    int64_t groups = (e->capacity + (int64_t)blk_rows - 1) / (int64_t)blk_rows;
    groups = CV_MAX(1, CV_MIN(groups, (int64_t)SEG_MAX_GROUPS));
    return seg_run(q, k, "segment_seqlens_expand", (size_t)groups * wg, wg);
}

#endif /* CLVARLEN_HAVE_OPENCL */

/* ================================================================ seqlens_expand */

/* Page-table geometry shared by both entry points (page_table given). */
static clvarlen_status expand_geom(clvarlen_context *ctx, const char *fn, int64_t n,
                                   int64_t page_cols, int64_t *page_stride, int64_t *col_limit,
                                   int64_t *out_stride, int64_t out_rows)
{
    if (page_cols < 1 || page_cols > INT32_MAX)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: page_cols %lld is outside [1, INT32_MAX]", fn, (long long)page_cols);
    if (*col_limit == 0)
        *col_limit = page_cols;
    if (*col_limit < 0 || *col_limit > page_cols)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: col_limit %lld is outside [0, page_cols %lld]", fn,
                        (long long)*col_limit, (long long)page_cols);
    clvarlen_status st = cv_check_rows(ctx, fn, "page_table", CLVARLEN_DTYPE_I32, page_cols, n,
                                       *page_stride, page_stride);
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_rows(ctx, fn, "page_table_out", CLVARLEN_DTYPE_I32, *col_limit, out_rows,
                           *out_stride, out_stride);
    return st;
}

clvarlen_status clvarlen_seqlens_expand(clvarlen_context *ctx, const int32_t *kv_len,
                                        const int32_t *q_len, int32_t uniform_q_len, int64_t n,
                                        const int32_t *page_table, int64_t page_cols,
                                        int64_t page_stride, int64_t col_limit, int64_t capacity,
                                        int32_t *seqlens_expanded, int32_t *page_table_out,
                                        int64_t out_stride, int64_t *total)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    clvarlen_status st = seg_check_count(ctx, fn, "n", n);
    if (st == CLVARLEN_SUCCESS)
        st = seg_need(ctx, fn, "kv_len", kv_len, n > 0);
    if (st == CLVARLEN_SUCCESS && !q_len && uniform_q_len < 0)
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: uniform_q_len %d is negative",
                      fn, (int)uniform_q_len);
    if (st == CLVARLEN_SUCCESS && capacity < 0)
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: capacity is negative", fn);
    if (st != CLVARLEN_SUCCESS)
        return st;
    int64_t sum = 0;
    for (int64_t s = 0; s < n; s++) {
        int64_t q = q_len ? q_len[s] : uniform_q_len;
        if (q < 0)
            return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: q_len[%lld] is %d", fn,
                            (long long)s, (int)q);
        /* a negative size; the clamp at 0 is for kv < q */
        if (kv_len[s] < 0)
            return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: kv_len[%lld] is %d", fn,
                            (long long)s, (int)kv_len[s]);
        sum += q;
    }
    if (sum > capacity)
        return cv_error(ctx, CLVARLEN_ERROR_BUFFER_TOO_SMALL,
                        "%s: %lld expanded rows do not fit capacity %lld", fn, (long long)sum,
                        (long long)capacity);
    if (page_table) {
        st = expand_geom(ctx, fn, n, page_cols, &page_stride, &col_limit, &out_stride, sum);
        if (st == CLVARLEN_SUCCESS)
            st = seg_need(ctx, fn, "page_table_out", page_table_out, sum > 0);
        if (st != CLVARLEN_SUCCESS)
            return st;
    } else {
        page_table_out = NULL;
    }
    if (sum > 0 && (seqlens_expanded || page_table_out)) {
        if (!cv_use_cl(ctx)) {
            st = cv_cpu_seqlens_expand(ctx, kv_len, q_len, uniform_q_len, n, page_table,
                                       page_stride, col_limit, seqlens_expanded, page_table_out,
                                       out_stride);
        }
#if CLVARLEN_HAVE_OPENCL
        else {
            cv_chain q;
    cv_chain_begin(&q, ctx, 0, NULL, false);
            size_t out_span = cv_span_bytes(CLVARLEN_DTYPE_I32, col_limit, sum, out_stride);
            cl_mem d_kv = NULL, d_q = NULL, d_pt = NULL, d_se = NULL, d_po = NULL;
            st = seg_check_cl_limits(ctx, fn, 4, sum);
            if (st == CLVARLEN_SUCCESS)
                st = seg_upload(ctx, kv_len, (size_t)n * 4, &d_kv);
            if (st == CLVARLEN_SUCCESS)
                st = seg_upload(ctx, q_len, (size_t)n * 4, &d_q);
            if (st == CLVARLEN_SUCCESS && page_table_out)
                st = seg_upload(ctx, page_table,
                            cv_span_bytes(CLVARLEN_DTYPE_I32, page_cols, n, page_stride), &d_pt);
            if (st == CLVARLEN_SUCCESS && seqlens_expanded)
                st = cv_buffer(ctx, (size_t)sum * 4, NULL, &d_se);
            if (st == CLVARLEN_SUCCESS && page_table_out)
                st = cv_buffer(ctx, out_span, NULL, &d_po);
            if (st == CLVARLEN_SUCCESS) {
                expand_args e = {d_kv, 0, d_q, 0, uniform_q_len, n, d_pt, 0, page_stride,
                                 col_limit, sum, d_se, 0, d_po, 0, out_stride, NULL, 0};
                st = enq_expand(&q, &e);
            }
            if (st == CLVARLEN_SUCCESS && seqlens_expanded)
                st = seg_read_bytes(&q, d_se, (size_t)sum * 4, seqlens_expanded);
            if (st == CLVARLEN_SUCCESS && page_table_out)
                st = seg_read_rows(&q, d_po, sum, (size_t)col_limit * 4, (size_t)out_stride * 4,
                               page_table_out);
            cv_chain_abort(&q);
            cv_release(&d_kv);
            cv_release(&d_q);
            cv_release(&d_pt);
            cv_release(&d_se);
            cv_release(&d_po);
        }
#endif
    }
    if (st == CLVARLEN_SUCCESS && total)
        *total = sum;
    return st;
}

#if CLVARLEN_HAVE_OPENCL

clvarlen_status clvarlen_cl_seqlens_expand(
    clvarlen_context *ctx, cl_mem kv_len, size_t kv_len_offset, cl_mem q_len, size_t q_len_offset,
    int32_t uniform_q_len, int64_t n, cl_mem page_table, size_t page_table_offset,
    int64_t page_cols, int64_t page_stride, int64_t col_limit, int64_t capacity,
    cl_mem seqlens_expanded, size_t seqlens_offset, cl_mem page_table_out, size_t page_out_offset,
    int64_t out_stride, cl_mem total, size_t total_offset, cl_uint num_events,
    const cl_event *wait_list, cl_event *event)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    clvarlen_status st = cv_cl_enter(ctx, fn, num_events, wait_list);
    if (st == CLVARLEN_SUCCESS)
        st = seg_check_count(ctx, fn, "n", n);
    if (st == CLVARLEN_SUCCESS && !q_len && uniform_q_len < 0)
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: uniform_q_len %d is negative",
                      fn, (int)uniform_q_len);
    if (st == CLVARLEN_SUCCESS && (capacity < 0 || capacity > INT32_MAX))
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                      "%s: capacity %lld is outside [0, INT32_MAX]", fn, (long long)capacity);
    if (st == CLVARLEN_SUCCESS)
        st = seg_cl_arg(ctx, fn, "kv_len", kv_len, kv_len_offset, 4, n > 0);
    if (st == CLVARLEN_SUCCESS)
        st = seg_cl_arg(ctx, fn, "q_len", q_len, q_len_offset, 4, false);
    if (st == CLVARLEN_SUCCESS)
        st = seg_cl_arg(ctx, fn, "seqlens_expanded", seqlens_expanded, seqlens_offset, 4, false);
    if (st == CLVARLEN_SUCCESS)
        st = seg_cl_arg(ctx, fn, "total", total, total_offset, 8, false);
    if (st == CLVARLEN_SUCCESS && page_table) {
        st = expand_geom(ctx, fn, n, page_cols, &page_stride, &col_limit, &out_stride, capacity);
        if (st == CLVARLEN_SUCCESS)
            st = seg_cl_arg(ctx, fn, "page_table", page_table, page_table_offset, 4, true);
        if (st == CLVARLEN_SUCCESS)
            st = seg_cl_arg(ctx, fn, "page_table_out", page_table_out, page_out_offset, 4,
                        capacity > 0);
    }
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_chain q;
    st = cv_chain_begin(&q, ctx, num_events, wait_list, ctx->device_checks != 0);
    if (st == CLVARLEN_SUCCESS) {
        expand_args e = {kv_len, kv_len_offset, q_len, q_len_offset, uniform_q_len, n,
                         page_table, page_table_offset, page_stride, col_limit, capacity,
                         seqlens_expanded, seqlens_offset, page_table ? page_table_out : NULL,
                         page_out_offset, out_stride, total, total_offset};
        st = enq_expand(&q, &e);
    }
    return cv_chain_end(&q, fn, st, event);
}

#endif /* CLVARLEN_HAVE_OPENCL */

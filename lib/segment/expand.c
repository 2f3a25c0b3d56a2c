/* seqlens_expanded and the page-table expansion (SPEC 2.4): one launch of
 * segment_seqlens_expand (cl/segment-scan.cl). */
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
    if (check)
        SEG_TRY(cv_chain_check_range(q, e->kv_len, NULL, e->kv_off, e->n, 0,
                                     (int64_t)INT32_MAX + 1, false, CV_CHECK_VALUE));
    if (check && e->q_len)
        SEG_TRY(cv_chain_check_range(q, e->q_len, NULL, e->q_off, e->n, 0,
                                     (int64_t)INT32_MAX + 1, false, CV_CHECK_VALUE));
    cl_kernel k;
    SEG_TRY(cv_seg_kernel(ctx, SEG_PROG_EXPAND, 0, -1, "segment_seqlens_expand", &k));
    size_t wg = cv_seg_expand_wg(ctx);
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
    return cv_seg_run(q, k, "segment_seqlens_expand", (size_t)groups * wg, wg);
}

#endif /* CLVARLEN_HAVE_OPENCL */

/* ================================================================ entry points */

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
    SEG_TRY(cv_check_rows(ctx, fn, "page_table", CLVARLEN_DTYPE_I32, page_cols, n, *page_stride,
                          page_stride));
    return cv_check_rows(ctx, fn, "page_table_out", CLVARLEN_DTYPE_I32, *col_limit, out_rows,
                         *out_stride, out_stride);
}

/* The validated arguments of the host-memory entry point. */
typedef struct expand_host {
    const int32_t *kv_len, *q_len;
    int32_t uniform_q_len;
    int64_t n;
    const int32_t *page_table;
    int64_t page_cols, page_stride, col_limit;
    int64_t rows; /* expanded rows (the sum of q_len) */
    int32_t *seqlens_expanded, *page_table_out;
    int64_t out_stride;
} expand_host;

#if CLVARLEN_HAVE_OPENCL
static clvarlen_status expand_on_device(clvarlen_context *ctx, const char *fn, const expand_host *h)
{
    cv_chain q;
    cv_chain_begin(&q, ctx, 0, NULL, false, false);
    size_t out_span = cv_span_bytes(CLVARLEN_DTYPE_I32, h->col_limit, h->rows, h->out_stride);
    size_t pt_span = cv_span_bytes(CLVARLEN_DTYPE_I32, h->page_cols, h->n, h->page_stride);
    cl_mem d_kv = NULL, d_q = NULL, d_pt = NULL, d_se = NULL, d_po = NULL;
    clvarlen_status st;
    SEG_TRY_OUT(cv_seg_check_cl_limits(ctx, fn, 4, h->rows));
    SEG_TRY_OUT(cv_seg_upload(ctx, h->kv_len, (size_t)h->n * 4, &d_kv));
    SEG_TRY_OUT(cv_seg_upload(ctx, h->q_len, (size_t)h->n * 4, &d_q));
    if (h->page_table_out)
        SEG_TRY_OUT(cv_seg_upload(ctx, h->page_table, pt_span, &d_pt));
    if (h->seqlens_expanded)
        SEG_TRY_OUT(cv_buffer(ctx, (size_t)h->rows * 4, NULL, &d_se));
    if (h->page_table_out)
        SEG_TRY_OUT(cv_buffer(ctx, out_span, NULL, &d_po));
    expand_args e = {
        .kv_len = d_kv,
        .q_len = d_q,
        .uniform_q = h->uniform_q_len,
        .n = h->n,
        .page_table = d_pt,
        .pt_stride = h->page_stride,
        .col_limit = h->col_limit,
        .capacity = h->rows,
        .seqlens = d_se,
        .page_out = d_po,
        .out_stride = h->out_stride,
    };
    SEG_TRY_OUT(enq_expand(&q, &e));
    if (h->seqlens_expanded)
        SEG_TRY_OUT(cv_seg_read_bytes(&q, d_se, (size_t)h->rows * 4, h->seqlens_expanded));
    if (h->page_table_out)
        SEG_TRY_OUT(cv_seg_read_rows(&q, d_po, h->rows, (size_t)h->col_limit * 4,
                                     (size_t)h->out_stride * 4, h->page_table_out));
out:
    cv_chain_abort(&q);
    cv_release(&d_kv);
    cv_release(&d_q);
    cv_release(&d_pt);
    cv_release(&d_se);
    cv_release(&d_po);
    return st;
}
#endif /* CLVARLEN_HAVE_OPENCL */

/* Every q_len (or uniform_q_len) and kv_len non-negative; *rows gets the
 * sum of q_len, which must fit capacity. */
static clvarlen_status expand_rows(clvarlen_context *ctx, const char *fn, const int32_t *kv_len,
                                   const int32_t *q_len, int32_t uniform_q_len, int64_t n,
                                   int64_t capacity, int64_t *rows)
{
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
    *rows = sum;
    return CLVARLEN_SUCCESS;
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
    SEG_TRY(cv_seg_check_count(ctx, fn, "n", n));
    SEG_TRY(cv_seg_need(ctx, fn, "kv_len", kv_len, n > 0));
    if (!q_len && uniform_q_len < 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: uniform_q_len %d is negative",
                        fn, (int)uniform_q_len);
    if (capacity < 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: capacity is negative", fn);
    int64_t sum = 0;
    SEG_TRY(expand_rows(ctx, fn, kv_len, q_len, uniform_q_len, n, capacity, &sum));
    if (page_table) {
        SEG_TRY(expand_geom(ctx, fn, n, page_cols, &page_stride, &col_limit, &out_stride, sum));
        SEG_TRY(cv_seg_need(ctx, fn, "page_table_out", page_table_out, sum > 0));
    } else {
        page_table_out = NULL;
    }
    const cv_seg_rows pt = {(size_t)page_cols * 4, (size_t)page_stride * 4, 0},
                   po = {(size_t)col_limit * 4, (size_t)out_stride * 4, 0};
    const cv_region regions[] = {
        cv_seg_host("kv_len", kv_len, (uint64_t)n * 4, false),
        cv_seg_host("q_len", q_len, (uint64_t)n * 4, false),
        cv_seg_host_rows("page_table", page_table, &pt, n, false),
        cv_seg_host("seqlens_expanded", seqlens_expanded, (uint64_t)sum * 4, true),
        cv_seg_host_rows("page_table_out", page_table_out, &po, sum, true),
        cv_seg_host("total", total, 8, true),
    };
    SEG_TRY(SEG_CHECK_HOST(ctx, fn, regions));
    if (sum > 0 && (seqlens_expanded || page_table_out)) {
        if (!cv_use_cl(ctx)) {
            SEG_TRY(cv_cpu_seqlens_expand(ctx, kv_len, q_len, uniform_q_len, n, page_table,
                                          page_stride, col_limit, seqlens_expanded,
                                          page_table_out, out_stride));
        } else {
#if CLVARLEN_HAVE_OPENCL
            expand_host h = {
                .kv_len = kv_len,
                .q_len = q_len,
                .uniform_q_len = uniform_q_len,
                .n = n,
                .page_table = page_table,
                .page_cols = page_cols,
                .page_stride = page_stride,
                .col_limit = col_limit,
                .rows = sum,
                .seqlens_expanded = seqlens_expanded,
                .page_table_out = page_table_out,
                .out_stride = out_stride,
            };
            SEG_TRY(expand_on_device(ctx, fn, &h));
#endif
        }
    }
    if (total)
        *total = sum;
    return CLVARLEN_SUCCESS;
}

#if CLVARLEN_HAVE_OPENCL

clvarlen_status
clvarlen_cl_seqlens_expand(clvarlen_context *ctx, cl_mem kv_len, size_t kv_len_offset, cl_mem q_len,
                           size_t q_len_offset, int32_t uniform_q_len, int64_t n, cl_mem page_table,
                           size_t page_table_offset, int64_t page_cols, int64_t page_stride,
                           int64_t col_limit, int64_t capacity, cl_mem seqlens_expanded,
                           size_t seqlens_offset, cl_mem page_table_out, size_t page_out_offset,
                           int64_t out_stride, cl_mem total, size_t total_offset,
                           cl_uint num_events, const cl_event *wait_list, cl_event *event)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    SEG_TRY(cv_cl_enter(ctx, fn, num_events, wait_list));
    SEG_TRY(cv_seg_check_count(ctx, fn, "n", n));
    if (!q_len && uniform_q_len < 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: uniform_q_len %d is negative",
                        fn, (int)uniform_q_len);
    if (capacity < 0 || capacity > INT32_MAX)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: capacity %lld is outside [0, INT32_MAX]", fn, (long long)capacity);
    if (page_table)
        SEG_TRY(expand_geom(ctx, fn, n, page_cols, &page_stride, &col_limit, &out_stride,
                            capacity));
    else
        page_table_out = NULL;
    const cv_seg_rows pt = {(size_t)page_cols * 4, (size_t)page_stride * 4, 0},
                   po = {(size_t)col_limit * 4, (size_t)out_stride * 4, 0};
    const cv_mem_arg args[] = {
        cv_seg_mem("kv_len", kv_len, kv_len_offset, 4, (uint64_t)n * 4, n > 0, false),
        cv_seg_mem("q_len", q_len, q_len_offset, 4, (uint64_t)n * 4, false, false),
        cv_seg_mem_rows("page_table", page_table, page_table_offset, 4, &pt, page_table ? n : 0,
                        false),
        cv_seg_mem("seqlens_expanded", seqlens_expanded, seqlens_offset, 4, (uint64_t)capacity * 4,
                   false, true),
        cv_seg_mem_rows("page_table_out", page_table_out, page_out_offset, 4, &po,
                        page_table ? capacity : 0, true),
        cv_seg_mem("total", total, total_offset, 8, 8, false, true),
    };
    SEG_TRY(SEG_CHECK_MEM(ctx, fn, args));
    expand_args e = {
        .kv_len = kv_len,
        .kv_off = kv_len_offset,
        .q_len = q_len,
        .q_off = q_len_offset,
        .uniform_q = uniform_q_len,
        .n = n,
        .page_table = page_table,
        .pt_off = page_table_offset,
        .pt_stride = page_stride,
        .col_limit = col_limit,
        .capacity = capacity,
        .seqlens = seqlens_expanded,
        .se_off = seqlens_offset,
        .page_out = page_table_out,
        .po_off = page_out_offset,
        .out_stride = out_stride,
        .total = total,
        .total_off = total_offset,
    };
    cv_chain q;
    clvarlen_status st = cv_chain_begin(&q, ctx, num_events, wait_list, event != NULL, ctx->device_checks != 0);
    if (st == CLVARLEN_SUCCESS)
        st = enq_expand(&q, &e);
    return cv_chain_end(&q, fn, st, event);
}

#endif /* CLVARLEN_HAVE_OPENCL */

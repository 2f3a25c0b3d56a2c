/* Row gather and scatter (SPEC 2.3): the generic row copy of launch.c, an
 * inverse map for scatter with ZERO_REST, and the ordered accumulate for
 * repeated destinations (cl/segment.cl). */
#include "segment/segment.h"

#if CLVARLEN_HAVE_OPENCL

typedef struct rows_args {
    clvarlen_dtype dtype;
    int64_t row_elems;
    cl_mem src;
    size_t src_off, src_stride_b;
    int64_t src_rows;
    cl_mem index;
    size_t index_off;
    int64_t n_index;
    cl_mem dst;
    size_t dst_off, dst_stride_b;
    int64_t dst_rows;
} rows_args;

static clvarlen_status enq_gather(cv_chain *q, const rows_args *r)
{
    if (r->n_index <= 0)
        return CLVARLEN_SUCCESS;
    if (q->flag)
        SEG_TRY(cv_chain_check_range(q, r->index, NULL, r->index_off, r->n_index, 0, r->src_rows,
                                     true, CV_CHECK_INDEX));
    copy_args c = {
        .dtype = r->dtype,
        .row_elems = r->row_elems,
        .src = r->src,
        .src_off = r->src_off,
        .src_stride_b = r->src_stride_b,
        .src_rows = r->src_rows,
        .dst = r->dst,
        .dst_off = r->dst_off,
        .dst_stride_b = r->dst_stride_b,
        .dst_rows = r->n_index,
        .n_rows = r->n_index,
        .map32 = r->index,
        .map_off = r->index_off,
        .fill_mode = 1,
    };
    return cv_seg_enq_copy(q, &c);
}

/* Accumulate with repeated destinations: each group adds its destination
 * rows' sources in index order (segment_scatter_add_ordered). */
static clvarlen_status enq_scatter_ordered(cv_chain *q, const rows_args *r, bool zero_rest)
{
    clvarlen_context *ctx = q->ctx;
    cl_mem flag = q->flag;
    cl_int check = q->flag != NULL;
    cl_kernel k;
    SEG_TRY(cv_seg_kernel(ctx, SEG_PROG_ACC, 0, cv_dtype_kernel_code(r->dtype),
                          "segment_scatter_add_ordered", &k));
    cl_ulong so = r->src_off, ss = r->src_stride_b, io = r->index_off, doff = r->dst_off,
             ds = r->dst_stride_b;
    cl_long ni = r->n_index, dr = r->dst_rows;
    cl_int re = (cl_int)r->row_elems, zr = zero_rest;
    cv_args a = cv_args_begin(k);
    CV_ARG(a, r->src);
    CV_ARG(a, so);
    CV_ARG(a, ss);
    CV_ARG(a, r->index);
    CV_ARG(a, io);
    CV_ARG(a, ni);
    CV_ARG(a, r->dst);
    CV_ARG(a, doff);
    CV_ARG(a, ds);
    CV_ARG(a, dr);
    CV_ARG(a, re);
    CV_ARG(a, zr);
    CV_ARG(a, flag);
    CV_ARG(a, check);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(ctx, a.err, "segment_scatter_add_ordered: clSetKernelArg");
    size_t wg = cv_seg_copy_wg(ctx);
    int64_t acc_rows = (int64_t)cv_seg_acc_rows(ctx);
    int64_t blocks = (r->dst_rows + acc_rows - 1) / acc_rows *
                     ((r->row_elems + (int64_t)wg - 1) / (int64_t)wg);
    int64_t groups = CV_MAX(1, CV_MIN(blocks, (int64_t)SEG_MAX_GROUPS));
    return cv_seg_run(q, k, "segment_scatter_add_ordered", (size_t)groups * wg, wg);
}

/*
 * overwrite: direct (dst map), or with zero_rest through the inverse map
 * (every dst row written once); accumulate with unique indices: the same
 * with CV_ACC; accumulate with repeats: the ordered kernel.
 */
static clvarlen_status enq_scatter(cv_chain *q, const rows_args *r, clvarlen_scatter_mode mode,
                                   bool zero_rest, bool unique)
{
    bool acc = mode == CLVARLEN_SCATTER_ACCUMULATE;
    if (r->dst_rows <= 0 || (r->n_index <= 0 && !zero_rest))
        return CLVARLEN_SUCCESS;
    if (q->flag)
        SEG_TRY(cv_chain_check_range(q, r->index, NULL, r->index_off, r->n_index, 0, r->dst_rows,
                                     true, CV_CHECK_INDEX));
    if (acc && !unique)
        return enq_scatter_ordered(q, r, zero_rest);
    copy_args c = {
        .dtype = r->dtype,
        .row_elems = r->row_elems,
        .src = r->src,
        .src_off = r->src_off,
        .src_stride_b = r->src_stride_b,
        .src_rows = r->n_index,
        .dst = r->dst,
        .dst_off = r->dst_off,
        .dst_stride_b = r->dst_stride_b,
        .dst_rows = r->dst_rows,
        .accumulate = acc,
    };
    if (!zero_rest) {
        c.n_rows = r->n_index;
        c.map32 = r->index;
        c.map_off = r->index_off;
        c.map_dst = 1;
        return cv_seg_enq_copy(q, &c);
    }
    cl_mem inv = NULL;
    SEG_TRY(cv_seg_temp(q, (size_t)r->dst_rows * sizeof(cl_int), &inv));
    SEG_TRY(cv_seg_enq_invert(q, r->index, NULL, r->index_off, r->n_index, r->dst_rows, inv,
                              SEG_TEMP_OFF));
    c.n_rows = r->dst_rows;
    c.map32 = inv;
    c.map_off = SEG_TEMP_OFF;
    c.fill_mode = 1;
    return cv_seg_enq_copy(q, &c);
}

/* The host-memory paths: upload, enqueue, read back, release. */
static clvarlen_status gather_on_device(clvarlen_context *ctx, const rows_args *h, const void *src,
                                        const int32_t *index, void *dst, const cv_seg_rows *sr,
                                        const cv_seg_rows *dr)
{
    cv_chain q;
    cv_chain_begin(&q, ctx, 0, NULL, false, false);
    cl_mem d_src = NULL, d_idx = NULL, d_dst = NULL;
    clvarlen_status st;
    SEG_TRY_OUT(cv_seg_upload(ctx, h->src_rows > 0 ? src : NULL, sr->span, &d_src));
    SEG_TRY_OUT(cv_seg_upload(ctx, index, (size_t)h->n_index * 4, &d_idx));
    SEG_TRY_OUT(cv_buffer(ctx, dr->span, NULL, &d_dst));
    rows_args r = *h;
    r.src = d_src;
    r.index = d_idx;
    r.dst = d_dst;
    SEG_TRY_OUT(enq_gather(&q, &r));
    SEG_TRY_OUT(cv_seg_read_rows(&q, d_dst, h->n_index, dr->row_bytes, dr->stride_b, dst));
out:
    cv_chain_abort(&q);
    cv_release(&d_src);
    cv_release(&d_idx);
    cv_release(&d_dst);
    return st;
}

static clvarlen_status scatter_on_device(clvarlen_context *ctx, const rows_args *h, const void *src,
                                         const int32_t *index, void *dst, const cv_seg_rows *sr,
                                         const cv_seg_rows *dr, clvarlen_scatter_mode mode,
                                         bool zero_rest, bool distinct)
{
    bool overwrite = mode == CLVARLEN_SCATTER_OVERWRITE;
    cv_chain q;
    cv_chain_begin(&q, ctx, 0, NULL, false, false);
    cl_mem d_src = NULL, d_idx = NULL, d_dst = NULL;
    clvarlen_status st;
    SEG_TRY_OUT(cv_seg_upload(ctx, h->n_index > 0 ? src : NULL, sr->span, &d_src));
    SEG_TRY_OUT(cv_seg_upload(ctx, h->n_index > 0 ? index : NULL, (size_t)h->n_index * 4, &d_idx));
    /* every dst row is written with overwrite + zero_rest; otherwise keep the others */
    SEG_TRY_OUT(cv_buffer(ctx, dr->span, (overwrite && zero_rest) ? NULL : dst, &d_dst));
    rows_args r = *h;
    r.src = d_src;
    r.index = d_idx;
    r.dst = d_dst;
    SEG_TRY_OUT(enq_scatter(&q, &r, mode, zero_rest, distinct));
    SEG_TRY_OUT(cv_seg_read_rows(&q, d_dst, h->dst_rows, dr->row_bytes, dr->stride_b, dst));
out:
    cv_chain_abort(&q);
    cv_release(&d_src);
    cv_release(&d_idx);
    cv_release(&d_dst);
    return st;
}

#endif /* CLVARLEN_HAVE_OPENCL */

/* ================================================================ entry points */

clvarlen_status clvarlen_gather_rows(clvarlen_context *ctx, clvarlen_dtype dtype, int64_t row_elems,
                                     const void *src, int64_t src_rows, int64_t src_stride,
                                     const int32_t *index, int64_t n_index, void *dst,
                                     int64_t dst_stride)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    cv_seg_rows sr, dr;
    SEG_TRY(cv_seg_rows_geom(ctx, fn, "src", dtype, row_elems, src_rows, src_stride, src, &sr));
    SEG_TRY(cv_seg_rows_geom(ctx, fn, "dst", dtype, row_elems, n_index, dst_stride, dst, &dr));
    SEG_TRY(cv_seg_need(ctx, fn, "index", index, n_index > 0));
    SEG_TRY(cv_seg_check_indices(ctx, fn, "index", index, NULL, n_index, src_rows, true, NULL,
                                 false));
    if (n_index == 0)
        return CLVARLEN_SUCCESS;
    const cv_region regions[] = {
        cv_seg_host_rows("src", src, &sr, src_rows, false),
        cv_seg_host("index", index, (uint64_t)n_index * 4, false),
        cv_seg_host_rows("dst", dst, &dr, n_index, true),
    };
    SEG_TRY(SEG_CHECK_HOST(ctx, fn, regions));
    if (!cv_use_cl(ctx)) {
        cv_cpu_gather(ctx, sr.row_bytes, src, sr.stride_b, index, n_index, dst, dr.stride_b);
        return CLVARLEN_SUCCESS;
    }
#if CLVARLEN_HAVE_OPENCL
    SEG_TRY(cv_seg_check_cl_limits(ctx, fn, sr.row_bytes, n_index));
    rows_args r = {
        .dtype = dtype,
        .row_elems = row_elems,
        .src_stride_b = sr.stride_b,
        .src_rows = src_rows,
        .n_index = n_index,
        .dst_stride_b = dr.stride_b,
        .dst_rows = n_index,
    };
    return gather_on_device(ctx, &r, src, index, dst, &sr, &dr);
#else
    return CLVARLEN_ERROR_INTERNAL;
#endif
}

/*
 * UNIQUE_INDICES is a promise for the cl_mem entry point; here the host sees
 * the indices and decides by itself (a broken promise cannot change the sum).
 */
clvarlen_status clvarlen_scatter_rows(clvarlen_context *ctx, clvarlen_dtype dtype,
                                      int64_t row_elems, const void *src, int64_t src_stride,
                                      const int32_t *index, int64_t n_index, void *dst,
                                      int64_t dst_rows, int64_t dst_stride,
                                      clvarlen_scatter_mode mode, unsigned flags)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    cv_seg_rows sr, dr;
    SEG_TRY(cv_seg_check_scatter_mode(ctx, fn, dtype, mode, flags));
    SEG_TRY(cv_seg_rows_geom(ctx, fn, "src", dtype, row_elems, n_index, src_stride, src, &sr));
    SEG_TRY(cv_seg_rows_geom(ctx, fn, "dst", dtype, row_elems, dst_rows, dst_stride, dst, &dr));
    SEG_TRY(cv_seg_need(ctx, fn, "index", index, n_index > 0));
    bool overwrite = mode == CLVARLEN_SCATTER_OVERWRITE;
    bool zero_rest = (flags & CLVARLEN_SCATTER_ZERO_REST) != 0;
    bool distinct = false;
    SEG_TRY(cv_seg_check_indices(ctx, fn, "index", index, NULL, n_index, dst_rows, true,
                                 (overwrite || cv_use_cl(ctx)) ? &distinct : NULL, overwrite));
    if (dst_rows == 0 || (n_index == 0 && !zero_rest))
        return CLVARLEN_SUCCESS;
    const cv_region regions[] = {
        cv_seg_host_rows("src", src, &sr, n_index, false),
        cv_seg_host("index", index, (uint64_t)n_index * 4, false),
        cv_seg_host_rows("dst", dst, &dr, dst_rows, true),
    };
    SEG_TRY(SEG_CHECK_HOST(ctx, fn, regions));
    if (!cv_use_cl(ctx))
        return cv_cpu_scatter(ctx, dtype, row_elems, src, sr.stride_b, index, n_index, dst,
                              dst_rows, dr.stride_b, mode, zero_rest);
#if CLVARLEN_HAVE_OPENCL
    SEG_TRY(cv_seg_check_cl_limits(ctx, fn, sr.row_bytes, CV_MAX(n_index, dst_rows)));
    rows_args r = {
        .dtype = dtype,
        .row_elems = row_elems,
        .src_stride_b = sr.stride_b,
        .src_rows = n_index,
        .n_index = n_index,
        .dst_stride_b = dr.stride_b,
        .dst_rows = dst_rows,
    };
    return scatter_on_device(ctx, &r, src, index, dst, &sr, &dr, mode, zero_rest, distinct);
#else
    return CLVARLEN_ERROR_INTERNAL;
#endif
}

#if CLVARLEN_HAVE_OPENCL

clvarlen_status clvarlen_cl_gather_rows(clvarlen_context *ctx, clvarlen_dtype dtype,
                                        int64_t row_elems, cl_mem src, size_t src_offset,
                                        int64_t src_rows, int64_t src_stride, cl_mem index,
                                        size_t index_offset, int64_t n_index, cl_mem dst,
                                        size_t dst_offset, int64_t dst_stride, cl_uint num_events,
                                        const cl_event *wait_list, cl_event *event)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    SEG_TRY(cv_cl_enter(ctx, fn, num_events, wait_list));
    cv_seg_rows sr, dr;
    size_t es = cv_dtype_size(dtype);
    SEG_TRY(cv_seg_rows_geom(ctx, fn, "src", dtype, row_elems, src_rows, src_stride, src, &sr));
    SEG_TRY(cv_seg_rows_geom(ctx, fn, "dst", dtype, row_elems, n_index, dst_stride, dst, &dr));
    SEG_TRY(cv_seg_check_cl_limits(ctx, fn, sr.row_bytes, n_index));
    const cv_mem_arg args[] = {
        cv_seg_mem_rows("src", src, src_offset, es, &sr, src_rows, false),
        cv_seg_mem("index", index, index_offset, 4, (uint64_t)n_index * 4, n_index > 0, false),
        cv_seg_mem_rows("dst", dst, dst_offset, es, &dr, n_index, true),
    };
    SEG_TRY(SEG_CHECK_MEM(ctx, fn, args));
    rows_args r = {
        .dtype = dtype,
        .row_elems = row_elems,
        .src = src,
        .src_off = src_offset,
        .src_stride_b = sr.stride_b,
        .src_rows = src_rows,
        .index = index,
        .index_off = index_offset,
        .n_index = n_index,
        .dst = dst,
        .dst_off = dst_offset,
        .dst_stride_b = dr.stride_b,
        .dst_rows = n_index,
    };
    cv_chain q;
    clvarlen_status st = cv_chain_begin(&q, ctx, num_events, wait_list, event != NULL, ctx->device_checks != 0);
    if (st == CLVARLEN_SUCCESS)
        st = enq_gather(&q, &r);
    return cv_chain_end(&q, fn, st, event);
}

clvarlen_status
clvarlen_cl_scatter_rows(clvarlen_context *ctx, clvarlen_dtype dtype, int64_t row_elems, cl_mem src,
                         size_t src_offset, int64_t src_stride, cl_mem index, size_t index_offset,
                         int64_t n_index, cl_mem dst, size_t dst_offset, int64_t dst_rows,
                         int64_t dst_stride, clvarlen_scatter_mode mode, unsigned flags,
                         cl_uint num_events, const cl_event *wait_list, cl_event *event)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    SEG_TRY(cv_cl_enter(ctx, fn, num_events, wait_list));
    cv_seg_rows sr, dr;
    size_t es = cv_dtype_size(dtype);
    SEG_TRY(cv_seg_check_scatter_mode(ctx, fn, dtype, mode, flags));
    SEG_TRY(cv_seg_rows_geom(ctx, fn, "src", dtype, row_elems, n_index, src_stride, src, &sr));
    SEG_TRY(cv_seg_rows_geom(ctx, fn, "dst", dtype, row_elems, dst_rows, dst_stride, dst, &dr));
    SEG_TRY(cv_seg_check_cl_limits(ctx, fn, sr.row_bytes, CV_MAX(n_index, dst_rows)));
    const cv_mem_arg args[] = {
        cv_seg_mem_rows("src", src, src_offset, es, &sr, n_index, false),
        cv_seg_mem("index", index, index_offset, 4, (uint64_t)n_index * 4, n_index > 0, false),
        cv_seg_mem_rows("dst", dst, dst_offset, es, &dr, dst_rows, true),
    };
    SEG_TRY(SEG_CHECK_MEM(ctx, fn, args));
    rows_args r = {
        .dtype = dtype,
        .row_elems = row_elems,
        .src = src,
        .src_off = src_offset,
        .src_stride_b = sr.stride_b,
        .src_rows = n_index,
        .index = index,
        .index_off = index_offset,
        .n_index = n_index,
        .dst = dst,
        .dst_off = dst_offset,
        .dst_stride_b = dr.stride_b,
        .dst_rows = dst_rows,
    };
    cv_chain q;
    clvarlen_status st = cv_chain_begin(&q, ctx, num_events, wait_list, event != NULL, ctx->device_checks != 0);
    if (st == CLVARLEN_SUCCESS)
        st = enq_scatter(&q, &r, mode, (flags & CLVARLEN_SCATTER_ZERO_REST) != 0,
                         (flags & CLVARLEN_SCATTER_UNIQUE_INDICES) != 0);
    return cv_chain_end(&q, fn, st, event);
}

#endif /* CLVARLEN_HAVE_OPENCL */

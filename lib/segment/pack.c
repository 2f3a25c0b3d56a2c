#include "segment/segment.h"

#if CLVARLEN_HAVE_OPENCL

typedef struct pack_args {
    clvarlen_dtype dtype;
    int64_t row_elems;
    cl_mem padded;
    size_t padded_off, padded_stride_b;
    int64_t batch, max_seqlen;
    cl_mem valid_lens;
    size_t valid_lens_off;
    cl_mem mask;
    size_t mask_off;
    int64_t capacity;
    cl_mem packed;
    size_t packed_off;
    cl_mem cu;
    size_t cu_off;
    cl_mem src_index;
    size_t src_index_off;
    cl_mem total;
    size_t total_off;
} pack_args;

/*
 * Prefix form: scan (valid_lens -> cu, total; validates, checks capacity),
 * then one row kernel that finds each packed row's batch row in cu. Mask
 * form: per-row counts, the same scan, per-row index scans into src_index
 * (or a temporary), then a row gather bounded by the scanned total.
 */
/* Prefix form with batch <= SEG_FUSE_MAX: scan and rows in one launch. */
static clvarlen_status enq_pack_fused(cv_chain *q, const pack_args *p)
{
    cl_mem flag = q->flag;
    cl_int check = q->flag != NULL;
    clvarlen_context *ctx = q->ctx;
    int64_t rows_max = CV_MIN(p->capacity, p->batch * p->max_seqlen);
    size_t row_bytes = (size_t)p->row_elems * cv_dtype_size(p->dtype);
    size_t v[3] = {p->padded_off, p->packed_off, p->padded_stride_b};
    int unit = seg_pick_unit(row_bytes, v, 3);
    cl_kernel k;
    clvarlen_status st = seg_kernel(ctx, SEC_COPY, unit, -1, "segment_pack_fused", &k);
    if (st != CLVARLEN_SUCCESS)
        return st;
    seg_geo g;
    seg_fused_geo(ctx, (int64_t)(row_bytes / (size_t)unit), rows_max, &g);
    cl_ulong lo = p->valid_lens_off, co = p->cu_off, to = p->total_off, so = p->padded_off,
             ss = p->padded_stride_b, doff = p->packed_off, ds = row_bytes, io = p->src_index_off;
    cl_int nb = (cl_int)p->batch;
    cl_long S = p->max_seqlen, cap = p->capacity, nr = rows_max;
    cv_args a = cv_args_begin(k);
    CV_ARG(a, p->valid_lens);
    CV_ARG(a, lo);
    CV_ARG(a, nb);
    CV_ARG(a, S);
    CV_ARG(a, cap);
    CV_ARG(a, p->cu);
    CV_ARG(a, co);
    CV_ARG(a, p->total);
    CV_ARG(a, to);
    CV_ARG(a, nr);
    CV_ARG(a, p->padded);
    CV_ARG(a, so);
    CV_ARG(a, ss);
    CV_ARG(a, p->packed);
    CV_ARG(a, doff);
    CV_ARG(a, ds);
    CV_ARG(a, g.row_units);
    CV_ARG(a, g.lpr);
    CV_ARG(a, p->src_index);
    CV_ARG(a, io);
    CV_ARG(a, flag);
    CV_ARG(a, check);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(ctx, a.err, "segment_pack_fused: clSetKernelArg");
    return seg_run(q, k, "segment_pack_fused", g.global, g.local);
}

static clvarlen_status enq_pack(cv_chain *q, const pack_args *p)
{
    cl_mem flag = q->flag;
    cl_int check = q->flag != NULL;
    clvarlen_context *ctx = q->ctx;
    if (!p->mask && p->batch <= SEG_FUSE_MAX)
        return enq_pack_fused(q, p);
    int64_t rows_max = CV_MIN(p->capacity, p->batch * p->max_seqlen);
    size_t es = cv_dtype_size(p->dtype);
    size_t row_bytes = (size_t)p->row_elems * es;
    cl_kernel k_count = NULL, k_index = NULL, k_rows = NULL;
    int unit = 1;
    clvarlen_status st;
    if (p->mask) {
        st = seg_kernel(ctx, SEC_SCANS, 0, -1, "segment_mask_count", &k_count);
        if (st == CLVARLEN_SUCCESS)
            st = seg_kernel(ctx, SEC_SCANS, 0, -1, "segment_mask_index", &k_index);
    } else {
        size_t v[3] = {p->padded_off, p->packed_off, p->padded_stride_b};
        unit = seg_pick_unit(row_bytes, v, 3);
        st = seg_kernel(ctx, SEC_COPY, unit, -1, "segment_pack_rows", &k_rows);
    }
    if (st != CLVARLEN_SUCCESS)
        return st;
    /* temp: scratch word; mask form: counts [batch], then the index when
     * the caller wants no src_index */
    size_t counts_off = SEG_TEMP_OFF, index_off = SEG_TEMP_OFF;
    size_t temp_bytes = 0;
    if (p->mask) {
        index_off = SEG_TEMP_OFF + seg_align8((size_t)p->batch * sizeof(cl_int));
        temp_bytes = index_off - SEG_TEMP_OFF;
        if (!p->src_index && rows_max > 0)
            temp_bytes += (size_t)rows_max * sizeof(cl_long);
    }
    cl_mem temp = NULL;
    st = seg_temp(q, temp_bytes, &temp);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cl_mem scratch = temp;
    cl_ulong mo = p->mask_off, co = p->cu_off, cno = counts_off;
    cl_int nb = (cl_int)p->batch;
    cl_long S = p->max_seqlen, cap = p->capacity;
    size_t wg = seg_scan_wg(ctx);
    size_t groups = (size_t)CV_MAX(1, CV_MIN(p->batch, (int64_t)SEG_MAX_GROUPS));
    if (st == CLVARLEN_SUCCESS && p->mask && p->batch > 0) {
        if (p->max_seqlen == 0) {
            static const cl_int zero = 0;
            st = cv_chain_fill(q, temp, &zero, sizeof zero, counts_off,
                          (size_t)p->batch * sizeof(cl_int));
        } else {
            cv_args a = cv_args_begin(k_count);
            CV_ARG(a, p->mask);
            CV_ARG(a, mo);
            CV_ARG(a, nb);
            CV_ARG(a, S);
            CV_ARG(a, temp);
            CV_ARG(a, cno);
            st = a.err != CL_SUCCESS
                     ? cv_cl_check(ctx, a.err, "segment_mask_count: clSetKernelArg")
                     : seg_run(q, k_count, "segment_mask_count", groups * wg, wg);
        }
    }
    if (st == CLVARLEN_SUCCESS)
        st = seg_enq_scan_lengths(q, p->mask ? temp : p->valid_lens,
                              p->mask ? counts_off : p->valid_lens_off, p->batch,
                              p->mask ? -1 : p->max_seqlen, p->capacity, p->cu, p->cu_off,
                              p->total, p->total_off, scratch);
    if (st == CLVARLEN_SUCCESS && rows_max > 0 && !p->mask) {
        seg_geo g;
        seg_row_geo(ctx, (int64_t)(row_bytes / (size_t)unit), rows_max, &g);
        cl_ulong so = p->padded_off, ss = p->padded_stride_b, doff = p->packed_off, ds = row_bytes,
                 io = p->src_index_off;
        cl_long nr = rows_max;
        cv_args a = cv_args_begin(k_rows);
        CV_ARG(a, p->cu);
        CV_ARG(a, co);
        CV_ARG(a, nb);
        CV_ARG(a, S);
        CV_ARG(a, scratch);
        CV_ARG(a, cap);
        CV_ARG(a, nr);
        CV_ARG(a, p->padded);
        CV_ARG(a, so);
        CV_ARG(a, ss);
        CV_ARG(a, p->packed);
        CV_ARG(a, doff);
        CV_ARG(a, ds);
        CV_ARG(a, g.row_units);
        CV_ARG(a, g.lpr);
        CV_ARG(a, p->src_index);
        CV_ARG(a, io);
        CV_ARG(a, flag);
        CV_ARG(a, check);
        st = a.err != CL_SUCCESS ? cv_cl_check(ctx, a.err, "segment_pack_rows: clSetKernelArg")
                                 : seg_run(q, k_rows, "segment_pack_rows", g.global, g.local);
    }
    cl_mem idx = p->src_index ? p->src_index : temp;
    cl_ulong io = p->src_index ? p->src_index_off : index_off;
    if (st == CLVARLEN_SUCCESS && rows_max > 0 && p->mask) {
        cv_args a = cv_args_begin(k_index);
        CV_ARG(a, p->mask);
        CV_ARG(a, mo);
        CV_ARG(a, nb);
        CV_ARG(a, S);
        CV_ARG(a, p->cu);
        CV_ARG(a, co);
        CV_ARG(a, scratch);
        CV_ARG(a, cap);
        CV_ARG(a, idx);
        CV_ARG(a, io);
        CV_ARG(a, flag);
        CV_ARG(a, check);
        st = a.err != CL_SUCCESS ? cv_cl_check(ctx, a.err, "segment_mask_index: clSetKernelArg")
                                 : seg_run(q, k_index, "segment_mask_index", groups * wg, wg);
    }
    if (st == CLVARLEN_SUCCESS && rows_max > 0 && p->mask) {
        copy_args c = {0};
        c.dtype = p->dtype;
        c.row_elems = p->row_elems;
        c.src = p->padded;
        c.src_off = p->padded_off;
        c.src_stride_b = p->padded_stride_b;
        c.src_rows = p->batch * p->max_seqlen;
        c.dst = p->packed;
        c.dst_off = p->packed_off;
        c.dst_stride_b = row_bytes;
        c.dst_rows = p->capacity;
        c.n_rows = rows_max;
        c.map64 = idx;
        c.map_off = io;
        c.count = scratch;
        c.count_cap = p->capacity;
        st = seg_enq_copy(q, &c);
    }
    return st;
}

typedef struct unpack_args {
    clvarlen_dtype dtype;
    int64_t row_elems;
    cl_mem packed;
    size_t packed_off, packed_stride_b;
    int64_t total;
    cl_mem src_index;
    size_t src_index_off;
    int64_t padded_rows;
    const void *pad;
    cl_mem padded;
    size_t padded_off, padded_stride_b;
} unpack_args;

/* Row map inversion, then one pass over every padded row (packed row or pad). */
static clvarlen_status enq_unpack(cv_chain *q, const unpack_args *u)
{
    cl_int check = q->flag != NULL;
    if (u->padded_rows <= 0)
        return CLVARLEN_SUCCESS;
    clvarlen_status st = CLVARLEN_SUCCESS;
    if (check)
        st = cv_chain_check_range(q, NULL, u->src_index, u->src_index_off, u->total, 0,
                             u->padded_rows, false, CV_CHECK_INDEX);
    cl_mem inv = NULL;
    if (st == CLVARLEN_SUCCESS)
        st = seg_temp(q, (size_t)u->padded_rows * sizeof(cl_int), &inv);
    if (st == CLVARLEN_SUCCESS)
        st = seg_enq_invert(q, NULL, u->src_index, u->src_index_off, u->total,
                        u->padded_rows, inv, SEG_TEMP_OFF);
    if (st == CLVARLEN_SUCCESS) {
        copy_args c = {0};
        c.dtype = u->dtype;
        c.row_elems = u->row_elems;
        c.src = u->packed;
        c.src_off = u->packed_off;
        c.src_stride_b = u->packed_stride_b;
        c.src_rows = u->total;
        c.dst = u->padded;
        c.dst_off = u->padded_off;
        c.dst_stride_b = u->padded_stride_b;
        c.dst_rows = u->padded_rows;
        c.n_rows = u->padded_rows;
        c.map32 = inv;
        c.map_off = SEG_TEMP_OFF;
        c.fill_mode = 1;
        seg_fill_pattern(c.fill, u->pad, cv_dtype_size(u->dtype));
        st = seg_enq_copy(q, &c);
    }
    return st;
}

#endif /* CLVARLEN_HAVE_OPENCL */

/* ================================================================ pack / unpack */

/* batch and max_seqlen of a padded tensor. */
static clvarlen_status check_padded(clvarlen_context *ctx, const char *fn, int64_t batch,
                                    int64_t max_seqlen)
{
    clvarlen_status st = seg_check_count(ctx, fn, "batch", batch);
    if (st == CLVARLEN_SUCCESS && (max_seqlen < 0 || max_seqlen > INT32_MAX))
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                      "%s: max_seqlen %lld is outside [0, INT32_MAX]", fn, (long long)max_seqlen);
    return st;
}

static clvarlen_status pack_host(clvarlen_context *ctx, const char *fn, clvarlen_dtype dtype,
                                 int64_t row_elems, const void *padded, int64_t padded_stride,
                                 int64_t batch, int64_t max_seqlen, const int32_t *valid_lens,
                                 const uint8_t *mask, int64_t capacity, void *packed,
                                 int32_t *cu_seqlens, int64_t *src_index, int64_t *total_tokens)
{
    CV_ENTER_FN(ctx, fn);
    seg_rows pr;
    clvarlen_status st = check_padded(ctx, fn, batch, max_seqlen);
    int64_t rows = batch * max_seqlen;
    if (st == CLVARLEN_SUCCESS)
        st = seg_rows_geom(ctx, fn, "padded", dtype, row_elems, rows, padded_stride, padded, &pr);
    if (st == CLVARLEN_SUCCESS)
        st = mask ? CLVARLEN_SUCCESS : seg_need(ctx, fn, "valid_lens", valid_lens, batch > 0);
    if (st == CLVARLEN_SUCCESS && capacity < 0)
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: capacity_tokens is negative",
                      fn);
    if (st == CLVARLEN_SUCCESS)
        st = seg_need(ctx, fn, "cu_seqlens", cu_seqlens, true);
    if (st != CLVARLEN_SUCCESS)
        return st;
    int32_t *counts = NULL;
    const int32_t *lens = valid_lens;
    if (mask) {
        counts = malloc((size_t)(batch > 0 ? batch : 1) * sizeof *counts);
        if (!counts)
            return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "%s: cannot allocate counts", fn);
        for (int64_t b = 0; b < batch; b++) {
            const uint8_t *m = mask + (size_t)(b * max_seqlen);
            int64_t k = 0;
            for (int64_t s = 0; s < max_seqlen; s++)
                k += m[s] != 0;
            counts[b] = (int32_t)k;
        }
        lens = counts;
    }
    int64_t total = 0;
    for (int64_t b = 0; b < batch && st == CLVARLEN_SUCCESS; b++) {
        if (lens[b] < 0 || lens[b] > max_seqlen)
            st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                          "%s: valid_lens[%lld] = %d is outside [0, max_seqlen %lld]", fn,
                          (long long)b, (int)lens[b], (long long)max_seqlen);
        total += lens[b];
    }
    if (st == CLVARLEN_SUCCESS && total > INT32_MAX)
        st = cv_error(ctx, CLVARLEN_ERROR_OVERFLOW, "%s: %lld tokens exceed INT32_MAX", fn,
                      (long long)total);
    if (st == CLVARLEN_SUCCESS && total > capacity)
        st = cv_error(ctx, CLVARLEN_ERROR_BUFFER_TOO_SMALL,
                      "%s: %lld tokens do not fit capacity_tokens %lld", fn, (long long)total,
                      (long long)capacity);
    if (st == CLVARLEN_SUCCESS)
        st = seg_need(ctx, fn, "packed", packed, total > 0);
    if (st == CLVARLEN_SUCCESS && !cv_use_cl(ctx))
        st = cv_cpu_pack(ctx, pr.row_bytes, padded, pr.stride_b, batch, max_seqlen, lens, mask,
                         packed, cu_seqlens, src_index);
#if CLVARLEN_HAVE_OPENCL
    else if (st == CLVARLEN_SUCCESS) {
        st = seg_check_cl_limits(ctx, fn, pr.row_bytes, total);
        cv_chain q;
    cv_chain_begin(&q, ctx, 0, NULL, false);
        cl_mem d_pad = NULL, d_lens = NULL, d_mask = NULL, d_packed = NULL, d_cu = NULL,
               d_si = NULL;
        if (st == CLVARLEN_SUCCESS)
            st = seg_upload(ctx, rows > 0 ? padded : NULL, pr.span, &d_pad);
        if (st == CLVARLEN_SUCCESS && !mask)
            st = seg_upload(ctx, batch > 0 ? valid_lens : NULL, (size_t)batch * 4, &d_lens);
        if (st == CLVARLEN_SUCCESS && mask)
            st = seg_upload(ctx, mask, (size_t)rows, &d_mask);
        if (st == CLVARLEN_SUCCESS)
            st = cv_buffer(ctx, (size_t)total * pr.row_bytes, NULL, &d_packed);
        if (st == CLVARLEN_SUCCESS)
            st = cv_buffer(ctx, (size_t)(batch + 1) * 4, NULL, &d_cu);
        if (st == CLVARLEN_SUCCESS && src_index)
            st = cv_buffer(ctx, (size_t)total * 8, NULL, &d_si);
        if (st == CLVARLEN_SUCCESS) {
            pack_args p = {dtype, row_elems, d_pad, 0, pr.stride_b, batch, max_seqlen, d_lens, 0,
                           d_mask, 0, total, d_packed, 0, d_cu, 0, d_si, 0, NULL, 0};
            st = enq_pack(&q, &p);
        }
        if (st == CLVARLEN_SUCCESS)
            st = seg_read_bytes(&q, d_packed, (size_t)total * pr.row_bytes, packed);
        if (st == CLVARLEN_SUCCESS)
            st = seg_read_bytes(&q, d_cu, (size_t)(batch + 1) * 4, cu_seqlens);
        if (st == CLVARLEN_SUCCESS && src_index)
            st = seg_read_bytes(&q, d_si, (size_t)total * 8, src_index);
        cv_chain_abort(&q);
        cv_release(&d_pad);
        cv_release(&d_lens);
        cv_release(&d_mask);
        cv_release(&d_packed);
        cv_release(&d_cu);
        cv_release(&d_si);
    }
#endif
    free(counts);
    if (st == CLVARLEN_SUCCESS && total_tokens)
        *total_tokens = total;
    return st;
}

clvarlen_status clvarlen_pack(clvarlen_context *ctx, clvarlen_dtype dtype, int64_t row_elems,
                              const void *padded, int64_t padded_stride, int64_t batch,
                              int64_t max_seqlen, const int32_t *valid_lens,
                              int64_t capacity_tokens, void *packed, int32_t *cu_seqlens,
                              int64_t *src_index, int64_t *total_tokens)
{
    return pack_host(ctx, __func__, dtype, row_elems, padded, padded_stride, batch, max_seqlen,
                     valid_lens, NULL, capacity_tokens, packed, cu_seqlens, src_index,
                     total_tokens);
}

clvarlen_status clvarlen_pack_masked(clvarlen_context *ctx, clvarlen_dtype dtype,
                                     int64_t row_elems, const void *padded,
                                     int64_t padded_stride, int64_t batch, int64_t max_seqlen,
                                     const uint8_t *mask, int64_t capacity_tokens, void *packed,
                                     int32_t *cu_seqlens, int64_t *src_index,
                                     int64_t *total_tokens)
{
    if (ctx && !mask && batch > 0 && max_seqlen > 0) {
        cv_clear_error(ctx);
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: mask is NULL", __func__);
    }
    static const uint8_t no_rows = 0;
    return pack_host(ctx, __func__, dtype, row_elems, padded, padded_stride, batch, max_seqlen,
                     NULL, mask ? mask : &no_rows, capacity_tokens, packed, cu_seqlens, src_index,
                     total_tokens);
}

clvarlen_status clvarlen_unpack(clvarlen_context *ctx, clvarlen_dtype dtype, int64_t row_elems,
                                const void *packed, int64_t packed_stride, int64_t total_tokens,
                                const int64_t *src_index, int64_t batch, int64_t max_seqlen,
                                const void *pad_value, void *padded, int64_t padded_stride)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    seg_rows pk, pd;
    clvarlen_status st = check_padded(ctx, fn, batch, max_seqlen);
    int64_t rows = batch * max_seqlen;
    if (st == CLVARLEN_SUCCESS && (total_tokens < 0 || total_tokens > rows))
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                      "%s: total_tokens %lld is outside [0, batch * max_seqlen = %lld]", fn,
                      (long long)total_tokens, (long long)rows);
    if (st == CLVARLEN_SUCCESS)
        st = seg_rows_geom(ctx, fn, "packed", dtype, row_elems, total_tokens, packed_stride, packed,
                       &pk);
    if (st == CLVARLEN_SUCCESS)
        st = seg_rows_geom(ctx, fn, "padded", dtype, row_elems, rows, padded_stride, padded, &pd);
    if (st == CLVARLEN_SUCCESS)
        st = seg_need(ctx, fn, "src_index", src_index, total_tokens > 0);
    if (st == CLVARLEN_SUCCESS) {
        bool distinct;
        st = seg_check_indices(ctx, fn, "src_index", NULL, src_index, total_tokens, rows, false,
                           &distinct, true);
    }
    if (st != CLVARLEN_SUCCESS || rows == 0)
        return st;
    size_t es = cv_dtype_size(dtype);
    if (!cv_use_cl(ctx))
        return cv_cpu_unpack(ctx, pd.row_bytes, es, packed, pk.stride_b, total_tokens, src_index,
                             rows, pad_value, padded, pd.stride_b);
#if CLVARLEN_HAVE_OPENCL
    st = seg_check_cl_limits(ctx, fn, pd.row_bytes, total_tokens);
    cv_chain q;
    cv_chain_begin(&q, ctx, 0, NULL, false);
    cl_mem d_packed = NULL, d_si = NULL, d_padded = NULL;
    if (st == CLVARLEN_SUCCESS)
        st = seg_upload(ctx, total_tokens > 0 ? packed : NULL, pk.span, &d_packed);
    if (st == CLVARLEN_SUCCESS)
        st = seg_upload(ctx, total_tokens > 0 ? src_index : NULL, (size_t)total_tokens * 8, &d_si);
    if (st == CLVARLEN_SUCCESS)
        st = cv_buffer(ctx, pd.span, NULL, &d_padded);
    if (st == CLVARLEN_SUCCESS) {
        unpack_args u = {dtype, row_elems, d_packed, 0, pk.stride_b, total_tokens, d_si, 0,
                         rows, pad_value, d_padded, 0, pd.stride_b};
        st = enq_unpack(&q, &u);
    }
    if (st == CLVARLEN_SUCCESS)
        st = seg_read_rows(&q, d_padded, rows, pd.row_bytes, pd.stride_b, padded);
    cv_chain_abort(&q);
    cv_release(&d_packed);
    cv_release(&d_si);
    cv_release(&d_padded);
    return st;
#else
    return CLVARLEN_ERROR_INTERNAL;
#endif
}

#if CLVARLEN_HAVE_OPENCL

clvarlen_status clvarlen_cl_pack(clvarlen_context *ctx, clvarlen_dtype dtype, int64_t row_elems,
                                 cl_mem padded, size_t padded_offset, int64_t padded_stride,
                                 int64_t batch, int64_t max_seqlen, cl_mem valid_lens,
                                 size_t valid_lens_offset, cl_mem mask, size_t mask_offset,
                                 int64_t capacity_tokens, cl_mem packed, size_t packed_offset,
                                 cl_mem cu_seqlens, size_t cu_offset, cl_mem src_index,
                                 size_t src_index_offset, cl_mem total_tokens, size_t total_offset,
                                 cl_uint num_events, const cl_event *wait_list, cl_event *event)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    clvarlen_status st = cv_cl_enter(ctx, fn, num_events, wait_list);
    int64_t rows = 0;
    seg_rows pr, kr;
    size_t es = cv_dtype_size(dtype);
    if (st == CLVARLEN_SUCCESS)
        st = check_padded(ctx, fn, batch, max_seqlen);
    if (st == CLVARLEN_SUCCESS) {
        rows = batch * max_seqlen;
        st = seg_rows_geom(ctx, fn, "padded", dtype, row_elems, rows, padded_stride, padded, &pr);
    }
    if (st == CLVARLEN_SUCCESS && capacity_tokens < 0)
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: capacity_tokens is negative",
                      fn);
    if (st == CLVARLEN_SUCCESS)
        st = seg_rows_geom(ctx, fn, "packed", dtype, row_elems, CV_MIN(capacity_tokens, rows), 0,
                       packed, &kr);
    if (st == CLVARLEN_SUCCESS)
        st = seg_check_cl_limits(ctx, fn, pr.row_bytes, CV_MIN(capacity_tokens, rows));
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_offset(ctx, fn, "padded", padded_offset, es);
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_offset(ctx, fn, "packed", packed_offset, es);
    if (st == CLVARLEN_SUCCESS)
        st = mask ? seg_cl_arg(ctx, fn, "mask", mask, mask_offset, 1, true)
                  : seg_cl_arg(ctx, fn, "valid_lens", valid_lens, valid_lens_offset, 4, batch > 0);
    if (st == CLVARLEN_SUCCESS)
        st = seg_cl_arg(ctx, fn, "cu_seqlens", cu_seqlens, cu_offset, 4, true);
    if (st == CLVARLEN_SUCCESS)
        st = seg_cl_arg(ctx, fn, "src_index", src_index, src_index_offset, 8, false);
    if (st == CLVARLEN_SUCCESS)
        st = seg_cl_arg(ctx, fn, "total_tokens", total_tokens, total_offset, 8, false);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_chain q;
    st = cv_chain_begin(&q, ctx, num_events, wait_list, ctx->device_checks != 0);
    if (st == CLVARLEN_SUCCESS) {
        pack_args p = {dtype, row_elems, padded, padded_offset, pr.stride_b, batch, max_seqlen,
                       mask ? NULL : valid_lens, valid_lens_offset, mask, mask_offset,
                       capacity_tokens, packed, packed_offset, cu_seqlens, cu_offset, src_index,
                       src_index_offset, total_tokens, total_offset};
        st = enq_pack(&q, &p);
    }
    return cv_chain_end(&q, fn, st, event);
}

clvarlen_status clvarlen_cl_unpack(clvarlen_context *ctx, clvarlen_dtype dtype, int64_t row_elems,
                                   cl_mem packed, size_t packed_offset, int64_t packed_stride,
                                   int64_t total_tokens, cl_mem src_index,
                                   size_t src_index_offset, int64_t batch, int64_t max_seqlen,
                                   const void *pad_value, cl_mem padded, size_t padded_offset,
                                   int64_t padded_stride, cl_uint num_events,
                                   const cl_event *wait_list, cl_event *event)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    clvarlen_status st = cv_cl_enter(ctx, fn, num_events, wait_list);
    int64_t rows = 0;
    seg_rows pk, pd;
    size_t es = cv_dtype_size(dtype);
    if (st == CLVARLEN_SUCCESS)
        st = check_padded(ctx, fn, batch, max_seqlen);
    if (st == CLVARLEN_SUCCESS) {
        rows = batch * max_seqlen;
        if (total_tokens < 0 || total_tokens > rows)
            st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                          "%s: total_tokens %lld is outside [0, batch * max_seqlen = %lld]", fn,
                          (long long)total_tokens, (long long)rows);
    }
    if (st == CLVARLEN_SUCCESS)
        st = seg_rows_geom(ctx, fn, "packed", dtype, row_elems, total_tokens, packed_stride, packed,
                       &pk);
    if (st == CLVARLEN_SUCCESS)
        st = seg_rows_geom(ctx, fn, "padded", dtype, row_elems, rows, padded_stride, padded, &pd);
    if (st == CLVARLEN_SUCCESS)
        st = seg_check_cl_limits(ctx, fn, pd.row_bytes, total_tokens);
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_offset(ctx, fn, "packed", packed_offset, es);
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_offset(ctx, fn, "padded", padded_offset, es);
    if (st == CLVARLEN_SUCCESS)
        st = seg_cl_arg(ctx, fn, "src_index", src_index, src_index_offset, 8, total_tokens > 0);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_chain q;
    st = cv_chain_begin(&q, ctx, num_events, wait_list, ctx->device_checks != 0);
    if (st == CLVARLEN_SUCCESS) {
        unpack_args u = {dtype, row_elems, packed, packed_offset, pk.stride_b, total_tokens,
                         src_index, src_index_offset, rows, pad_value, padded, padded_offset,
                         pd.stride_b};
        st = enq_unpack(&q, &u);
    }
    return cv_chain_end(&q, fn, st, event);
}

#endif /* CLVARLEN_HAVE_OPENCL */

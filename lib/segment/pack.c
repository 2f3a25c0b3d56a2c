/* pack, pack_masked and unpack (SPEC 2.3): a scan of the kept lengths,
 * then row kernels (cl/segment.cl); the mask form counts and indexes its
 * rows first (cl/segment-scan.cl). */
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
/* Prefix form with batch <= CV_SEG_FUSE_MAX: scan and rows in one launch. */
static clvarlen_status enq_pack_fused(cv_chain *q, const pack_args *p)
{
    cl_mem flag = q->flag;
    cl_int check = q->flag != NULL;
    clvarlen_context *ctx = q->ctx;
    int64_t rows_max = CV_MIN(p->capacity, p->batch * p->max_seqlen);
    size_t row_bytes = (size_t)p->row_elems * cv_dtype_size(p->dtype);
    size_t v[3] = {p->padded_off, p->packed_off, p->padded_stride_b};
    int unit = cv_seg_pick_unit(row_bytes, v, 3);
    cl_kernel k;
    SEG_TRY(cv_seg_kernel(ctx, SEG_PROG_COPY, unit, -1, "segment_pack_fused", &k));
    cv_seg_geo g;
    cv_seg_fused_geo(ctx, (int64_t)(row_bytes / (size_t)unit), rows_max, &g);
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
    return cv_seg_run(q, k, "segment_pack_fused", g.global, g.local);
}

/* Prefix form, batch > CV_SEG_FUSE_MAX: the scan, then segment_pack_rows. */
static clvarlen_status enq_pack_prefix(cv_chain *q, const pack_args *p)
{
    clvarlen_context *ctx = q->ctx;
    cl_mem flag = q->flag;
    cl_int check = q->flag != NULL;
    int64_t rows_max = CV_MIN(p->capacity, p->batch * p->max_seqlen);
    size_t row_bytes = (size_t)p->row_elems * cv_dtype_size(p->dtype);
    size_t v[3] = {p->padded_off, p->packed_off, p->padded_stride_b};
    int unit = cv_seg_pick_unit(row_bytes, v, 3);
    cl_kernel k;
    SEG_TRY(cv_seg_kernel(ctx, SEG_PROG_COPY, unit, -1, "segment_pack_rows", &k));
    cl_mem scratch = NULL; /* the scanned total, at byte 0 of the temp buffer */
    SEG_TRY(cv_seg_temp(q, 0, &scratch));
    SEG_TRY(cv_seg_enq_scan_lengths(q, p->valid_lens, p->valid_lens_off, p->batch, p->max_seqlen,
                                    p->capacity, p->cu, p->cu_off, p->total, p->total_off,
                                    scratch));
    if (rows_max <= 0)
        return CLVARLEN_SUCCESS;
    cv_seg_geo g;
    cv_seg_row_geo(ctx, (int64_t)(row_bytes / (size_t)unit), rows_max, &g);
    cl_ulong co = p->cu_off, so = p->padded_off, ss = p->padded_stride_b, doff = p->packed_off,
             ds = row_bytes, io = p->src_index_off;
    cl_int nb = (cl_int)p->batch;
    cl_long S = p->max_seqlen, cap = p->capacity, nr = rows_max;
    cv_args a = cv_args_begin(k);
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
    if (a.err != CL_SUCCESS)
        return cv_cl_check(ctx, a.err, "segment_pack_rows: clSetKernelArg");
    return cv_seg_run(q, k, "segment_pack_rows", g.global, g.local);
}

/* Mask form, step 1: per-row counts of kept tokens into temp at counts_off. */
static clvarlen_status enq_mask_count(cv_chain *q, const pack_args *p, cl_kernel k, cl_mem temp,
                                      size_t counts_off)
{
    if (p->batch <= 0)
        return CLVARLEN_SUCCESS;
    if (p->max_seqlen == 0) {
        static const cl_int zero = 0;
        return cv_chain_fill(q, temp, &zero, sizeof zero, counts_off,
                             (size_t)p->batch * sizeof(cl_int));
    }
    cl_ulong mo = p->mask_off, cno = counts_off;
    cl_int nb = (cl_int)p->batch;
    cl_long S = p->max_seqlen;
    cv_args a = cv_args_begin(k);
    CV_ARG(a, p->mask);
    CV_ARG(a, mo);
    CV_ARG(a, nb);
    CV_ARG(a, S);
    CV_ARG(a, temp);
    CV_ARG(a, cno);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(q->ctx, a.err, "segment_mask_count: clSetKernelArg");
    size_t wg = cv_seg_scan_wg(q->ctx);
    size_t groups = (size_t)CV_MAX(1, CV_MIN(p->batch, (int64_t)SEG_MAX_GROUPS));
    return cv_seg_run(q, k, "segment_mask_count", groups * wg, wg);
}

/* Mask form, step 3: each row's kept tokens -> their padded row (int64 index). */
static clvarlen_status enq_mask_index(cv_chain *q, const pack_args *p, cl_kernel k, cl_mem scratch,
                                      cl_mem idx, size_t idx_off)
{
    cl_mem flag = q->flag;
    cl_int check = q->flag != NULL;
    cl_ulong mo = p->mask_off, co = p->cu_off, io = idx_off;
    cl_int nb = (cl_int)p->batch;
    cl_long S = p->max_seqlen, cap = p->capacity;
    cv_args a = cv_args_begin(k);
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
    if (a.err != CL_SUCCESS)
        return cv_cl_check(q->ctx, a.err, "segment_mask_index: clSetKernelArg");
    size_t wg = cv_seg_scan_wg(q->ctx);
    size_t groups = (size_t)CV_MAX(1, CV_MIN(p->batch, (int64_t)SEG_MAX_GROUPS));
    return cv_seg_run(q, k, "segment_mask_index", groups * wg, wg);
}

/* Mask form: counts, the scan, the index (into src_index or a temporary),
 * then a row gather bounded by the scanned total. */
static clvarlen_status enq_pack_masked(cv_chain *q, const pack_args *p)
{
    clvarlen_context *ctx = q->ctx;
    int64_t rows_max = CV_MIN(p->capacity, p->batch * p->max_seqlen);
    size_t row_bytes = (size_t)p->row_elems * cv_dtype_size(p->dtype);
    cl_kernel k_count, k_index;
    SEG_TRY(cv_seg_kernel(ctx, SEG_PROG_SCANS, 0, -1, "segment_mask_count", &k_count));
    SEG_TRY(cv_seg_kernel(ctx, SEG_PROG_SCANS, 0, -1, "segment_mask_index", &k_index));
    /* temp: scratch word, counts [batch], then the index when the caller
     * wants no src_index */
    size_t counts_off = SEG_TEMP_OFF;
    size_t index_off = SEG_TEMP_OFF + cv_seg_align8((size_t)p->batch * sizeof(cl_int));
    size_t temp_bytes = index_off - SEG_TEMP_OFF;
    if (!p->src_index && rows_max > 0)
        temp_bytes += (size_t)rows_max * sizeof(cl_long);
    cl_mem temp = NULL;
    SEG_TRY(cv_seg_temp(q, temp_bytes, &temp));
    SEG_TRY(enq_mask_count(q, p, k_count, temp, counts_off));
    SEG_TRY(cv_seg_enq_scan_lengths(q, temp, counts_off, p->batch, -1, p->capacity, p->cu,
                                    p->cu_off,
                                    p->total, p->total_off, temp));
    if (rows_max <= 0)
        return CLVARLEN_SUCCESS;
    cl_mem idx = p->src_index ? p->src_index : temp;
    size_t io = p->src_index ? p->src_index_off : index_off;
    SEG_TRY(enq_mask_index(q, p, k_index, temp, idx, io));
    copy_args c = {
        .dtype = p->dtype,
        .row_elems = p->row_elems,
        .src = p->padded,
        .src_off = p->padded_off,
        .src_stride_b = p->padded_stride_b,
        .src_rows = p->batch * p->max_seqlen,
        .dst = p->packed,
        .dst_off = p->packed_off,
        .dst_stride_b = row_bytes,
        .dst_rows = p->capacity,
        .n_rows = rows_max,
        .map64 = idx,
        .map_off = io,
        .count = temp, /* the scanned total bounds the rows copied */
        .count_cap = p->capacity,
    };
    return cv_seg_enq_copy(q, &c);
}

static clvarlen_status enq_pack(cv_chain *q, const pack_args *p)
{
    if (p->mask)
        return enq_pack_masked(q, p);
    if (p->batch <= CV_SEG_FUSE_MAX)
        return enq_pack_fused(q, p);
    return enq_pack_prefix(q, p);
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
    if (u->padded_rows <= 0)
        return CLVARLEN_SUCCESS;
    if (q->flag)
        SEG_TRY(cv_chain_check_range(q, NULL, u->src_index, u->src_index_off, u->total, 0,
                                     u->padded_rows, false, CV_CHECK_INDEX));
    cl_mem inv = NULL;
    SEG_TRY(cv_seg_temp(q, (size_t)u->padded_rows * sizeof(cl_int), &inv));
    SEG_TRY(cv_seg_enq_invert(q, NULL, u->src_index, u->src_index_off, u->total, u->padded_rows,
                              inv,
                              SEG_TEMP_OFF));
    copy_args c = {
        .dtype = u->dtype,
        .row_elems = u->row_elems,
        .src = u->packed,
        .src_off = u->packed_off,
        .src_stride_b = u->packed_stride_b,
        .src_rows = u->total,
        .dst = u->padded,
        .dst_off = u->padded_off,
        .dst_stride_b = u->padded_stride_b,
        .dst_rows = u->padded_rows,
        .n_rows = u->padded_rows,
        .map32 = inv,
        .map_off = SEG_TEMP_OFF,
        .fill_mode = 1,
    };
    cv_seg_fill_pattern(c.fill, u->pad, cv_dtype_size(u->dtype));
    return cv_seg_enq_copy(q, &c);
}

#endif /* CLVARLEN_HAVE_OPENCL */

/* ================================================================ entry points */

/* batch and max_seqlen of a padded tensor. */
static clvarlen_status check_padded(clvarlen_context *ctx, const char *fn, int64_t batch,
                                    int64_t max_seqlen)
{
    SEG_TRY(cv_seg_check_count(ctx, fn, "batch", batch));
    if (max_seqlen < 0 || max_seqlen > INT32_MAX)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: max_seqlen %lld is outside [0, INT32_MAX]", fn,
                        (long long)max_seqlen);
    return CLVARLEN_SUCCESS;
}

/* The arguments of the host-memory pack and pack_masked, and what
 * validation found (row geometry, kept rows per batch row, total). */
typedef struct pack_host_args {
    clvarlen_dtype dtype;
    int64_t row_elems;
    const void *padded;
    int64_t batch, max_seqlen;
    const int32_t *valid_lens; /* prefix form */
    const uint8_t *mask;       /* mask form */
    int64_t capacity;
    void *packed;
    int32_t *cu_seqlens;
    int64_t *src_index;
    cv_seg_rows pr;               /* padded geometry */
    const int32_t *lens;       /* valid_lens, or the mask's per-row counts */
    int64_t total;
} pack_host_args;

#if CLVARLEN_HAVE_OPENCL
static clvarlen_status pack_on_device(clvarlen_context *ctx, const char *fn,
                                      const pack_host_args *h)
{
    int64_t rows = h->batch * h->max_seqlen, total = h->total;
    size_t row_bytes = h->pr.row_bytes;
    cv_chain q;
    cv_chain_begin(&q, ctx, 0, NULL, false, false);
    cl_mem d_pad = NULL, d_lens = NULL, d_mask = NULL, d_packed = NULL, d_cu = NULL, d_si = NULL;
    clvarlen_status st;
    SEG_TRY_OUT(cv_seg_check_cl_limits(ctx, fn, row_bytes, total));
    SEG_TRY_OUT(cv_seg_upload(ctx, rows > 0 ? h->padded : NULL, h->pr.span, &d_pad));
    if (!h->mask)
        SEG_TRY_OUT(
            cv_seg_upload(ctx, h->batch > 0 ? h->valid_lens : NULL, (size_t)h->batch * 4, &d_lens));
    if (h->mask)
        SEG_TRY_OUT(cv_seg_upload(ctx, h->mask, (size_t)rows, &d_mask));
    SEG_TRY_OUT(cv_buffer(ctx, (size_t)total * row_bytes, NULL, &d_packed));
    SEG_TRY_OUT(cv_buffer(ctx, (size_t)(h->batch + 1) * 4, NULL, &d_cu));
    if (h->src_index)
        SEG_TRY_OUT(cv_buffer(ctx, (size_t)total * 8, NULL, &d_si));
    pack_args p = {
        .dtype = h->dtype,
        .row_elems = h->row_elems,
        .padded = d_pad,
        .padded_stride_b = h->pr.stride_b,
        .batch = h->batch,
        .max_seqlen = h->max_seqlen,
        .valid_lens = d_lens,
        .mask = d_mask,
        .capacity = total,
        .packed = d_packed,
        .cu = d_cu,
        .src_index = d_si,
    };
    SEG_TRY_OUT(enq_pack(&q, &p));
    SEG_TRY_OUT(cv_seg_read_bytes(&q, d_packed, (size_t)total * row_bytes, h->packed));
    SEG_TRY_OUT(cv_seg_read_bytes(&q, d_cu, (size_t)(h->batch + 1) * 4, h->cu_seqlens));
    if (h->src_index)
        SEG_TRY_OUT(cv_seg_read_bytes(&q, d_si, (size_t)total * 8, h->src_index));
out:
    cv_chain_abort(&q);
    cv_release(&d_pad);
    cv_release(&d_lens);
    cv_release(&d_mask);
    cv_release(&d_packed);
    cv_release(&d_cu);
    cv_release(&d_si);
    return st;
}
#endif /* CLVARLEN_HAVE_OPENCL */

/* Every kept count in [0, max_seqlen]; the total fits int and the capacity. */
static clvarlen_status pack_total(clvarlen_context *ctx, const char *fn, pack_host_args *h)
{
    int64_t total = 0;
    for (int64_t b = 0; b < h->batch; b++) {
        if (h->lens[b] < 0 || h->lens[b] > h->max_seqlen)
            return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                            "%s: valid_lens[%lld] = %d is outside [0, max_seqlen %lld]", fn,
                            (long long)b, (int)h->lens[b], (long long)h->max_seqlen);
        total += h->lens[b];
    }
    if (total > INT32_MAX)
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW, "%s: %lld tokens exceed INT32_MAX", fn,
                        (long long)total);
    if (total > h->capacity)
        return cv_error(ctx, CLVARLEN_ERROR_BUFFER_TOO_SMALL,
                        "%s: %lld tokens do not fit capacity_tokens %lld", fn, (long long)total,
                        (long long)h->capacity);
    h->total = total;
    return cv_seg_need(ctx, fn, "packed", h->packed, total > 0);
}

/* Totals, the CPU or the device path (lens and total set by the caller's checks). */
static clvarlen_status pack_run(clvarlen_context *ctx, const char *fn, pack_host_args *h,
                                int64_t *total_tokens)
{
    SEG_TRY(pack_total(ctx, fn, h));
    int64_t rows = h->batch * h->max_seqlen;
    const cv_seg_rows packed = {h->pr.row_bytes, h->pr.row_bytes, 0};
    const cv_region regions[] = {
        cv_seg_host_rows("padded", h->padded, &h->pr, rows, false),
        cv_seg_host("valid_lens", h->valid_lens, (uint64_t)h->batch * 4, false),
        cv_seg_host("mask", h->mask, h->mask ? (uint64_t)rows : 0, false),
        cv_seg_host_rows("packed", h->packed, &packed, h->total, true),
        cv_seg_host("cu_seqlens", h->cu_seqlens, (uint64_t)(h->batch + 1) * 4, true),
        cv_seg_host("src_index", h->src_index, (uint64_t)h->total * 8, true),
        cv_seg_host("total_tokens", total_tokens, 8, true),
    };
    SEG_TRY(SEG_CHECK_HOST(ctx, fn, regions));
    if (!cv_use_cl(ctx))
        return cv_cpu_pack(ctx, h->pr.row_bytes, h->padded, h->pr.stride_b, h->batch,
                           h->max_seqlen, h->lens, h->mask, h->packed, h->cu_seqlens,
                           h->src_index);
#if CLVARLEN_HAVE_OPENCL
    return pack_on_device(ctx, fn, h);
#else
    return CLVARLEN_ERROR_INTERNAL;
#endif
}

static clvarlen_status pack_host(clvarlen_context *ctx, const char *fn, pack_host_args *h,
                                 int64_t padded_stride, int64_t *total_tokens)
{
    CV_ENTER_FN(ctx, fn);
    SEG_TRY(check_padded(ctx, fn, h->batch, h->max_seqlen));
    SEG_TRY(cv_seg_rows_geom(ctx, fn, "padded", h->dtype, h->row_elems, h->batch * h->max_seqlen,
                             padded_stride, h->padded, &h->pr));
    if (!h->mask)
        SEG_TRY(cv_seg_need(ctx, fn, "valid_lens", h->valid_lens, h->batch > 0));
    if (h->capacity < 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: capacity_tokens is negative",
                        fn);
    SEG_TRY(cv_seg_need(ctx, fn, "cu_seqlens", h->cu_seqlens, true));
    h->lens = h->valid_lens;
    clvarlen_status st;
    if (h->mask) {
        int32_t *counts = malloc((size_t)(h->batch > 0 ? h->batch : 1) * sizeof *counts);
        if (!counts)
            return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "%s: cannot allocate counts", fn);
        for (int64_t b = 0; b < h->batch; b++) {
            const uint8_t *m = h->mask + (size_t)(b * h->max_seqlen);
            int64_t k = 0;
            for (int64_t s = 0; s < h->max_seqlen; s++)
                k += m[s] != 0;
            counts[b] = (int32_t)k;
        }
        h->lens = counts;
        st = pack_run(ctx, fn, h, total_tokens);
        free(counts);
    } else {
        st = pack_run(ctx, fn, h, total_tokens);
    }
    if (st == CLVARLEN_SUCCESS && total_tokens)
        *total_tokens = h->total;
    return st;
}

clvarlen_status clvarlen_pack(clvarlen_context *ctx, clvarlen_dtype dtype, int64_t row_elems,
                              const void *padded, int64_t padded_stride, int64_t batch,
                              int64_t max_seqlen, const int32_t *valid_lens,
                              int64_t capacity_tokens, void *packed, int32_t *cu_seqlens,
                              int64_t *src_index, int64_t *total_tokens)
{
    pack_host_args h = {
        .dtype = dtype,
        .row_elems = row_elems,
        .padded = padded,
        .batch = batch,
        .max_seqlen = max_seqlen,
        .valid_lens = valid_lens,
        .capacity = capacity_tokens,
        .packed = packed,
        .cu_seqlens = cu_seqlens,
        .src_index = src_index,
    };
    return pack_host(ctx, __func__, &h, padded_stride, total_tokens);
}

clvarlen_status clvarlen_pack_masked(clvarlen_context *ctx, clvarlen_dtype dtype, int64_t row_elems,
                                     const void *padded, int64_t padded_stride, int64_t batch,
                                     int64_t max_seqlen, const uint8_t *mask,
                                     int64_t capacity_tokens, void *packed, int32_t *cu_seqlens,
                                     int64_t *src_index, int64_t *total_tokens)
{
    CV_ENTER(ctx); /* the context's lock covers this check too (pack_host enters again) */
    if (!mask && batch > 0 && max_seqlen > 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: mask is NULL", __func__);
    static const uint8_t no_rows = 0;
    pack_host_args h = {
        .dtype = dtype,
        .row_elems = row_elems,
        .padded = padded,
        .batch = batch,
        .max_seqlen = max_seqlen,
        .mask = mask ? mask : &no_rows,
        .capacity = capacity_tokens,
        .packed = packed,
        .cu_seqlens = cu_seqlens,
        .src_index = src_index,
    };
    return pack_host(ctx, __func__, &h, padded_stride, total_tokens);
}

#if CLVARLEN_HAVE_OPENCL
static clvarlen_status unpack_on_device(clvarlen_context *ctx, const unpack_args *u,
                                        const void *packed, const int64_t *src_index, void *padded,
                                        const cv_seg_rows *pk, const cv_seg_rows *pd)
{
    cv_chain q;
    cv_chain_begin(&q, ctx, 0, NULL, false, false);
    cl_mem d_packed = NULL, d_si = NULL, d_padded = NULL;
    clvarlen_status st;
    SEG_TRY_OUT(cv_seg_upload(ctx, u->total > 0 ? packed : NULL, pk->span, &d_packed));
    SEG_TRY_OUT(cv_seg_upload(ctx, u->total > 0 ? src_index : NULL, (size_t)u->total * 8, &d_si));
    SEG_TRY_OUT(cv_buffer(ctx, pd->span, NULL, &d_padded));
    unpack_args a = *u;
    a.packed = d_packed;
    a.src_index = d_si;
    a.padded = d_padded;
    SEG_TRY_OUT(enq_unpack(&q, &a));
    SEG_TRY_OUT(cv_seg_read_rows(&q, d_padded, u->padded_rows, pd->row_bytes, pd->stride_b,
                                 padded));
out:
    cv_chain_abort(&q);
    cv_release(&d_packed);
    cv_release(&d_si);
    cv_release(&d_padded);
    return st;
}
#endif /* CLVARLEN_HAVE_OPENCL */

clvarlen_status clvarlen_unpack(clvarlen_context *ctx, clvarlen_dtype dtype, int64_t row_elems,
                                const void *packed, int64_t packed_stride, int64_t total_tokens,
                                const int64_t *src_index, int64_t batch, int64_t max_seqlen,
                                const void *pad_value, void *padded, int64_t padded_stride)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    cv_seg_rows pk, pd;
    SEG_TRY(check_padded(ctx, fn, batch, max_seqlen));
    int64_t rows = batch * max_seqlen;
    if (total_tokens < 0 || total_tokens > rows)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: total_tokens %lld is outside [0, batch * max_seqlen = %lld]", fn,
                        (long long)total_tokens, (long long)rows);
    SEG_TRY(cv_seg_rows_geom(ctx, fn, "packed", dtype, row_elems, total_tokens, packed_stride,
                             packed,
                             &pk));
    SEG_TRY(cv_seg_rows_geom(ctx, fn, "padded", dtype, row_elems, rows, padded_stride, padded,
                             &pd));
    SEG_TRY(cv_seg_need(ctx, fn, "src_index", src_index, total_tokens > 0));
    bool distinct;
    SEG_TRY(cv_seg_check_indices(ctx, fn, "src_index", NULL, src_index, total_tokens, rows, false,
                                 &distinct, true));
    if (rows == 0)
        return CLVARLEN_SUCCESS;
    size_t es = cv_dtype_size(dtype);
    const cv_region regions[] = {
        cv_seg_host_rows("packed", packed, &pk, total_tokens, false),
        cv_seg_host("src_index", src_index, (uint64_t)total_tokens * 8, false),
        cv_seg_host("pad_value", pad_value, es, false),
        cv_seg_host_rows("padded", padded, &pd, rows, true),
    };
    SEG_TRY(SEG_CHECK_HOST(ctx, fn, regions));
    if (!cv_use_cl(ctx))
        return cv_cpu_unpack(ctx, pd.row_bytes, es, packed, pk.stride_b, total_tokens, src_index,
                             rows, pad_value, padded, pd.stride_b);
#if CLVARLEN_HAVE_OPENCL
    SEG_TRY(cv_seg_check_cl_limits(ctx, fn, pd.row_bytes, total_tokens));
    unpack_args u = {
        .dtype = dtype,
        .row_elems = row_elems,
        .packed_stride_b = pk.stride_b,
        .total = total_tokens,
        .padded_rows = rows,
        .pad = pad_value,
        .padded_stride_b = pd.stride_b,
    };
    return unpack_on_device(ctx, &u, packed, src_index, padded, &pk, &pd);
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
    SEG_TRY(cv_cl_enter(ctx, fn, num_events, wait_list));
    cv_seg_rows pr, kr;
    size_t es = cv_dtype_size(dtype);
    SEG_TRY(check_padded(ctx, fn, batch, max_seqlen));
    int64_t rows = batch * max_seqlen;
    SEG_TRY(cv_seg_rows_geom(ctx, fn, "padded", dtype, row_elems, rows, padded_stride, padded,
                             &pr));
    if (capacity_tokens < 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: capacity_tokens is negative",
                        fn);
    SEG_TRY(cv_seg_rows_geom(ctx, fn, "packed", dtype, row_elems, CV_MIN(capacity_tokens, rows), 0,
                             packed, &kr));
    int64_t out_rows = CV_MIN(capacity_tokens, rows);
    SEG_TRY(cv_seg_check_cl_limits(ctx, fn, pr.row_bytes, out_rows));
    const cv_mem_arg args[] = {
        cv_seg_mem_rows("padded", padded, padded_offset, es, &pr, rows, false),
        cv_seg_mem("valid_lens", mask ? NULL : valid_lens, valid_lens_offset, 4,
                   (uint64_t)batch * 4, !mask && batch > 0, false),
        cv_seg_mem("mask", mask, mask_offset, 1, (uint64_t)rows, false, false),
        cv_seg_mem_rows("packed", packed, packed_offset, es, &kr, out_rows, true),
        cv_seg_mem("cu_seqlens", cu_seqlens, cu_offset, 4, (uint64_t)(batch + 1) * 4, true, true),
        cv_seg_mem("src_index", src_index, src_index_offset, 8, (uint64_t)out_rows * 8, false,
                   true),
        cv_seg_mem("total_tokens", total_tokens, total_offset, 8, 8, false, true),
    };
    SEG_TRY(SEG_CHECK_MEM(ctx, fn, args));
    pack_args p = {
        .dtype = dtype,
        .row_elems = row_elems,
        .padded = padded,
        .padded_off = padded_offset,
        .padded_stride_b = pr.stride_b,
        .batch = batch,
        .max_seqlen = max_seqlen,
        .valid_lens = mask ? NULL : valid_lens,
        .valid_lens_off = valid_lens_offset,
        .mask = mask,
        .mask_off = mask_offset,
        .capacity = capacity_tokens,
        .packed = packed,
        .packed_off = packed_offset,
        .cu = cu_seqlens,
        .cu_off = cu_offset,
        .src_index = src_index,
        .src_index_off = src_index_offset,
        .total = total_tokens,
        .total_off = total_offset,
    };
    cv_chain q;
    clvarlen_status st = cv_chain_begin(&q, ctx, num_events, wait_list, event != NULL, ctx->device_checks != 0);
    if (st == CLVARLEN_SUCCESS)
        st = enq_pack(&q, &p);
    return cv_chain_end(&q, fn, st, event);
}

clvarlen_status clvarlen_cl_unpack(clvarlen_context *ctx, clvarlen_dtype dtype, int64_t row_elems,
                                   cl_mem packed, size_t packed_offset, int64_t packed_stride,
                                   int64_t total_tokens, cl_mem src_index, size_t src_index_offset,
                                   int64_t batch, int64_t max_seqlen, const void *pad_value,
                                   cl_mem padded, size_t padded_offset, int64_t padded_stride,
                                   cl_uint num_events, const cl_event *wait_list, cl_event *event)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    SEG_TRY(cv_cl_enter(ctx, fn, num_events, wait_list));
    cv_seg_rows pk, pd;
    size_t es = cv_dtype_size(dtype);
    SEG_TRY(check_padded(ctx, fn, batch, max_seqlen));
    int64_t rows = batch * max_seqlen;
    if (total_tokens < 0 || total_tokens > rows)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: total_tokens %lld is outside [0, batch * max_seqlen = %lld]", fn,
                        (long long)total_tokens, (long long)rows);
    SEG_TRY(cv_seg_rows_geom(ctx, fn, "packed", dtype, row_elems, total_tokens, packed_stride,
                             packed,
                             &pk));
    SEG_TRY(cv_seg_rows_geom(ctx, fn, "padded", dtype, row_elems, rows, padded_stride, padded,
                             &pd));
    SEG_TRY(cv_seg_check_cl_limits(ctx, fn, pd.row_bytes, total_tokens));
    const cv_mem_arg args[] = {
        cv_seg_mem_rows("packed", packed, packed_offset, es, &pk, total_tokens, false),
        cv_seg_mem("src_index", src_index, src_index_offset, 8, (uint64_t)total_tokens * 8,
                   total_tokens > 0, false),
        cv_seg_mem_rows("padded", padded, padded_offset, es, &pd, rows, true),
    };
    SEG_TRY(SEG_CHECK_MEM(ctx, fn, args));
    unpack_args u = {
        .dtype = dtype,
        .row_elems = row_elems,
        .packed = packed,
        .packed_off = packed_offset,
        .packed_stride_b = pk.stride_b,
        .total = total_tokens,
        .src_index = src_index,
        .src_index_off = src_index_offset,
        .padded_rows = rows,
        .pad = pad_value,
        .padded = padded,
        .padded_off = padded_offset,
        .padded_stride_b = pd.stride_b,
    };
    cv_chain q;
    clvarlen_status st = cv_chain_begin(&q, ctx, num_events, wait_list, event != NULL, ctx->device_checks != 0);
    if (st == CLVARLEN_SUCCESS)
        st = enq_unpack(&q, &u);
    return cv_chain_end(&q, fn, st, event);
}

#endif /* CLVARLEN_HAVE_OPENCL */

/* What the segment family's operations share: host-side argument checks,
 * kernel loading (which program and -D options), launch geometry, the
 * temp buffer, and the generic row copy and map inversion that pack,
 * unpack, gather and scatter build on. */
#include "segment/segment.h"

/* ================================================================ host-side validation */

clvarlen_status cv_seg_need(clvarlen_context *ctx, const char *fn, const char *what, const void *p,
                            bool needed)
{
    if (needed && !p)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, what);
    return CLVARLEN_SUCCESS;
}

/* A count of sequences: kernels index them with int, cu has n + 1 entries. */
clvarlen_status cv_seg_check_count(clvarlen_context *ctx, const char *fn, const char *what,
                                   int64_t n)
{
    if (n < 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: %s is negative (%lld)", fn,
                        what, (long long)n);
    if (n > INT32_MAX - 1)
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW, "%s: %s %lld exceeds INT32_MAX - 1", fn,
                        what, (long long)n);
    return CLVARLEN_SUCCESS;
}

clvarlen_status cv_seg_rows_geom(clvarlen_context *ctx, const char *fn, const char *what,
                                 clvarlen_dtype dtype, int64_t row_elems, int64_t rows,
                                 int64_t stride,
                                 const void *ptr, cv_seg_rows *g)
{
    SEG_TRY(cv_check_rows(ctx, fn, what, dtype, row_elems, rows, stride, &stride));
    SEG_TRY(cv_seg_need(ctx, fn, what, ptr, rows > 0));
    size_t es = cv_dtype_size(dtype);
    g->row_bytes = (size_t)row_elems * es;
    g->stride_b = (size_t)stride * es;
    g->span = cv_span_bytes(dtype, row_elems, rows, stride);
    return CLVARLEN_SUCCESS;
}

static clvarlen_status check_acc_dtype(clvarlen_context *ctx, const char *fn, clvarlen_dtype dtype)
{
    if (cv_is_float_act(dtype) || dtype == CLVARLEN_DTYPE_I32)
        return CLVARLEN_SUCCESS;
    return cv_error(ctx, CLVARLEN_ERROR_UNSUPPORTED,
                    "%s: accumulate supports f32, f16, bf16 and i32 rows, not %s", fn,
                    clvarlen_dtype_name(dtype));
}

clvarlen_status cv_seg_check_scatter_mode(clvarlen_context *ctx, const char *fn,
                                          clvarlen_dtype dtype,
                                          clvarlen_scatter_mode mode, unsigned flags)
{
    if (mode != CLVARLEN_SCATTER_OVERWRITE && mode != CLVARLEN_SCATTER_ACCUMULATE)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: unknown scatter mode %d", fn,
                        (int)mode);
    if (flags & ~(CLVARLEN_SCATTER_ZERO_REST | CLVARLEN_SCATTER_UNIQUE_INDICES))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: unknown flags 0x%x", fn,
                        flags & ~(CLVARLEN_SCATTER_ZERO_REST | CLVARLEN_SCATTER_UNIQUE_INDICES));
    if (mode == CLVARLEN_SCATTER_ACCUMULATE)
        return check_acc_dtype(ctx, fn, dtype);
    return CLVARLEN_SUCCESS;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/*
 * Host-visible indices (int32 or int64, one given): each in [0, limit), or -1
 * when allow_skip. With `distinct` set, *distinct says whether the entries
 * that name a row are pairwise different (a bitmap when the range is small
 * against n, else a sorted copy); with dup_is_error a repeat is
 * CLVARLEN_ERROR_INVALID_ARGUMENT.
 */
clvarlen_status cv_seg_check_indices(clvarlen_context *ctx, const char *fn, const char *what,
                                     const int32_t *i32, const int64_t *i64, int64_t n,
                                     int64_t limit,
                                     bool allow_skip, bool *distinct, bool dup_is_error)
{
    /* the index array itself must be a size: n entries of 4 or 8 bytes within int64 */
    if (n < 0 || (uint64_t)n > (uint64_t)INT64_MAX / (i64 ? 8u : 4u))
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW,
                        "%s: %s of %lld entries spans more than INT64_MAX bytes", fn, what,
                        (long long)n);
    for (int64_t m = 0; m < n; m++) {
        int64_t v = i64 ? i64[m] : i32[m];
        if (allow_skip && v == -1)
            continue;
        if (v < 0 || v >= limit)
            return cv_error(ctx, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE,
                            "%s: %s[%lld] = %lld is outside [%s0, %lld)", fn, what, (long long)m,
                            (long long)v, allow_skip ? "-1 or " : "", (long long)limit);
    }
    if (!distinct)
        return CLVARLEN_SUCCESS;
    *distinct = true;
    if (n <= 1)
        return CLVARLEN_SUCCESS;
    bool dup = false;
    int64_t dup_value = -1;
    if ((uint64_t)limit / 8 <= (uint64_t)n * 16 + 4096) {
        uint8_t *bits = calloc((size_t)(limit / 8) + 1, 1);
        if (!bits)
            return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "%s: cannot allocate a row map",
                            fn);
        for (int64_t m = 0; m < n && !dup; m++) {
            int64_t v = i64 ? i64[m] : i32[m];
            if (v < 0)
                continue;
            uint8_t bit = (uint8_t)(1u << (v & 7));
            if (bits[v >> 3] & bit) {
                dup = true;
                dup_value = v;
            }
            bits[v >> 3] |= bit;
        }
        free(bits);
    } else {
        int64_t *sorted = calloc((size_t)n, sizeof *sorted);
        if (!sorted)
            return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY, "%s: cannot sort the indices",
                            fn);
        int64_t k = 0;
        for (int64_t m = 0; m < n; m++) {
            int64_t v = i64 ? i64[m] : i32[m];
            if (v >= 0)
                sorted[k++] = v;
        }
        qsort(sorted, (size_t)k, sizeof *sorted, cmp_i64);
        for (int64_t m = 1; m < k && !dup; m++)
            if (sorted[m] == sorted[m - 1]) {
                dup = true;
                dup_value = sorted[m];
            }
        free(sorted);
    }
    *distinct = !dup;
    if (dup && dup_is_error)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: %s names row %lld more than once (entries must be distinct)", fn,
                        what, (long long)dup_value);
    return CLVARLEN_SUCCESS;
}

#if CLVARLEN_HAVE_OPENCL

size_t cv_seg_copy_wg(const clvarlen_context *ctx)
{
    return (size_t)cv_pow2_floor(ctx->tuning.copy_wg ? (int64_t)ctx->tuning.copy_wg : 64);
}

size_t cv_seg_scan_wg(const clvarlen_context *ctx)
{
    return (size_t)cv_pow2_floor(ctx->tuning.scan_wg ? (int64_t)ctx->tuning.scan_wg : 64);
}

/* seqlens_expand: a short kernel of many small groups (H100: 8 us at 64 or 128
 * work-items, 10-12 us at 256-1024); the scans' size where the table has none. */
size_t cv_seg_expand_wg(const clvarlen_context *ctx)
{
    return ctx->tuning.expand_wg ? (size_t)cv_pow2_floor((int64_t)ctx->tuning.expand_wg)
                                 : cv_seg_scan_wg(ctx);
}

/* The fewest lanes per row of a row copy (8 x 16 B keeps a warp's accesses
 * in 128-byte runs); measured on an H100: 8 beats 1 by up to 5% for
 * 256 B - 4 KiB rows. Each lane loads CV_SEG_UNROLL units (cl/cv-shared.h). */
#define SEG_MIN_LANES 8

/* Destination rows per group of the ordered accumulate: its f32 tile stays at 16 KiB. */
size_t cv_seg_acc_rows(const clvarlen_context *ctx)
{
    size_t r = 4096 / cv_seg_copy_wg(ctx);
    return r < 1 ? 1 : r > 32 ? 32 : r;
}

/* Each program of the family is one file of cl/. -D options: the scan
 * work-group size sizes the scans' local arrays, the row unit specialises
 * copies, the dtype code accumulation. */
clvarlen_status cv_seg_kernel(clvarlen_context *ctx, int program, int unit, int acc,
                              const char *name,
                              cl_kernel *kernel)
{
    char opts[256] = "";
    const char *file = "segment.cl";
    switch (program) {
    case SEG_PROG_MAPS:
        file = "segment-maps.cl";
        break;
    case SEG_PROG_SCANS:
        file = "segment-scan.cl";
        snprintf(opts, sizeof opts, "-DCV_SCAN_WG=%zu", cv_seg_scan_wg(ctx));
        break;
    case SEG_PROG_EXPAND: /* the scans' program at seqlens_expand's work-group size */
        file = "segment-scan.cl";
        snprintf(opts, sizeof opts, "-DCV_SCAN_WG=%zu", cv_seg_expand_wg(ctx));
        break;
    case SEG_PROG_COPY:
        snprintf(opts, sizeof opts, "-DCV_UNIT=%d -DCV_SCAN_WG=%zu", unit, cv_seg_scan_wg(ctx));
        break;
    case SEG_PROG_ACC:
        snprintf(opts, sizeof opts,
                 "-DCV_ACC=1 -DCV_DTYPE=%d -DCV_COPY_WG=%zu -DCV_ACC_ROWS=%zu -DCV_SCAN_WG=%zu",
                 acc, cv_seg_copy_wg(ctx), cv_seg_acc_rows(ctx), cv_seg_scan_wg(ctx));
        break;
    case SEG_PROG_GEN:
        file = "segment-gen.cl";
        snprintf(opts, sizeof opts, "-cl-fp32-correctly-rounded-divide-sqrt");
        break;
    default:
        return cv_error(ctx, CLVARLEN_ERROR_INTERNAL, "cv_seg_kernel: unknown program %d", program);
    }
    return cv_get_kernel(ctx, file, opts, name, kernel);
}

/* The widest unit dividing the row and every byte offset and stride. */
int cv_seg_pick_unit(size_t row_bytes, const size_t *v, int nv)
{
    static const int units[] = {16, 8, 4, 2, 1};
    for (int k = 0; k < 5; k++) {
        size_t u = (size_t)units[k];
        bool ok = row_bytes % u == 0;
        for (int i = 0; i < nv && ok; i++)
            ok = v[i] % u == 0;
        if (ok)
            return units[k];
    }
    return 1;
}

static void row_geo_wg(const clvarlen_context *ctx, size_t wg, int64_t max_groups, int64_t units,
                       int64_t rows, cv_seg_geo *g)
{
    /* Enough lanes that each moves about CV_UNROLL units, but at least
     * min_lanes per row so a warp's accesses stay in long contiguous runs. */
    size_t unroll = CV_SEG_UNROLL;
    const int64_t u = units > 0 ? (int64_t)units : 1;
    size_t lpr = (size_t)cv_pow2_ceil((u + (int64_t)unroll - 1) / (int64_t)unroll);
    size_t floor_lanes = CV_MIN((size_t)cv_pow2_ceil(u), (size_t)SEG_MIN_LANES);
    if (lpr < floor_lanes)
        lpr = floor_lanes;
    if (lpr > wg)
        lpr = wg;
    size_t rpg = wg / lpr;
    int64_t blocks = (rows + (int64_t)rpg - 1) / (int64_t)rpg;
    int64_t per_wg = ctx->tuning.copy_rows_per_wg ? (int64_t)ctx->tuning.copy_rows_per_wg : 1;
    int64_t groups = (blocks + per_wg - 1) / per_wg;
    groups = CV_MAX(1, CV_MIN(groups, max_groups));
    g->row_units = (cl_int)units;
    g->lpr = (cl_int)lpr;
    g->local = wg;
    g->global = (size_t)groups * wg;
}

void cv_seg_row_geo(const clvarlen_context *ctx, int64_t units, int64_t rows, cv_seg_geo *g)
{
    row_geo_wg(ctx, cv_seg_copy_wg(ctx), SEG_MAX_GROUPS, units, rows, g);
}

/* Fused kernels (a scan per work-group, then rows): about as many
 * work-groups as fit on the device at once, grid-striding over the rows. */
void cv_seg_fused_geo(const clvarlen_context *ctx, int64_t units, int64_t rows, cv_seg_geo *g)
{
    size_t wg = cv_seg_scan_wg(ctx);
    int64_t cus = ctx->device.compute_units ? (int64_t)ctx->device.compute_units : 16;
    int64_t per_cu = CV_MAX(1, 2048 / (int64_t)wg);
    row_geo_wg(ctx, wg, cus * per_cu, units, rows, g);
}

/* A 1-D grid of one work-item per element, grid-stride beyond the cap. */
void cv_seg_elem_grid(const clvarlen_context *ctx, int64_t n, size_t *global, size_t *local)
{
    size_t wg = cv_seg_copy_wg(ctx);
    int64_t groups = (n + (int64_t)wg - 1) / (int64_t)wg;
    groups = CV_MAX(1, CV_MIN(groups, (int64_t)SEG_MAX_GROUPS));
    *local = wg;
    *global = (size_t)groups * wg;
}

/* Launchers enqueue through a cv_chain (lib/runtime/cl-chain.c); this keeps
 * the 1-D launches short. */
clvarlen_status cv_seg_run(cv_chain *q, cl_kernel k, const char *what, size_t global, size_t local)
{
    return cv_chain_run(q, k, what, 1, &global, &local);
}

size_t cv_seg_align8(size_t x)
{
    return (x + 7) & ~(size_t)7;
}

/* The context's temp buffer with `bytes` of work space at SEG_TEMP_OFF (one
 * call per chain). */
clvarlen_status cv_seg_temp(cv_chain *q, size_t bytes, cl_mem *mem)
{
    return cv_temp(q->ctx, SEG_TEMP_OFF + bytes, mem);
}

/* Blocking read of rows (only the row bytes of a strided tensor) after the chain. */
clvarlen_status cv_seg_read_rows(cv_chain *q, cl_mem mem, int64_t rows, size_t row_bytes,
                                 size_t stride_b, void *host)
{
    return cv_chain_read_rows(q, mem, rows, row_bytes, stride_b, host, stride_b);
}

clvarlen_status cv_seg_read_bytes(cv_chain *q, cl_mem mem, size_t bytes, void *host)
{
    return cv_chain_read(q, mem, 0, bytes, host);
}

/* An input buffer (NULL host pointer: no buffer). */
clvarlen_status cv_seg_upload(clvarlen_context *ctx, const void *host, size_t bytes, cl_mem *mem)
{
    *mem = NULL;
    if (!host)
        return CLVARLEN_SUCCESS;
    return cv_buffer(ctx, bytes, host, mem);
}

/* ---------------------------------------------------------------- building blocks */

clvarlen_status cv_seg_enq_scan_lengths(cv_chain *q, cl_mem len, size_t len_off, int64_t n,
                                        int64_t max_len, int64_t capacity, cl_mem cu, size_t cu_off,
                                        cl_mem total_out, size_t total_off, cl_mem scratch)
{
    cl_mem flag = q->flag;
    cl_int check = q->flag != NULL;
    cl_kernel k;
    SEG_TRY(cv_seg_kernel(q->ctx, SEG_PROG_SCANS, 0, -1, "segment_scan_lengths", &k));
    cl_ulong lo = len_off, co = cu_off, to = total_off;
    cl_int nn = (cl_int)n, ml = (cl_int)CV_MIN(max_len, (int64_t)INT32_MAX);
    cl_long cap = capacity;
    cv_args a = cv_args_begin(k);
    CV_ARG(a, len);
    CV_ARG(a, lo);
    CV_ARG(a, nn);
    CV_ARG(a, ml);
    CV_ARG(a, cap);
    CV_ARG(a, cu);
    CV_ARG(a, co);
    CV_ARG(a, total_out);
    CV_ARG(a, to);
    CV_ARG(a, scratch);
    CV_ARG(a, flag);
    CV_ARG(a, check);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(q->ctx, a.err, "segment_scan_lengths: clSetKernelArg");
    size_t wg = cv_seg_scan_wg(q->ctx);
    return cv_seg_run(q, k, "segment_scan_lengths", wg, wg);
}

/* inv[0..rows) = -1 (at byte inv_off), then inv[map[i]] = i. */
clvarlen_status cv_seg_enq_invert(cv_chain *q, cl_mem m32, cl_mem m64, size_t map_off, int64_t n,
                                  int64_t rows, cl_mem inv, size_t inv_off)
{
    cl_mem flag = q->flag;
    cl_int check = q->flag != NULL;
    static const cl_int minus1 = -1;
    SEG_TRY(cv_chain_fill(q, inv, &minus1, sizeof minus1, inv_off,
                          (size_t)rows * sizeof(cl_int)));
    if (n <= 0)
        return CLVARLEN_SUCCESS;
    cl_kernel k;
    SEG_TRY(cv_seg_kernel(q->ctx, SEG_PROG_MAPS, 0, -1, "segment_invert_map", &k));
    cl_ulong o = map_off, io = inv_off;
    cl_long nn = n, lim = rows;
    cv_args a = cv_args_begin(k);
    CV_ARG(a, m32);
    CV_ARG(a, m64);
    CV_ARG(a, o);
    CV_ARG(a, nn);
    CV_ARG(a, lim);
    CV_ARG(a, inv);
    CV_ARG(a, io);
    CV_ARG(a, flag);
    CV_ARG(a, check);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(q->ctx, a.err, "segment_invert_map: clSetKernelArg");
    size_t global, local;
    cv_seg_elem_grid(q->ctx, n, &global, &local);
    return cv_seg_run(q, k, "segment_invert_map", global, local);
}

clvarlen_status cv_seg_enq_copy(cv_chain *q, const copy_args *c)
{
    cl_mem flag = q->flag;
    cl_int check = q->flag != NULL;
    if (c->n_rows <= 0)
        return CLVARLEN_SUCCESS;
    size_t es = cv_dtype_size(c->dtype);
    size_t row_bytes = (size_t)c->row_elems * es;
    int unit = 0, acc = -1;
    int64_t units;
    if (c->accumulate) {
        acc = cv_dtype_kernel_code(c->dtype);
        units = c->row_elems;
    } else {
        size_t v[4] = {c->src_off, c->dst_off, c->src_stride_b, c->dst_stride_b};
        unit = cv_seg_pick_unit(row_bytes, v, 4);
        units = (int64_t)(row_bytes / (size_t)unit);
    }
    cl_kernel k;
    SEG_TRY(cv_seg_kernel(q->ctx, acc >= 0 ? SEG_PROG_ACC : SEG_PROG_COPY, unit, acc,
                          "segment_copy_rows", &k));
    cv_seg_geo g;
    cv_seg_row_geo(q->ctx, units, c->n_rows, &g);
    cl_ulong so = c->src_off, ss = c->src_stride_b, doff = c->dst_off, ds = c->dst_stride_b;
    cl_ulong mo = c->map_off;
    cl_long sr = c->src_rows, dr = c->dst_rows, nr = c->n_rows, cap = c->count_cap;
    cl_int md = c->map_dst, fm = c->fill_mode;
    cl_uint4 fill;
    memcpy(&fill, c->fill, sizeof fill);
    cv_args a = cv_args_begin(k);
    CV_ARG(a, c->src);
    CV_ARG(a, so);
    CV_ARG(a, ss);
    CV_ARG(a, sr);
    CV_ARG(a, c->dst);
    CV_ARG(a, doff);
    CV_ARG(a, ds);
    CV_ARG(a, dr);
    CV_ARG(a, nr);
    CV_ARG(a, g.row_units);
    CV_ARG(a, c->map32);
    CV_ARG(a, c->map64);
    CV_ARG(a, mo);
    CV_ARG(a, md);
    CV_ARG(a, fm);
    CV_ARG(a, fill);
    CV_ARG(a, c->count);
    CV_ARG(a, cap);
    CV_ARG(a, g.lpr);
    CV_ARG(a, flag);
    CV_ARG(a, check);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(q->ctx, a.err, "segment_copy_rows: clSetKernelArg");
    return cv_seg_run(q, k, "segment_copy_rows", g.global, g.local);
}

/* The 16-byte fill pattern: one element repeated (NULL: zeros). */
void cv_seg_fill_pattern(unsigned char out[16], const void *elem, size_t es)
{
    memset(out, 0, 16);
    if (!elem)
        return;
    for (size_t o = 0; o + es <= 16; o += es)
        memcpy(out + o, elem, es);
}

/* Kernels address a row in int units and tokens with int. */
clvarlen_status cv_seg_check_cl_limits(clvarlen_context *ctx, const char *fn, size_t row_bytes,
                                       int64_t rows)
{
    if (row_bytes > (size_t)INT32_MAX)
        return cv_error(ctx, CLVARLEN_ERROR_UNSUPPORTED,
                        "%s: rows of %zu bytes exceed the OpenCL kernels' limit (2^31 - 1)", fn,
                        row_bytes);
    if (rows > INT32_MAX)
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW,
                        "%s: %lld rows exceed the OpenCL kernels' limit (INT32_MAX)", fn,
                        (long long)rows);
    return CLVARLEN_SUCCESS;
}

#endif /* CLVARLEN_HAVE_OPENCL */

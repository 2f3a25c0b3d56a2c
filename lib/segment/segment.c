/* The segment family's public entry points (SPEC 2): argument validation,
 * dispatch and the OpenCL host launchers. Every host-memory entry point
 * validates everything first (host-visible cu_seqlens and indices fully,
 * duplicates included where they matter), then runs lib/cpu/segment.c on a
 * CPU-fallback context, or on an OpenCL context uploads its inputs, runs the
 * same enqueue routine as the cl_mem entry point and reads the outputs back
 * only after success. The cl_mem entry points validate what the host can see
 * and, with device checks on, validate device-resident cu_seqlens, indices
 * and values with check kernels whose flag makes the op kernels write
 * nothing; they chain their commands with events and never block otherwise.
 * Kernels live in cl/segment.cl, built per section (-DCV_SECTION) with row
 * units (-DCV_UNIT), accumulation dtypes (-DCV_DTYPE) and work-group sizes
 * from ctx->tuning as -D options. Scans over at most SEG_FUSE_MAX sequences
 * are fused into the row kernels (pack, CP rows: one launch); other
 * temporaries live in the context's temp buffer (cv_temp).
 */
#include "runtime/runtime.h"

#include "cpu/segment.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ host-side validation */

static clvarlen_status need(clvarlen_context *ctx, const char *fn, const char *what,
                            const void *p, bool needed)
{
    if (needed && !p)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, what);
    return CLVARLEN_SUCCESS;
}

/* A count of sequences: kernels index them with int, cu has n + 1 entries. */
static clvarlen_status check_count(clvarlen_context *ctx, const char *fn, const char *what,
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

/* Row tensor geometry in bytes. */
typedef struct seg_rows {
    size_t row_bytes, stride_b, span;
} seg_rows;

static clvarlen_status rows_geom(clvarlen_context *ctx, const char *fn, const char *what,
                                 clvarlen_dtype dtype, int64_t row_elems, int64_t rows,
                                 int64_t stride, const void *ptr, seg_rows *g)
{
    clvarlen_status st = cv_check_rows(ctx, fn, what, dtype, row_elems, rows, stride, &stride);
    if (st != CLVARLEN_SUCCESS)
        return st;
    if ((st = need(ctx, fn, what, ptr, rows > 0)) != CLVARLEN_SUCCESS)
        return st;
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

static clvarlen_status check_scatter_mode(clvarlen_context *ctx, const char *fn,
                                          clvarlen_dtype dtype, clvarlen_scatter_mode mode,
                                          unsigned flags)
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
static clvarlen_status check_indices(clvarlen_context *ctx, const char *fn, const char *what,
                                     const int32_t *i32, const int64_t *i64, int64_t n,
                                     int64_t limit, bool allow_skip, bool *distinct,
                                     bool dup_is_error)
{
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

static clvarlen_status check_gen(clvarlen_context *ctx, const char *fn, int32_t world, int32_t n,
                                 int64_t total)
{
    if (world < 1 || n < 1)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: world (%d) and n (%d) must be at least 1", fn, (int)world, (int)n);
    if (total < 0 || total > (1 << 24))
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: total %lld is outside [0, 2^24]", fn, (long long)total);
    if ((uint64_t)world * (uint64_t)n > (uint64_t)(SIZE_MAX / sizeof(int32_t) / 2))
        return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW, "%s: world * n is too large", fn);
    return CLVARLEN_SUCCESS;
}

/* ================================================================ OpenCL launchers */

#if CLVARLEN_HAVE_OPENCL

#define SEG_FILE "segment.cl"
/* Cap on work-groups of grid-stride kernels (keeps every NDRange dimension small). */
#define SEG_MAX_GROUPS 65536

static size_t copy_wg(const clvarlen_context *ctx)
{
    return (size_t)cv_pow2_floor(ctx->tuning.copy_wg ? (int64_t)ctx->tuning.copy_wg : 64);
}

static size_t scan_wg(const clvarlen_context *ctx)
{
    return (size_t)cv_pow2_floor(ctx->tuning.scan_wg ? (int64_t)ctx->tuning.scan_wg : 64);
}

/* seqlens_expand: a short kernel of many small groups (H100: 8 us at 64 or 128
 * work-items, 10-12 us at 256-1024); the scans' size where the table has none. */
static size_t expand_wg(const clvarlen_context *ctx)
{
    return ctx->tuning.expand_wg ? (size_t)cv_pow2_floor((int64_t)ctx->tuning.expand_wg)
                                 : scan_wg(ctx);
}

/* Units each lane of a row copy loads before storing, and the fewest lanes
 * per row (8 x 16 B keeps a warp's accesses in 128-byte runs); measured on
 * an H100: 4 and 8 beat 1 and 1 by up to 5% for 256 B - 4 KiB rows. */
#define SEG_COPY_UNROLL 4
#define SEG_MIN_LANES 8
/* Sequences up to which pack and CP rows fuse their scan into the row
 * kernel (one launch; the scan lives in local memory, 8 KiB). */
#ifndef SEG_FUSE_MAX
#define SEG_FUSE_MAX 2048
#endif

static int copy_unroll(void)
{
    return SEG_COPY_UNROLL;
}

static size_t copy_min_lanes(void)
{
    return SEG_MIN_LANES;
}

/* Destination rows per group of the ordered accumulate: its f32 tile stays at 16 KiB. */
static size_t acc_rows(const clvarlen_context *ctx)
{
    size_t r = 4096 / copy_wg(ctx);
    return r < 1 ? 1 : r > 32 ? 32 : r;
}

/* The kernel's dtype code (cl/common.clh CV_DT_*, 3 = i32). */
static int acc_code(clvarlen_dtype dtype)
{
    switch (dtype) {
    case CLVARLEN_DTYPE_F16: return 1;
    case CLVARLEN_DTYPE_BF16: return 2;
    case CLVARLEN_DTYPE_I32: return 3;
    default: return 0;
    }
}

/* Kernel sections of cl/segment.cl (-DCV_SECTION): each specialisation
 * compiles only the kernels it holds. */
enum { SEC_MAPS = 0, SEC_SCANS = 1, SEC_COPY = 2, SEC_ACC = 3, SEC_GEN = 4, SEC_EXPAND = 5 };

/* -D options per section: the scan work-group size sizes local arrays of
 * the scans, the row unit specialises copies, the dtype accumulation. */
static clvarlen_status seg_kernel(clvarlen_context *ctx, int section, int unit, int acc,
                                  const char *name, cl_kernel *kernel)
{
    char opts[256];
    switch (section) {
    case SEC_SCANS:
        snprintf(opts, sizeof opts, "-DCV_SECTION=1 -DCV_SCAN_WG=%zu", scan_wg(ctx));
        break;
    case SEC_EXPAND: /* section 1 at seqlens_expand's work-group size */
        snprintf(opts, sizeof opts, "-DCV_SECTION=1 -DCV_SCAN_WG=%zu", expand_wg(ctx));
        break;
    case SEC_COPY:
        snprintf(opts, sizeof opts,
                 "-DCV_SECTION=2 -DCV_UNIT=%d -DCV_UNROLL=%d -DCV_SCAN_WG=%zu -DCV_FUSE_MAX=%d",
                 unit, copy_unroll(), scan_wg(ctx), SEG_FUSE_MAX);
        break;
    case SEC_ACC:
        snprintf(opts, sizeof opts,
                 "-DCV_SECTION=3 -DCV_DTYPE=%d -DCV_COPY_WG=%zu -DCV_ACC_ROWS=%zu "
                 "-DCV_SCAN_WG=%zu -DCV_FUSE_MAX=%d",
                 acc, copy_wg(ctx), acc_rows(ctx), scan_wg(ctx), SEG_FUSE_MAX);
        break;
    case SEC_GEN:
        snprintf(opts, sizeof opts, "-DCV_SECTION=4 -cl-fp32-correctly-rounded-divide-sqrt");
        break;
    default:
        snprintf(opts, sizeof opts, "-DCV_SECTION=0");
        break;
    }
    return cv_get_kernel(ctx, SEG_FILE, opts, name, kernel);
}

/* The widest unit dividing the row and every byte offset and stride. */
static int pick_unit(size_t row_bytes, const size_t *v, int nv)
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

/* Rows laid over work-groups: lpr lanes per row, several short rows per group. */
typedef struct seg_geo {
    cl_int row_units, lpr;
    size_t global, local;
} seg_geo;

static void row_geo_wg(const clvarlen_context *ctx, size_t wg, int64_t max_groups, int64_t units,
                       int64_t rows, seg_geo *g)
{
    /* Enough lanes that each moves about CV_UNROLL units, but at least
     * min_lanes per row so a warp's accesses stay in long contiguous runs. */
    size_t unroll = (size_t)copy_unroll();
    const int64_t u = units > 0 ? (int64_t)units : 1;
    size_t lpr = (size_t)cv_pow2_ceil((u + (int64_t)unroll - 1) / (int64_t)unroll);
    size_t floor_lanes = CV_MIN((size_t)cv_pow2_ceil(u), copy_min_lanes());
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

static void row_geo(const clvarlen_context *ctx, int64_t units, int64_t rows, seg_geo *g)
{
    row_geo_wg(ctx, copy_wg(ctx), SEG_MAX_GROUPS, units, rows, g);
}

/* Fused kernels (a scan per work-group, then rows): about as many
 * work-groups as fit on the device at once, grid-striding over the rows. */
static void fused_geo(const clvarlen_context *ctx, int64_t units, int64_t rows, seg_geo *g)
{
    size_t wg = scan_wg(ctx);
    int64_t cus = ctx->device.compute_units ? (int64_t)ctx->device.compute_units : 16;
    int64_t per_cu = CV_MAX(1, 2048 / (int64_t)wg);
    row_geo_wg(ctx, wg, cus * per_cu, units, rows, g);
}

/* A 1-D grid of one work-item per element, grid-stride beyond the cap. */
static void elem_grid(const clvarlen_context *ctx, int64_t n, size_t *global, size_t *local)
{
    size_t wg = copy_wg(ctx);
    int64_t groups = (n + (int64_t)wg - 1) / (int64_t)wg;
    groups = CV_MAX(1, CV_MIN(groups, (int64_t)SEG_MAX_GROUPS));
    *local = wg;
    *global = (size_t)groups * wg;
}

/* Launchers enqueue through a cv_chain (lib/runtime/cl-chain.c); this keeps
 * the 1-D launches short. */
static clvarlen_status seq_run(cv_chain *q, cl_kernel k, const char *what, size_t global,
                               size_t local)
{
    return cv_chain_run(q, k, what, 1, &global, &local);
}

/* Temporaries start here in the context's temp buffer; the scratch word
 * (a device-computed total) is at byte 0. */
#define SEG_TEMP_OFF 64

static size_t align8(size_t x)
{
    return (x + 7) & ~(size_t)7;
}

/* The context's temp buffer with `bytes` of work space at SEG_TEMP_OFF (one
 * call per chain). */
static clvarlen_status seq_temp(cv_chain *q, size_t bytes, cl_mem *mem)
{
    return cv_temp(q->ctx, SEG_TEMP_OFF + bytes, mem);
}

/* Blocking read of rows (only the row bytes of a strided tensor) after the chain. */
static clvarlen_status read_rows(cv_chain *q, cl_mem mem, int64_t rows, size_t row_bytes,
                                 size_t stride_b, void *host)
{
    return cv_chain_read_rows(q, mem, rows, row_bytes, stride_b, host, stride_b);
}

static clvarlen_status read_bytes(cv_chain *q, cl_mem mem, size_t bytes, void *host)
{
    return cv_chain_read(q, mem, 0, bytes, host);
}

/* An input buffer (NULL host pointer: no buffer). */
static clvarlen_status upload(clvarlen_context *ctx, const void *host, size_t bytes, cl_mem *mem)
{
    *mem = NULL;
    if (!host)
        return CLVARLEN_SUCCESS;
    return cv_buffer(ctx, bytes, host, mem);
}

/* ---------------------------------------------------------------- building blocks */

static clvarlen_status enq_scan_lengths(cv_chain *q, cl_mem flag, cl_int check, cl_mem len,
                                        size_t len_off, int64_t n, int64_t max_len,
                                        int64_t capacity, cl_mem cu, size_t cu_off,
                                        cl_mem total_out, size_t total_off, cl_mem scratch)
{
    cl_kernel k;
    clvarlen_status st = seg_kernel(q->ctx, SEC_SCANS, 0, -1, "segment_scan_lengths", &k);
    if (st != CLVARLEN_SUCCESS)
        return st;
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
    size_t wg = scan_wg(q->ctx);
    return seq_run(q, k, "segment_scan_lengths", wg, wg);
}

/* inv[0..rows) = -1 (at byte inv_off), then inv[map[i]] = i. */
static clvarlen_status enq_invert(cv_chain *q, cl_mem flag, cl_int check, cl_mem m32, cl_mem m64,
                                  size_t map_off, int64_t n, int64_t rows, cl_mem inv,
                                  size_t inv_off)
{
    static const cl_int minus1 = -1;
    clvarlen_status st =
        cv_chain_fill(q, inv, &minus1, sizeof minus1, inv_off, (size_t)rows * sizeof(cl_int));
    if (st != CLVARLEN_SUCCESS || n <= 0)
        return st;
    cl_kernel k;
    st = seg_kernel(q->ctx, SEC_MAPS, 0, -1, "segment_invert_map", &k);
    if (st != CLVARLEN_SUCCESS)
        return st;
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
    elem_grid(q->ctx, n, &global, &local);
    return seq_run(q, k, "segment_invert_map", global, local);
}

/* Arguments of segment_copy_rows. */
typedef struct copy_args {
    clvarlen_dtype dtype;
    int64_t row_elems;
    cl_mem src;
    size_t src_off, src_stride_b;
    int64_t src_rows;
    cl_mem dst;
    size_t dst_off, dst_stride_b;
    int64_t dst_rows;
    int64_t n_rows;
    cl_mem map32, map64;
    size_t map_off;
    int map_dst, fill_mode;
    unsigned char fill[16];
    cl_mem count;
    int64_t count_cap;
    int accumulate;
} copy_args;

static clvarlen_status enq_copy(cv_chain *q, cl_mem flag, cl_int check, const copy_args *c)
{
    if (c->n_rows <= 0)
        return CLVARLEN_SUCCESS;
    size_t es = cv_dtype_size(c->dtype);
    size_t row_bytes = (size_t)c->row_elems * es;
    int unit = 0, acc = -1;
    int64_t units;
    if (c->accumulate) {
        acc = acc_code(c->dtype);
        units = c->row_elems;
    } else {
        size_t v[4] = {c->src_off, c->dst_off, c->src_stride_b, c->dst_stride_b};
        unit = pick_unit(row_bytes, v, 4);
        units = (int64_t)(row_bytes / (size_t)unit);
    }
    cl_kernel k;
    clvarlen_status st =
        seg_kernel(q->ctx, acc >= 0 ? SEC_ACC : SEC_COPY, unit, acc, "segment_copy_rows", &k);
    if (st != CLVARLEN_SUCCESS)
        return st;
    seg_geo g;
    row_geo(q->ctx, units, c->n_rows, &g);
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
    return seq_run(q, k, "segment_copy_rows", g.global, g.local);
}

/* The 16-byte fill pattern: one element repeated (NULL: zeros). */
static void fill_pattern(unsigned char out[16], const void *elem, size_t es)
{
    memset(out, 0, 16);
    if (!elem)
        return;
    for (size_t o = 0; o + es <= 16; o += es)
        memcpy(out + o, elem, es);
}

/* ---------------------------------------------------------------- operations */

static clvarlen_status enq_cu_from_lengths(cv_chain *q, cl_mem flag, cl_int check, cl_mem lengths,
                                           size_t len_off, int64_t n, cl_mem cu, size_t cu_off)
{
    return enq_scan_lengths(q, flag, check, lengths, len_off, n, -1, -1, cu, cu_off, NULL, 0,
                            NULL);
}

static clvarlen_status enq_lengths_from_cu(cv_chain *q, cl_mem flag, cl_int check, cl_mem cu,
                                           size_t cu_off, int64_t n, cl_mem lengths,
                                           size_t len_off)
{
    if (n <= 0)
        return CLVARLEN_SUCCESS;
    cl_kernel k;
    clvarlen_status st = seg_kernel(q->ctx, SEC_MAPS, 0, -1, "segment_lengths_from_cu", &k);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cl_ulong co = cu_off, lo = len_off;
    cl_int nn = (cl_int)n;
    cv_args a = cv_args_begin(k);
    CV_ARG(a, cu);
    CV_ARG(a, co);
    CV_ARG(a, nn);
    CV_ARG(a, lengths);
    CV_ARG(a, lo);
    CV_ARG(a, flag);
    CV_ARG(a, check);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(q->ctx, a.err, "segment_lengths_from_cu: clSetKernelArg");
    size_t global, local;
    elem_grid(q->ctx, n, &global, &local);
    return seq_run(q, k, "segment_lengths_from_cu", global, local);
}

static clvarlen_status enq_token_maps(cv_chain *q, cl_mem flag, cl_int check, cl_mem cu,
                                      size_t cu_off, int64_t n, int64_t total, cl_mem offsets,
                                      size_t offsets_off, cl_mem seq_id, size_t seq_off,
                                      cl_mem pos, size_t pos_off)
{
    if (n <= 0 || total <= 0)
        return CLVARLEN_SUCCESS;
    cl_kernel k;
    clvarlen_status st = seg_kernel(q->ctx, SEC_MAPS, 0, -1, "segment_token_maps", &k);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cl_ulong co = cu_off, oo = offsets_off, so = seq_off, po = pos_off;
    cl_int nn = (cl_int)n;
    cl_long tot = total;
    cv_args a = cv_args_begin(k);
    CV_ARG(a, cu);
    CV_ARG(a, co);
    CV_ARG(a, nn);
    CV_ARG(a, tot);
    CV_ARG(a, offsets);
    CV_ARG(a, oo);
    CV_ARG(a, seq_id);
    CV_ARG(a, so);
    CV_ARG(a, pos);
    CV_ARG(a, po);
    CV_ARG(a, flag);
    CV_ARG(a, check);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(q->ctx, a.err, "segment_token_maps: clSetKernelArg");
    size_t global, local;
    elem_grid(q->ctx, total, &global, &local);
    return seq_run(q, k, "segment_token_maps", global, local);
}

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
static clvarlen_status enq_pack_fused(cv_chain *q, cl_mem flag, cl_int check, const pack_args *p)
{
    clvarlen_context *ctx = q->ctx;
    int64_t rows_max = CV_MIN(p->capacity, p->batch * p->max_seqlen);
    size_t row_bytes = (size_t)p->row_elems * cv_dtype_size(p->dtype);
    size_t v[3] = {p->padded_off, p->packed_off, p->padded_stride_b};
    int unit = pick_unit(row_bytes, v, 3);
    cl_kernel k;
    clvarlen_status st = seg_kernel(ctx, SEC_COPY, unit, -1, "segment_pack_fused", &k);
    if (st != CLVARLEN_SUCCESS)
        return st;
    seg_geo g;
    fused_geo(ctx, (int64_t)(row_bytes / (size_t)unit), rows_max, &g);
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
    return seq_run(q, k, "segment_pack_fused", g.global, g.local);
}

static clvarlen_status enq_pack(cv_chain *q, cl_mem flag, cl_int check, const pack_args *p)
{
    clvarlen_context *ctx = q->ctx;
    if (!p->mask && p->batch <= SEG_FUSE_MAX)
        return enq_pack_fused(q, flag, check, p);
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
        unit = pick_unit(row_bytes, v, 3);
        st = seg_kernel(ctx, SEC_COPY, unit, -1, "segment_pack_rows", &k_rows);
    }
    if (st != CLVARLEN_SUCCESS)
        return st;
    /* temp: scratch word; mask form: counts [batch], then the index when
     * the caller wants no src_index */
    size_t counts_off = SEG_TEMP_OFF, index_off = SEG_TEMP_OFF;
    size_t need = 0;
    if (p->mask) {
        index_off = SEG_TEMP_OFF + align8((size_t)p->batch * sizeof(cl_int));
        need = index_off - SEG_TEMP_OFF;
        if (!p->src_index && rows_max > 0)
            need += (size_t)rows_max * sizeof(cl_long);
    }
    cl_mem temp = NULL;
    st = seq_temp(q, need, &temp);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cl_mem scratch = temp;
    cl_ulong mo = p->mask_off, co = p->cu_off, cno = counts_off;
    cl_int nb = (cl_int)p->batch;
    cl_long S = p->max_seqlen, cap = p->capacity;
    size_t wg = scan_wg(ctx);
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
                     : seq_run(q, k_count, "segment_mask_count", groups * wg, wg);
        }
    }
    if (st == CLVARLEN_SUCCESS)
        st = enq_scan_lengths(q, flag, check, p->mask ? temp : p->valid_lens,
                              p->mask ? counts_off : p->valid_lens_off, p->batch,
                              p->mask ? -1 : p->max_seqlen, p->capacity, p->cu, p->cu_off,
                              p->total, p->total_off, scratch);
    if (st == CLVARLEN_SUCCESS && rows_max > 0 && !p->mask) {
        seg_geo g;
        row_geo(ctx, (int64_t)(row_bytes / (size_t)unit), rows_max, &g);
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
                                 : seq_run(q, k_rows, "segment_pack_rows", g.global, g.local);
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
                                 : seq_run(q, k_index, "segment_mask_index", groups * wg, wg);
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
        st = enq_copy(q, flag, check, &c);
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
static clvarlen_status enq_unpack(cv_chain *q, cl_mem flag, cl_int check, const unpack_args *u)
{
    if (u->padded_rows <= 0)
        return CLVARLEN_SUCCESS;
    clvarlen_status st = CLVARLEN_SUCCESS;
    if (check)
        st = cv_chain_check_range(q, NULL, u->src_index, u->src_index_off, u->total, 0,
                             u->padded_rows, false, CV_CHECK_INDEX);
    cl_mem inv = NULL;
    if (st == CLVARLEN_SUCCESS)
        st = seq_temp(q, (size_t)u->padded_rows * sizeof(cl_int), &inv);
    if (st == CLVARLEN_SUCCESS)
        st = enq_invert(q, flag, check, NULL, u->src_index, u->src_index_off, u->total,
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
        fill_pattern(c.fill, u->pad, cv_dtype_size(u->dtype));
        st = enq_copy(q, flag, check, &c);
    }
    return st;
}

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

static clvarlen_status enq_gather(cv_chain *q, cl_mem flag, cl_int check, const rows_args *r)
{
    if (r->n_index <= 0)
        return CLVARLEN_SUCCESS;
    clvarlen_status st = CLVARLEN_SUCCESS;
    if (check)
        st = cv_chain_check_range(q, r->index, NULL, r->index_off, r->n_index, 0, r->src_rows,
                             true, CV_CHECK_INDEX);
    if (st != CLVARLEN_SUCCESS)
        return st;
    copy_args c = {0};
    c.dtype = r->dtype;
    c.row_elems = r->row_elems;
    c.src = r->src;
    c.src_off = r->src_off;
    c.src_stride_b = r->src_stride_b;
    c.src_rows = r->src_rows;
    c.dst = r->dst;
    c.dst_off = r->dst_off;
    c.dst_stride_b = r->dst_stride_b;
    c.dst_rows = r->n_index;
    c.n_rows = r->n_index;
    c.map32 = r->index;
    c.map_off = r->index_off;
    c.fill_mode = 1;
    return enq_copy(q, flag, check, &c);
}

/*
 * overwrite: direct (dst map), or with zero_rest through the inverse map
 * (every dst row written once); accumulate with unique indices: the same
 * with CV_ACC; accumulate with repeats: the ordered kernel.
 */
static clvarlen_status enq_scatter(cv_chain *q, cl_mem flag, cl_int check, const rows_args *r,
                                   clvarlen_scatter_mode mode, bool zero_rest, bool unique)
{
    clvarlen_context *ctx = q->ctx;
    clvarlen_status st = CLVARLEN_SUCCESS;
    bool acc = mode == CLVARLEN_SCATTER_ACCUMULATE;
    if (r->dst_rows <= 0 || (r->n_index <= 0 && !zero_rest))
        return CLVARLEN_SUCCESS;
    if (check)
        st = cv_chain_check_range(q, r->index, NULL, r->index_off, r->n_index, 0, r->dst_rows,
                             true, CV_CHECK_INDEX);
    if (st != CLVARLEN_SUCCESS)
        return st;
    copy_args c = {0};
    c.dtype = r->dtype;
    c.row_elems = r->row_elems;
    c.src = r->src;
    c.src_off = r->src_off;
    c.src_stride_b = r->src_stride_b;
    c.src_rows = r->n_index;
    c.dst = r->dst;
    c.dst_off = r->dst_off;
    c.dst_stride_b = r->dst_stride_b;
    c.dst_rows = r->dst_rows;
    c.accumulate = acc;
    if (acc && !unique) {
        cl_kernel k;
        st = seg_kernel(ctx, SEC_ACC, 0, acc_code(r->dtype), "segment_scatter_add_ordered", &k);
        if (st != CLVARLEN_SUCCESS)
            return st;
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
        size_t wg = copy_wg(ctx);
        int64_t blocks = (r->dst_rows + (int64_t)acc_rows(ctx) - 1) / (int64_t)acc_rows(ctx) *
                         ((r->row_elems + (int64_t)wg - 1) / (int64_t)wg);
        int64_t groups = CV_MAX(1, CV_MIN(blocks, (int64_t)SEG_MAX_GROUPS));
        return seq_run(q, k, "segment_scatter_add_ordered", (size_t)groups * wg, wg);
    }
    if (!zero_rest) {
        c.n_rows = r->n_index;
        c.map32 = r->index;
        c.map_off = r->index_off;
        c.map_dst = 1;
        return enq_copy(q, flag, check, &c);
    }
    cl_mem inv = NULL;
    st = seq_temp(q, (size_t)r->dst_rows * sizeof(cl_int), &inv);
    if (st == CLVARLEN_SUCCESS)
        st = enq_invert(q, flag, check, r->index, NULL, r->index_off, r->n_index, r->dst_rows,
                        inv, SEG_TEMP_OFF);
    if (st == CLVARLEN_SUCCESS) {
        c.n_rows = r->dst_rows;
        c.map32 = inv;
        c.map_off = SEG_TEMP_OFF;
        c.fill_mode = 1;
        st = enq_copy(q, flag, check, &c);
    }
    return st;
}

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

static clvarlen_status enq_expand(cv_chain *q, cl_mem flag, cl_int check, const expand_args *e)
{
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
    size_t wg = expand_wg(ctx);
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
    return seq_run(q, k, "segment_seqlens_expand", (size_t)groups * wg, wg);
}

static clvarlen_status enq_cp_scan(cv_chain *q, cl_mem flag, cl_int check, cl_mem cu,
                                   size_t cu_off, int64_t n, int32_t world, int32_t rank,
                                   int64_t capacity, cl_mem local_cu, size_t local_off,
                                   cl_mem head_cu, size_t head_off, cl_mem tail_cu,
                                   size_t tail_off, cl_mem total_out, size_t total_off,
                                   cl_mem scratch)
{
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
    size_t wg = scan_wg(q->ctx);
    return seq_run(q, k, "segment_cp_scan", wg, wg);
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

static clvarlen_status enq_cp_plan(cv_chain *q, cl_mem flag, cl_int check, const plan_args *p)
{
    clvarlen_context *ctx = q->ctx;
    bool tokens = (p->global_index || p->position) && p->capacity > 0 && p->n > 0;
    cl_kernel k = NULL;
    clvarlen_status st = CLVARLEN_SUCCESS;
    if (tokens)
        st = seg_kernel(ctx, SEC_MAPS, 0, -1, "segment_cp_plan_tokens", &k);
    cl_mem scratch = NULL;
    if (st == CLVARLEN_SUCCESS)
        st = seq_temp(q, 0, &scratch);
    if (st == CLVARLEN_SUCCESS)
        st = enq_cp_scan(q, flag, check, p->cu, p->cu_off, p->n, p->world, p->rank,
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
            elem_grid(ctx, p->capacity, &global, &local);
            st = seq_run(q, k, "segment_cp_plan_tokens", global, local);
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
static clvarlen_status enq_cp_rows(cv_chain *q, cl_mem flag, cl_int check, const cp_rows_args *c)
{
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
        unit = pick_unit(row_bytes, v, 4);
        units = (int64_t)(row_bytes / (size_t)unit);
    }
    bool fused = c->n <= SEG_FUSE_MAX;
    cl_kernel k;
    clvarlen_status st =
        seg_kernel(ctx, acc ? SEC_ACC : SEC_COPY, unit, acc ? acc_code(c->dtype) : -1,
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
        fused_geo(ctx, units, n_iter, &g);
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
        return seq_run(q, k, "segment_cp_rows_fused", g.global, g.local);
    }
    /* temp: scratch word, then the local offsets [n + 1] */
    cl_mem temp = NULL;
    st = seq_temp(q, (size_t)(c->n + 1) * sizeof(cl_int), &temp);
    if (st == CLVARLEN_SUCCESS)
        st = enq_cp_scan(q, flag, check, c->cu, c->cu_off, c->n, c->world, c->rank,
                         c->local_capacity, temp, SEG_TEMP_OFF, NULL, 0, NULL, 0, NULL, 0, temp);
    if (st == CLVARLEN_SUCCESS) {
        if (n_iter > 0) {
            seg_geo g;
            row_geo(ctx, units, n_iter, &g);
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
                                     : seq_run(q, k, "segment_cp_rows", g.global, g.local);
        }
    }
    return st;
}

/* True when f32 division and sqrt are correctly rounded (gen_seq_lens needs it). */
/*
 * gen_seq_lens must be bit-identical everywhere, and its two f32 divisions
 * are only correctly rounded on a device that reports
 * CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT, with the program built with
 * -cl-fp32-correctly-rounded-divide-sqrt (OpenCL otherwise allows 2.5 ulp).
 * Other devices get the rows computed on the host (the same code as the CPU
 * fallback) and written to `out` in order after the wait list.
 */
static clvarlen_status enq_gen(cv_chain *q, uint64_t seed, int32_t world, int32_t n,
                               int64_t total, cl_mem out, size_t out_off)
{
    clvarlen_context *ctx = q->ctx;
    if (!ctx->exact_div) {
        size_t bytes = (size_t)world * (size_t)n * sizeof(int32_t);
        int32_t *host = malloc(bytes);
        if (!host)
            return cv_error(ctx, CLVARLEN_ERROR_OUT_OF_MEMORY,
                            "clvarlen_gen_seq_lens: cannot allocate %zu bytes", bytes);
        cv_cpu_gen_seq_lens(ctx, seed, world, n, total, host);
        cl_uint nw;
        const cl_event *wl;
        cv_chain_wait_list(q, &nw, &wl);
        cl_event ev = NULL;
        clvarlen_status st = cv_write(ctx, out, out_off, bytes, host, nw, wl, &ev);
        free(host);
        if (st == CLVARLEN_SUCCESS)
            cv_chain_take(q, ev);
        return st;
    }
    cl_kernel k;
    clvarlen_status st = seg_kernel(ctx, SEC_GEN, 0, -1, "segment_gen_seq_lens", &k);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cl_ulong sd = seed, oo = out_off;
    cl_int w = world, nn = n, tot = (cl_int)total;
    cv_args a = cv_args_begin(k);
    CV_ARG(a, sd);
    CV_ARG(a, w);
    CV_ARG(a, nn);
    CV_ARG(a, tot);
    CV_ARG(a, out);
    CV_ARG(a, oo);
    if (a.err != CL_SUCCESS)
        return cv_cl_check(ctx, a.err, "segment_gen_seq_lens: clSetKernelArg");
    size_t local = CV_MIN((size_t)64, copy_wg(ctx));
    return seq_run(q, k, "segment_gen_seq_lens", (size_t)world, local);
}

/* Start of a cl_mem entry point's command chain, with device checks when enabled. */
static clvarlen_status cl_begin(clvarlen_context *ctx, cv_chain *q, cl_uint nw,
                                const cl_event *wl, cl_mem *flag, cl_int *check)
{
    clvarlen_status st = cv_chain_begin(q, ctx, nw, wl, ctx->device_checks != 0);
    *flag = q->flag;
    *check = q->flag != NULL;
    return st;
}

/* Host-memory path helpers: a chain with no wait list and no checks. */
#define HOST_SEQ(q) \
    cv_chain q;     \
    cv_chain_begin(&q, ctx, 0, NULL, false)

#endif /* CLVARLEN_HAVE_OPENCL */

#if CLVARLEN_HAVE_OPENCL
/* Kernels address a row in int units and tokens with int. */
static clvarlen_status check_cl_limits(clvarlen_context *ctx, const char *fn, size_t row_bytes,
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
#endif

/* ================================================================ lengths and maps */

clvarlen_status clvarlen_cu_seqlens_from_lengths(clvarlen_context *ctx, const int32_t *lengths,
                                                 int64_t n, int32_t *cu_seqlens)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    clvarlen_status st = check_count(ctx, fn, "n", n);
    if (st == CLVARLEN_SUCCESS)
        st = need(ctx, fn, "lengths", lengths, n > 0);
    if (st == CLVARLEN_SUCCESS)
        st = need(ctx, fn, "cu_seqlens", cu_seqlens, true);
    if (st != CLVARLEN_SUCCESS)
        return st;
    int64_t total = 0;
    for (int64_t s = 0; s < n; s++) {
        if (lengths[s] < 0)
            return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: lengths[%lld] is %d", fn,
                            (long long)s, (int)lengths[s]);
        total += lengths[s];
        if (total > INT32_MAX)
            return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW,
                            "%s: the lengths sum to more than INT32_MAX", fn);
    }
    if (!cv_use_cl(ctx)) {
        cv_cpu_cu_from_lengths(lengths, n, cu_seqlens);
        return CLVARLEN_SUCCESS;
    }
#if CLVARLEN_HAVE_OPENCL
    HOST_SEQ(q);
    cl_mem d_len = NULL, d_cu = NULL;
    st = upload(ctx, n > 0 ? lengths : NULL, (size_t)n * 4, &d_len);
    if (st == CLVARLEN_SUCCESS)
        st = cv_buffer(ctx, (size_t)(n + 1) * 4, NULL, &d_cu);
    if (st == CLVARLEN_SUCCESS)
        st = enq_cu_from_lengths(&q, NULL, 0, d_len, 0, n, d_cu, 0);
    if (st == CLVARLEN_SUCCESS)
        st = read_bytes(&q, d_cu, (size_t)(n + 1) * 4, cu_seqlens);
    cv_chain_abort(&q);
    cv_release(&d_len);
    cv_release(&d_cu);
    return st;
#else
    return CLVARLEN_ERROR_INTERNAL;
#endif
}

clvarlen_status clvarlen_lengths_from_cu_seqlens(clvarlen_context *ctx, const int32_t *cu_seqlens,
                                                 int64_t n, int32_t *lengths)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    clvarlen_status st = check_count(ctx, fn, "n", n);
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_cu_seqlens(ctx, fn, "cu_seqlens", cu_seqlens, n, -1);
    if (st == CLVARLEN_SUCCESS)
        st = need(ctx, fn, "lengths", lengths, n > 0);
    if (st != CLVARLEN_SUCCESS || n == 0)
        return st;
    if (!cv_use_cl(ctx)) {
        cv_cpu_lengths_from_cu(ctx, cu_seqlens, n, lengths);
        return CLVARLEN_SUCCESS;
    }
#if CLVARLEN_HAVE_OPENCL
    HOST_SEQ(q);
    cl_mem d_cu = NULL, d_len = NULL;
    st = upload(ctx, cu_seqlens, (size_t)(n + 1) * 4, &d_cu);
    if (st == CLVARLEN_SUCCESS)
        st = cv_buffer(ctx, (size_t)n * 4, NULL, &d_len);
    if (st == CLVARLEN_SUCCESS)
        st = enq_lengths_from_cu(&q, NULL, 0, d_cu, 0, n, d_len, 0);
    if (st == CLVARLEN_SUCCESS)
        st = read_bytes(&q, d_len, (size_t)n * 4, lengths);
    cv_chain_abort(&q);
    cv_release(&d_cu);
    cv_release(&d_len);
    return st;
#else
    return CLVARLEN_ERROR_INTERNAL;
#endif
}

clvarlen_status clvarlen_token_maps(clvarlen_context *ctx, const int32_t *cu_seqlens, int64_t n,
                                    int64_t total_tokens, const int32_t *offsets, int32_t *seq_id,
                                    int32_t *pos)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    clvarlen_status st = check_count(ctx, fn, "n", n);
    if (st == CLVARLEN_SUCCESS && total_tokens < 0)
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: total_tokens is negative", fn);
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_cu_seqlens(ctx, fn, "cu_seqlens", cu_seqlens, n, total_tokens);
    if (st == CLVARLEN_SUCCESS && !seq_id && !pos)
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: seq_id and pos are both NULL",
                      fn);
    if (st != CLVARLEN_SUCCESS)
        return st;
    if (offsets && pos)
        for (int64_t s = 0; s < n; s++) {
            int64_t L = cu_seqlens[s + 1] - cu_seqlens[s];
            if (L > 0 && (int64_t)offsets[s] + L - 1 > INT32_MAX)
                return cv_error(ctx, CLVARLEN_ERROR_OVERFLOW,
                                "%s: offsets[%lld] + length exceeds INT32_MAX", fn, (long long)s);
        }
    if (total_tokens == 0)
        return CLVARLEN_SUCCESS;
    if (!cv_use_cl(ctx)) {
        cv_cpu_token_maps(ctx, cu_seqlens, n, total_tokens, offsets, seq_id, pos);
        return CLVARLEN_SUCCESS;
    }
#if CLVARLEN_HAVE_OPENCL
    HOST_SEQ(q);
    size_t tb = (size_t)total_tokens * 4;
    cl_mem d_cu = NULL, d_off = NULL, d_seq = NULL, d_pos = NULL;
    st = upload(ctx, cu_seqlens, (size_t)(n + 1) * 4, &d_cu);
    if (st == CLVARLEN_SUCCESS && pos)
        st = upload(ctx, offsets, (size_t)n * 4, &d_off);
    if (st == CLVARLEN_SUCCESS && seq_id)
        st = cv_buffer(ctx, tb, NULL, &d_seq);
    if (st == CLVARLEN_SUCCESS && pos)
        st = cv_buffer(ctx, tb, NULL, &d_pos);
    if (st == CLVARLEN_SUCCESS)
        st = enq_token_maps(&q, NULL, 0, d_cu, 0, n, total_tokens, d_off, 0, d_seq, 0, d_pos, 0);
    if (st == CLVARLEN_SUCCESS && seq_id)
        st = read_bytes(&q, d_seq, tb, seq_id);
    if (st == CLVARLEN_SUCCESS && pos)
        st = read_bytes(&q, d_pos, tb, pos);
    cv_chain_abort(&q);
    cv_release(&d_cu);
    cv_release(&d_off);
    cv_release(&d_seq);
    cv_release(&d_pos);
    return st;
#else
    return CLVARLEN_ERROR_INTERNAL;
#endif
}

/* ================================================================ pack / unpack */

/* batch and max_seqlen of a padded tensor. */
static clvarlen_status check_padded(clvarlen_context *ctx, const char *fn, int64_t batch,
                                    int64_t max_seqlen)
{
    clvarlen_status st = check_count(ctx, fn, "batch", batch);
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
        st = rows_geom(ctx, fn, "padded", dtype, row_elems, rows, padded_stride, padded, &pr);
    if (st == CLVARLEN_SUCCESS)
        st = mask ? CLVARLEN_SUCCESS : need(ctx, fn, "valid_lens", valid_lens, batch > 0);
    if (st == CLVARLEN_SUCCESS && capacity < 0)
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: capacity_tokens is negative",
                      fn);
    if (st == CLVARLEN_SUCCESS)
        st = need(ctx, fn, "cu_seqlens", cu_seqlens, true);
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
        st = need(ctx, fn, "packed", packed, total > 0);
    if (st == CLVARLEN_SUCCESS && !cv_use_cl(ctx))
        st = cv_cpu_pack(ctx, pr.row_bytes, padded, pr.stride_b, batch, max_seqlen, lens, mask,
                         packed, cu_seqlens, src_index);
#if CLVARLEN_HAVE_OPENCL
    else if (st == CLVARLEN_SUCCESS) {
        st = check_cl_limits(ctx, fn, pr.row_bytes, total);
        HOST_SEQ(q);
        cl_mem d_pad = NULL, d_lens = NULL, d_mask = NULL, d_packed = NULL, d_cu = NULL,
               d_si = NULL;
        if (st == CLVARLEN_SUCCESS)
            st = upload(ctx, rows > 0 ? padded : NULL, pr.span, &d_pad);
        if (st == CLVARLEN_SUCCESS && !mask)
            st = upload(ctx, batch > 0 ? valid_lens : NULL, (size_t)batch * 4, &d_lens);
        if (st == CLVARLEN_SUCCESS && mask)
            st = upload(ctx, mask, (size_t)rows, &d_mask);
        if (st == CLVARLEN_SUCCESS)
            st = cv_buffer(ctx, (size_t)total * pr.row_bytes, NULL, &d_packed);
        if (st == CLVARLEN_SUCCESS)
            st = cv_buffer(ctx, (size_t)(batch + 1) * 4, NULL, &d_cu);
        if (st == CLVARLEN_SUCCESS && src_index)
            st = cv_buffer(ctx, (size_t)total * 8, NULL, &d_si);
        if (st == CLVARLEN_SUCCESS) {
            pack_args p = {dtype, row_elems, d_pad, 0, pr.stride_b, batch, max_seqlen, d_lens, 0,
                           d_mask, 0, total, d_packed, 0, d_cu, 0, d_si, 0, NULL, 0};
            st = enq_pack(&q, NULL, 0, &p);
        }
        if (st == CLVARLEN_SUCCESS)
            st = read_bytes(&q, d_packed, (size_t)total * pr.row_bytes, packed);
        if (st == CLVARLEN_SUCCESS)
            st = read_bytes(&q, d_cu, (size_t)(batch + 1) * 4, cu_seqlens);
        if (st == CLVARLEN_SUCCESS && src_index)
            st = read_bytes(&q, d_si, (size_t)total * 8, src_index);
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
        st = rows_geom(ctx, fn, "packed", dtype, row_elems, total_tokens, packed_stride, packed,
                       &pk);
    if (st == CLVARLEN_SUCCESS)
        st = rows_geom(ctx, fn, "padded", dtype, row_elems, rows, padded_stride, padded, &pd);
    if (st == CLVARLEN_SUCCESS)
        st = need(ctx, fn, "src_index", src_index, total_tokens > 0);
    if (st == CLVARLEN_SUCCESS) {
        bool distinct;
        st = check_indices(ctx, fn, "src_index", NULL, src_index, total_tokens, rows, false,
                           &distinct, true);
    }
    if (st != CLVARLEN_SUCCESS || rows == 0)
        return st;
    size_t es = cv_dtype_size(dtype);
    if (!cv_use_cl(ctx))
        return cv_cpu_unpack(ctx, pd.row_bytes, es, packed, pk.stride_b, total_tokens, src_index,
                             rows, pad_value, padded, pd.stride_b);
#if CLVARLEN_HAVE_OPENCL
    st = check_cl_limits(ctx, fn, pd.row_bytes, total_tokens);
    HOST_SEQ(q);
    cl_mem d_packed = NULL, d_si = NULL, d_padded = NULL;
    if (st == CLVARLEN_SUCCESS)
        st = upload(ctx, total_tokens > 0 ? packed : NULL, pk.span, &d_packed);
    if (st == CLVARLEN_SUCCESS)
        st = upload(ctx, total_tokens > 0 ? src_index : NULL, (size_t)total_tokens * 8, &d_si);
    if (st == CLVARLEN_SUCCESS)
        st = cv_buffer(ctx, pd.span, NULL, &d_padded);
    if (st == CLVARLEN_SUCCESS) {
        unpack_args u = {dtype, row_elems, d_packed, 0, pk.stride_b, total_tokens, d_si, 0,
                         rows, pad_value, d_padded, 0, pd.stride_b};
        st = enq_unpack(&q, NULL, 0, &u);
    }
    if (st == CLVARLEN_SUCCESS)
        st = read_rows(&q, d_padded, rows, pd.row_bytes, pd.stride_b, padded);
    cv_chain_abort(&q);
    cv_release(&d_packed);
    cv_release(&d_si);
    cv_release(&d_padded);
    return st;
#else
    return CLVARLEN_ERROR_INTERNAL;
#endif
}

/* ================================================================ gather / scatter */

clvarlen_status clvarlen_gather_rows(clvarlen_context *ctx, clvarlen_dtype dtype,
                                     int64_t row_elems, const void *src, int64_t src_rows,
                                     int64_t src_stride, const int32_t *index, int64_t n_index,
                                     void *dst, int64_t dst_stride)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    seg_rows sr, dr;
    clvarlen_status st =
        rows_geom(ctx, fn, "src", dtype, row_elems, src_rows, src_stride, src, &sr);
    if (st == CLVARLEN_SUCCESS)
        st = rows_geom(ctx, fn, "dst", dtype, row_elems, n_index, dst_stride, dst, &dr);
    if (st == CLVARLEN_SUCCESS)
        st = need(ctx, fn, "index", index, n_index > 0);
    if (st == CLVARLEN_SUCCESS)
        st = check_indices(ctx, fn, "index", index, NULL, n_index, src_rows, true, NULL, false);
    if (st != CLVARLEN_SUCCESS || n_index == 0)
        return st;
    if (!cv_use_cl(ctx)) {
        cv_cpu_gather(ctx, sr.row_bytes, src, sr.stride_b, index, n_index, dst, dr.stride_b);
        return CLVARLEN_SUCCESS;
    }
#if CLVARLEN_HAVE_OPENCL
    st = check_cl_limits(ctx, fn, sr.row_bytes, n_index);
    HOST_SEQ(q);
    cl_mem d_src = NULL, d_idx = NULL, d_dst = NULL;
    if (st == CLVARLEN_SUCCESS)
        st = upload(ctx, src_rows > 0 ? src : NULL, sr.span, &d_src);
    if (st == CLVARLEN_SUCCESS)
        st = upload(ctx, index, (size_t)n_index * 4, &d_idx);
    if (st == CLVARLEN_SUCCESS)
        st = cv_buffer(ctx, dr.span, NULL, &d_dst);
    if (st == CLVARLEN_SUCCESS) {
        rows_args r = {dtype, row_elems, d_src, 0, sr.stride_b, src_rows, d_idx, 0, n_index,
                       d_dst, 0, dr.stride_b, n_index};
        st = enq_gather(&q, NULL, 0, &r);
    }
    if (st == CLVARLEN_SUCCESS)
        st = read_rows(&q, d_dst, n_index, dr.row_bytes, dr.stride_b, dst);
    cv_chain_abort(&q);
    cv_release(&d_src);
    cv_release(&d_idx);
    cv_release(&d_dst);
    return st;
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
    seg_rows sr, dr;
    clvarlen_status st = check_scatter_mode(ctx, fn, dtype, mode, flags);
    if (st == CLVARLEN_SUCCESS)
        st = rows_geom(ctx, fn, "src", dtype, row_elems, n_index, src_stride, src, &sr);
    if (st == CLVARLEN_SUCCESS)
        st = rows_geom(ctx, fn, "dst", dtype, row_elems, dst_rows, dst_stride, dst, &dr);
    if (st == CLVARLEN_SUCCESS)
        st = need(ctx, fn, "index", index, n_index > 0);
    bool overwrite = mode == CLVARLEN_SCATTER_OVERWRITE;
    bool zero_rest = (flags & CLVARLEN_SCATTER_ZERO_REST) != 0;
    bool distinct = false;
    if (st == CLVARLEN_SUCCESS)
        st = check_indices(ctx, fn, "index", index, NULL, n_index, dst_rows, true,
                           (overwrite || cv_use_cl(ctx)) ? &distinct : NULL, overwrite);
    if (st != CLVARLEN_SUCCESS || dst_rows == 0 || (n_index == 0 && !zero_rest))
        return st;
    if (!cv_use_cl(ctx))
        return cv_cpu_scatter(ctx, dtype, row_elems, src, sr.stride_b, index, n_index, dst,
                              dst_rows, dr.stride_b, mode, zero_rest);
#if CLVARLEN_HAVE_OPENCL
    st = check_cl_limits(ctx, fn, sr.row_bytes, CV_MAX(n_index, dst_rows));
    HOST_SEQ(q);
    cl_mem d_src = NULL, d_idx = NULL, d_dst = NULL;
    if (st == CLVARLEN_SUCCESS)
        st = upload(ctx, n_index > 0 ? src : NULL, sr.span, &d_src);
    if (st == CLVARLEN_SUCCESS)
        st = upload(ctx, n_index > 0 ? index : NULL, (size_t)n_index * 4, &d_idx);
    /* every dst row is written with overwrite + zero_rest; otherwise keep the others */
    if (st == CLVARLEN_SUCCESS)
        st = cv_buffer(ctx, dr.span, (overwrite && zero_rest) ? NULL : dst, &d_dst);
    if (st == CLVARLEN_SUCCESS) {
        rows_args r = {dtype, row_elems, d_src, 0, sr.stride_b, n_index, d_idx, 0, n_index,
                       d_dst, 0, dr.stride_b, dst_rows};
        st = enq_scatter(&q, NULL, 0, &r, mode, zero_rest, distinct);
    }
    if (st == CLVARLEN_SUCCESS)
        st = read_rows(&q, d_dst, dst_rows, dr.row_bytes, dr.stride_b, dst);
    cv_chain_abort(&q);
    cv_release(&d_src);
    cv_release(&d_idx);
    cv_release(&d_dst);
    return st;
#else
    return CLVARLEN_ERROR_INTERNAL;
#endif
}

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
    clvarlen_status st = check_count(ctx, fn, "n", n);
    if (st == CLVARLEN_SUCCESS)
        st = need(ctx, fn, "kv_len", kv_len, n > 0);
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
            st = need(ctx, fn, "page_table_out", page_table_out, sum > 0);
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
            HOST_SEQ(q);
            size_t out_span = cv_span_bytes(CLVARLEN_DTYPE_I32, col_limit, sum, out_stride);
            cl_mem d_kv = NULL, d_q = NULL, d_pt = NULL, d_se = NULL, d_po = NULL;
            st = check_cl_limits(ctx, fn, 4, sum);
            if (st == CLVARLEN_SUCCESS)
                st = upload(ctx, kv_len, (size_t)n * 4, &d_kv);
            if (st == CLVARLEN_SUCCESS)
                st = upload(ctx, q_len, (size_t)n * 4, &d_q);
            if (st == CLVARLEN_SUCCESS && page_table_out)
                st = upload(ctx, page_table,
                            cv_span_bytes(CLVARLEN_DTYPE_I32, page_cols, n, page_stride), &d_pt);
            if (st == CLVARLEN_SUCCESS && seqlens_expanded)
                st = cv_buffer(ctx, (size_t)sum * 4, NULL, &d_se);
            if (st == CLVARLEN_SUCCESS && page_table_out)
                st = cv_buffer(ctx, out_span, NULL, &d_po);
            if (st == CLVARLEN_SUCCESS) {
                expand_args e = {d_kv, 0, d_q, 0, uniform_q_len, n, d_pt, 0, page_stride,
                                 col_limit, sum, d_se, 0, d_po, 0, out_stride, NULL, 0};
                st = enq_expand(&q, NULL, 0, &e);
            }
            if (st == CLVARLEN_SUCCESS && seqlens_expanded)
                st = read_bytes(&q, d_se, (size_t)sum * 4, seqlens_expanded);
            if (st == CLVARLEN_SUCCESS && page_table_out)
                st = read_rows(&q, d_po, sum, (size_t)col_limit * 4, (size_t)out_stride * 4,
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

/* ================================================================ context parallel */

clvarlen_status clvarlen_cp_plan(clvarlen_context *ctx, const int32_t *cu_seqlens, int64_t n,
                                 int32_t world, int32_t rank, clvarlen_cp_plan_out *plan)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    clvarlen_status st = check_count(ctx, fn, "n", n);
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_cu_seqlens(ctx, fn, "cu_seqlens", cu_seqlens, n, -1);
    if (st == CLVARLEN_SUCCESS)
        st = check_cp(ctx, fn, world, rank);
    if (st == CLVARLEN_SUCCESS)
        st = need(ctx, fn, "plan", plan, true);
    if (st == CLVARLEN_SUCCESS)
        st = need(ctx, fn, "plan->local_cu_seqlens", plan->local_cu_seqlens, true);
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
    HOST_SEQ(q);
    size_t cub = (size_t)(n + 1) * 4, tb = (size_t)local * 4;
    cl_mem d_cu = NULL, d_lcu = NULL, d_h = NULL, d_t = NULL, d_gi = NULL, d_pos = NULL;
    st = upload(ctx, cu_seqlens, cub, &d_cu);
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
        st = enq_cp_plan(&q, NULL, 0, &p);
    }
    if (st == CLVARLEN_SUCCESS)
        st = read_bytes(&q, d_lcu, cub, plan->local_cu_seqlens);
    if (st == CLVARLEN_SUCCESS && d_h)
        st = read_bytes(&q, d_h, cub, plan->head_cu);
    if (st == CLVARLEN_SUCCESS && d_t)
        st = read_bytes(&q, d_t, cub, plan->tail_cu);
    if (st == CLVARLEN_SUCCESS && d_gi)
        st = read_bytes(&q, d_gi, tb, plan->global_index);
    if (st == CLVARLEN_SUCCESS && d_pos)
        st = read_bytes(&q, d_pos, tb, plan->position);
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
    clvarlen_status st = check_count(ctx, fn, "n", n);
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_cu_seqlens(ctx, fn, "cu_seqlens", cu_seqlens, n, -1);
    if (st == CLVARLEN_SUCCESS)
        st = check_cp(ctx, fn, world, rank);
    if (st == CLVARLEN_SUCCESS && !to_local)
        st = check_scatter_mode(ctx, fn, dtype, mode, flags);
    if (st != CLVARLEN_SUCCESS)
        return st;
    int64_t total = cu_seqlens[n];
    int64_t local = cp_local_total(cu_seqlens, n, world, rank);
    seg_rows gr, lr;
    st = rows_geom(ctx, fn, "global_rows", dtype, row_elems, total, global_stride, global_rows,
                   &gr);
    if (st == CLVARLEN_SUCCESS)
        st = rows_geom(ctx, fn, "local_rows", dtype, row_elems, local, local_stride, local_rows,
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
    st = check_cl_limits(ctx, fn, gr.row_bytes, total);
    HOST_SEQ(q);
    bool global_in = !to_local && !(mode == CLVARLEN_SCATTER_OVERWRITE && zero_rest);
    cl_mem d_cu = NULL, d_g = NULL, d_l = NULL;
    if (st == CLVARLEN_SUCCESS)
        st = upload(ctx, cu_seqlens, (size_t)(n + 1) * 4, &d_cu);
    if (st == CLVARLEN_SUCCESS)
        st = cv_buffer(ctx, gr.span, to_local || global_in ? global_rows : NULL, &d_g);
    if (st == CLVARLEN_SUCCESS)
        st = cv_buffer(ctx, lr.span, to_local || local == 0 ? NULL : local_rows, &d_l);
    if (st == CLVARLEN_SUCCESS) {
        cp_rows_args c = {dtype, row_elems, d_g, 0, gr.stride_b, total, d_cu, 0, n, world, rank,
                          d_l, 0, lr.stride_b, local, to_local, mode, zero_rest};
        st = enq_cp_rows(&q, NULL, 0, &c);
    }
    if (st == CLVARLEN_SUCCESS)
        st = to_local ? read_rows(&q, d_l, local, lr.row_bytes, lr.stride_b, local_rows)
                      : read_rows(&q, d_g, total, gr.row_bytes, gr.stride_b, global_rows);
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

/* ================================================================ gen_seq_lens */

clvarlen_status clvarlen_gen_seq_lens(clvarlen_context *ctx, uint64_t seed, int32_t world,
                                      int32_t n, int64_t total, int32_t *out)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    clvarlen_status st = check_gen(ctx, fn, world, n, total);
    if (st == CLVARLEN_SUCCESS)
        st = need(ctx, fn, "out", out, true);
    if (st != CLVARLEN_SUCCESS)
        return st;
    if (!cv_use_cl(ctx)) {
        cv_cpu_gen_seq_lens(ctx, seed, world, n, total, out);
        return CLVARLEN_SUCCESS;
    }
#if CLVARLEN_HAVE_OPENCL
    HOST_SEQ(q);
    size_t bytes = (size_t)world * (size_t)n * 4;
    cl_mem d_out = NULL;
    st = cv_buffer(ctx, bytes, NULL, &d_out);
    if (st == CLVARLEN_SUCCESS)
        st = enq_gen(&q, seed, world, n, total, d_out, 0);
    if (st == CLVARLEN_SUCCESS)
        st = read_bytes(&q, d_out, bytes, out);
    cv_chain_abort(&q);
    cv_release(&d_out);
    return st;
#else
    return CLVARLEN_ERROR_INTERNAL;
#endif
}

/* ================================================================ cl_mem entry points */

#if CLVARLEN_HAVE_OPENCL

/* A device tensor argument: present when it has bytes, offset aligned. */
static clvarlen_status cl_arg(clvarlen_context *ctx, const char *fn, const char *what, cl_mem mem,
                              size_t offset, size_t align, bool needed)
{
    clvarlen_status st = need(ctx, fn, what, mem, needed);
    if (st == CLVARLEN_SUCCESS && mem)
        st = cv_check_offset(ctx, fn, what, offset, align);
    return st;
}

clvarlen_status clvarlen_cl_cu_seqlens_from_lengths(clvarlen_context *ctx, cl_mem lengths,
                                                    size_t lengths_offset, int64_t n,
                                                    cl_mem cu_seqlens, size_t cu_offset,
                                                    cl_uint num_events, const cl_event *wait_list,
                                                    cl_event *event)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    clvarlen_status st = cv_cl_enter(ctx, fn, num_events, wait_list);
    if (st == CLVARLEN_SUCCESS)
        st = check_count(ctx, fn, "n", n);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "lengths", lengths, lengths_offset, 4, n > 0);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "cu_seqlens", cu_seqlens, cu_offset, 4, true);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_chain q;
    cl_mem flag;
    cl_int check;
    st = cl_begin(ctx, &q, num_events, wait_list, &flag, &check);
    if (st == CLVARLEN_SUCCESS)
        st = enq_cu_from_lengths(&q, flag, check, lengths, lengths_offset, n, cu_seqlens,
                                 cu_offset);
    return cv_chain_end(&q, fn, st, event);
}

clvarlen_status clvarlen_cl_lengths_from_cu_seqlens(clvarlen_context *ctx, cl_mem cu_seqlens,
                                                    size_t cu_offset, int64_t n, cl_mem lengths,
                                                    size_t lengths_offset, cl_uint num_events,
                                                    const cl_event *wait_list, cl_event *event)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    clvarlen_status st = cv_cl_enter(ctx, fn, num_events, wait_list);
    if (st == CLVARLEN_SUCCESS)
        st = check_count(ctx, fn, "n", n);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "cu_seqlens", cu_seqlens, cu_offset, 4, true);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "lengths", lengths, lengths_offset, 4, n > 0);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_chain q;
    cl_mem flag;
    cl_int check;
    st = cl_begin(ctx, &q, num_events, wait_list, &flag, &check);
    if (st == CLVARLEN_SUCCESS && check)
        st = cv_chain_check_cu_seqlens(&q, cu_seqlens, cu_offset, n, -1);
    if (st == CLVARLEN_SUCCESS)
        st = enq_lengths_from_cu(&q, flag, check, cu_seqlens, cu_offset, n, lengths,
                                 lengths_offset);
    return cv_chain_end(&q, fn, st, event);
}

clvarlen_status clvarlen_cl_token_maps(clvarlen_context *ctx, cl_mem cu_seqlens, size_t cu_offset,
                                       int64_t n, int64_t total_tokens, cl_mem offsets,
                                       size_t offsets_offset, cl_mem seq_id, size_t seq_id_offset,
                                       cl_mem pos, size_t pos_offset, cl_uint num_events,
                                       const cl_event *wait_list, cl_event *event)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    clvarlen_status st = cv_cl_enter(ctx, fn, num_events, wait_list);
    if (st == CLVARLEN_SUCCESS)
        st = check_count(ctx, fn, "n", n);
    if (st == CLVARLEN_SUCCESS && (total_tokens < 0 || total_tokens > INT32_MAX))
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                      "%s: total_tokens %lld is outside [0, INT32_MAX]", fn,
                      (long long)total_tokens);
    if (st == CLVARLEN_SUCCESS && !seq_id && !pos)
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: seq_id and pos are both NULL",
                      fn);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "cu_seqlens", cu_seqlens, cu_offset, 4, true);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "offsets", offsets, offsets_offset, 4, false);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "seq_id", seq_id, seq_id_offset, 4, false);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "pos", pos, pos_offset, 4, false);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_chain q;
    cl_mem flag;
    cl_int check;
    st = cl_begin(ctx, &q, num_events, wait_list, &flag, &check);
    if (st == CLVARLEN_SUCCESS && check)
        st = cv_chain_check_cu_seqlens(&q, cu_seqlens, cu_offset, n, total_tokens);
    if (st == CLVARLEN_SUCCESS)
        st = enq_token_maps(&q, flag, check, cu_seqlens, cu_offset, n, total_tokens,
                            pos ? offsets : NULL, offsets_offset, seq_id, seq_id_offset, pos,
                            pos_offset);
    return cv_chain_end(&q, fn, st, event);
}

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
        st = rows_geom(ctx, fn, "padded", dtype, row_elems, rows, padded_stride, padded, &pr);
    }
    if (st == CLVARLEN_SUCCESS && capacity_tokens < 0)
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: capacity_tokens is negative",
                      fn);
    if (st == CLVARLEN_SUCCESS)
        st = rows_geom(ctx, fn, "packed", dtype, row_elems, CV_MIN(capacity_tokens, rows), 0,
                       packed, &kr);
    if (st == CLVARLEN_SUCCESS)
        st = check_cl_limits(ctx, fn, pr.row_bytes, CV_MIN(capacity_tokens, rows));
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_offset(ctx, fn, "padded", padded_offset, es);
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_offset(ctx, fn, "packed", packed_offset, es);
    if (st == CLVARLEN_SUCCESS)
        st = mask ? cl_arg(ctx, fn, "mask", mask, mask_offset, 1, true)
                  : cl_arg(ctx, fn, "valid_lens", valid_lens, valid_lens_offset, 4, batch > 0);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "cu_seqlens", cu_seqlens, cu_offset, 4, true);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "src_index", src_index, src_index_offset, 8, false);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "total_tokens", total_tokens, total_offset, 8, false);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_chain q;
    cl_mem flag;
    cl_int check;
    st = cl_begin(ctx, &q, num_events, wait_list, &flag, &check);
    if (st == CLVARLEN_SUCCESS) {
        pack_args p = {dtype, row_elems, padded, padded_offset, pr.stride_b, batch, max_seqlen,
                       mask ? NULL : valid_lens, valid_lens_offset, mask, mask_offset,
                       capacity_tokens, packed, packed_offset, cu_seqlens, cu_offset, src_index,
                       src_index_offset, total_tokens, total_offset};
        st = enq_pack(&q, flag, check, &p);
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
        st = rows_geom(ctx, fn, "packed", dtype, row_elems, total_tokens, packed_stride, packed,
                       &pk);
    if (st == CLVARLEN_SUCCESS)
        st = rows_geom(ctx, fn, "padded", dtype, row_elems, rows, padded_stride, padded, &pd);
    if (st == CLVARLEN_SUCCESS)
        st = check_cl_limits(ctx, fn, pd.row_bytes, total_tokens);
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_offset(ctx, fn, "packed", packed_offset, es);
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_offset(ctx, fn, "padded", padded_offset, es);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "src_index", src_index, src_index_offset, 8, total_tokens > 0);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_chain q;
    cl_mem flag;
    cl_int check;
    st = cl_begin(ctx, &q, num_events, wait_list, &flag, &check);
    if (st == CLVARLEN_SUCCESS) {
        unpack_args u = {dtype, row_elems, packed, packed_offset, pk.stride_b, total_tokens,
                         src_index, src_index_offset, rows, pad_value, padded, padded_offset,
                         pd.stride_b};
        st = enq_unpack(&q, flag, check, &u);
    }
    return cv_chain_end(&q, fn, st, event);
}

clvarlen_status clvarlen_cl_gather_rows(clvarlen_context *ctx, clvarlen_dtype dtype,
                                        int64_t row_elems, cl_mem src, size_t src_offset,
                                        int64_t src_rows, int64_t src_stride, cl_mem index,
                                        size_t index_offset, int64_t n_index, cl_mem dst,
                                        size_t dst_offset, int64_t dst_stride, cl_uint num_events,
                                        const cl_event *wait_list, cl_event *event)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    clvarlen_status st = cv_cl_enter(ctx, fn, num_events, wait_list);
    seg_rows sr, dr;
    size_t es = cv_dtype_size(dtype);
    if (st == CLVARLEN_SUCCESS)
        st = rows_geom(ctx, fn, "src", dtype, row_elems, src_rows, src_stride, src, &sr);
    if (st == CLVARLEN_SUCCESS)
        st = rows_geom(ctx, fn, "dst", dtype, row_elems, n_index, dst_stride, dst, &dr);
    if (st == CLVARLEN_SUCCESS)
        st = check_cl_limits(ctx, fn, sr.row_bytes, n_index);
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_offset(ctx, fn, "src", src_offset, es);
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_offset(ctx, fn, "dst", dst_offset, es);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "index", index, index_offset, 4, n_index > 0);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_chain q;
    cl_mem flag;
    cl_int check;
    st = cl_begin(ctx, &q, num_events, wait_list, &flag, &check);
    if (st == CLVARLEN_SUCCESS) {
        rows_args r = {dtype, row_elems, src, src_offset, sr.stride_b, src_rows, index,
                       index_offset, n_index, dst, dst_offset, dr.stride_b, n_index};
        st = enq_gather(&q, flag, check, &r);
    }
    return cv_chain_end(&q, fn, st, event);
}

clvarlen_status clvarlen_cl_scatter_rows(clvarlen_context *ctx, clvarlen_dtype dtype,
                                         int64_t row_elems, cl_mem src, size_t src_offset,
                                         int64_t src_stride, cl_mem index, size_t index_offset,
                                         int64_t n_index, cl_mem dst, size_t dst_offset,
                                         int64_t dst_rows, int64_t dst_stride,
                                         clvarlen_scatter_mode mode, unsigned flags,
                                         cl_uint num_events, const cl_event *wait_list,
                                         cl_event *event)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    clvarlen_status st = cv_cl_enter(ctx, fn, num_events, wait_list);
    seg_rows sr, dr;
    size_t es = cv_dtype_size(dtype);
    if (st == CLVARLEN_SUCCESS)
        st = check_scatter_mode(ctx, fn, dtype, mode, flags);
    if (st == CLVARLEN_SUCCESS)
        st = rows_geom(ctx, fn, "src", dtype, row_elems, n_index, src_stride, src, &sr);
    if (st == CLVARLEN_SUCCESS)
        st = rows_geom(ctx, fn, "dst", dtype, row_elems, dst_rows, dst_stride, dst, &dr);
    if (st == CLVARLEN_SUCCESS)
        st = check_cl_limits(ctx, fn, sr.row_bytes, CV_MAX(n_index, dst_rows));
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_offset(ctx, fn, "src", src_offset, es);
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_offset(ctx, fn, "dst", dst_offset, es);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "index", index, index_offset, 4, n_index > 0);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_chain q;
    cl_mem flag;
    cl_int check;
    st = cl_begin(ctx, &q, num_events, wait_list, &flag, &check);
    if (st == CLVARLEN_SUCCESS) {
        rows_args r = {dtype, row_elems, src, src_offset, sr.stride_b, n_index, index,
                       index_offset, n_index, dst, dst_offset, dr.stride_b, dst_rows};
        st = enq_scatter(&q, flag, check, &r, mode, (flags & CLVARLEN_SCATTER_ZERO_REST) != 0,
                         (flags & CLVARLEN_SCATTER_UNIQUE_INDICES) != 0);
    }
    return cv_chain_end(&q, fn, st, event);
}

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
        st = check_count(ctx, fn, "n", n);
    if (st == CLVARLEN_SUCCESS && !q_len && uniform_q_len < 0)
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: uniform_q_len %d is negative",
                      fn, (int)uniform_q_len);
    if (st == CLVARLEN_SUCCESS && (capacity < 0 || capacity > INT32_MAX))
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                      "%s: capacity %lld is outside [0, INT32_MAX]", fn, (long long)capacity);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "kv_len", kv_len, kv_len_offset, 4, n > 0);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "q_len", q_len, q_len_offset, 4, false);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "seqlens_expanded", seqlens_expanded, seqlens_offset, 4, false);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "total", total, total_offset, 8, false);
    if (st == CLVARLEN_SUCCESS && page_table) {
        st = expand_geom(ctx, fn, n, page_cols, &page_stride, &col_limit, &out_stride, capacity);
        if (st == CLVARLEN_SUCCESS)
            st = cl_arg(ctx, fn, "page_table", page_table, page_table_offset, 4, true);
        if (st == CLVARLEN_SUCCESS)
            st = cl_arg(ctx, fn, "page_table_out", page_table_out, page_out_offset, 4,
                        capacity > 0);
    }
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_chain q;
    cl_mem flag;
    cl_int check;
    st = cl_begin(ctx, &q, num_events, wait_list, &flag, &check);
    if (st == CLVARLEN_SUCCESS) {
        expand_args e = {kv_len, kv_len_offset, q_len, q_len_offset, uniform_q_len, n,
                         page_table, page_table_offset, page_stride, col_limit, capacity,
                         seqlens_expanded, seqlens_offset, page_table ? page_table_out : NULL,
                         page_out_offset, out_stride, total, total_offset};
        st = enq_expand(&q, flag, check, &e);
    }
    return cv_chain_end(&q, fn, st, event);
}

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
        st = check_count(ctx, fn, "n", n);
    if (st == CLVARLEN_SUCCESS)
        st = check_cp(ctx, fn, world, rank);
    if (st == CLVARLEN_SUCCESS && (global_index || position) &&
        (capacity < 0 || capacity > INT32_MAX))
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                      "%s: capacity %lld is outside [0, INT32_MAX]", fn, (long long)capacity);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "cu_seqlens", cu_seqlens, cu_offset, 4, true);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "local_cu_seqlens", local_cu_seqlens, local_cu_offset, 4, true);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "head_cu", head_cu, head_cu_offset, 4, false);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "tail_cu", tail_cu, tail_cu_offset, 4, false);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "global_index", global_index, global_index_offset, 4, false);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "position", position, position_offset, 4, false);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "local_tokens", local_tokens, local_tokens_offset, 8, false);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_chain q;
    cl_mem flag;
    cl_int check;
    st = cl_begin(ctx, &q, num_events, wait_list, &flag, &check);
    if (st == CLVARLEN_SUCCESS && check)
        st = cv_chain_check_cu_seqlens(&q, cu_seqlens, cu_offset, n, -1);
    if (st == CLVARLEN_SUCCESS) {
        plan_args p = {cu_seqlens, cu_offset, n, world, rank, local_cu_seqlens, local_cu_offset,
                       head_cu, head_cu_offset, tail_cu, tail_cu_offset, capacity, global_index,
                       global_index_offset, position, position_offset, local_tokens,
                       local_tokens_offset};
        st = enq_cp_plan(&q, flag, check, &p);
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
        st = check_count(ctx, fn, "n", n);
    if (st == CLVARLEN_SUCCESS)
        st = check_cp(ctx, fn, world, rank);
    if (st == CLVARLEN_SUCCESS && !to_local)
        st = check_scatter_mode(ctx, fn, dtype, mode, flags);
    if (st == CLVARLEN_SUCCESS && (total_tokens < 0 || total_tokens > INT32_MAX))
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                      "%s: total_tokens %lld is outside [0, INT32_MAX]", fn,
                      (long long)total_tokens);
    if (st == CLVARLEN_SUCCESS && local_capacity < 0)
        st = cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: local_capacity is negative", fn);
    if (st == CLVARLEN_SUCCESS)
        st = rows_geom(ctx, fn, "global_rows", dtype, row_elems, total_tokens, global_stride,
                       global_rows, &gr);
    if (st == CLVARLEN_SUCCESS)
        st = rows_geom(ctx, fn, "local_rows", dtype, row_elems,
                       CV_MIN(local_capacity, total_tokens), local_stride, local_rows, &lr);
    if (st == CLVARLEN_SUCCESS)
        st = check_cl_limits(ctx, fn, gr.row_bytes, total_tokens);
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_offset(ctx, fn, "global_rows", global_offset, es);
    if (st == CLVARLEN_SUCCESS)
        st = cv_check_offset(ctx, fn, "local_rows", local_offset, es);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "cu_seqlens", cu_seqlens, cu_offset, 4, true);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_chain q;
    cl_mem flag;
    cl_int check;
    st = cl_begin(ctx, &q, num_events, wait_list, &flag, &check);
    if (st == CLVARLEN_SUCCESS && check)
        st = cv_chain_check_cu_seqlens(&q, cu_seqlens, cu_offset, n, total_tokens);
    if (st == CLVARLEN_SUCCESS) {
        cp_rows_args c = {dtype, row_elems, global_rows, global_offset, gr.stride_b,
                          total_tokens, cu_seqlens, cu_offset, n, world, rank, local_rows,
                          local_offset, lr.stride_b, local_capacity, to_local, mode,
                          !to_local && (flags & CLVARLEN_SCATTER_ZERO_REST)};
        st = enq_cp_rows(&q, flag, check, &c);
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

clvarlen_status clvarlen_cl_gen_seq_lens(clvarlen_context *ctx, uint64_t seed, int32_t world,
                                         int32_t n, int64_t total, cl_mem out, size_t out_offset,
                                         cl_uint num_events, const cl_event *wait_list,
                                         cl_event *event)
{
    const char *fn = __func__;
    CV_ENTER(ctx);
    clvarlen_status st = cv_cl_enter(ctx, fn, num_events, wait_list);
    if (st == CLVARLEN_SUCCESS)
        st = check_gen(ctx, fn, world, n, total);
    if (st == CLVARLEN_SUCCESS)
        st = cl_arg(ctx, fn, "out", out, out_offset, 4, true);
    if (st != CLVARLEN_SUCCESS)
        return st;
    cv_chain q;
    cv_chain_begin(&q, ctx, num_events, wait_list, false);
    st = enq_gen(&q, seed, world, n, total, out, out_offset);
    return cv_chain_end(&q, fn, st, event);
}

#endif /* CLVARLEN_HAVE_OPENCL */

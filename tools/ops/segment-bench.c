/* clvarlen-test: segment family benchmarks: the cl_mem entry points on
 * device-resident buffers (or the host-memory API on the CPU fallback) for
 * gather, scatter, pack, unpack, cp_gather, cp_scatter and seqlens_expand.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clvarlen/clvarlen.h>
#if CLVARLEN_HAVE_OPENCL
#  include <clvarlen/clvarlen-cl.h>
#endif

#include "ops.h"
#include "segment.h"

/* ================================================================ benchmarks */

/* f16 rows of 64 B, 256 B, 1 KiB, 4 KiB and 16 KiB. */
static const int64_t bench_row_elems[] = {32, 128, 512, 2048, 8192};
#define N_BENCH_ROWS (sizeof bench_row_elems / sizeof bench_row_elems[0])
#define SB_SLOTS 8

enum sb_op { SB_GATHER, SB_SCATTER, SB_PACK, SB_UNPACK, SB_CP_GATHER, SB_CP_SCATTER, SB_EXPAND };

typedef struct sbench {
    clvarlen_context *ctx;
    int is_cl;
    enum sb_op op;
    clvarlen_dtype dtype;
    int64_t row_elems;
    int64_t rows;       /* gather/scatter: rows of src and dst; cp: global tokens */
    int64_t batch, max_seqlen, total; /* pack/unpack */
    int64_t n;          /* cp documents, expand sequences */
    int64_t local;      /* cp local tokens */
    int32_t world, rank, uniform_q;
    int64_t page_cols, capacity;
    void *h[SB_SLOTS];  /* host buffers (CPU fallback) */
    size_t bytes[SB_SLOTS];
#if CLVARLEN_HAVE_OPENCL
    cl_context clc;
    cl_command_queue queue;
    cl_mem m[SB_SLOTS];
#endif
    char err[300];
} sbench;

static int sb_init(sbench *b, clvarlen_context *ctx, enum sb_op op)
{
    memset(b, 0, sizeof *b);
    b->ctx = ctx;
    b->op = op;
    b->dtype = CLVARLEN_DTYPE_F16;
    b->is_cl = ct_context_is_cl(ctx);
#if CLVARLEN_HAVE_OPENCL
    if (b->is_cl) {
        cl_device_id d;
        if (clvarlen_context_get_cl(ctx, &b->clc, &d, &b->queue) != CLVARLEN_SUCCESS) {
            snprintf(b->err, sizeof b->err, "clvarlen_context_get_cl failed");
            return -1;
        }
    }
#endif
    return 0;
}

/* A buffer in slot i: device-resident on OpenCL, host memory on the CPU
 * fallback; filled from init, else zeroed (which also commits the pages). */
static int sb_buf(sbench *b, int slot, size_t bytes, const void *init)
{
    b->bytes[slot] = bytes;
#if CLVARLEN_HAVE_OPENCL
    if (b->is_cl) {
        cl_int err;
        b->m[slot] = clCreateBuffer(b->clc, CL_MEM_READ_WRITE, bytes ? bytes : 16, NULL, &err);
        if (err != CL_SUCCESS) {
            snprintf(b->err, sizeof b->err, "clCreateBuffer(%zu bytes) failed (%d)", bytes,
                     (int)err);
            return -1;
        }
        if (bytes == 0)
            return 0;
        if (init) {
            err = clEnqueueWriteBuffer(b->queue, b->m[slot], CL_TRUE, 0, bytes, init, 0, NULL,
                                       NULL);
        } else {
            cl_uchar zero = 0;
            err = clEnqueueFillBuffer(b->queue, b->m[slot], &zero, 1, 0, bytes, 0, NULL, NULL);
            if (err == CL_SUCCESS)
                err = clFinish(b->queue);
        }
        if (err != CL_SUCCESS) {
            snprintf(b->err, sizeof b->err, "initialising a %zu-byte buffer failed (%d)", bytes,
                     (int)err);
            return -1;
        }
        return 0;
    }
#endif
    b->h[slot] = malloc(bytes ? bytes : 1);
    if (!b->h[slot]) {
        snprintf(b->err, sizeof b->err, "out of host memory (%zu bytes)", bytes);
        return -1;
    }
    if (init)
        memcpy(b->h[slot], init, bytes);
    else
        memset(b->h[slot], 0, bytes);
    return 0;
}

static void sb_free(sbench *b)
{
    for (int i = 0; i < SB_SLOTS; i++) {
        free(b->h[i]);
        b->h[i] = NULL;
#if CLVARLEN_HAVE_OPENCL
        if (b->m[i])
            clReleaseMemObject(b->m[i]);
        b->m[i] = NULL;
#endif
    }
}

/* One run of the op; on OpenCL through the cl_mem entry points, returning the op's event. */
static int sb_run(void *arg, void *event_out)
{
    sbench *b = arg;
    clvarlen_status st = CLVARLEN_ERROR_INTERNAL;
#if CLVARLEN_HAVE_OPENCL
    if (b->is_cl) {
        cl_event *ev = event_out;
        cl_mem *m = b->m;
        switch (b->op) {
        case SB_GATHER: /* 0 src, 1 index, 2 dst */
            st = clvarlen_cl_gather_rows(b->ctx, b->dtype, b->row_elems, m[0], 0, b->rows, 0,
                                         m[1], 0, b->rows, m[2], 0, 0, 0, NULL, ev);
            break;
        case SB_SCATTER: /* 0 src, 1 index, 2 dst */
            st = clvarlen_cl_scatter_rows(b->ctx, b->dtype, b->row_elems, m[0], 0, 0, m[1], 0,
                                          b->rows, m[2], 0, b->rows, 0, CLVARLEN_SCATTER_OVERWRITE,
                                          CLVARLEN_SCATTER_UNIQUE_INDICES, 0, NULL, ev);
            break;
        case SB_PACK: /* 0 padded, 1 valid_lens, 2 packed, 3 cu, 4 src_index, 5 total */
            st = clvarlen_cl_pack(b->ctx, b->dtype, b->row_elems, m[0], 0, 0, b->batch,
                                  b->max_seqlen, m[1], 0, NULL, 0, b->total, m[2], 0, m[3], 0,
                                  m[4], 0, m[5], 0, 0, NULL, ev);
            break;
        case SB_UNPACK: /* 2 packed, 4 src_index, 0 padded */
            st = clvarlen_cl_unpack(b->ctx, b->dtype, b->row_elems, m[2], 0, 0, b->total, m[4],
                                    0, b->batch, b->max_seqlen, NULL, m[0], 0, 0, 0, NULL, ev);
            break;
        case SB_CP_GATHER: /* 0 global, 1 cu, 2 local */
            st = clvarlen_cl_cp_gather(b->ctx, b->dtype, b->row_elems, m[0], 0, 0, b->rows, m[1],
                                       0, b->n, b->world, b->rank, m[2], 0, 0, b->local, 0, NULL,
                                       ev);
            break;
        case SB_CP_SCATTER:
            st = clvarlen_cl_cp_scatter(b->ctx, b->dtype, b->row_elems, m[2], 0, 0, b->local,
                                        m[1], 0, b->n, b->world, b->rank, m[0], 0, 0, b->rows,
                                        CLVARLEN_SCATTER_OVERWRITE, 0, 0, NULL, ev);
            break;
        case SB_EXPAND: /* 0 kv_len, 1 q_len (or none), 2 page table, 3 seqlens, 4 page out, 5 total */
            st = clvarlen_cl_seqlens_expand(b->ctx, m[0], 0, b->uniform_q ? NULL : m[1], 0,
                                            b->uniform_q, b->n, m[2], 0, b->page_cols,
                                            b->page_cols, 0, b->capacity, m[3], 0, m[4], 0,
                                            b->page_cols, m[5], 0, 0, NULL, ev);
            break;
        }
    } else
#endif
    {
        (void)event_out;
        void **h = b->h;
        switch (b->op) {
        case SB_GATHER:
            st = clvarlen_gather_rows(b->ctx, b->dtype, b->row_elems, h[0], b->rows, 0, h[1],
                                      b->rows, h[2], 0);
            break;
        case SB_SCATTER:
            st = clvarlen_scatter_rows(b->ctx, b->dtype, b->row_elems, h[0], 0, h[1], b->rows,
                                       h[2], b->rows, 0, CLVARLEN_SCATTER_OVERWRITE,
                                       CLVARLEN_SCATTER_UNIQUE_INDICES);
            break;
        case SB_PACK:
            st = clvarlen_pack(b->ctx, b->dtype, b->row_elems, h[0], 0, b->batch, b->max_seqlen,
                               h[1], b->total, h[2], h[3], h[4], h[5]);
            break;
        case SB_UNPACK:
            st = clvarlen_unpack(b->ctx, b->dtype, b->row_elems, h[2], 0, b->total, h[4],
                                 b->batch, b->max_seqlen, NULL, h[0], 0);
            break;
        case SB_CP_GATHER:
            st = clvarlen_cp_gather(b->ctx, b->dtype, b->row_elems, h[0], 0, h[1], b->n,
                                    b->world, b->rank, h[2], 0, b->local);
            break;
        case SB_CP_SCATTER:
            st = clvarlen_cp_scatter(b->ctx, b->dtype, b->row_elems, h[2], 0, h[1], b->n,
                                     b->world, b->rank, h[0], 0, CLVARLEN_SCATTER_OVERWRITE, 0);
            break;
        case SB_EXPAND:
            st = clvarlen_seqlens_expand(b->ctx, h[0], b->uniform_q ? NULL : h[1], b->uniform_q,
                                         b->n, h[2], b->page_cols, b->page_cols, 0, b->capacity,
                                         h[3], h[4], b->page_cols, h[5]);
            break;
        }
    }
    if (st != CLVARLEN_SUCCESS) {
        snprintf(b->err, sizeof b->err, "%s: %s", clvarlen_status_name(st),
                 clvarlen_last_error(b->ctx));
        return 1;
    }
    return 0;
}

/* Rows so that reading and writing them moves at least --min-mb. */
static int64_t bench_rows(const ct_options *opt, int64_t row_bytes)
{
    double target = opt->min_mbytes * 1e6;
    int64_t rows = (int64_t)ceil(target / (2.0 * (double)row_bytes));
    return rows < 1 ? 1 : rows;
}

static void shuffle_identity(uint64_t *rng, int32_t *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        v[i] = (int32_t)i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = ct_rng_int(rng, 0, i);
        int32_t t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

static const char *sb_op_name(enum sb_op op)
{
    switch (op) {
    case SB_GATHER: return "gather";
    case SB_SCATTER: return "scatter";
    case SB_PACK: return "pack";
    case SB_UNPACK: return "unpack";
    case SB_CP_GATHER: return "cp_gather";
    case SB_CP_SCATTER: return "cp_scatter";
    case SB_EXPAND: return "seqlens_expand";
    }
    return "?";
}

/* Sets up one row size of a bandwidth benchmark; *bytes gets the bytes it moves. */
static int sb_setup_rows(sbench *b, const ct_options *opt, uint64_t *rng, int64_t row_elems,
                         double *bytes, char *shape, size_t shape_size)
{
    size_t es = clvarlen_dtype_size(b->dtype);
    int64_t row_bytes = row_elems * (int64_t)es;
    int64_t rows = bench_rows(opt, row_bytes);
    b->row_elems = row_elems;
    int rc = 0;
    switch (b->op) {
    case SB_GATHER:
    case SB_SCATTER: {
        /* A random permutation: every row moves once, in no particular order (KV-cache style). */
        if (rows > INT32_MAX)
            rows = INT32_MAX;
        int32_t *index = malloc((size_t)rows * 4);
        if (!index) {
            snprintf(b->err, sizeof b->err, "out of host memory");
            return -1;
        }
        shuffle_identity(rng, index, rows);
        b->rows = rows;
        rc = sb_buf(b, 0, (size_t)(rows * row_bytes), NULL) || sb_buf(b, 1, (size_t)rows * 4, index) ||
             sb_buf(b, 2, (size_t)(rows * row_bytes), NULL);
        free(index);
        *bytes = 2.0 * (double)rows * (double)row_bytes + 4.0 * (double)rows;
        snprintf(shape, shape_size, "f16 row %lld B x %lld, random index", (long long)row_bytes,
                 (long long)rows);
        break;
    }
    case SB_PACK:
    case SB_UNPACK: {
        /* Padded [batch, S] with valid lengths in [S/2, S] (about 3/4 full). */
        int64_t S = rows >= 32768 ? 4096 : (rows / 8 > 1 ? rows / 8 : 1);
        int64_t batch = (int64_t)ceil((double)rows / (0.75 * (double)S));
        int32_t *valid = malloc((size_t)batch * 4);
        int64_t *src_index = NULL;
        if (!valid) {
            snprintf(b->err, sizeof b->err, "out of host memory");
            return -1;
        }
        int64_t total = 0;
        for (int64_t i = 0; i < batch; i++) {
            valid[i] = (int32_t)ct_rng_int(rng, S / 2, S);
            total += valid[i];
        }
        src_index = malloc((size_t)total * 8 + 8);
        if (!src_index) {
            free(valid);
            snprintf(b->err, sizeof b->err, "out of host memory");
            return -1;
        }
        for (int64_t i = 0, t = 0; i < batch; i++)
            for (int64_t s = 0; s < valid[i]; s++)
                src_index[t++] = i * S + s;
        b->batch = batch;
        b->max_seqlen = S;
        b->total = total;
        rc = sb_buf(b, 0, (size_t)(batch * S * row_bytes), NULL) ||
             sb_buf(b, 1, (size_t)batch * 4, valid) ||
             sb_buf(b, 2, (size_t)(total * row_bytes), NULL) ||
             sb_buf(b, 3, (size_t)(batch + 1) * 4, NULL) ||
             sb_buf(b, 4, (size_t)total * 8, src_index) || sb_buf(b, 5, 8, NULL);
        free(valid);
        free(src_index);
        if (b->op == SB_PACK)
            *bytes = 2.0 * (double)total * (double)row_bytes + 8.0 * (double)total +
                     8.0 * (double)batch;
        else
            *bytes = (double)total * (double)row_bytes + (double)(batch * S) * (double)row_bytes +
                     8.0 * (double)total;
        snprintf(shape, shape_size, "f16 row %lld B, %lld x %lld, %lld tokens",
                 (long long)row_bytes, (long long)batch, (long long)S, (long long)total);
        break;
    }
    case SB_CP_GATHER:
    case SB_CP_SCATTER: {
        /* World 2, rank 0: the local half of 2 * rows global tokens, 64 documents. */
        int64_t global = 2 * rows;
        if (global > INT32_MAX / 2)
            global = INT32_MAX / 2;
        int64_t n = global >= 64 ? 64 : 1;
        int32_t *cu = malloc((size_t)(n + 1) * 4);
        if (!cu) {
            snprintf(b->err, sizeof b->err, "out of host memory");
            return -1;
        }
        /* Lengths around global / n, odd ones included, summing to global. */
        cu[0] = 0;
        for (int64_t s = 0; s < n; s++) {
            int64_t left = global - cu[s], docs_left = n - s;
            int64_t len = docs_left == 1 ? left
                                         : ct_rng_int(rng, left / docs_left / 2,
                                                      left / docs_left * 3 / 2);
            if (len > left)
                len = left;
            cu[s + 1] = cu[s] + (int32_t)len;
        }
        b->world = 2;
        b->rank = 0;
        b->n = n;
        b->rows = global;
        b->local = ref_cp_local_tokens(cu, n, b->world, b->rank);
        rc = sb_buf(b, 0, (size_t)(global * row_bytes), NULL) ||
             sb_buf(b, 1, (size_t)(n + 1) * 4, cu) ||
             sb_buf(b, 2, (size_t)(b->local * row_bytes), NULL);
        free(cu);
        *bytes = 2.0 * (double)b->local * (double)row_bytes;
        snprintf(shape, shape_size, "f16 row %lld B, W=2, %lld of %lld tokens",
                 (long long)row_bytes, (long long)b->local, (long long)global);
        break;
    }
    case SB_EXPAND:
        break;
    }
    return rc ? -1 : 0;
}

static int bench_rows_op(clvarlen_context *dev, const ct_options *opt, double copy_gbps,
                         enum sb_op op)
{
    const char *name = sb_op_name(op);
    uint64_t rng = ct_seed_for(opt, name);
    int rc = 0;
    for (size_t i = 0; i < N_BENCH_ROWS; i++) {
        sbench b;
        double bytes = 0.0;
        char shape[128];
        if (sb_init(&b, dev, op) != 0 ||
            sb_setup_rows(&b, opt, &rng, bench_row_elems[i], &bytes, shape, sizeof shape) != 0) {
            ct_bench_note(opt, "%s: %s", name, b.err);
            sb_free(&b);
            rc = 1;
            break;
        }
        double t = ct_time_median(dev, sb_run, &b, ct_bench_iters(opt));
        if (t <= 0.0) {
            ct_bench_note(opt, "%s (%s): %s", name, shape, b.err[0] ? b.err : "timing failed");
            sb_free(&b);
            rc = 1;
            break;
        }
        double gbps = bytes / t * 1e-9;
        ct_bench_report(opt, name, shape, t, bytes, 0.0, copy_gbps > 0.0 ? gbps / copy_gbps : 0.0,
                        "copy");
        sb_free(&b);
    }
    return rc;
}

int bench_gather(clvarlen_context *dev, const ct_options *opt, double copy_gbps)
{
    return bench_rows_op(dev, opt, copy_gbps, SB_GATHER);
}

int bench_scatter(clvarlen_context *dev, const ct_options *opt, double copy_gbps)
{
    return bench_rows_op(dev, opt, copy_gbps, SB_SCATTER);
}

int bench_pack(clvarlen_context *dev, const ct_options *opt, double copy_gbps)
{
    return bench_rows_op(dev, opt, copy_gbps, SB_PACK);
}

int bench_unpack(clvarlen_context *dev, const ct_options *opt, double copy_gbps)
{
    return bench_rows_op(dev, opt, copy_gbps, SB_UNPACK);
}

int bench_cp_gather(clvarlen_context *dev, const ct_options *opt, double copy_gbps)
{
    return bench_rows_op(dev, opt, copy_gbps, SB_CP_GATHER);
}

int bench_cp_scatter(clvarlen_context *dev, const ct_options *opt, double copy_gbps)
{
    return bench_rows_op(dev, opt, copy_gbps, SB_CP_SCATTER);
}

/* seqlens_expand with page table, N = 256, page_cols 1024: target verify
 * (q = 4) and draft extend (q in [0, 4]); a latency number, one launch. */
int bench_seqlens_expand(clvarlen_context *dev, const ct_options *opt, double copy_gbps)
{
    (void)copy_gbps;
    uint64_t rng = ct_seed_for(opt, "seqlens_expand");
    const int64_t n = 256, cols = 1024;
    int rc = 0;
    for (int draft = 0; draft <= 1 && rc == 0; draft++) {
        sbench b;
        int32_t *kv = malloc((size_t)n * 4), *q = malloc((size_t)n * 4);
        int32_t *pages = malloc((size_t)(n * cols) * 4);
        if (sb_init(&b, dev, SB_EXPAND) != 0 || !kv || !q || !pages) {
            ct_bench_note(opt, "seqlens_expand: %s", b.err[0] ? b.err : "out of host memory");
            free(kv);
            free(q);
            free(pages);
            return 1;
        }
        int64_t total = 0;
        for (int64_t s = 0; s < n; s++) {
            q[s] = draft ? (int32_t)ct_rng_int(&rng, 0, 4) : 4;
            kv[s] = (int32_t)ct_rng_int(&rng, 1024, 65536);
            total += q[s];
        }
        for (int64_t i = 0; i < n * cols; i++)
            pages[i] = (int32_t)ct_rng_int(&rng, 0, 1 << 20);
        b.n = n;
        b.uniform_q = draft ? 0 : 4;
        b.page_cols = cols;
        b.capacity = n * 4;
        if (sb_buf(&b, 0, (size_t)n * 4, kv) || sb_buf(&b, 1, (size_t)n * 4, q) ||
            sb_buf(&b, 2, (size_t)(n * cols) * 4, pages) ||
            sb_buf(&b, 3, (size_t)b.capacity * 4, NULL) ||
            sb_buf(&b, 4, (size_t)(b.capacity * cols) * 4, NULL) || sb_buf(&b, 5, 8, NULL)) {
            ct_bench_note(opt, "seqlens_expand: %s", b.err);
            rc = 1;
        } else {
            double t = ct_time_median_launch(dev, sb_run, &b, ct_bench_iters(opt) * 4);
            char shape[128];
            snprintf(shape, sizeof shape, "%s N=%lld page_cols=%lld rows=%lld",
                     draft ? "draft q in [0,4]" : "verify q=4", (long long)n, (long long)cols,
                     (long long)total);
            if (t <= 0.0) {
                ct_bench_note(opt, "seqlens_expand (%s): %s", shape,
                              b.err[0] ? b.err : "timing failed");
                rc = 1;
            } else {
                /* Page rows read and written, plus the lengths: small, latency-bound. */
                double bytes = 2.0 * (double)total * (double)cols * 4.0 + 4.0 * (double)total +
                               8.0 * (double)n;
                ct_bench_report(opt, draft ? "seqlens_expand_draft" : "seqlens_expand_verify",
                                shape, t, bytes, 0.0, 0.0, NULL);
            }
        }
        sb_free(&b);
        free(kv);
        free(q);
        free(pages);
    }
    return rc;
}

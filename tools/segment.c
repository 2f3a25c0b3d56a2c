/* clvarlen-test: segment family (SPEC section 2). Checks compare the device
 * with the CPU fallback on random varlen batches; copies and integer outputs
 * must match bitwise, and every output is compared over its whole allocation
 * (rows past the total, gaps between strided rows) with guard bands around it,
 * so stray writes show up too. The integer ops are also compared with a small
 * oracle written here from the SPEC, which keeps a CPU-against-itself run
 * meaningful. Benchmarks time the cl_mem entry points on device-resident
 * buffers (or the host-memory API on the CPU fallback).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clvarlen/clvarlen.h>
#if CLVARLEN_HAVE_OPENCL
#  include <clvarlen/clvarlen-cl.h>
#endif

#include "clvarlen-test.h"

#if defined(__GNUC__)
#  define SEG_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#  define SEG_PRINTF(f, a)
#endif

/* ================================================================ check plumbing */

#define GUARD_BYTES 64
#define GUARD_FILL 0xA5
#define SENTINEL 0xAB /* unwritten output bytes; compared like any other */
#define MAX_ALLOCS 40

typedef struct chk {
    clvarlen_context *dev, *cpu;
    const ct_options *opt;
    ct_row *row;
    uint64_t rng;
    int case_i;
    int case_bad;
    int stop; /* an error that stopped the op (reported as ERROR) */
    int oom;
    unsigned char *alloc[MAX_ALLOCS];
    size_t alloc_bytes[MAX_ALLOCS];
    int n_alloc;
    int is_cl;   /* dev is an OpenCL context */
    int cl_case; /* this case runs the device through the cl_mem entry points */
#if CLVARLEN_HAVE_OPENCL
    cl_context clc;
    cl_command_queue queue;
    struct dmem {
        cl_mem mem;
        size_t offset, bytes;
        void *host_out; /* outputs: read back here */
    } dm[MAX_ALLOCS];
    int n_dm;
    int dm_failed;
#endif
} chk;

static void chk_begin(chk *c, clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                      ct_row *row, const char *op)
{
    memset(c, 0, sizeof *c);
    c->dev = dev;
    c->cpu = cpu;
    c->opt = opt;
    c->row = row;
    c->rng = ct_seed_for(opt, op);
    row->cases = 0;
    row->failed = 0;
    row->max_err = 0.0;
    row->tolerance = 0.0;
    row->note[0] = '\0';
    c->is_cl = ct_context_is_cl(dev);
#if CLVARLEN_HAVE_OPENCL
    if (c->is_cl) {
        cl_device_id d;
        if (clvarlen_context_get_cl(dev, &c->clc, &d, &c->queue) != CLVARLEN_SUCCESS)
            c->is_cl = 0;
    }
#endif
}

/* On an OpenCL device, odd cases go through the cl_mem entry points (byte
 * offsets, device-side guard bytes); even ones through the host-memory API. */
static void chk_case_begin(chk *c)
{
    c->cl_case = c->is_cl && c->case_i % 2 == 1;
}

static int n_cases(const chk *c)
{
    return c->opt->quick ? 3 : 10;
}

static void chk_fail(chk *c, const char *fmt, ...) SEG_PRINTF(2, 3);

static void chk_fail(chk *c, const char *fmt, ...)
{
    c->case_bad = 1;
    if (c->row->note[0])
        return;
    int k = snprintf(c->row->note, sizeof c->row->note, "case %d%s: ", c->case_i,
                     c->cl_case ? " (cl_mem)" : "");
    va_list ap;
    va_start(ap, fmt);
    if (k > 0 && (size_t)k < sizeof c->row->note)
        vsnprintf(c->row->note + k, sizeof c->row->note - (size_t)k, fmt, ap);
    va_end(ap);
}

/* A guarded, sentinel-filled buffer that lives until the end of the case. */
static void *aalloc(chk *c, size_t bytes)
{
    if (c->n_alloc == MAX_ALLOCS) {
        c->oom = 1;
        return NULL;
    }
    unsigned char *base = malloc(bytes + 2 * GUARD_BYTES);
    if (!base) {
        c->oom = 1;
        return NULL;
    }
    memset(base, GUARD_FILL, GUARD_BYTES);
    memset(base + GUARD_BYTES, SENTINEL, bytes);
    memset(base + GUARD_BYTES + bytes, GUARD_FILL, GUARD_BYTES);
    c->alloc[c->n_alloc] = base;
    c->alloc_bytes[c->n_alloc] = bytes;
    c->n_alloc++;
    return base + GUARD_BYTES;
}

/* Ends a case: guard bands intact, counts the case, frees its buffers. */
static void chk_end_case(chk *c)
{
    for (int i = 0; i < c->n_alloc; i++) {
        const unsigned char *b = c->alloc[i];
        int intact = 1;
        for (size_t k = 0; k < GUARD_BYTES; k++)
            if (b[k] != GUARD_FILL || b[GUARD_BYTES + c->alloc_bytes[i] + k] != GUARD_FILL)
                intact = 0;
        if (!intact)
            chk_fail(c, "a write outside a buffer (guard band of buffer %d changed)", i);
        free(c->alloc[i]);
    }
    c->n_alloc = 0;
    if (c->oom && !c->stop) {
        c->stop = 1;
        snprintf(c->row->note, sizeof c->row->note, "case %d: out of host memory", c->case_i);
    }
    if (!c->stop) {
        c->row->cases++;
        if (c->case_bad)
            c->row->failed++;
    }
    c->case_bad = 0;
}

static int chk_finish(chk *c)
{
    return c->stop ? 1 : 0;
}

/* Statuses that say the device (or the build) could not run the op at all. */
static int is_stopping(clvarlen_status st)
{
    return st == CLVARLEN_ERROR_OPENCL || st == CLVARLEN_ERROR_KERNEL_NOT_FOUND ||
           st == CLVARLEN_ERROR_KERNEL_BUILD || st == CLVARLEN_ERROR_OUT_OF_MEMORY ||
           st == CLVARLEN_ERROR_NO_OPENCL;
}

/* A call on valid input must succeed; returns 1 if it did. */
static int chk_call(chk *c, int on_cpu, clvarlen_status st)
{
    if (st == CLVARLEN_SUCCESS)
        return 1;
    clvarlen_context *ctx = on_cpu ? c->cpu : c->dev;
    if (c->stop)
        return 0; /* dev_finish has said why */
    if (is_stopping(st)) {
        c->stop = 1;
        snprintf(c->row->note, sizeof c->row->note, "case %d: %s: %s: %s", c->case_i,
                 on_cpu ? "cpu" : "device", clvarlen_status_name(st), clvarlen_last_error(ctx));
        return 0;
    }
    chk_fail(c, "%s: %s: %s", on_cpu ? "cpu" : "device", clvarlen_status_name(st),
             clvarlen_last_error(ctx));
    return 0;
}

/* An error-path call must return `want`. */
static void chk_expect(chk *c, int on_cpu, clvarlen_status st, clvarlen_status want)
{
    if (st == want)
        return;
    if (is_stopping(st)) {
        chk_call(c, on_cpu, st);
        return;
    }
    chk_fail(c, "%s: returned %s, expected %s", on_cpu ? "cpu" : "device",
             clvarlen_status_name(st), clvarlen_status_name(want));
}

static void note_err(chk *c, double e)
{
    if (isnan(e) || e > c->row->max_err)
        c->row->max_err = isnan(e) ? INFINITY : e;
}

/* Bitwise equality of n elements of dtype. */
static void chk_same(chk *c, const char *what, const void *got, const void *want,
                     clvarlen_dtype dtype, size_t n)
{
    size_t es = clvarlen_dtype_size(dtype);
    const unsigned char *g = got, *w = want;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(g + i * es, w + i * es, es) != 0) {
            if (!bad)
                first = i;
            bad++;
        }
    }
    if (!bad)
        return;
    double e = ct_rel_err(got, want, dtype, n);
    note_err(c, e > 0.0 ? e : 1e-300);
    chk_fail(c, "%s: %zu of %zu differ, first [%zu]: %.9g vs %.9g", what, bad, n, first,
             ct_get(got, dtype, first), ct_get(want, dtype, first));
}

/* Relative L2 within tol (SPEC section 4), for float accumulation. */
static void chk_close(chk *c, const char *what, const void *got, const void *want,
                      clvarlen_dtype dtype, size_t n, double tol)
{
    double e = ct_rel_err(got, want, dtype, n);
    note_err(c, e);
    if (tol > c->row->tolerance)
        c->row->tolerance = tol;
    if (!(e <= tol))
        chk_fail(c, "%s: rel L2 %.3g > %.3g (max abs %.3g)", what, e, tol,
                 ct_max_abs_err(got, want, dtype, n));
}

/* Nothing may be written on error: the buffer still holds the sentinel. */
static void chk_untouched(chk *c, const char *what, const void *p, size_t bytes)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < bytes; i++) {
        if (b[i] != SENTINEL) {
            chk_fail(c, "%s written although the call failed (byte %zu)", what, i);
            return;
        }
    }
}

static int64_t rnd(chk *c, int64_t lo, int64_t hi)
{
    return ct_rng_int(&c->rng, lo, hi);
}

#if CLVARLEN_HAVE_OPENCL
/* A device copy of a host buffer at a random byte offset (a multiple of 8,
 * so every element type stays aligned), with guard bytes on both sides.
 * host_out != NULL: an output, read back into host_out by dev_finish. */
static cl_mem dev_put(chk *c, const void *host, size_t bytes, void *host_out, size_t *offset)
{
    *offset = 0;
    if (!host || c->dm_failed)
        return NULL;
    if (c->n_dm == MAX_ALLOCS) {
        c->dm_failed = 1;
        return NULL;
    }
    size_t off = 8 * (size_t)rnd(c, 1, 16);
    size_t total = off + bytes + GUARD_BYTES;
    unsigned char *tmp = malloc(total);
    if (!tmp) {
        c->oom = 1;
        c->dm_failed = 1;
        return NULL;
    }
    memset(tmp, GUARD_FILL, total);
    memcpy(tmp + off, host, bytes);
    cl_int err;
    cl_mem m = clCreateBuffer(c->clc, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, total, tmp, &err);
    free(tmp);
    if (err != CL_SUCCESS) {
        c->dm_failed = 1;
        return NULL;
    }
    struct dmem *d = &c->dm[c->n_dm++];
    d->mem = m;
    d->offset = off;
    d->bytes = bytes;
    d->host_out = host_out;
    *offset = off;
    return m;
}

static cl_mem dev_in(chk *c, const void *host, size_t bytes, size_t *offset)
{
    return dev_put(c, host, bytes, NULL, offset);
}

static cl_mem dev_out(chk *c, void *host, size_t bytes, size_t *offset)
{
    return dev_put(c, host, bytes, host, offset);
}

/* After a cl_mem call: waits for its event, reads the outputs back, checks
 * every buffer's guard bytes and releases the buffers. Returns st, or
 * CLVARLEN_ERROR_OPENCL (with the note set) when the tool's own OpenCL calls
 * failed. */
static clvarlen_status dev_finish(chk *c, clvarlen_status st, cl_event ev)
{
    int tool_failed = c->dm_failed;
    if (ev) {
        if (st == CLVARLEN_SUCCESS && clWaitForEvents(1, &ev) != CL_SUCCESS)
            tool_failed = 1;
        clReleaseEvent(ev);
    }
    if (st == CLVARLEN_SUCCESS && !tool_failed && clFinish(c->queue) != CL_SUCCESS)
        tool_failed = 1;
    for (int i = 0; i < c->n_dm; i++) {
        struct dmem *d = &c->dm[i];
        size_t total = d->offset + d->bytes + GUARD_BYTES;
        unsigned char *tmp = st == CLVARLEN_SUCCESS && !tool_failed ? malloc(total) : NULL;
        if (tmp && clEnqueueReadBuffer(c->queue, d->mem, CL_TRUE, 0, total, tmp, 0, NULL,
                                       NULL) == CL_SUCCESS) {
            int intact = 1;
            for (size_t k = 0; k < d->offset; k++)
                intact &= tmp[k] == GUARD_FILL;
            for (size_t k = 0; k < GUARD_BYTES; k++)
                intact &= tmp[d->offset + d->bytes + k] == GUARD_FILL;
            if (!intact)
                chk_fail(c, "device wrote outside buffer %d (offset %zu, %zu bytes)", i,
                         d->offset, d->bytes);
            if (d->host_out)
                memcpy(d->host_out, tmp + d->offset, d->bytes);
        } else if (st == CLVARLEN_SUCCESS) {
            tool_failed = 1;
        }
        free(tmp);
        clReleaseMemObject(d->mem);
    }
    c->n_dm = 0;
    c->dm_failed = 0;
    if (tool_failed && st == CLVARLEN_SUCCESS) {
        c->stop = 1;
        snprintf(c->row->note, sizeof c->row->note,
                 "case %d: the tool's OpenCL buffer calls failed", c->case_i);
        return CLVARLEN_ERROR_OPENCL;
    }
    return st;
}
#endif

static double unif(chk *c)
{
    return ct_rng_uniform(&c->rng);
}

static clvarlen_dtype pick_dtype(chk *c, int copies)
{
    /* Copies take any element type; accumulation only f32, f16, bf16, i32. */
    static const clvarlen_dtype any[] = {CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_F16,
                                         CLVARLEN_DTYPE_BF16, CLVARLEN_DTYPE_U8,
                                         CLVARLEN_DTYPE_I32};
    static const clvarlen_dtype acc[] = {CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_F16,
                                         CLVARLEN_DTYPE_BF16, CLVARLEN_DTYPE_I32};
    return copies ? any[rnd(c, 0, 4)] : acc[rnd(c, 0, 3)];
}

static int is_float(clvarlen_dtype d)
{
    return d == CLVARLEN_DTYPE_F32 || d == CLVARLEN_DTYPE_F16 || d == CLVARLEN_DTYPE_BF16;
}

/* Row length: mostly short; case 1 is a long row (16 KiB of f16 and more) for
 * the kernels' row-tiling paths. Not a multiple of any tile. */
static int64_t pick_row_elems(chk *c)
{
    if (c->case_i == 1)
        return rnd(c, 8192, 8192 + 37);
    return rnd(c, 1, c->opt->quick ? 64 : 300);
}

/* A token stride: 0 (contiguous) or the row plus a gap. */
static int64_t pick_stride(chk *c, int64_t row_elems, int which)
{
    switch ((c->case_i + which) % 3) {
    case 0: return 0;
    case 1: return row_elems;
    default: return row_elems + rnd(c, 1, 7);
    }
}

static int64_t eff(int64_t stride, int64_t row_elems)
{
    return stride ? stride : row_elems;
}

static void cu_from_lengths(const int32_t *len, int64_t n, int32_t *cu)
{
    cu[0] = 0;
    for (int64_t i = 0; i < n; i++)
        cu[i + 1] = cu[i] + len[i];
}

static void fill_data(chk *c, void *p, clvarlen_dtype dtype, size_t n)
{
    ct_fill(&c->rng, p, dtype, n, dtype == CLVARLEN_DTYPE_I32 ? 1000.0 : 1.0);
}

/* Lengths for a case: case 0 is an all-empty batch (T = 0). */
static int64_t case_lengths(chk *c, int64_t max_n, int64_t max_len, int32_t *len)
{
    if (c->case_i == 0) {
        int64_t n = rnd(c, 1, max_n < 5 ? max_n : 5);
        for (int64_t i = 0; i < n; i++)
            len[i] = 0;
        return n;
    }
    return ct_random_lengths(&c->rng, max_n, max_len, (int64_t)1 << 28, len);
}

/* ================================================================ oracles from SPEC 2.5 */

typedef struct cp_expect {
    int32_t *local_cu, *head_cu, *tail_cu; /* [n + 1] */
    int32_t *global_index, *position;      /* [local tokens] */
    int64_t local_tokens;
    int32_t max_head, max_tail;
} cp_expect;

static void cp_chunk(int64_t len, int32_t world, int32_t c, int64_t *start, int64_t *size)
{
    int64_t chunks = 2 * (int64_t)world;
    int64_t base = len / chunks, rem = len % chunks;
    *start = c * base + (c < rem ? c : rem);
    *size = base + (c < rem ? 1 : 0);
}

/* Any output may be NULL; global_index/position are filled up to the local total. */
static int64_t cp_oracle(const int32_t *cu, int64_t n, int32_t world, int32_t rank,
                         cp_expect *e)
{
    int64_t local = 0;
    int32_t max_head = 0, max_tail = 0;
    if (e->local_cu)
        e->local_cu[0] = 0;
    if (e->head_cu)
        e->head_cu[0] = 0;
    if (e->tail_cu)
        e->tail_cu[0] = 0;
    for (int64_t s = 0; s < n; s++) {
        int64_t len = cu[s + 1] - cu[s];
        int64_t hs, hn, ts, tn;
        cp_chunk(len, world, rank, &hs, &hn);
        cp_chunk(len, world, 2 * world - 1 - rank, &ts, &tn);
        for (int64_t j = 0; j < hn + tn; j++) {
            int64_t p = j < hn ? hs + j : ts + (j - hn);
            if (e->global_index)
                e->global_index[local + j] = (int32_t)(cu[s] + p);
            if (e->position)
                e->position[local + j] = (int32_t)p;
        }
        local += hn + tn;
        if (e->local_cu)
            e->local_cu[s + 1] = (int32_t)local;
        if (e->head_cu)
            e->head_cu[s + 1] = e->head_cu[s] + (int32_t)hn;
        if (e->tail_cu)
            e->tail_cu[s + 1] = e->tail_cu[s] + (int32_t)tn;
        if (hn > max_head)
            max_head = (int32_t)hn;
        if (tn > max_tail)
            max_tail = (int32_t)tn;
    }
    e->local_tokens = local;
    e->max_head = max_head;
    e->max_tail = max_tail;
    return local;
}

/* CP documents (at most 48): lengths below 2W, odd lengths, empty ones.
 * Case 1 (long rows) keeps to a few short documents. */
static int64_t cp_lengths(chk *c, int32_t world, int32_t *len)
{
    if (c->case_i == 0) {
        len[0] = 0;
        return 1;
    }
    int64_t n = rnd(c, 1, c->case_i == 1 ? 4 : c->opt->quick ? 12 : 48);
    int64_t max_len = c->case_i == 1 ? 40 : c->opt->quick ? 300 : 1500;
    for (int64_t i = 0; i < n; i++) {
        double r = unif(c);
        len[i] = (int32_t)(r < 0.1    ? 0
                           : r < 0.35 ? rnd(c, 1, 2 * world)
                                      : rnd(c, 1, max_len));
    }
    return n;
}

/* ================================================================ checks */

static int check_cu_seqlens(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                            ct_row *row)
{
    chk c;
    chk_begin(&c, dev, cpu, opt, row, "cu_seqlens");
    for (; c.case_i < n_cases(&c) && !c.stop; c.case_i++) {
        chk_case_begin(&c);
        int64_t max_n = c.case_i == 0 ? 0 : (opt->quick ? 64 : 3000);
        int32_t *len = aalloc(&c, (size_t)(max_n + 1) * 4);
        int32_t *want = aalloc(&c, (size_t)(max_n + 1) * 4);
        if (c.oom)
            goto next;
        int64_t n = max_n ? ct_random_lengths(&c.rng, max_n, 5000, (int64_t)1 << 30, len) : 0;
        size_t cu_bytes = (size_t)(n + 1) * 4, len_bytes = (size_t)n * 4;
        int32_t *cu_d = aalloc(&c, cu_bytes), *cu_c = aalloc(&c, cu_bytes);
        int32_t *len_d = aalloc(&c, len_bytes), *len_c = aalloc(&c, len_bytes);
        if (c.oom)
            goto next;
        cu_from_lengths(len, n, want);
        clvarlen_status sd;
#if CLVARLEN_HAVE_OPENCL
        if (c.cl_case) {
            size_t o_len, o_cu;
            cl_event ev = NULL;
            cl_mem m_len = dev_in(&c, len, len_bytes, &o_len);
            cl_mem m_cu = dev_out(&c, cu_d, cu_bytes, &o_cu);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_cu_seqlens_from_lengths(dev, m_len, o_len, n, m_cu,
                                                                   o_cu, 0, NULL, &ev);
            sd = dev_finish(&c, sd, ev);
        } else
#endif
            sd = clvarlen_cu_seqlens_from_lengths(dev, len, n, cu_d);
        if (!chk_call(&c, 0, sd) ||
            !chk_call(&c, 1, clvarlen_cu_seqlens_from_lengths(cpu, len, n, cu_c)))
            goto next;
        chk_same(&c, "cu_seqlens", cu_d, cu_c, CLVARLEN_DTYPE_I32, (size_t)n + 1);
        chk_same(&c, "cu_seqlens (cpu vs SPEC)", cu_c, want, CLVARLEN_DTYPE_I32, (size_t)n + 1);
#if CLVARLEN_HAVE_OPENCL
        if (c.cl_case) {
            size_t o_cu, o_len;
            cl_event ev = NULL;
            cl_mem m_cu = dev_in(&c, want, cu_bytes, &o_cu);
            cl_mem m_len = dev_out(&c, len_d, len_bytes, &o_len);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_lengths_from_cu_seqlens(dev, m_cu, o_cu, n, m_len,
                                                                   o_len, 0, NULL, &ev);
            sd = dev_finish(&c, sd, ev);
        } else
#endif
            sd = clvarlen_lengths_from_cu_seqlens(dev, want, n, len_d);
        if (!chk_call(&c, 0, sd) ||
            !chk_call(&c, 1, clvarlen_lengths_from_cu_seqlens(cpu, want, n, len_c)))
            goto next;
        chk_same(&c, "lengths", len_d, len_c, CLVARLEN_DTYPE_I32, (size_t)n);
        chk_same(&c, "lengths (cpu round trip)", len_c, len, CLVARLEN_DTYPE_I32, (size_t)n);
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}

static int check_token_maps(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                            ct_row *row)
{
    chk c;
    chk_begin(&c, dev, cpu, opt, row, "token_maps");
    int64_t max_n = opt->quick ? 40 : 300;
    for (; c.case_i < n_cases(&c) && !c.stop; c.case_i++) {
        chk_case_begin(&c);
        int32_t *len = aalloc(&c, (size_t)max_n * 4);
        int32_t *cu = aalloc(&c, (size_t)(max_n + 1) * 4);
        int32_t *offsets = aalloc(&c, (size_t)max_n * 4);
        if (c.oom)
            goto next;
        int64_t n = case_lengths(&c, max_n, opt->quick ? 100 : 700, len);
        cu_from_lengths(len, n, cu);
        int64_t total = cu[n];
        for (int64_t s = 0; s < n; s++)
            offsets[s] = (int32_t)rnd(&c, 0, 5000);
        const int32_t *offs = c.case_i % 3 == 0 ? NULL : offsets;
        int mode = c.case_i % 4; /* 2: seq_id only, 3: pos only */
        size_t bytes = (size_t)total * 4;
        int32_t *sid_d = aalloc(&c, bytes), *sid_c = aalloc(&c, bytes), *sid_w = aalloc(&c, bytes);
        int32_t *pos_d = aalloc(&c, bytes), *pos_c = aalloc(&c, bytes), *pos_w = aalloc(&c, bytes);
        if (c.oom)
            goto next;
        for (int64_t s = 0; s < n; s++) {
            for (int64_t t = cu[s]; t < cu[s + 1]; t++) {
                sid_w[t] = (int32_t)s;
                pos_w[t] = (int32_t)(t - cu[s] + (offs ? offs[s] : 0));
            }
        }
        clvarlen_status sd;
#if CLVARLEN_HAVE_OPENCL
        if (c.cl_case) {
            size_t o_cu, o_off, o_sid, o_pos;
            cl_event ev = NULL;
            cl_mem m_cu = dev_in(&c, cu, (size_t)(n + 1) * 4, &o_cu);
            cl_mem m_off = dev_in(&c, offs, (size_t)n * 4, &o_off);
            cl_mem m_sid = dev_out(&c, mode == 3 ? NULL : sid_d, bytes, &o_sid);
            cl_mem m_pos = dev_out(&c, mode == 2 ? NULL : pos_d, bytes, &o_pos);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_token_maps(dev, m_cu, o_cu, n, total, m_off, o_off,
                                                      m_sid, o_sid, m_pos, o_pos, 0, NULL, &ev);
            sd = dev_finish(&c, sd, ev);
        } else
#endif
            sd = clvarlen_token_maps(dev, cu, n, total, offs, mode == 3 ? NULL : sid_d,
                                     mode == 2 ? NULL : pos_d);
        if (!chk_call(&c, 0, sd) ||
            !chk_call(&c, 1,
                      clvarlen_token_maps(cpu, cu, n, total, offs, mode == 3 ? NULL : sid_c,
                                          mode == 2 ? NULL : pos_c)))
            goto next;
        chk_same(&c, "seq_id", sid_d, sid_c, CLVARLEN_DTYPE_I32, (size_t)total);
        chk_same(&c, "pos", pos_d, pos_c, CLVARLEN_DTYPE_I32, (size_t)total);
        if (mode != 3)
            chk_same(&c, "seq_id (cpu vs SPEC)", sid_c, sid_w, CLVARLEN_DTYPE_I32, (size_t)total);
        if (mode != 2)
            chk_same(&c, "pos (cpu vs SPEC)", pos_c, pos_w, CLVARLEN_DTYPE_I32, (size_t)total);
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}

/* pack and pack_masked share everything but how the kept rows are chosen. */
static int check_pack_common(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                             ct_row *row, int masked)
{
    chk c;
    chk_begin(&c, dev, cpu, opt, row, masked ? "pack_masked" : "pack");
    for (; c.case_i < n_cases(&c) && !c.stop; c.case_i++) {
        chk_case_begin(&c);
        clvarlen_dtype dtype = pick_dtype(&c, 1);
        size_t es = clvarlen_dtype_size(dtype);
        int64_t row_elems = pick_row_elems(&c);
        int64_t batch = rnd(&c, 1, c.case_i == 1 ? 3 : (opt->quick ? 8 : 24));
        int64_t max_seqlen = rnd(&c, 1, c.case_i == 1 ? 20 : (opt->quick ? 64 : 200));
        int64_t pstride = pick_stride(&c, row_elems, 0);
        int64_t slots = batch * max_seqlen;
        void *padded = aalloc(&c, (size_t)(slots * eff(pstride, row_elems)) * es);
        int32_t *valid = aalloc(&c, (size_t)batch * 4);
        uint8_t *mask = aalloc(&c, (size_t)slots);
        if (c.oom)
            goto next;
        fill_data(&c, padded, dtype, (size_t)(slots * eff(pstride, row_elems)));
        int64_t total = 0;
        if (masked) {
            double density = 0.1 + 0.85 * unif(&c);
            for (int64_t b = 0; b < batch; b++) {
                double r = unif(&c);
                for (int64_t s = 0; s < max_seqlen; s++) {
                    /* Any nonzero byte keeps the row: values other than 1 catch
                     * indices computed from a sum of mask values. */
                    int keep = c.case_i == 0 ? 0 : r < 0.1 ? 0 : r < 0.2 ? 1 : unif(&c) < density;
                    mask[b * max_seqlen + s] = keep ? (uint8_t)rnd(&c, 1, 255) : 0;
                    total += keep;
                }
            }
        } else {
            for (int64_t b = 0; b < batch; b++) {
                double r = unif(&c);
                valid[b] = c.case_i == 0 ? 0
                           : r < 0.15    ? 0
                           : r < 0.3     ? (int32_t)max_seqlen
                                         : (int32_t)rnd(&c, 0, max_seqlen);
                total += valid[b];
            }
        }
        int too_small = c.case_i == n_cases(&c) - 1 && total > 0;
        int64_t capacity = too_small ? total - 1 : total + rnd(&c, 0, 3);
        size_t packed_bytes = (size_t)(capacity * row_elems) * es;
        void *pk_d = aalloc(&c, packed_bytes), *pk_c = aalloc(&c, packed_bytes);
        int32_t *cu_d = aalloc(&c, (size_t)(batch + 1) * 4), *cu_c = aalloc(&c, (size_t)(batch + 1) * 4);
        int64_t *si_d = aalloc(&c, (size_t)capacity * 8), *si_c = aalloc(&c, (size_t)capacity * 8);
        int64_t *tot_d = aalloc(&c, 8), *tot_c = aalloc(&c, 8);
        if (c.oom)
            goto next;
        int no_index = c.case_i % 4 == 2, no_total = c.case_i % 5 == 3;
        clvarlen_status sd = CLVARLEN_SUCCESS, sc;
        if (too_small)
            c.cl_case = 0; /* on device an overflow is reported through total_tokens only */
        if (c.cl_case) {
            no_index = no_total = 0;
#if CLVARLEN_HAVE_OPENCL
            size_t o_pd, o_v, o_m, o_pk, o_cu, o_si, o_t;
            cl_event ev = NULL;
            size_t padded_bytes = (size_t)(slots * eff(pstride, row_elems)) * es;
            cl_mem m_pd = dev_in(&c, padded, padded_bytes, &o_pd);
            cl_mem m_v = dev_in(&c, masked ? NULL : valid, (size_t)batch * 4, &o_v);
            cl_mem m_m = dev_in(&c, masked ? mask : NULL, (size_t)slots, &o_m);
            cl_mem m_pk = dev_out(&c, pk_d, packed_bytes, &o_pk);
            cl_mem m_cu = dev_out(&c, cu_d, (size_t)(batch + 1) * 4, &o_cu);
            cl_mem m_si = dev_out(&c, si_d, (size_t)capacity * 8, &o_si);
            cl_mem m_t = dev_out(&c, tot_d, 8, &o_t);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_pack(dev, dtype, row_elems, m_pd, o_pd, pstride, batch,
                                                max_seqlen, m_v, o_v, m_m, o_m, capacity, m_pk,
                                                o_pk, m_cu, o_cu, m_si, o_si, m_t, o_t, 0, NULL,
                                                &ev);
            sd = dev_finish(&c, sd, ev);
#endif
        } else if (masked) {
            sd = clvarlen_pack_masked(dev, dtype, row_elems, padded, pstride, batch, max_seqlen,
                                      mask, capacity, pk_d, cu_d, no_index ? NULL : si_d,
                                      no_total ? NULL : tot_d);
        } else {
            sd = clvarlen_pack(dev, dtype, row_elems, padded, pstride, batch, max_seqlen, valid,
                               capacity, pk_d, cu_d, no_index ? NULL : si_d,
                               no_total ? NULL : tot_d);
        }
        if (masked)
            sc = clvarlen_pack_masked(cpu, dtype, row_elems, padded, pstride, batch, max_seqlen,
                                      mask, capacity, pk_c, cu_c, no_index ? NULL : si_c,
                                      no_total ? NULL : tot_c);
        else
            sc = clvarlen_pack(cpu, dtype, row_elems, padded, pstride, batch, max_seqlen, valid,
                               capacity, pk_c, cu_c, no_index ? NULL : si_c,
                               no_total ? NULL : tot_c);
        if (too_small) {
            chk_expect(&c, 0, sd, CLVARLEN_ERROR_BUFFER_TOO_SMALL);
            chk_expect(&c, 1, sc, CLVARLEN_ERROR_BUFFER_TOO_SMALL);
            chk_untouched(&c, "device packed", pk_d, packed_bytes);
            chk_untouched(&c, "device cu_seqlens", cu_d, (size_t)(batch + 1) * 4);
            chk_untouched(&c, "device src_index", si_d, (size_t)capacity * 8);
            chk_untouched(&c, "cpu packed", pk_c, packed_bytes);
            chk_untouched(&c, "cpu cu_seqlens", cu_c, (size_t)(batch + 1) * 4);
            goto next;
        }
        if (!chk_call(&c, 0, sd) || !chk_call(&c, 1, sc))
            goto next;
        chk_same(&c, "packed", pk_d, pk_c, CLVARLEN_DTYPE_U8, packed_bytes);
        chk_same(&c, "cu_seqlens", cu_d, cu_c, CLVARLEN_DTYPE_I32, (size_t)batch + 1);
        chk_same(&c, "src_index", si_d, si_c, CLVARLEN_DTYPE_I64, (size_t)capacity);
        chk_same(&c, "total", tot_d, tot_c, CLVARLEN_DTYPE_I64, 1);
        if (!no_total && *tot_c != total)
            chk_fail(&c, "cpu total %lld, expected %lld", (long long)*tot_c, (long long)total);
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}

static int check_pack(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                      ct_row *row)
{
    return check_pack_common(dev, cpu, opt, row, 0);
}

static int check_pack_masked(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                             ct_row *row)
{
    return check_pack_common(dev, cpu, opt, row, 1);
}

static int check_unpack(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                        ct_row *row)
{
    chk c;
    chk_begin(&c, dev, cpu, opt, row, "unpack");
    for (; c.case_i < n_cases(&c) && !c.stop; c.case_i++) {
        chk_case_begin(&c);
        clvarlen_dtype dtype = pick_dtype(&c, 1);
        size_t es = clvarlen_dtype_size(dtype);
        int64_t row_elems = pick_row_elems(&c);
        int64_t batch = rnd(&c, 1, c.case_i == 1 ? 3 : (opt->quick ? 8 : 24));
        int64_t max_seqlen = rnd(&c, 1, c.case_i == 1 ? 20 : (opt->quick ? 64 : 200));
        int64_t slots = batch * max_seqlen;
        int64_t *src_index = aalloc(&c, (size_t)slots * 8);
        if (c.oom)
            goto next;
        /* Kept positions with holes; shuffled in some cases (entries need only be distinct). */
        double density = c.case_i == 0 ? 0.0 : 0.1 + 0.9 * unif(&c);
        int64_t total = 0;
        for (int64_t p = 0; p < slots; p++)
            if (unif(&c) < density)
                src_index[total++] = p;
        if (c.case_i % 4 == 3)
            for (int64_t i = total - 1; i > 0; i--) {
                int64_t j = rnd(&c, 0, i), t = src_index[i];
                src_index[i] = src_index[j];
                src_index[j] = t;
            }
        int64_t kstride = pick_stride(&c, row_elems, 0), pstride = pick_stride(&c, row_elems, 1);
        size_t packed_elems = (size_t)(total * eff(kstride, row_elems));
        size_t padded_bytes = (size_t)(slots * eff(pstride, row_elems)) * es;
        void *packed = aalloc(&c, packed_elems * es);
        void *pad_value = aalloc(&c, es);
        void *pd_d = aalloc(&c, padded_bytes), *pd_c = aalloc(&c, padded_bytes);
        if (c.oom)
            goto next;
        fill_data(&c, packed, dtype, packed_elems);
        fill_data(&c, pad_value, dtype, 1);
        const void *pv = c.case_i % 2 ? pad_value : NULL;
        clvarlen_status sd;
#if CLVARLEN_HAVE_OPENCL
        if (c.cl_case) {
            size_t o_pk, o_si, o_pd;
            cl_event ev = NULL;
            cl_mem m_pk = dev_in(&c, packed, packed_elems * es, &o_pk);
            cl_mem m_si = dev_in(&c, src_index, (size_t)total * 8, &o_si);
            cl_mem m_pd = dev_out(&c, pd_d, padded_bytes, &o_pd);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_unpack(dev, dtype, row_elems, m_pk, o_pk, kstride,
                                                  total, m_si, o_si, batch, max_seqlen, pv, m_pd,
                                                  o_pd, pstride, 0, NULL, &ev);
            sd = dev_finish(&c, sd, ev);
        } else
#endif
            sd = clvarlen_unpack(dev, dtype, row_elems, packed, kstride, total, src_index, batch,
                                 max_seqlen, pv, pd_d, pstride);
        if (!chk_call(&c, 0, sd) ||
            !chk_call(&c, 1,
                      clvarlen_unpack(cpu, dtype, row_elems, packed, kstride, total, src_index,
                                      batch, max_seqlen, pv, pd_c, pstride)))
            goto next;
        chk_same(&c, "padded", pd_d, pd_c, CLVARLEN_DTYPE_U8, padded_bytes);
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}

static int check_gather(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                        ct_row *row)
{
    chk c;
    chk_begin(&c, dev, cpu, opt, row, "gather");
    for (; c.case_i < n_cases(&c) && !c.stop; c.case_i++) {
        chk_case_begin(&c);
        clvarlen_dtype dtype = pick_dtype(&c, 1);
        size_t es = clvarlen_dtype_size(dtype);
        int64_t row_elems = pick_row_elems(&c);
        int64_t src_rows = rnd(&c, 1, c.case_i == 1 ? 60 : (opt->quick ? 200 : 3000));
        int64_t n_index = c.case_i == 0 ? 0 : rnd(&c, 1, c.case_i == 1 ? 80 : (opt->quick ? 300 : 4000));
        int64_t sstride = pick_stride(&c, row_elems, 0), dstride = pick_stride(&c, row_elems, 1);
        size_t src_elems = (size_t)(src_rows * eff(sstride, row_elems));
        size_t dst_bytes = (size_t)(n_index * eff(dstride, row_elems)) * es;
        void *src = aalloc(&c, src_elems * es);
        int32_t *index = aalloc(&c, (size_t)n_index * 4);
        void *dst_d = aalloc(&c, dst_bytes), *dst_c = aalloc(&c, dst_bytes);
        if (c.oom)
            goto next;
        fill_data(&c, src, dtype, src_elems);
        for (int64_t m = 0; m < n_index; m++)
            index[m] = unif(&c) < 0.05 ? -1 : (int32_t)rnd(&c, 0, src_rows - 1);
        clvarlen_status sd;
#if CLVARLEN_HAVE_OPENCL
        if (c.cl_case) {
            size_t o_src, o_idx, o_dst;
            cl_event ev = NULL;
            cl_mem m_src = dev_in(&c, src, src_elems * es, &o_src);
            cl_mem m_idx = dev_in(&c, index, (size_t)n_index * 4, &o_idx);
            cl_mem m_dst = dev_out(&c, dst_d, dst_bytes, &o_dst);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_gather_rows(dev, dtype, row_elems, m_src, o_src,
                                                       src_rows, sstride, m_idx, o_idx, n_index,
                                                       m_dst, o_dst, dstride, 0, NULL, &ev);
            sd = dev_finish(&c, sd, ev);
        } else
#endif
            sd = clvarlen_gather_rows(dev, dtype, row_elems, src, src_rows, sstride, index,
                                      n_index, dst_d, dstride);
        if (!chk_call(&c, 0, sd) ||
            !chk_call(&c, 1,
                      clvarlen_gather_rows(cpu, dtype, row_elems, src, src_rows, sstride, index,
                                           n_index, dst_c, dstride)))
            goto next;
        chk_same(&c, "dst", dst_d, dst_c, CLVARLEN_DTYPE_U8, dst_bytes);
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}

/* The three scatter rows: 0 overwrite, 1 accumulate, 2 zero-rest. */
enum { SC_OVERWRITE, SC_ACCUMULATE, SC_ZERO_REST };

static int check_scatter_common(clvarlen_context *dev, clvarlen_context *cpu,
                                const ct_options *opt, ct_row *row, int variant)
{
    static const char *const names[] = {"scatter_overwrite", "scatter_accumulate",
                                         "scatter_zero_rest"};
    chk c;
    chk_begin(&c, dev, cpu, opt, row, names[variant]);
    for (; c.case_i < n_cases(&c) && !c.stop; c.case_i++) {
        chk_case_begin(&c);
        int accumulate = variant == SC_ACCUMULATE || (variant == SC_ZERO_REST && c.case_i % 2);
        /* Accumulate with distinct indices is one add per element: bitwise.
         * Repeated indices may be summed in another order: SPEC 4 tolerance. */
        int unique = !accumulate || c.case_i % 3 == 0;
        clvarlen_dtype dtype = pick_dtype(&c, !accumulate);
        size_t es = clvarlen_dtype_size(dtype);
        int64_t row_elems = pick_row_elems(&c);
        int64_t dst_rows = rnd(&c, 1, c.case_i == 1 ? 60 : (opt->quick ? 200 : 3000));
        int64_t n_index;
        if (c.case_i == 0)
            n_index = 0;
        else if (unique)
            n_index = rnd(&c, 1, dst_rows);
        else
            n_index = rnd(&c, 1, c.case_i == 1 ? 120 : (opt->quick ? 400 : 5000));
        int64_t sstride = pick_stride(&c, row_elems, 0), dstride = pick_stride(&c, row_elems, 1);
        size_t src_elems = (size_t)(n_index * eff(sstride, row_elems));
        size_t dst_elems = (size_t)(dst_rows * eff(dstride, row_elems));
        void *src = aalloc(&c, src_elems * es);
        int32_t *index = aalloc(&c, (size_t)n_index * 4);
        int32_t *perm = aalloc(&c, (size_t)dst_rows * 4);
        void *dst_d = aalloc(&c, dst_elems * es), *dst_c = aalloc(&c, dst_elems * es);
        if (c.oom)
            goto next;
        fill_data(&c, src, dtype, src_elems);
        fill_data(&c, dst_d, dtype, dst_elems);
        memcpy(dst_c, dst_d, dst_elems * es);
        if (unique) {
            for (int64_t i = 0; i < dst_rows; i++)
                perm[i] = (int32_t)i;
            for (int64_t i = dst_rows - 1; i > 0; i--) {
                int64_t j = rnd(&c, 0, i);
                int32_t t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
            for (int64_t m = 0; m < n_index; m++)
                index[m] = unif(&c) < 0.05 ? -1 : perm[m];
        } else {
            for (int64_t m = 0; m < n_index; m++)
                index[m] = unif(&c) < 0.05 ? -1 : (int32_t)rnd(&c, 0, dst_rows - 1);
        }
        clvarlen_scatter_mode mode = accumulate ? CLVARLEN_SCATTER_ACCUMULATE
                                                : CLVARLEN_SCATTER_OVERWRITE;
        unsigned flags = variant == SC_ZERO_REST ? CLVARLEN_SCATTER_ZERO_REST : 0u;
        if (unique && c.case_i % 2 == 0)
            flags |= CLVARLEN_SCATTER_UNIQUE_INDICES;
        clvarlen_status sd;
#if CLVARLEN_HAVE_OPENCL
        if (c.cl_case) {
            size_t o_src, o_idx, o_dst;
            cl_event ev = NULL;
            cl_mem m_src = dev_in(&c, src, src_elems * es, &o_src);
            cl_mem m_idx = dev_in(&c, index, (size_t)n_index * 4, &o_idx);
            cl_mem m_dst = dev_out(&c, dst_d, dst_elems * es, &o_dst);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_scatter_rows(dev, dtype, row_elems, m_src, o_src,
                                                        sstride, m_idx, o_idx, n_index, m_dst,
                                                        o_dst, dst_rows, dstride, mode, flags, 0,
                                                        NULL, &ev);
            sd = dev_finish(&c, sd, ev);
        } else
#endif
            sd = clvarlen_scatter_rows(dev, dtype, row_elems, src, sstride, index, n_index, dst_d,
                                       dst_rows, dstride, mode, flags);
        if (!chk_call(&c, 0, sd) ||
            !chk_call(&c, 1,
                      clvarlen_scatter_rows(cpu, dtype, row_elems, src, sstride, index, n_index,
                                            dst_c, dst_rows, dstride, mode, flags)))
            goto next;
        if (unique || !is_float(dtype))
            chk_same(&c, "dst", dst_d, dst_c, dtype, dst_elems);
        else
            chk_close(&c, "dst", dst_d, dst_c, dtype, dst_elems, ct_tolerance(dtype));
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}

static int check_scatter_overwrite(clvarlen_context *dev, clvarlen_context *cpu,
                                   const ct_options *opt, ct_row *row)
{
    return check_scatter_common(dev, cpu, opt, row, SC_OVERWRITE);
}

static int check_scatter_accumulate(clvarlen_context *dev, clvarlen_context *cpu,
                                    const ct_options *opt, ct_row *row)
{
    return check_scatter_common(dev, cpu, opt, row, SC_ACCUMULATE);
}

static int check_scatter_zero_rest(clvarlen_context *dev, clvarlen_context *cpu,
                                   const ct_options *opt, ct_row *row)
{
    return check_scatter_common(dev, cpu, opt, row, SC_ZERO_REST);
}

/* seqlens_expand: draft = per-sequence q in [0, 4], else a uniform q (target verify). */
static int check_expand_common(clvarlen_context *dev, clvarlen_context *cpu,
                               const ct_options *opt, ct_row *row, int draft)
{
    chk c;
    chk_begin(&c, dev, cpu, opt, row, draft ? "seqlens_expand_draft" : "seqlens_expand_verify");
    for (; c.case_i < n_cases(&c) && !c.stop; c.case_i++) {
        chk_case_begin(&c);
        int64_t n = c.case_i == 0 ? 1 : rnd(&c, 1, opt->quick ? 64 : 300);
        int32_t uniform_q = draft ? 0 : (int32_t)rnd(&c, 1, 8);
        int32_t *kv = aalloc(&c, (size_t)n * 4), *q = aalloc(&c, (size_t)n * 4);
        if (c.oom)
            goto next;
        int64_t total = 0;
        for (int64_t s = 0; s < n; s++) {
            q[s] = draft ? (int32_t)rnd(&c, 0, 4) : uniform_q;
            /* Some KV lengths shorter than q exercise the clamp at 0. */
            kv[s] = (int32_t)(unif(&c) < 0.1 ? rnd(&c, 0, q[s]) : rnd(&c, q[s], 20000));
            total += q[s];
        }
        int with_pages = c.case_i % 3 != 0;
        int64_t page_cols = with_pages ? rnd(&c, 1, opt->quick ? 64 : 1100) : 0;
        int64_t page_stride = page_cols + (c.case_i % 2 ? rnd(&c, 0, 9) : 0);
        int64_t col_limit = c.case_i % 4 == 1 ? 0 : rnd(&c, 1, page_cols > 0 ? page_cols : 1);
        if (!with_pages)
            col_limit = 0;
        int64_t out_cols = col_limit ? col_limit : page_cols;
        int64_t out_stride = out_cols + (c.case_i % 2 ? rnd(&c, 0, 5) : 0);
        int too_small = c.case_i == n_cases(&c) - 1 && total > 0;
        int64_t capacity = too_small ? total - 1 : total + rnd(&c, 0, 3);
        size_t page_out_bytes = (size_t)(capacity * out_stride) * 4;
        int32_t *pages = aalloc(&c, (size_t)(n * page_stride) * 4);
        int32_t *se_d = aalloc(&c, (size_t)capacity * 4), *se_c = aalloc(&c, (size_t)capacity * 4);
        int32_t *se_w = aalloc(&c, (size_t)capacity * 4);
        int32_t *po_d = aalloc(&c, page_out_bytes), *po_c = aalloc(&c, page_out_bytes);
        int32_t *po_w = aalloc(&c, page_out_bytes);
        int64_t *tot_d = aalloc(&c, 8), *tot_c = aalloc(&c, 8);
        if (c.oom)
            goto next;
        for (int64_t i = 0; i < n * page_stride; i++)
            pages[i] = (int32_t)rnd(&c, 0, 1000000);
        const int32_t *q_arg = draft ? q : NULL;
        const int32_t *pt = with_pages ? pages : NULL;
        int no_total = c.case_i % 5 == 4;
        clvarlen_status sd = CLVARLEN_SUCCESS;
        if (too_small)
            c.cl_case = 0; /* on device an overflow is reported through the total only */
        if (c.cl_case) {
#if CLVARLEN_HAVE_OPENCL
            size_t o_kv, o_q, o_pt, o_se, o_po, o_t;
            cl_event ev = NULL;
            cl_mem m_kv = dev_in(&c, kv, (size_t)n * 4, &o_kv);
            cl_mem m_q = dev_in(&c, q_arg, (size_t)n * 4, &o_q);
            cl_mem m_pt = dev_in(&c, pt, (size_t)(n * page_stride) * 4, &o_pt);
            cl_mem m_se = dev_out(&c, se_d, (size_t)capacity * 4, &o_se);
            cl_mem m_po = dev_out(&c, with_pages ? po_d : NULL, page_out_bytes, &o_po);
            cl_mem m_t = dev_out(&c, no_total ? NULL : tot_d, 8, &o_t);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_seqlens_expand(dev, m_kv, o_kv, m_q, o_q, uniform_q, n,
                                                          m_pt, o_pt, page_cols, page_stride,
                                                          col_limit, capacity, m_se, o_se, m_po,
                                                          o_po, out_stride, m_t, o_t, 0, NULL,
                                                          &ev);
            sd = dev_finish(&c, sd, ev);
#endif
        } else {
            sd = clvarlen_seqlens_expand(dev, kv, q_arg, uniform_q, n, pt, page_cols, page_stride,
                                         col_limit, capacity, se_d, with_pages ? po_d : NULL,
                                         out_stride, no_total ? NULL : tot_d);
        }
        clvarlen_status sc = clvarlen_seqlens_expand(
            cpu, kv, q_arg, uniform_q, n, pt, page_cols, page_stride, col_limit, capacity, se_c,
            with_pages ? po_c : NULL, out_stride, no_total ? NULL : tot_c);
        if (too_small) {
            chk_expect(&c, 0, sd, CLVARLEN_ERROR_BUFFER_TOO_SMALL);
            chk_expect(&c, 1, sc, CLVARLEN_ERROR_BUFFER_TOO_SMALL);
            chk_untouched(&c, "device seqlens_expanded", se_d, (size_t)capacity * 4);
            chk_untouched(&c, "device page table", po_d, page_out_bytes);
            chk_untouched(&c, "cpu seqlens_expanded", se_c, (size_t)capacity * 4);
            goto next;
        }
        if (!chk_call(&c, 0, sd) || !chk_call(&c, 1, sc))
            goto next;
        /* SPEC 2.4 on the side: rows kept past the total and gaps stay unwritten. */
        int64_t r = 0;
        for (int64_t s = 0; s < n; s++) {
            for (int32_t j = 0; j < q[s]; j++, r++) {
                int64_t v = (int64_t)kv[s] - q[s] + 1 + j;
                se_w[r] = (int32_t)(v < 0 ? 0 : v);
                if (with_pages)
                    memcpy(po_w + r * out_stride, pages + s * page_stride, (size_t)out_cols * 4);
            }
        }
        chk_same(&c, "seqlens_expanded", se_d, se_c, CLVARLEN_DTYPE_I32, (size_t)capacity);
        chk_same(&c, "seqlens_expanded (cpu vs SPEC)", se_c, se_w, CLVARLEN_DTYPE_I32,
                 (size_t)capacity);
        if (with_pages) {
            chk_same(&c, "page table", po_d, po_c, CLVARLEN_DTYPE_I32, page_out_bytes / 4);
            chk_same(&c, "page table (cpu vs SPEC)", po_c, po_w, CLVARLEN_DTYPE_I32,
                     page_out_bytes / 4);
        }
        chk_same(&c, "total", tot_d, tot_c, CLVARLEN_DTYPE_I64, 1);
        if (!no_total && *tot_c != total)
            chk_fail(&c, "cpu total %lld, expected %lld", (long long)*tot_c, (long long)total);
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}

static int check_expand_verify(clvarlen_context *dev, clvarlen_context *cpu,
                               const ct_options *opt, ct_row *row)
{
    return check_expand_common(dev, cpu, opt, row, 0);
}

static int check_expand_draft(clvarlen_context *dev, clvarlen_context *cpu,
                              const ct_options *opt, ct_row *row)
{
    return check_expand_common(dev, cpu, opt, row, 1);
}

static int check_cp_plan(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                         ct_row *row)
{
    chk c;
    chk_begin(&c, dev, cpu, opt, row, "cp_plan");
    for (; c.case_i < n_cases(&c) && !c.stop; c.case_i++) {
        chk_case_begin(&c);
        int32_t world = (int32_t)rnd(&c, 1, 8);
        int32_t rank = (int32_t)rnd(&c, 0, world - 1);
        int32_t *len = aalloc(&c, 48 * 4), *cu = aalloc(&c, 49 * 4);
        if (c.oom)
            goto next;
        int64_t n = cp_lengths(&c, world, len);
        cu_from_lengths(len, n, cu);
        int64_t total = cu[n];
        int64_t capacity = total + rnd(&c, 0, 3);
        size_t cu_bytes = (size_t)(n + 1) * 4, cap_bytes = (size_t)capacity * 4;
        int halves = c.case_i % 3 != 1, maps = c.case_i % 3 != 2;
        clvarlen_cp_plan_out pd, pc;
        cp_expect w;
        memset(&pd, 0, sizeof pd);
        memset(&pc, 0, sizeof pc);
        memset(&w, 0, sizeof w);
        pd.local_cu_seqlens = aalloc(&c, cu_bytes);
        pc.local_cu_seqlens = aalloc(&c, cu_bytes);
        w.local_cu = aalloc(&c, cu_bytes);
        pd.head_cu = aalloc(&c, cu_bytes);
        pc.head_cu = aalloc(&c, cu_bytes);
        w.head_cu = aalloc(&c, cu_bytes);
        pd.tail_cu = aalloc(&c, cu_bytes);
        pc.tail_cu = aalloc(&c, cu_bytes);
        w.tail_cu = aalloc(&c, cu_bytes);
        pd.global_index = aalloc(&c, cap_bytes);
        pc.global_index = aalloc(&c, cap_bytes);
        w.global_index = aalloc(&c, cap_bytes);
        pd.position = aalloc(&c, cap_bytes);
        pc.position = aalloc(&c, cap_bytes);
        w.position = aalloc(&c, cap_bytes);
        if (c.oom)
            goto next;
        cp_oracle(cu, n, world, rank, &w);
        if (!halves)
            pd.head_cu = pd.tail_cu = pc.head_cu = pc.tail_cu = NULL;
        if (!maps)
            pd.global_index = pd.position = pc.global_index = pc.position = NULL;
        pd.capacity = pc.capacity = capacity;
        clvarlen_status sd;
#if CLVARLEN_HAVE_OPENCL
        if (c.cl_case) {
            size_t o_cu, o_l, o_h, o_t, o_g, o_p, o_n;
            cl_event ev = NULL;
            int64_t *lt_d = aalloc(&c, 8);
            cl_mem m_cu = dev_in(&c, cu, cu_bytes, &o_cu);
            cl_mem m_l = dev_out(&c, pd.local_cu_seqlens, cu_bytes, &o_l);
            cl_mem m_h = dev_out(&c, pd.head_cu, cu_bytes, &o_h);
            cl_mem m_t = dev_out(&c, pd.tail_cu, cu_bytes, &o_t);
            cl_mem m_g = dev_out(&c, pd.global_index, cap_bytes, &o_g);
            cl_mem m_p = dev_out(&c, pd.position, cap_bytes, &o_p);
            cl_mem m_n = dev_out(&c, lt_d, 8, &o_n);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_cp_plan(dev, m_cu, o_cu, n, world, rank, m_l, o_l, m_h,
                                                   o_h, m_t, o_t, capacity, m_g, o_g, m_p, o_p,
                                                   m_n, o_n, 0, NULL, &ev);
            sd = dev_finish(&c, sd, ev);
            if (lt_d)
                pd.local_tokens = *lt_d;
        } else
#endif
            sd = clvarlen_cp_plan(dev, cu, n, world, rank, &pd);
        if (!chk_call(&c, 0, sd) ||
            !chk_call(&c, 1, clvarlen_cp_plan(cpu, cu, n, world, rank, &pc)))
            goto next;
        chk_same(&c, "local_cu_seqlens", pd.local_cu_seqlens, pc.local_cu_seqlens,
                 CLVARLEN_DTYPE_I32, (size_t)n + 1);
        chk_same(&c, "local_cu_seqlens (cpu vs SPEC)", pc.local_cu_seqlens, w.local_cu,
                 CLVARLEN_DTYPE_I32, (size_t)n + 1);
        if (halves) {
            chk_same(&c, "head_cu", pd.head_cu, pc.head_cu, CLVARLEN_DTYPE_I32, (size_t)n + 1);
            chk_same(&c, "tail_cu", pd.tail_cu, pc.tail_cu, CLVARLEN_DTYPE_I32, (size_t)n + 1);
            chk_same(&c, "head_cu (cpu vs SPEC)", pc.head_cu, w.head_cu, CLVARLEN_DTYPE_I32,
                     (size_t)n + 1);
            chk_same(&c, "tail_cu (cpu vs SPEC)", pc.tail_cu, w.tail_cu, CLVARLEN_DTYPE_I32,
                     (size_t)n + 1);
        }
        if (maps) {
            chk_same(&c, "global_index", pd.global_index, pc.global_index, CLVARLEN_DTYPE_I32,
                     (size_t)capacity);
            chk_same(&c, "position", pd.position, pc.position, CLVARLEN_DTYPE_I32,
                     (size_t)capacity);
            chk_same(&c, "global_index (cpu vs SPEC)", pc.global_index, w.global_index,
                     CLVARLEN_DTYPE_I32, (size_t)capacity);
            chk_same(&c, "position (cpu vs SPEC)", pc.position, w.position, CLVARLEN_DTYPE_I32,
                     (size_t)capacity);
        }
        if (c.cl_case) /* the device plan has no max_head / max_tail */
            pd.max_head = pc.max_head, pd.max_tail = pc.max_tail;
        if (pd.local_tokens != pc.local_tokens || pd.max_head != pc.max_head ||
            pd.max_tail != pc.max_tail)
            chk_fail(&c, "local_tokens/max_head/max_tail: device %lld/%d/%d, cpu %lld/%d/%d",
                     (long long)pd.local_tokens, pd.max_head, pd.max_tail,
                     (long long)pc.local_tokens, pc.max_head, pc.max_tail);
        if (pc.local_tokens != w.local_tokens || pc.max_head != w.max_head ||
            pc.max_tail != w.max_tail)
            chk_fail(&c, "local_tokens/max_head/max_tail: cpu %lld/%d/%d, SPEC %lld/%d/%d",
                     (long long)pc.local_tokens, pc.max_head, pc.max_tail,
                     (long long)w.local_tokens, w.max_head, w.max_tail);
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}

static int check_cp_rows(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                         ct_row *row, int scatter)
{
    chk c;
    chk_begin(&c, dev, cpu, opt, row, scatter ? "cp_scatter" : "cp_gather");
    for (; c.case_i < n_cases(&c) && !c.stop; c.case_i++) {
        chk_case_begin(&c);
        int32_t world = (int32_t)rnd(&c, 1, 8);
        int32_t rank = (int32_t)rnd(&c, 0, world - 1);
        /* cp_scatter: 0 overwrite, 1 overwrite + zero rest, 2 accumulate, 3 accumulate + zero rest. */
        int variant = c.case_i % 4;
        int accumulate = scatter && variant >= 2;
        clvarlen_dtype dtype = pick_dtype(&c, !accumulate);
        size_t es = clvarlen_dtype_size(dtype);
        int64_t row_elems = pick_row_elems(&c);
        int32_t *len = aalloc(&c, 48 * 4), *cu = aalloc(&c, 49 * 4);
        if (c.oom)
            goto next;
        int64_t n = cp_lengths(&c, world, len);
        cu_from_lengths(len, n, cu);
        int64_t total = cu[n];
        cp_expect w;
        memset(&w, 0, sizeof w);
        int64_t local = cp_oracle(cu, n, world, rank, &w);
        int64_t capacity = local + (scatter ? 0 : rnd(&c, 0, 3));
        int64_t gstride = pick_stride(&c, row_elems, 0), lstride = pick_stride(&c, row_elems, 1);
        size_t g_elems = (size_t)(total * eff(gstride, row_elems));
        size_t l_elems = (size_t)(capacity * eff(lstride, row_elems));
        int32_t *gi = aalloc(&c, (size_t)local * 4);
        void *global = aalloc(&c, g_elems * es), *local_rows = aalloc(&c, l_elems * es);
        void *out_d = aalloc(&c, (scatter ? g_elems : l_elems) * es);
        void *out_c = aalloc(&c, (scatter ? g_elems : l_elems) * es);
        void *out_w = aalloc(&c, (scatter ? g_elems : l_elems) * es);
        if (c.oom)
            goto next;
        w.global_index = gi;
        cp_oracle(cu, n, world, rank, &w);
        size_t row_bytes = (size_t)row_elems * es;
        if (!scatter) {
            fill_data(&c, global, dtype, g_elems);
            for (int64_t i = 0; i < local; i++)
                memcpy((char *)out_w + (size_t)(i * eff(lstride, row_elems)) * es,
                       (char *)global + (size_t)(gi[i] * eff(gstride, row_elems)) * es, row_bytes);
            clvarlen_status sd;
#if CLVARLEN_HAVE_OPENCL
            if (c.cl_case) {
                size_t o_g, o_cu, o_l;
                cl_event ev = NULL;
                cl_mem m_g = dev_in(&c, global, g_elems * es, &o_g);
                cl_mem m_cu = dev_in(&c, cu, (size_t)(n + 1) * 4, &o_cu);
                cl_mem m_l = dev_out(&c, out_d, l_elems * es, &o_l);
                sd = c.dm_failed ? CLVARLEN_SUCCESS
                                 : clvarlen_cl_cp_gather(dev, dtype, row_elems, m_g, o_g, gstride,
                                                         total, m_cu, o_cu, n, world, rank, m_l,
                                                         o_l, lstride, capacity, 0, NULL, &ev);
                sd = dev_finish(&c, sd, ev);
            } else
#endif
                sd = clvarlen_cp_gather(dev, dtype, row_elems, global, gstride, cu, n, world,
                                        rank, out_d, lstride, capacity);
            if (!chk_call(&c, 0, sd) ||
                !chk_call(&c, 1,
                          clvarlen_cp_gather(cpu, dtype, row_elems, global, gstride, cu, n, world,
                                             rank, out_c, lstride, capacity)))
                goto next;
            chk_same(&c, "local rows", out_d, out_c, CLVARLEN_DTYPE_U8, l_elems * es);
            chk_same(&c, "local rows (cpu vs SPEC)", out_c, out_w, CLVARLEN_DTYPE_U8,
                     l_elems * es);
        } else {
            fill_data(&c, local_rows, dtype, l_elems);
            fill_data(&c, out_d, dtype, g_elems);
            memcpy(out_c, out_d, g_elems * es);
            clvarlen_scatter_mode mode = accumulate ? CLVARLEN_SCATTER_ACCUMULATE
                                                    : CLVARLEN_SCATTER_OVERWRITE;
            unsigned flags = variant % 2 ? CLVARLEN_SCATTER_ZERO_REST : 0u;
            clvarlen_status sd;
#if CLVARLEN_HAVE_OPENCL
            if (c.cl_case) {
                size_t o_l, o_cu, o_g;
                cl_event ev = NULL;
                cl_mem m_l = dev_in(&c, local_rows, l_elems * es, &o_l);
                cl_mem m_cu = dev_in(&c, cu, (size_t)(n + 1) * 4, &o_cu);
                cl_mem m_g = dev_out(&c, out_d, g_elems * es, &o_g);
                sd = c.dm_failed ? CLVARLEN_SUCCESS
                                 : clvarlen_cl_cp_scatter(dev, dtype, row_elems, m_l, o_l, lstride,
                                                          capacity, m_cu, o_cu, n, world, rank,
                                                          m_g, o_g, gstride, total, mode, flags, 0,
                                                          NULL, &ev);
                sd = dev_finish(&c, sd, ev);
            } else
#endif
                sd = clvarlen_cp_scatter(dev, dtype, row_elems, local_rows, lstride, cu, n, world,
                                         rank, out_d, gstride, mode, flags);
            if (!chk_call(&c, 0, sd) ||
                !chk_call(&c, 1,
                          clvarlen_cp_scatter(cpu, dtype, row_elems, local_rows, lstride, cu, n,
                                              world, rank, out_c, gstride, mode, flags)))
                goto next;
            /* Each global row receives at most one local row: bitwise even when accumulating. */
            chk_same(&c, "global rows", out_d, out_c, dtype, g_elems);
            if (!accumulate) {
                memcpy(out_w, out_c, g_elems * es);
                for (int64_t i = 0; i < local; i++)
                    memcpy((char *)out_w + (size_t)(gi[i] * eff(gstride, row_elems)) * es,
                           (char *)local_rows + (size_t)(i * eff(lstride, row_elems)) * es,
                           row_bytes);
                chk_same(&c, "global rows (cpu vs SPEC)", out_c, out_w, CLVARLEN_DTYPE_U8,
                         g_elems * es);
            }
        }
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}

static int check_cp_gather(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                           ct_row *row)
{
    return check_cp_rows(dev, cpu, opt, row, 0);
}

static int check_cp_scatter(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                            ct_row *row)
{
    return check_cp_rows(dev, cpu, opt, row, 1);
}

static int check_gen_seq_lens(clvarlen_context *dev, clvarlen_context *cpu,
                              const ct_options *opt, ct_row *row)
{
    chk c;
    chk_begin(&c, dev, cpu, opt, row, "gen_seq_lens");
    for (; c.case_i < n_cases(&c) && !c.stop; c.case_i++) {
        chk_case_begin(&c);
        uint64_t seed = ct_rng_next(&c.rng);
        int32_t world = (int32_t)rnd(&c, 1, opt->quick ? 4 : 8);
        int32_t n = (int32_t)rnd(&c, 1, opt->quick ? 64 : 512);
        int64_t total;
        switch (c.case_i % 4) {
        case 0: total = rnd(&c, 0, n / 2 + 1); break; /* total << n^2: the excess path */
        case 1: total = c.case_i == 1 ? 0 : rnd(&c, 0, n); break;
        case 2: total = rnd(&c, n, 200000); break;
        default: total = (int64_t)1 << 24; break;
        }
        size_t bytes = (size_t)world * (size_t)n * 4;
        int32_t *out_d = aalloc(&c, bytes), *out_c = aalloc(&c, bytes);
        if (c.oom)
            goto next;
        clvarlen_status sd;
#if CLVARLEN_HAVE_OPENCL
        if (c.cl_case) {
            size_t o_out;
            cl_event ev = NULL;
            cl_mem m_out = dev_out(&c, out_d, bytes, &o_out);
            sd = c.dm_failed ? CLVARLEN_SUCCESS
                             : clvarlen_cl_gen_seq_lens(dev, seed, world, n, total, m_out, o_out,
                                                        0, NULL, &ev);
            sd = dev_finish(&c, sd, ev);
        } else
#endif
            sd = clvarlen_gen_seq_lens(dev, seed, world, n, total, out_d);
        if (!chk_call(&c, 0, sd) ||
            !chk_call(&c, 1, clvarlen_gen_seq_lens(cpu, seed, world, n, total, out_c)))
            goto next;
        chk_same(&c, "lengths", out_d, out_c, CLVARLEN_DTYPE_I32, (size_t)world * (size_t)n);
        for (int32_t r = 0; r < world; r++) {
            int64_t sum = 0;
            int negative = 0;
            for (int32_t i = 0; i < n; i++) {
                sum += out_c[(size_t)r * (size_t)n + (size_t)i];
                negative |= out_c[(size_t)r * (size_t)n + (size_t)i] < 0;
            }
            if (sum != total || negative) {
                chk_fail(&c, "cpu row %d sums to %lld (want %lld)%s", r, (long long)sum,
                         (long long)total, negative ? ", negative length" : "");
                break;
            }
        }
    next:
        chk_end_case(&c);
    }
    return chk_finish(&c);
}

const ct_check ct_segment_checks[] = {
    {"cu_seqlens", "segment", check_cu_seqlens},
    {"token_maps", "segment", check_token_maps},
    {"pack", "segment", check_pack},
    {"pack_masked", "segment", check_pack_masked},
    {"unpack", "segment", check_unpack},
    {"gather", "segment", check_gather},
    {"scatter_overwrite", "segment", check_scatter_overwrite},
    {"scatter_accumulate", "segment", check_scatter_accumulate},
    {"scatter_zero_rest", "segment", check_scatter_zero_rest},
    {"seqlens_expand_verify", "segment", check_expand_verify},
    {"seqlens_expand_draft", "segment", check_expand_draft},
    {"cp_plan", "segment", check_cp_plan},
    {"cp_gather", "segment", check_cp_gather},
    {"cp_scatter", "segment", check_cp_scatter},
    {"gen_seq_lens", "segment", check_gen_seq_lens},
    {NULL, NULL, NULL},
};

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
        cp_expect w;
        memset(&w, 0, sizeof w);
        b->local = cp_oracle(cu, n, b->world, b->rank, &w);
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

static int bench_gather(clvarlen_context *dev, const ct_options *opt, double copy_gbps)
{
    return bench_rows_op(dev, opt, copy_gbps, SB_GATHER);
}

static int bench_scatter(clvarlen_context *dev, const ct_options *opt, double copy_gbps)
{
    return bench_rows_op(dev, opt, copy_gbps, SB_SCATTER);
}

static int bench_pack(clvarlen_context *dev, const ct_options *opt, double copy_gbps)
{
    return bench_rows_op(dev, opt, copy_gbps, SB_PACK);
}

static int bench_unpack(clvarlen_context *dev, const ct_options *opt, double copy_gbps)
{
    return bench_rows_op(dev, opt, copy_gbps, SB_UNPACK);
}

static int bench_cp_gather(clvarlen_context *dev, const ct_options *opt, double copy_gbps)
{
    return bench_rows_op(dev, opt, copy_gbps, SB_CP_GATHER);
}

static int bench_cp_scatter(clvarlen_context *dev, const ct_options *opt, double copy_gbps)
{
    return bench_rows_op(dev, opt, copy_gbps, SB_CP_SCATTER);
}

/* seqlens_expand with page table, N = 256, page_cols 1024: target verify
 * (q = 4) and draft extend (q in [0, 4]); a latency number, one launch. */
static int bench_seqlens_expand(clvarlen_context *dev, const ct_options *opt, double copy_gbps)
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

const ct_bench ct_segment_benches[] = {
    {"gather", "segment", bench_gather},
    {"scatter", "segment", bench_scatter},
    {"pack", "segment", bench_pack},
    {"unpack", "segment", bench_unpack},
    {"cp_gather", "segment", bench_cp_gather},
    {"cp_scatter", "segment", bench_cp_scatter},
    {"seqlens_expand", "segment", bench_seqlens_expand},
    {NULL, NULL, NULL},
};

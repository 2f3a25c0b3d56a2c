/* clvarlen-test: the tool's generic test utilities (see ct-util.h). Contents:
 *   random numbers    ct_rng_*, ct_seed_for, ct_random_lengths (SplitMix64)
 *   dtypes            ct_fill (stores through the kit's tu_set)
 *   check buffers     struct chk and chk_*: the kit's guard bands, sentinels,
 *                     cl_mem copies at random offsets with the kit's guard
 *                     bytes, comparisons through the kit's error measures
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct-util.h"

/* ================================================================ random numbers, dtypes */

/* SplitMix64: small state, good enough statistics, and reproducible everywhere. */
uint64_t ct_rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double ct_rng_uniform(uint64_t *state)
{
    return (double)(ct_rng_next(state) >> 11) * 0x1.0p-53;
}

double ct_rng_normal(uint64_t *state)
{
    double u1 = 1.0 - ct_rng_uniform(state); /* (0, 1]: log never sees 0 */
    double u2 = ct_rng_uniform(state);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int64_t ct_rng_int(uint64_t *state, int64_t lo, int64_t hi)
{
    if (hi <= lo)
        return lo;
    uint64_t span = (uint64_t)hi - (uint64_t)lo + 1u;
    uint64_t r = ct_rng_next(state);
    return span == 0 ? (int64_t)r : (int64_t)((uint64_t)lo + r % span);
}

uint64_t ct_seed_for(const ct_options *opt, const char *op)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a of the name, mixed with the seed */
    for (const char *c = op; c && *c; c++)
        h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    uint64_t s = (opt ? opt->seed : CT_DEFAULT_SEED) ^ h;
    (void)ct_rng_next(&s);
    return s;
}

void ct_fill(uint64_t *state, void *p, clvarlen_dtype dtype, size_t n, double scale)
{
    int64_t imax = scale >= 1.0 ? (int64_t)scale : 1;
    for (size_t i = 0; i < n; i++) {
        switch (dtype) {
        case CLVARLEN_DTYPE_I32:
        case CLVARLEN_DTYPE_I64: tu_set(p, dtype, i, (double)ct_rng_int(state, -imax, imax)); break;
        case CLVARLEN_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)ct_rng_next(state); break;
        default: tu_set(p, dtype, i, ct_rng_normal(state) * scale); break;
        }
    }
}

int64_t ct_random_lengths(uint64_t *state, int64_t max_n, int64_t max_len, int64_t max_total,
                          int32_t *lengths)
{
    if (max_n < 1)
        return 0;
    int64_t n = ct_rng_int(state, 1, max_n);
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        double r = ct_rng_uniform(state);
        int64_t len;
        if (r < 0.12)
            len = 0;
        else if (r < 0.24)
            len = 1;
        else if (r < 0.30)
            len = max_len;
        else
            len = ct_rng_int(state, 2, max_len);
        if (len > max_len)
            len = max_len;
        if (len < 0)
            len = 0;
        if (total + len > max_total)
            len = max_total - total;
        lengths[i] = (int32_t)len;
        total += len;
    }
    return n;
}

/* ================================================================ check buffers with guard bands */

#define SENTINEL 0xAB /* unwritten output bytes; compared like any other */

void chk_begin(chk *c, clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
               ct_row *row, const char *op)
{
    memset(c, 0, sizeof *c);
    c->dev = dev;
    c->cpu = cpu;
    c->opt = opt;
    c->row = row;
    c->rng = c->base_rng = ct_seed_for(opt, op);
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
int chk_case_begin(chk *c)
{
    c->cl_case = c->is_cl && c->case_i % 2 == 1;
    c->rng = ct_case_seed(c->base_rng, c->case_i);
    return ct_check_case_runs(c->opt, c->case_i);
}

int chk_n_cases(const chk *c)
{
    return c->opt->quick ? 3 : 10;
}

void chk_fail(chk *c, const char *fmt, ...)
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

/* A guarded (the kit's guard bands), sentinel-filled buffer that lives until the end of
 * the case. */
void *chk_alloc(chk *c, size_t bytes)
{
    if (c->n_alloc == CT_CHK_MAX_ALLOCS) {
        c->oom = 1;
        return NULL;
    }
    tu_guarded *g = &c->alloc[c->n_alloc];
    if (tu_guarded_init(g, bytes, SENTINEL) != 0) {
        c->oom = 1;
        return NULL;
    }
    c->n_alloc++;
    return g->p;
}

/* Ends a case: guard bands intact, counts the case, frees its buffers. */
void chk_end_case(chk *c)
{
    for (int i = 0; i < c->n_alloc; i++) {
        if (!tu_guard_ok(&c->alloc[i]))
            chk_fail(c, "a write outside a buffer (guard band of buffer %d changed)", i);
        tu_guarded_free(&c->alloc[i]);
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

int chk_finish(chk *c)
{
    return c->stop ? 1 : 0;
}

/* Statuses that say the device (or the build) could not run the op at all. */
static int chk_is_stopping(clvarlen_status st)
{
    return st == CLVARLEN_ERROR_OPENCL || st == CLVARLEN_ERROR_KERNEL_NOT_FOUND ||
           st == CLVARLEN_ERROR_KERNEL_BUILD || st == CLVARLEN_ERROR_OUT_OF_MEMORY ||
           st == CLVARLEN_ERROR_NO_OPENCL;
}

/* A call on valid input must succeed; returns 1 if it did. */
int chk_call(chk *c, int on_cpu, clvarlen_status st)
{
    if (st == CLVARLEN_SUCCESS)
        return 1;
    clvarlen_context *ctx = on_cpu ? c->cpu : c->dev;
    if (c->stop)
        return 0; /* dev_finish has said why */
    if (chk_is_stopping(st)) {
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
void chk_expect(chk *c, int on_cpu, clvarlen_status st, clvarlen_status want)
{
    if (st == want)
        return;
    if (chk_is_stopping(st)) {
        chk_call(c, on_cpu, st);
        return;
    }
    chk_fail(c, "%s: returned %s, expected %s", on_cpu ? "cpu" : "device",
             clvarlen_status_name(st), clvarlen_status_name(want));
}

void chk_note_err(chk *c, double e)
{
    if (isnan(e) || e > c->row->max_err)
        c->row->max_err = isnan(e) ? INFINITY : e;
}

/* Bitwise equality of n elements of dtype. */
void chk_same(chk *c, const char *what, const void *got, const void *want,
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
    double e = tu_rel_err(got, want, dtype, n);
    chk_note_err(c, e > 0.0 ? e : 1e-300);
    chk_fail(c, "%s: %zu of %zu differ, first [%zu]: %.9g vs %.9g", what, bad, n, first,
             tu_get(got, dtype, first), tu_get(want, dtype, first));
}

/* Relative L2 within tol (SPEC section 4), for float accumulation. */
void chk_close(chk *c, const char *what, const void *got, const void *want,
               clvarlen_dtype dtype, size_t n, double tol)
{
    double e = tu_rel_err(got, want, dtype, n);
    chk_note_err(c, e);
    if (tol > c->row->tolerance)
        c->row->tolerance = tol;
    if (!(e <= tol))
        chk_fail(c, "%s: rel L2 %.3g > %.3g (max abs %.3g)", what, e, tol,
                 tu_max_abs_err(got, want, dtype, n));
}

/* Nothing may be written on error: the buffer still holds the sentinel. */
void chk_untouched(chk *c, const char *what, const void *p, size_t bytes)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < bytes; i++) {
        if (b[i] != SENTINEL) {
            chk_fail(c, "%s written although the call failed (byte %zu)", what, i);
            return;
        }
    }
}

int64_t chk_rnd(chk *c, int64_t lo, int64_t hi)
{
    return ct_rng_int(&c->rng, lo, hi);
}

#if CLVARLEN_HAVE_OPENCL
/* A device copy of a host buffer at a random byte offset (a multiple of 8,
 * so every element type stays aligned), with the kit's guard bytes on both
 * sides (all `off` bytes before it, TU_GUARD_BYTES after).
 * host_out != NULL: an output, read back into host_out by dev_finish. */
static cl_mem chk_dev_put(chk *c, const void *host, size_t bytes, void *host_out, size_t *offset)
{
    *offset = 0;
    if (!host || c->dm_failed)
        return NULL;
    if (c->n_dm == CT_CHK_MAX_ALLOCS) {
        c->dm_failed = 1;
        return NULL;
    }
    size_t off = 8 * (size_t)chk_rnd(c, 1, 16);
    size_t total = off + bytes + TU_GUARD_BYTES;
    unsigned char *tmp = malloc(total);
    if (!tmp) {
        c->oom = 1;
        c->dm_failed = 1;
        return NULL;
    }
    tu_guard_write_lead(tmp, off, bytes);
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

cl_mem chk_dev_in(chk *c, const void *host, size_t bytes, size_t *offset)
{
    return chk_dev_put(c, host, bytes, NULL, offset);
}

cl_mem chk_dev_out(chk *c, void *host, size_t bytes, size_t *offset)
{
    return chk_dev_put(c, host, bytes, host, offset);
}

/* After a cl_mem call: waits for its event, reads the outputs back, checks
 * every buffer's guard bytes and releases the buffers. Returns st, or
 * CLVARLEN_ERROR_OPENCL (with the note set) when the tool's own OpenCL calls
 * failed. */
clvarlen_status chk_dev_finish(chk *c, clvarlen_status st, cl_event ev)
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
        size_t total = d->offset + d->bytes + TU_GUARD_BYTES;
        unsigned char *tmp = st == CLVARLEN_SUCCESS && !tool_failed ? malloc(total) : NULL;
        if (tmp && clEnqueueReadBuffer(c->queue, d->mem, CL_TRUE, 0, total, tmp, 0, NULL,
                                       NULL) == CL_SUCCESS) {
            if (!tu_guard_intact_lead(tmp, d->offset, d->bytes))
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

double chk_unif(chk *c)
{
    return ct_rng_uniform(&c->rng);
}

/* bench --case TEXT: cases whose name contains TEXT; TEXT may list several
 * alternatives separated by commas, and an alternative starting with '='
 * matches one name exactly. */
int ct_case_wanted(const ct_options *opt, const char *name)
{
    if (!opt->cases || !*opt->cases)
        return 1;
    for (const char *p = opt->cases; *p;) {
        size_t n = strcspn(p, ",");
        if (n > 0) {
            if (p[0] == '=') {
                if (strlen(name) == n - 1 && strncmp(name, p + 1, n - 1) == 0)
                    return 1;
            } else {
                for (const char *q = name; strlen(q) >= n; q++)
                    if (strncmp(q, p, n) == 0)
                        return 1;
            }
        }
        p += n;
        if (*p == ',')
            p++;
    }
    return 0;
}

void ct_progress(const ct_options *opt, const char *fmt, ...)
{
    if (!opt->progress)
        return;
    va_list ap;
    fputs("clvarlen-test: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

uint64_t ct_case_seed(uint64_t base, int i)
{
    uint64_t s = base ^ (0x9E3779B97F4A7C15ull * (uint64_t)(i + 1));
    (void)ct_rng_next(&s);
    return s;
}

int ct_check_case_runs(const ct_options *opt, int i)
{
    return opt->check_case < 0 || opt->check_case == i;
}

int ct_gpu_like(clvarlen_context *ctx)
{
    clvarlen_device_info info;
    if (clvarlen_context_device(ctx, &info) != CLVARLEN_SUCCESS)
        return 0;
    return info.kind == CLVARLEN_DEVICE_DISCRETE_GPU ||
           info.kind == CLVARLEN_DEVICE_INTEGRATED_GPU || info.kind == CLVARLEN_DEVICE_ACCELERATOR;
}

/* clvarlen-test: lists the devices the library sees, checks every implemented
 * op on a device against the CPU fallback, and benchmarks ops against the
 * device's own copy bandwidth.
 *
 * Exit codes: 0 all checks passed, 1 a check failed, 2 usage error, 3 device
 * or library error (a context that could not be created, an op that stopped
 * with an OpenCL or build error).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <clvarlen/clvarlen.h>
#if CLVARLEN_HAVE_OPENCL
#  include <clvarlen/clvarlen-cl.h>
#endif

#include "clvarlen-test.h"

enum { EXIT_PASS = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_DEVICE = 3 };

#define DEFAULT_SEED 1u
#define DEFAULT_MIN_MB 256.0
/* The copy-bandwidth measurement moves at least this much (SPEC of the tool: >= 256 MB). */
#define COPY_MIN_BYTES ((size_t)256 << 20)
/* A benchmark's timed runs stop early once they have used this much time. */
#define BENCH_BUDGET_S 4.0
#define BENCH_MIN_ITERS 5

#if defined(__GNUC__)
#  define CT_PRINTF_ATTR __attribute__((format(printf, 1, 2)))
#else
#  define CT_PRINTF_ATTR
#endif

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
    uint64_t s = (opt ? opt->seed : DEFAULT_SEED) ^ h;
    (void)ct_rng_next(&s);
    return s;
}

static float bits_to_float(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static uint32_t float_to_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    float mag;
    if (exp == 0)
        mag = ldexpf((float)mant, -24);
    else if (exp == 31)
        mag = bits_to_float(0x7f800000u | (mant << 13));
    else
        mag = bits_to_float(((exp + 112u) << 23) | (mant << 13));
    return bits_to_float(float_to_bits(mag) | sign);
}

/* Round to nearest even, as the library and vstore_half do. */
static uint16_t float_to_half(float f)
{
    uint32_t x = float_to_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
    if (ax >= 0x477ff000u) /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) /* below 2^-14: a subnormal half, scaled exactly, rounded by rint */
        return (uint16_t)(sign | (uint16_t)lrintf(bits_to_float(ax) * 16777216.0f));
    uint32_t h = ((ax >> 23) - 112u) << 10 | ((ax >> 13) & 0x3ffu);
    uint32_t rest = ax & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

static float bf16_to_float(uint16_t b)
{
    return bits_to_float((uint32_t)b << 16);
}

static uint16_t float_to_bf16(float f)
{
    uint32_t x = float_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

double ct_get(const void *p, clvarlen_dtype dtype, size_t i)
{
    switch (dtype) {
    case CLVARLEN_DTYPE_F32: return ((const float *)p)[i];
    case CLVARLEN_DTYPE_F16: return half_to_float(((const uint16_t *)p)[i]);
    case CLVARLEN_DTYPE_BF16: return bf16_to_float(((const uint16_t *)p)[i]);
    case CLVARLEN_DTYPE_F64: return ((const double *)p)[i];
    case CLVARLEN_DTYPE_I32: return ((const int32_t *)p)[i];
    case CLVARLEN_DTYPE_I64: return (double)((const int64_t *)p)[i];
    case CLVARLEN_DTYPE_U8: return ((const uint8_t *)p)[i];
    }
    return 0.0;
}

void ct_set(void *p, clvarlen_dtype dtype, size_t i, double x)
{
    switch (dtype) {
    case CLVARLEN_DTYPE_F32: ((float *)p)[i] = (float)x; break;
    case CLVARLEN_DTYPE_F16: ((uint16_t *)p)[i] = float_to_half((float)x); break;
    case CLVARLEN_DTYPE_BF16: ((uint16_t *)p)[i] = float_to_bf16((float)x); break;
    case CLVARLEN_DTYPE_F64: ((double *)p)[i] = x; break;
    case CLVARLEN_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)llround(x); break;
    case CLVARLEN_DTYPE_I64: ((int64_t *)p)[i] = (int64_t)llround(x); break;
    case CLVARLEN_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)llround(x); break;
    }
}

void ct_fill(uint64_t *state, void *p, clvarlen_dtype dtype, size_t n, double scale)
{
    int64_t imax = scale >= 1.0 ? (int64_t)scale : 1;
    for (size_t i = 0; i < n; i++) {
        switch (dtype) {
        case CLVARLEN_DTYPE_I32:
        case CLVARLEN_DTYPE_I64: ct_set(p, dtype, i, (double)ct_rng_int(state, -imax, imax)); break;
        case CLVARLEN_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)ct_rng_next(state); break;
        default: ct_set(p, dtype, i, ct_rng_normal(state) * scale); break;
        }
    }
}

double ct_rel_err(const void *a, const void *b, clvarlen_dtype dtype, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = ct_get(a, dtype, i), y = ct_get(b, dtype, i);
        if (isnan(x) || isnan(y)) /* NaN never passes, not even against NaN */
            return INFINITY;
        if (!isfinite(y)) {
            if (x == y)
                continue;
            return INFINITY;
        }
        if (!isfinite(x))
            return INFINITY;
        num += (x - y) * (x - y);
        den += y * y;
    }
    if (num == 0.0)
        return 0.0;
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

double ct_max_abs_err(const void *a, const void *b, clvarlen_dtype dtype, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = ct_get(a, dtype, i), y = ct_get(b, dtype, i);
        if (isnan(x) || isnan(y)) /* NaN never passes, not even against NaN */
            return INFINITY;
        if (!isfinite(y)) {
            if (x == y)
                continue;
            return INFINITY;
        }
        if (!isfinite(x))
            return INFINITY;
        if (fabs(x - y) > m)
            m = fabs(x - y);
    }
    return m;
}

double ct_tolerance(clvarlen_dtype dtype)
{
    switch (dtype) {
    case CLVARLEN_DTYPE_F32: return 1e-5;
    case CLVARLEN_DTYPE_F16: return 2e-3;
    case CLVARLEN_DTYPE_BF16: return 1e-2;
    case CLVARLEN_DTYPE_F64: return 1e-12;
    default: return 0.0;
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

/* ================================================================ JSON and text helpers */

static void json_str(const char *s)
{
    putchar('"');
    for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
        switch (*c) {
        case '"': fputs("\\\"", stdout); break;
        case '\\': fputs("\\\\", stdout); break;
        case '\n': fputs("\\n", stdout); break;
        case '\r': fputs("\\r", stdout); break;
        case '\t': fputs("\\t", stdout); break;
        default:
            if (*c < 0x20)
                printf("\\u%04x", *c);
            else
                putchar(*c);
        }
    }
    putchar('"');
}

/* JSON has no infinities: non-finite numbers become null. */
static void json_num(double x)
{
    if (isfinite(x) && x == floor(x) && fabs(x) < 1e15)
        printf("%.0f", x); /* byte counts stay exact */
    else if (isfinite(x))
        printf("%.6g", x);
    else
        fputs("null", stdout);
}

static void fmt_bytes(char *buf, size_t n, double bytes)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        u++;
    }
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
}

static int ci_equal(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return 0;
    return *a == *b;
}

/* ================================================================ timing */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int ct_context_is_cl(clvarlen_context *ctx)
{
#if CLVARLEN_HAVE_OPENCL
    cl_context c;
    cl_device_id d;
    cl_command_queue q;
    return ctx && clvarlen_context_get_cl(ctx, &c, &d, &q) == CLVARLEN_SUCCESS;
#else
    (void)ctx;
    return 0;
#endif
}

int ct_bench_iters(const ct_options *opt)
{
    return opt && opt->quick ? 5 : 25;
}

/* Calls timed back to back in one whole-call measurement (see time_one). */
#define BENCH_BURST 8

/* One timed run in seconds, < 0 on error. whole: `burst` calls enqueued
 * back to back, timed from a marker enqueued just before the first to the end
 * of the last call's event, divided by the burst: multi-kernel ops count
 * fully, and the launch gap a serving loop hides behind the previous call is
 * not charged to every call. !whole: the returned event alone (START to END). */
static double time_one(clvarlen_context *dev, void *queue, ct_run_fn fn, void *arg, int whole,
                       int burst)
{
#if CLVARLEN_HAVE_OPENCL
    if (queue) {
        cl_command_queue q = (cl_command_queue)queue;
        cl_event marker = NULL, first = NULL, ev = NULL;
        int runs = whole && burst > 1 ? burst : 1;
        if (clFinish(q) != CL_SUCCESS)
            return -1.0;
        if (whole && clEnqueueMarkerWithWaitList(q, 0, NULL, &marker) != CL_SUCCESS)
            marker = NULL;
        double t0 = now_s();
        for (int r = 0; r < runs; r++) {
            if (ev && r > 1)
                clReleaseEvent(ev);
            ev = NULL;
            if (fn(arg, &ev) != 0) {
                if (marker)
                    clReleaseEvent(marker);
                if (first && first != ev)
                    clReleaseEvent(first);
                if (ev)
                    clReleaseEvent(ev);
                clFinish(q);
                return -1.0;
            }
            if (r == 0)
                first = ev;
        }
        double t;
        if (!ev) { /* the run gave no event: wall clock to the end of the queue */
            clFinish(q);
            t = (now_s() - t0) / runs;
        } else if (clWaitForEvents(1, &ev) != CL_SUCCESS) {
            t = -1.0;
        } else {
            double wall = now_s() - t0;
            cl_ulong start = 0, end = 0, mend = 0;
            if (!first ||
                clGetEventProfilingInfo(first, CL_PROFILING_COMMAND_START, sizeof start, &start,
                                        NULL) != CL_SUCCESS ||
                clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL) !=
                    CL_SUCCESS ||
                end < start) {
                t = wall / runs; /* a queue without profiling (a caller's queue) */
            } else {
                t = (double)(end - start) * 1e-9 / runs;
                /* Use the marker only when its clock is consistent with the op's. */
                if (marker &&
                    clGetEventProfilingInfo(marker, CL_PROFILING_COMMAND_END, sizeof mend, &mend,
                                            NULL) == CL_SUCCESS &&
                    mend > 0 && mend <= start && (double)(end - mend) * 1e-9 <= wall * 1.5 + 1e-4)
                    t = (double)(end - mend) * 1e-9 / runs;
            }
        }
        if (first && first != ev)
            clReleaseEvent(first);
        if (ev)
            clReleaseEvent(ev);
        if (marker)
            clReleaseEvent(marker);
        return t;
    }
#else
    (void)queue;
    (void)whole;
    (void)burst;
#endif
    double t0 = now_s();
    if (fn(arg, NULL) != 0)
        return -1.0;
    if (clvarlen_context_finish(dev) != CLVARLEN_SUCCESS)
        return -1.0;
    return now_s() - t0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double time_median(clvarlen_context *dev, ct_run_fn fn, void *arg, int iters, int whole)
{
    void *queue = NULL;
#if CLVARLEN_HAVE_OPENCL
    cl_context c;
    cl_device_id d;
    cl_command_queue q;
    if (clvarlen_context_get_cl(dev, &c, &d, &q) == CLVARLEN_SUCCESS)
        queue = q;
#endif
    /* Two warm-up runs: the first may compile kernels; the second sizes the loop. */
    if (time_one(dev, queue, fn, arg, whole, 1) < 0.0)
        return -1.0;
    double est = time_one(dev, queue, fn, arg, whole, 1);
    if (est < 0.0)
        return -1.0;
    if (iters < 1)
        iters = 1;
    /* Bursts only where a run is short enough for them to matter. */
    int burst = est < 1e-3 ? BENCH_BURST : 1;
    est *= burst;
    if (est > 0.0 && est * iters > BENCH_BUDGET_S) {
        int fit = (int)(BENCH_BUDGET_S / est);
        iters = fit < BENCH_MIN_ITERS ? (iters < BENCH_MIN_ITERS ? iters : BENCH_MIN_ITERS) : fit;
    }
    double *t = malloc((size_t)iters * sizeof *t);
    if (!t)
        return -1.0;
    for (int i = 0; i < iters; i++) {
        t[i] = time_one(dev, queue, fn, arg, whole, burst);
        if (t[i] < 0.0) {
            free(t);
            return -1.0;
        }
    }
    qsort(t, (size_t)iters, sizeof *t, cmp_double);
    double m = iters % 2 ? t[iters / 2] : 0.5 * (t[iters / 2 - 1] + t[iters / 2]);
    free(t);
    return m;
}

double ct_time_median(clvarlen_context *dev, ct_run_fn fn, void *arg, int iters)
{
    return time_median(dev, fn, arg, iters, 1);
}

double ct_time_median_launch(clvarlen_context *dev, ct_run_fn fn, void *arg, int iters)
{
    return time_median(dev, fn, arg, iters, 0);
}

/* ================================================================ benchmark output */

static int bench_json_count; /* results printed in the current JSON array */

static void bench_json_sep(void)
{
    if (bench_json_count++)
        putchar(',');
    fputs("\n      ", stdout);
}

void ct_bench_report(const ct_options *opt, const char *op, const char *shape, double seconds,
                     double bytes, double flops, double ceiling_ratio, const char *ceiling_name)
{
    double gbps = seconds > 0.0 && bytes > 0.0 ? bytes / seconds * 1e-9 : 0.0;
    double gflops = seconds > 0.0 && flops > 0.0 ? flops / seconds * 1e-9 : 0.0;
    if (opt->json) {
        bench_json_sep();
        fputs("{\"op\": ", stdout);
        json_str(op);
        fputs(", \"shape\": ", stdout);
        json_str(shape);
        fputs(", \"us\": ", stdout);
        json_num(seconds * 1e6);
        fputs(", \"bytes\": ", stdout);
        json_num(bytes);
        fputs(", \"gbps\": ", stdout);
        json_num(gbps);
        if (flops > 0.0) {
            fputs(", \"gflops\": ", stdout);
            json_num(gflops);
        }
        if (ceiling_ratio > 0.0) {
            fputs(", \"ratio\": ", stdout);
            json_num(ceiling_ratio);
            fputs(", \"ceiling\": ", stdout);
            json_str(ceiling_name ? ceiling_name : "ceiling");
        }
        putchar('}');
    } else {
        printf("%-22s %-46s %12.1f us", op, shape, seconds * 1e6);
        if (bytes > 0.0)
            printf(" %10.2f GB/s", gbps);
        if (flops > 0.0)
            printf(" %10.1f GFLOP/s", gflops);
        if (ceiling_ratio > 0.0)
            printf("  %5.2f x %s", ceiling_ratio, ceiling_name ? ceiling_name : "ceiling");
        putchar('\n');
    }
    fflush(stdout);
}

void ct_bench_note(const ct_options *opt, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (opt->json) {
        bench_json_sep();
        fputs("{\"note\": ", stdout);
        json_str(msg);
        putchar('}');
    } else {
        printf("# %s\n", msg);
    }
    fflush(stdout);
}

/* ================================================================ devices */

static const char *vendor_name(clvarlen_vendor v)
{
    switch (v) {
    case CLVARLEN_VENDOR_NVIDIA: return "nvidia";
    case CLVARLEN_VENDOR_AMD: return "amd";
    case CLVARLEN_VENDOR_INTEL: return "intel";
    case CLVARLEN_VENDOR_CPU: return "cpu";
    default: return "other";
    }
}

static const char *kind_name(clvarlen_device_kind k)
{
    switch (k) {
    case CLVARLEN_DEVICE_CPU_FALLBACK: return "cpu-fallback";
    case CLVARLEN_DEVICE_DISCRETE_GPU: return "discrete-gpu";
    case CLVARLEN_DEVICE_INTEGRATED_GPU: return "integrated-gpu";
    case CLVARLEN_DEVICE_OPENCL_CPU: return "opencl-cpu";
    case CLVARLEN_DEVICE_ACCELERATOR: return "accelerator";
    }
    return "unknown";
}

static void caps_string(const clvarlen_device_info *info, char *buf, size_t n)
{
    snprintf(buf, n, "%s%s%s", info->has_fp16 ? "fp16 " : "", info->has_fp64 ? "fp64 " : "",
             info->has_subgroups ? "subgroups " : "");
    if (info->cc_major > 0) {
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "cc %d.%d ", info->cc_major, info->cc_minor);
    }
    size_t len = strlen(buf);
    if (len == 0)
        snprintf(buf, n, "none");
    else
        buf[len - 1] = '\0';
}

/* "[0] pthread-skylake..." style labels for tables. */
static void device_label(int index, const char *name, char *buf, size_t n)
{
    if (index < 0)
        snprintf(buf, n, "cpu");
    else
        snprintf(buf, n, "%d:%.20s", index, name);
}

static void print_device_json(const clvarlen_device_info *d, int is_default)
{
    char caps[96];
    caps_string(d, caps, sizeof caps);
    fputs("{\"index\": ", stdout);
    if (d->index < 0)
        fputs("\"cpu\"", stdout);
    else
        printf("%d", d->index);
    fputs(", \"platform\": ", stdout);
    json_str(d->platform_name);
    fputs(", \"platform_vendor\": ", stdout);
    json_str(d->platform_vendor);
    fputs(", \"vendor_class\": ", stdout);
    json_str(vendor_name(d->vendor));
    fputs(", \"kind\": ", stdout);
    json_str(kind_name(d->kind));
    fputs(", \"name\": ", stdout);
    json_str(d->device_name);
    fputs(", \"driver_version\": ", stdout);
    json_str(d->driver_version);
    fputs(", \"opencl_c_version\": ", stdout);
    json_str(d->opencl_c_version);
    printf(", \"compute_units\": %" PRIu32 ", \"max_clock_mhz\": %" PRIu32
           ", \"global_mem_bytes\": %" PRIu64 ", \"local_mem_bytes\": %" PRIu64
           ", \"max_work_group_size\": %" PRIu64,
           d->compute_units, d->max_clock_mhz, d->global_mem_bytes, d->local_mem_bytes,
           d->max_work_group_size);
    printf(", \"fp16\": %s, \"fp64\": %s, \"subgroups\": %s", d->has_fp16 ? "true" : "false",
           d->has_fp64 ? "true" : "false", d->has_subgroups ? "true" : "false");
    if (d->cc_major > 0)
        printf(", \"compute_capability\": \"%d.%d\"", d->cc_major, d->cc_minor);
    else
        fputs(", \"compute_capability\": null", stdout);
    fputs(", \"capabilities\": ", stdout);
    json_str(caps);
    printf(", \"default\": %s}", is_default ? "true" : "false");
}

static void print_device_text(const clvarlen_device_info *d, int is_default)
{
    char caps[96], mem[32], local[32];
    caps_string(d, caps, sizeof caps);
    fmt_bytes(mem, sizeof mem, (double)d->global_mem_bytes);
    fmt_bytes(local, sizeof local, (double)d->local_mem_bytes);
    if (d->index < 0)
        printf("[cpu] %s%s\n", d->device_name[0] ? d->device_name : "CPU fallback",
               is_default ? "   (default)" : "");
    else
        printf("[%d] %s%s\n", d->index, d->device_name, is_default ? "   (default)" : "");
    if (d->index >= 0)
        printf("    platform:      %s (%s)\n", d->platform_name, d->platform_vendor);
    printf("    class:         vendor %s, %s\n", vendor_name(d->vendor), kind_name(d->kind));
    printf("    compute units: %" PRIu32, d->compute_units);
    if (d->max_clock_mhz)
        printf(" @ %" PRIu32 " MHz", d->max_clock_mhz);
    if (d->max_work_group_size)
        printf(", max work-group %" PRIu64, d->max_work_group_size);
    putchar('\n');
    if (d->global_mem_bytes)
        printf("    memory:        %s global, %s local\n", mem, local);
    if (d->index >= 0) {
        printf("    OpenCL C:      %s; driver %s\n", d->opencl_c_version, d->driver_version);
        printf("    capabilities:  %s\n", caps);
    }
}

static int cmd_list(const ct_options *opt)
{
    size_t count = 0;
    clvarlen_status st = clvarlen_device_count(&count);
    if (st != CLVARLEN_SUCCESS) {
        fprintf(stderr, "clvarlen-test: cannot count devices: %s: %s\n",
                clvarlen_status_name(st), clvarlen_last_error(NULL));
        return EXIT_DEVICE;
    }
    int def = -2;
    char reason[512] = "";
    st = clvarlen_device_select(NULL, &def, reason, sizeof reason);
    if (st != CLVARLEN_SUCCESS) {
        def = -2; /* e.g. CLVARLEN_DEVICE names nothing: still list what exists */
        snprintf(reason, sizeof reason, "no default device: %s: %s", clvarlen_status_name(st),
                 clvarlen_last_error(NULL));
    }
    int rc = EXIT_PASS;
    clvarlen_device_info *infos = calloc(count + 1, sizeof *infos);
    if (!infos) {
        fprintf(stderr, "clvarlen-test: out of memory\n");
        return EXIT_DEVICE;
    }
    int *ok = calloc(count + 1, sizeof *ok);
    if (!ok) {
        free(infos);
        fprintf(stderr, "clvarlen-test: out of memory\n");
        return EXIT_DEVICE;
    }
    for (size_t i = 0; i <= count; i++) {
        int index = i < count ? (int)i : -1;
        st = clvarlen_device_query(index, &infos[i]);
        ok[i] = st == CLVARLEN_SUCCESS;
        if (!ok[i]) {
            fprintf(stderr, "clvarlen-test: cannot query device %d: %s: %s\n", index,
                    clvarlen_status_name(st), clvarlen_last_error(NULL));
            rc = EXIT_DEVICE;
        }
    }
    if (opt->json) {
        fputs("{\"tool\": \"clvarlen-test\", \"version\": ", stdout);
        json_str(CLVARLEN_VERSION_STRING);
        fputs(", \"library\": ", stdout);
        json_str(clvarlen_version_string());
        fputs(", \"command\": \"list\",\n  \"devices\": [", stdout);
        int first = 1;
        for (size_t i = 0; i < count; i++) {
            if (!ok[i])
                continue;
            fputs(first ? "\n    " : ",\n    ", stdout);
            first = 0;
            print_device_json(&infos[i], def == (int)i);
        }
        fputs("],\n  \"cpu_fallback\": ", stdout);
        if (ok[count])
            print_device_json(&infos[count], def == -1);
        else
            fputs("null", stdout);
        fputs(",\n  \"default\": {\"index\": ", stdout);
        if (def == -2)
            fputs("null", stdout);
        else if (def == -1)
            fputs("\"cpu\"", stdout);
        else
            printf("%d", def);
        fputs(", \"reason\": ", stdout);
        json_str(reason);
        printf("},\n  \"exit_code\": %d}\n", rc);
    } else {
        printf("OpenCL devices: %zu%s\n", count,
               count ? "" : " (no OpenCL platform, or a build without OpenCL)");
        for (size_t i = 0; i < count; i++)
            if (ok[i])
                print_device_text(&infos[i], def == (int)i);
        if (ok[count])
            print_device_text(&infos[count], def == -1);
        if (def == -2)
            printf("default: none (%s)\n", reason);
        else if (def == -1)
            printf("default: [cpu] %s\n", reason);
        else
            printf("default: [%d] %s\n", def, reason);
    }
    free(ok);
    free(infos);
    return rc;
}

/* ================================================================ targets and contexts */

typedef struct target {
    int index;      /* OpenCL device index, -1 for the CPU fallback */
    int cpu_self;   /* check: the CPU fallback against itself with another thread count */
    char name[CLVARLEN_NAME_MAX];
    char label[32];
} target;

static clvarlen_status make_context(int index, int threads, clvarlen_context **ctx)
{
    clvarlen_options *o = NULL;
    clvarlen_status st = clvarlen_options_create(&o);
    if (st != CLVARLEN_SUCCESS)
        return st;
    char spec[32];
    if (index < 0)
        snprintf(spec, sizeof spec, "cpu");
    else
        snprintf(spec, sizeof spec, "%d", index);
    st = clvarlen_options_set_device(o, spec);
    if (st == CLVARLEN_SUCCESS && threads > 0)
        st = clvarlen_options_set_threads(o, threads);
    if (st == CLVARLEN_SUCCESS)
        st = clvarlen_context_create(o, ctx);
    clvarlen_options_destroy(o);
    return st;
}

static void target_fill(target *t, int index, int cpu_self)
{
    clvarlen_device_info info;
    memset(&info, 0, sizeof info);
    t->index = index;
    t->cpu_self = cpu_self;
    if (clvarlen_device_query(index, &info) == CLVARLEN_SUCCESS)
        snprintf(t->name, sizeof t->name, "%s", info.device_name);
    else
        snprintf(t->name, sizeof t->name, "%s", index < 0 ? "CPU fallback" : "?");
    device_label(index, t->name, t->label, sizeof t->label);
}

/* The devices a command runs on. for_bench: a CPU-fallback default is
 * benchmarked as it is; for check it is replaced by the OpenCL devices (or a
 * CPU self-consistency run). Returns an exit code; *remark says what was chosen. */
static int resolve_targets(const ct_options *opt, int for_bench, target **out, size_t *n_out,
                           char *remark, size_t remark_size)
{
    size_t count = 0;
    clvarlen_status st = clvarlen_device_count(&count);
    if (st != CLVARLEN_SUCCESS) {
        fprintf(stderr, "clvarlen-test: cannot count devices: %s: %s\n",
                clvarlen_status_name(st), clvarlen_last_error(NULL));
        return EXIT_DEVICE;
    }
    target *t = calloc(count + 1, sizeof *t);
    if (!t) {
        fprintf(stderr, "clvarlen-test: out of memory\n");
        return EXIT_DEVICE;
    }
    size_t n = 0;
    remark[0] = '\0';
    int want_all = opt->device && ci_equal(opt->device, "all");
    int index = -1;
    char reason[400] = "";
    if (want_all) {
        if (count == 0) {
            fprintf(stderr, "clvarlen-test: --device all: no OpenCL device found\n");
            free(t);
            return EXIT_DEVICE;
        }
        snprintf(remark, remark_size, "every OpenCL device (%zu)", count);
    } else {
        st = clvarlen_device_select(opt->device, &index, reason, sizeof reason);
        if (st != CLVARLEN_SUCCESS) {
            fprintf(stderr, "clvarlen-test: %s%s: %s: %s\n",
                    opt->device ? "--device " : "default device",
                    opt->device ? opt->device : "", clvarlen_status_name(st),
                    clvarlen_last_error(NULL));
            free(t);
            return EXIT_DEVICE;
        }
        if (index >= 0 || for_bench) {
            target_fill(&t[n++], index, 0);
            snprintf(remark, remark_size, "%s", reason);
            if (index < 0)
                snprintf(remark + strlen(remark), remark_size - strlen(remark),
                         "%sthe CPU fallback runs through the host-memory API, timed with the "
                         "wall clock",
                         remark[0] ? "; " : "");
        } else if (!opt->device && count > 0) {
            snprintf(remark, remark_size,
                     "the default device is the CPU fallback (%s); comparing it with itself is "
                     "pointless, so every OpenCL device (%zu) is checked against it instead",
                     reason, count);
            want_all = 1;
        } else {
            target_fill(&t[n++], -1, 1);
            snprintf(remark, remark_size,
                     "%s, so the CPU fallback is checked against itself with a different thread "
                     "count (a consistency check; only the integer oracles are independent)",
                     opt->device ? "the CPU fallback was selected" : "no OpenCL device");
        }
    }
    if (want_all)
        for (size_t i = 0; i < count; i++)
            target_fill(&t[n++], (int)i, 0);
    *out = t;
    *n_out = n;
    return EXIT_PASS;
}

static const ct_check *const check_tables[] = {ct_segment_checks, ct_attention_checks,
                                               ct_gated_delta_checks};
static const ct_bench *const bench_tables[] = {ct_segment_benches, ct_attention_benches,
                                               ct_gated_delta_benches};
#define N_TABLES 3

/* --op NAME: a prefix of the op's name, or the family's name. */
static int op_matches(const char *filter, const char *op, const char *family)
{
    if (!filter || !*filter)
        return 1;
    if (strncmp(op, filter, strlen(filter)) == 0)
        return 1;
    return family && strcmp(family, filter) == 0;
}

static size_t count_checks(const char *filter)
{
    size_t n = 0;
    for (int t = 0; t < N_TABLES; t++)
        for (const ct_check *c = check_tables[t]; c->op; c++)
            n += (size_t)op_matches(filter, c->op, c->family);
    return n;
}

static size_t count_benches(const char *filter)
{
    size_t n = 0;
    for (int t = 0; t < N_TABLES; t++)
        for (const ct_bench *b = bench_tables[t]; b->op; b++)
            n += (size_t)op_matches(filter, b->op, b->family);
    return n;
}

static void print_header_json(const char *command)
{
    fputs("{\"tool\": \"clvarlen-test\", \"version\": ", stdout);
    json_str(CLVARLEN_VERSION_STRING);
    fputs(", \"library\": ", stdout);
    json_str(clvarlen_version_string());
    fputs(", \"command\": ", stdout);
    json_str(command);
}

/* ================================================================ check */

typedef struct check_result {
    ct_row row;
    const char *family;
    const char *result; /* PASS, FAIL, ERROR */
    int device_index;
    char device[CLVARLEN_NAME_MAX];
    char label[32];
} check_result;

typedef struct result_list {
    check_result *v;
    size_t n, cap;
} result_list;

static check_result *result_push(result_list *l)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 32;
        check_result *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return NULL;
        l->v = v;
        l->cap = cap;
    }
    check_result *r = &l->v[l->n++];
    memset(r, 0, sizeof *r);
    return r;
}

static void print_check_row(const check_result *r)
{
    printf("%-24s %-22s %6d %11.3g %10.3g  %-5s  %s\n", r->row.op, r->label, r->row.cases,
           r->row.max_err, r->row.tolerance, r->result, r->row.note);
    fflush(stdout);
}

static int cmd_check(const ct_options *opt)
{
    if (count_checks(opt->op) == 0) {
        fprintf(stderr, "clvarlen-test: no check matches --op %s\n", opt->op);
        return EXIT_USAGE;
    }
    target *targets = NULL;
    size_t n_targets = 0;
    char remark[1024];
    int rc = resolve_targets(opt, 0, &targets, &n_targets, remark, sizeof remark);
    if (rc != EXIT_PASS)
        return rc;

    result_list results = {NULL, 0, 0};
    size_t passed = 0, failed = 0, errored = 0;
    char errors[8][400];
    size_t n_errors = 0;

    if (!opt->json) {
        printf("clvarlen-test %s (library %s): check, seed %" PRIu64 "%s\n",
               CLVARLEN_VERSION_STRING, clvarlen_version_string(), opt->seed,
               opt->quick ? ", quick" : "");
        if (remark[0])
            printf("devices: %s\n", remark);
    }

    clvarlen_context *cpu = NULL;
    clvarlen_status st = make_context(-1, 0, &cpu);
    if (st != CLVARLEN_SUCCESS) {
        fprintf(stderr, "clvarlen-test: cannot create the CPU fallback context: %s: %s\n",
                clvarlen_status_name(st), clvarlen_last_error(NULL));
        free(targets);
        return EXIT_DEVICE;
    }
    int cpu_threads = clvarlen_context_threads(cpu);

    for (size_t ti = 0; ti < n_targets; ti++) {
        const target *tg = &targets[ti];
        clvarlen_context *dev = NULL;
        int threads = tg->cpu_self ? (cpu_threads > 1 ? 1 : 2) : 0;
        st = make_context(tg->index, threads, &dev);
        if (st != CLVARLEN_SUCCESS) {
            if (n_errors < 8)
                snprintf(errors[n_errors++], sizeof errors[0], "%s: cannot create a context: %s: %s",
                         tg->label, clvarlen_status_name(st), clvarlen_last_error(NULL));
            fprintf(stderr, "clvarlen-test: device %s: cannot create a context: %s: %s\n",
                    tg->label, clvarlen_status_name(st), clvarlen_last_error(NULL));
            errored++;
            continue;
        }
        if (!opt->json) {
            if (tg->cpu_self)
                printf("\ndevice %s: CPU fallback with %d thread%s vs CPU fallback with %d\n",
                       tg->label, clvarlen_context_threads(dev),
                       clvarlen_context_threads(dev) == 1 ? "" : "s", cpu_threads);
            else
                printf("\ndevice %s: %s vs CPU fallback (%d threads)\n", tg->label, tg->name,
                       cpu_threads);
            printf("%-24s %-22s %6s %11s %10s  %-5s  %s\n", "op", "device", "cases", "max error",
                   "tolerance", "result", "note");
        }
        for (int t = 0; t < N_TABLES; t++) {
            for (const ct_check *c = check_tables[t]; c->op; c++) {
                if (!op_matches(opt->op, c->op, c->family))
                    continue;
                check_result *r = result_push(&results);
                if (!r) {
                    fprintf(stderr, "clvarlen-test: out of memory\n");
                    errored++;
                    goto done;
                }
                snprintf(r->row.op, sizeof r->row.op, "%s", c->op);
                r->family = c->family;
                r->device_index = tg->index;
                snprintf(r->device, sizeof r->device, "%s", tg->name);
                snprintf(r->label, sizeof r->label, "%s", tg->label);
                int frc = c->fn(dev, cpu, opt, &r->row);
                if (frc != 0) {
                    r->result = "ERROR";
                    errored++;
                } else if (r->row.failed > 0) {
                    r->result = "FAIL";
                    failed++;
                } else {
                    r->result = "PASS";
                    passed++;
                }
                if (!opt->json)
                    print_check_row(r);
            }
        }
    done:
        clvarlen_context_destroy(dev);
    }
    clvarlen_context_destroy(cpu);

    rc = failed ? EXIT_FAIL : errored ? EXIT_DEVICE : EXIT_PASS;
    if (opt->json) {
        print_header_json("check");
        printf(", \"seed\": %" PRIu64 ", \"quick\": %s,\n  \"devices\": ", opt->seed,
               opt->quick ? "true" : "false");
        json_str(remark);
        fputs(",\n  \"results\": [", stdout);
        for (size_t i = 0; i < results.n; i++) {
            const check_result *r = &results.v[i];
            fputs(i ? ",\n    " : "\n    ", stdout);
            fputs("{\"op\": ", stdout);
            json_str(r->row.op);
            fputs(", \"family\": ", stdout);
            json_str(r->family);
            fputs(", \"device\": ", stdout);
            json_str(r->device);
            fputs(", \"device_index\": ", stdout);
            if (r->device_index < 0)
                fputs("\"cpu\"", stdout);
            else
                printf("%d", r->device_index);
            printf(", \"cases\": %d, \"failed_cases\": %d, \"max_err\": ", r->row.cases,
                   r->row.failed);
            json_num(r->row.max_err);
            fputs(", \"tolerance\": ", stdout);
            json_num(r->row.tolerance);
            fputs(", \"result\": ", stdout);
            json_str(r->result);
            fputs(", \"note\": ", stdout);
            json_str(r->row.note);
            putchar('}');
        }
        fputs("],\n  \"errors\": [", stdout);
        for (size_t i = 0; i < n_errors; i++) {
            if (i)
                fputs(", ", stdout);
            json_str(errors[i]);
        }
        printf("],\n  \"passed\": %zu, \"failed\": %zu, \"errors_count\": %zu, \"exit_code\": %d}\n",
               passed, failed, errored, rc);
    } else {
        printf("\n%zu passed, %zu failed, %zu error%s -> %s\n", passed, failed, errored,
               errored == 1 ? "" : "s",
               rc == EXIT_PASS ? "PASS" : rc == EXIT_FAIL ? "FAIL" : "ERROR");
    }
    fflush(stdout);
    free(results.v);
    free(targets);
    return rc;
}

/* ================================================================ copy bandwidth */

typedef struct copy_bw {
    double gbps;          /* the better of the methods, bytes read + written per second / 1e9 */
    const char *method;   /* which one */
    double buffer_gbps;   /* clEnqueueCopyBuffer (0: not measured) */
    double kernel_gbps;   /* the tool's copy kernel (0: not measured) */
    double bytes;         /* bytes copied per run (read and write each) */
} copy_bw;

/* CPU: memcpy split over the context's threads. */
typedef struct cpu_copy {
    unsigned char *dst;
    const unsigned char *src;
    size_t bytes;
    int threads;
} cpu_copy;

typedef struct cpu_copy_part {
    const cpu_copy *c;
    int part;
} cpu_copy_part;

static void *cpu_copy_worker(void *arg)
{
    const cpu_copy_part *p = arg;
    size_t chunk = (p->c->bytes / (size_t)p->c->threads + 63) & ~(size_t)63;
    size_t begin = chunk * (size_t)p->part;
    size_t end = begin + chunk < p->c->bytes ? begin + chunk : p->c->bytes;
    if (begin < end)
        memcpy(p->c->dst + begin, p->c->src + begin, end - begin);
    return NULL;
}

static int run_cpu_copy(void *arg, void *event_out)
{
    (void)event_out;
    const cpu_copy *c = arg;
    pthread_t tid[64];
    cpu_copy_part part[64];
    int started = 0;
    for (int i = 1; i < c->threads && i < 64; i++) {
        part[i].c = c;
        part[i].part = i;
        if (pthread_create(&tid[i], NULL, cpu_copy_worker, &part[i]) != 0)
            break;
        started = i;
    }
    part[0].c = c;
    part[0].part = 0;
    cpu_copy_worker(&part[0]);
    for (int i = 1; i <= started; i++)
        pthread_join(tid[i], NULL);
    /* Threads that failed to start: copy their parts here. */
    for (int i = started + 1; i < c->threads && i < 64; i++) {
        part[i].c = c;
        part[i].part = i;
        cpu_copy_worker(&part[i]);
    }
    return 0;
}

static size_t copy_bytes_for(const ct_options *opt)
{
    double want = opt->min_mbytes * 1e6;
    size_t bytes = want > (double)COPY_MIN_BYTES ? (size_t)want : COPY_MIN_BYTES;
    return bytes & ~(size_t)63;
}

static int measure_copy_cpu(clvarlen_context *ctx, const ct_options *opt, copy_bw *bw)
{
    cpu_copy c;
    c.bytes = copy_bytes_for(opt);
    c.threads = clvarlen_context_threads(ctx);
    if (c.threads < 1)
        c.threads = 1;
    if (c.threads > 64)
        c.threads = 64;
    unsigned char *src = malloc(c.bytes), *dst = malloc(c.bytes);
    if (!src || !dst) {
        free(src);
        free(dst);
        return -1;
    }
    memset(src, 1, c.bytes); /* touch every page before timing */
    memset(dst, 0, c.bytes);
    c.src = src;
    c.dst = dst;
    double t = ct_time_median(ctx, run_cpu_copy, &c, ct_bench_iters(opt));
    free(src);
    free(dst);
    if (t <= 0.0)
        return -1;
    bw->bytes = (double)c.bytes;
    bw->buffer_gbps = 2.0 * (double)c.bytes / t * 1e-9;
    bw->gbps = bw->buffer_gbps;
    bw->method = "memcpy";
    return 0;
}

#if CLVARLEN_HAVE_OPENCL
typedef struct cl_copy {
    cl_command_queue queue;
    cl_kernel kernel; /* NULL: clEnqueueCopyBuffer */
    cl_mem src, dst;
    size_t bytes;
    size_t global, local;
} cl_copy;

static int run_cl_copy(void *arg, void *event_out)
{
    const cl_copy *c = arg;
    cl_event *ev = event_out;
    cl_int err;
    if (c->kernel)
        err = clEnqueueNDRangeKernel(c->queue, c->kernel, 1, NULL, &c->global, &c->local, 0, NULL,
                                     ev);
    else
        err = clEnqueueCopyBuffer(c->queue, c->src, c->dst, 0, 0, c->bytes, 0, NULL, ev);
    return err != CL_SUCCESS;
}

/* One uint4 per work-item: the plainest streaming copy, which vendors' compilers handle well. */
static const char copy_kernel_source[] =
    "__kernel void ct_copy(__global const uint4 *src, __global uint4 *dst, ulong n)\n"
    "{\n"
    "    size_t i = get_global_id(0);\n"
    "    if (i < n)\n"
    "        dst[i] = src[i];\n"
    "}\n";

static int measure_copy_cl(clvarlen_context *ctx, const ct_options *opt, copy_bw *bw, char *err,
                           size_t err_size)
{
    cl_context clc;
    cl_device_id dev;
    cl_command_queue q;
    if (clvarlen_context_get_cl(ctx, &clc, &dev, &q) != CLVARLEN_SUCCESS) {
        snprintf(err, err_size, "no OpenCL objects in the context");
        return -1;
    }
    cl_ulong max_alloc = 0, global_mem = 0;
    size_t max_wg = 256;
    clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global_mem, &global_mem, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wg, &max_wg, NULL);
    size_t bytes = copy_bytes_for(opt);
    if (max_alloc && bytes > max_alloc)
        bytes = (size_t)max_alloc & ~(size_t)63;
    if (global_mem && bytes > global_mem / 4)
        bytes = (size_t)(global_mem / 4) & ~(size_t)63;

    cl_copy c;
    memset(&c, 0, sizeof c);
    c.queue = q;
    c.bytes = bytes;
    cl_int e1 = CL_SUCCESS, e2 = CL_SUCCESS;
    c.src = clCreateBuffer(clc, CL_MEM_READ_WRITE, bytes, NULL, &e1);
    c.dst = clCreateBuffer(clc, CL_MEM_READ_WRITE, bytes, NULL, &e2);
    int rc = -1;
    cl_program prog = NULL;
    if (e1 != CL_SUCCESS || e2 != CL_SUCCESS) {
        snprintf(err, err_size, "clCreateBuffer of %zu bytes failed (%d, %d)", bytes, (int)e1,
                 (int)e2);
        goto out;
    }
    cl_uint pattern = 0x3c003c00u;
    if (clEnqueueFillBuffer(q, c.src, &pattern, sizeof pattern, 0, bytes, 0, NULL, NULL) !=
            CL_SUCCESS ||
        clEnqueueFillBuffer(q, c.dst, &pattern, sizeof pattern, 0, bytes, 0, NULL, NULL) !=
            CL_SUCCESS ||
        clFinish(q) != CL_SUCCESS) {
        snprintf(err, err_size, "clEnqueueFillBuffer failed");
        goto out;
    }
    bw->bytes = (double)bytes;
    int iters = ct_bench_iters(opt);
    double t = ct_time_median_launch(ctx, run_cl_copy, &c, iters);
    bw->buffer_gbps = t > 0.0 ? 2.0 * (double)bytes / t * 1e-9 : 0.0;

    const char *src = copy_kernel_source;
    cl_int e = CL_SUCCESS;
    prog = clCreateProgramWithSource(clc, 1, &src, NULL, &e);
    if (e == CL_SUCCESS)
        e = clBuildProgram(prog, 1, &dev, "", NULL, NULL);
    if (e == CL_SUCCESS)
        c.kernel = clCreateKernel(prog, "ct_copy", &e);
    cl_ulong n16 = bytes / 16;
    if (e == CL_SUCCESS) {
        e = clSetKernelArg(c.kernel, 0, sizeof c.src, &c.src);
        if (e == CL_SUCCESS)
            e = clSetKernelArg(c.kernel, 1, sizeof c.dst, &c.dst);
        if (e == CL_SUCCESS)
            e = clSetKernelArg(c.kernel, 2, sizeof n16, &n16);
    }
    if (e == CL_SUCCESS) {
        c.local = max_wg < 256 ? max_wg : 256;
        c.global = ((size_t)n16 + c.local - 1) / c.local * c.local;
        t = ct_time_median_launch(ctx, run_cl_copy, &c, iters);
        bw->kernel_gbps = t > 0.0 ? 2.0 * (double)bytes / t * 1e-9 : 0.0;
    }
    if (bw->kernel_gbps > bw->buffer_gbps) {
        bw->gbps = bw->kernel_gbps;
        bw->method = "copy kernel";
    } else {
        bw->gbps = bw->buffer_gbps;
        bw->method = "clEnqueueCopyBuffer";
    }
    if (bw->gbps > 0.0)
        rc = 0;
    else
        snprintf(err, err_size, "neither clEnqueueCopyBuffer nor the copy kernel could be timed");
out:
    if (c.kernel)
        clReleaseKernel(c.kernel);
    if (prog)
        clReleaseProgram(prog);
    if (c.src)
        clReleaseMemObject(c.src);
    if (c.dst)
        clReleaseMemObject(c.dst);
    return rc;
}
#endif

/* ================================================================ bench */

static int cmd_bench(const ct_options *opt)
{
    if (count_benches(opt->op) == 0) {
        fprintf(stderr, "clvarlen-test: no benchmark matches --op %s\n", opt->op);
        return EXIT_USAGE;
    }
    target *targets = NULL;
    size_t n_targets = 0;
    char remark[1024];
    int rc = resolve_targets(opt, 1, &targets, &n_targets, remark, sizeof remark);
    if (rc != EXIT_PASS)
        return rc;
    size_t errored = 0;
    if (opt->json) {
        print_header_json("bench");
        fputs(", \"min_mb\": ", stdout);
        json_num(opt->min_mbytes);
        fputs(", \"devices\": ", stdout);
        json_str(remark);
        fputs(",\n  \"runs\": [", stdout);
    } else {
        printf("clvarlen-test %s (library %s): bench, >= %.0f MB moved per measurement%s\n",
               CLVARLEN_VERSION_STRING, clvarlen_version_string(), opt->min_mbytes,
               opt->quick ? ", quick" : "");
        if (remark[0])
            printf("devices: %s\n", remark);
        if (opt->min_mbytes < 64.0)
            printf("note: below 64 MB per measurement the data may stay in caches, so ratios "
                   "to the copy bandwidth can exceed 1\n");
    }
    for (size_t ti = 0; ti < n_targets; ti++) {
        const target *tg = &targets[ti];
        char errs[8][400];
        size_t n_errs = 0;
        clvarlen_context *dev = NULL;
        clvarlen_status st = make_context(tg->index, 0, &dev);
        int is_cl = st == CLVARLEN_SUCCESS && ct_context_is_cl(dev);
        copy_bw bw;
        memset(&bw, 0, sizeof bw);
        if (st != CLVARLEN_SUCCESS) {
            snprintf(errs[n_errs++], sizeof errs[0], "cannot create a context: %s: %s",
                     clvarlen_status_name(st), clvarlen_last_error(NULL));
        } else {
            char err[300] = "";
            int crc;
#if CLVARLEN_HAVE_OPENCL
            if (is_cl)
                crc = measure_copy_cl(dev, opt, &bw, err, sizeof err);
            else
#endif
                crc = measure_copy_cpu(dev, opt, &bw);
            if (crc != 0)
                snprintf(errs[n_errs++], sizeof errs[0], "copy bandwidth: %s",
                         err[0] ? err : "measurement failed");
        }
        if (opt->json) {
            fputs(ti ? ",\n    " : "\n    ", stdout);
            fputs("{\"device\": ", stdout);
            json_str(tg->name);
            fputs(", \"device_index\": ", stdout);
            if (tg->index < 0)
                fputs("\"cpu\"", stdout);
            else
                printf("%d", tg->index);
            printf(", \"timing\": \"%s\"", is_cl ? "opencl-profiling" : "wall-clock");
            fputs(",\n     \"copy\": {\"gbps\": ", stdout);
            json_num(bw.gbps);
            fputs(", \"method\": ", stdout);
            json_str(bw.method ? bw.method : "");
            fputs(", \"copy_buffer_gbps\": ", stdout);
            json_num(bw.buffer_gbps);
            fputs(", \"copy_kernel_gbps\": ", stdout);
            json_num(bw.kernel_gbps);
            fputs(", \"bytes\": ", stdout);
            json_num(bw.bytes);
            fputs("},\n     \"results\": [", stdout);
        } else {
            printf("\ndevice %s: %s (%s)\n", tg->label, tg->name,
                   is_cl ? "cl_mem entry points, device time from profiling events, median"
                         : "host-memory API, wall-clock time, median");
            if (bw.gbps > 0.0) {
                char size[32];
                fmt_bytes(size, sizeof size, bw.bytes);
                if (is_cl)
                    printf("copy bandwidth (read + write, %s buffers): clEnqueueCopyBuffer %.2f "
                           "GB/s, copy kernel %.2f GB/s -> %.2f GB/s (%s)\n",
                           size, bw.buffer_gbps, bw.kernel_gbps, bw.gbps, bw.method);
                else
                    printf("copy bandwidth (read + write, %s buffers): memcpy on %d threads "
                           "%.2f GB/s\n",
                           size, clvarlen_context_threads(dev), bw.gbps);
            }
            printf("%-22s %-46s %15s %15s\n", "op", "shape", "time", "bandwidth");
        }
        fflush(stdout);
        bench_json_count = 0;
        if (st == CLVARLEN_SUCCESS) {
            for (int t = 0; t < N_TABLES; t++) {
                for (const ct_bench *b = bench_tables[t]; b->op; b++) {
                    if (!op_matches(opt->op, b->op, b->family))
                        continue;
                    if (b->fn(dev, opt, bw.gbps) != 0) {
                        if (n_errs < 8)
                            snprintf(errs[n_errs++], sizeof errs[0], "bench %s failed", b->op);
                        if (!opt->json)
                            fprintf(stderr, "clvarlen-test: device %s: bench %s failed\n",
                                    tg->label, b->op);
                    }
                }
            }
        }
        if (opt->json) {
            fputs("],\n     \"errors\": [", stdout);
            for (size_t i = 0; i < n_errs; i++) {
                if (i)
                    fputs(", ", stdout);
                json_str(errs[i]);
            }
            fputs("]}", stdout);
        } else {
            for (size_t i = 0; i < n_errs; i++)
                fprintf(stderr, "clvarlen-test: device %s: %s\n", tg->label, errs[i]);
        }
        errored += n_errs;
        clvarlen_context_destroy(dev);
    }
    rc = errored ? EXIT_DEVICE : EXIT_PASS;
    if (opt->json)
        printf("],\n  \"exit_code\": %d}\n", rc);
    fflush(stdout);
    free(targets);
    return rc;
}

/* ================================================================ command line */

static void print_help(void)
{
    printf(
        "Usage: clvarlen-test [COMMAND] [OPTIONS]\n"
        "\n"
        "Checks clvarlen's ops on an OpenCL device against the built-in CPU fallback,\n"
        "lists devices, and benchmarks ops against the device's copy bandwidth.\n"
        "\n"
        "Commands:\n"
        "  list               every OpenCL device, the CPU fallback and the default device\n"
        "  check              compare every implemented op with the CPU fallback (default)\n"
        "  bench              copy bandwidth, then GB/s of every benchmark\n"
        "\n"
        "Options:\n"
        "  --device D         cpu, all, an index from 'list', or a substring of the\n"
        "                     platform, vendor or device name (default: CLVARLEN_DEVICE,\n"
        "                     else discrete GPU, integrated GPU, OpenCL CPU, CPU fallback)\n"
        "  --op NAME          only ops whose name starts with NAME, or of family NAME\n"
        "                     (segment, attention, gated-delta)\n"
        "  --json             one JSON document on stdout\n"
        "  --quick            check: fewer, smaller cases; bench: fewer timed runs\n"
        "  --seed S           random seed of the check data (default %u)\n"
        "  --min-mb M         bench: megabytes moved per measurement (default %.0f)\n"
        "  -h, --help         this text\n"
        "  -V, --version      the tool's and the library's version\n"
        "\n"
        "Exit status: 0 all passed, 1 a check failed, 2 usage error,\n"
        "3 device or library error.\n"
        "Environment: CLVARLEN_DEVICE, CLVARLEN_KERNEL_PATH, CLVARLEN_CACHE_DIR, CLVARLEN_LOG.\n"
        "See clvarlen-test(1).\n",
        DEFAULT_SEED, DEFAULT_MIN_MB);
}

static int usage_error(const char *fmt, ...) CT_PRINTF_ATTR;

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("clvarlen-test: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'clvarlen-test --help'.\n", stderr);
    return EXIT_USAGE;
}

int main(int argc, char **argv)
{
    ct_options opt;
    memset(&opt, 0, sizeof opt);
    opt.seed = DEFAULT_SEED;
    opt.min_mbytes = DEFAULT_MIN_MB;
    const char *cmd = NULL;
    int seen_quick = 0, seen_seed = 0, seen_min_mb = 0, seen_device = 0, seen_op = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] == '\0') {
            if (cmd)
                return usage_error("unexpected argument '%s'", a);
            if (strcmp(a, "list") && strcmp(a, "check") && strcmp(a, "bench"))
                return usage_error("unknown command '%s'", a);
            cmd = a;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            print_help();
            return EXIT_PASS;
        }
        if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
            printf("clvarlen-test %s (library %s)\n", CLVARLEN_VERSION_STRING,
                   clvarlen_version_string());
            return EXIT_PASS;
        }
        /* --name VALUE or --name=VALUE */
        char name[32];
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        if (len >= sizeof name)
            return usage_error("unknown option '%s'", a);
        memcpy(name, a, len);
        name[len] = '\0';
        int takes_value = !strcmp(name, "--device") || !strcmp(name, "--op") ||
                          !strcmp(name, "--seed") || !strcmp(name, "--min-mb");
        int is_flag = !strcmp(name, "--json") || !strcmp(name, "--quick");
        if (!takes_value && !is_flag)
            return usage_error("unknown option '%s'", a);
        if (is_flag && eq)
            return usage_error("option '%s' takes no value", name);
        const char *value = NULL;
        if (takes_value) {
            if (eq)
                value = eq + 1;
            else if (i + 1 < argc)
                value = argv[++i];
            else
                return usage_error("option '%s' needs a value", name);
            if (!*value)
                return usage_error("option '%s' needs a non-empty value", name);
        }
        if (!strcmp(name, "--json")) {
            opt.json = 1;
        } else if (!strcmp(name, "--quick")) {
            opt.quick = 1;
            seen_quick = 1;
        } else if (!strcmp(name, "--device")) {
            opt.device = value;
            seen_device = 1;
        } else if (!strcmp(name, "--op")) {
            opt.op = value;
            seen_op = 1;
        } else if (!strcmp(name, "--seed")) {
            char *end;
            errno = 0;
            int hex = value[0] == '0' && (value[1] == 'x' || value[1] == 'X');
            unsigned long long s = strtoull(value, &end, hex ? 16 : 10);
            if (errno || *end || value[0] == '-')
                return usage_error("--seed: '%s' is not an unsigned integer", value);
            opt.seed = (uint64_t)s;
            seen_seed = 1;
        } else { /* --min-mb */
            char *end;
            errno = 0;
            double m = strtod(value, &end);
            if (errno || *end || !(m > 0.0) || m > 1e7)
                return usage_error("--min-mb: '%s' is not a positive number of megabytes",
                                   value);
            opt.min_mbytes = m;
            seen_min_mb = 1;
        }
    }
    if (!cmd)
        cmd = "check";
    if (!strcmp(cmd, "list")) {
        if (seen_device || seen_op || seen_quick || seen_seed || seen_min_mb)
            return usage_error("'list' takes only --json");
        return cmd_list(&opt);
    }
    if (!strcmp(cmd, "check")) {
        if (seen_min_mb)
            return usage_error("--min-mb applies to 'bench' only");
        return cmd_check(&opt);
    }
    return cmd_bench(&opt);
}

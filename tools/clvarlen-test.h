/* clvarlen-test: shared declarations between the driver (clvarlen-test.c)
 * and the per-family checks and benchmarks (check-*.c, bench-*.c).
 */
#ifndef CLVARLEN_TEST_TOOL_H
#define CLVARLEN_TEST_TOOL_H

#include <stddef.h>
#include <stdint.h>

#include <clvarlen/clvarlen.h>

typedef struct ct_options {
    const char *device;   /* --device spec, NULL: default */
    const char *op;       /* --op filter, NULL: all */
    int json;             /* --json */
    int quick;            /* --quick: fewer, smaller cases */
    uint64_t seed;        /* --seed */
    double min_mbytes;    /* bench: minimum MB moved per measurement */
} ct_options;

/* One row of the check table. */
typedef struct ct_row {
    char op[48];
    int cases;
    double max_err;   /* max relative L2 error over cases (0 for bitwise ops that matched) */
    double tolerance; /* the tolerance applied */
    int failed;       /* cases that failed */
    char note[160];   /* first failure, or a remark */
} ct_row;

/* Check callbacks: run `op` on `dev` and on `cpu` (the CPU fallback) over
 * random varlen batches and fill `row`. Return 0 if the op ran (pass or fail
 * recorded in row), non-zero on an error that stopped it (note says why). */
typedef int (*ct_check_fn)(clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
                           ct_row *row);

typedef struct ct_check {
    const char *op;       /* name matched by --op (prefix match, e.g. "gather", "cp") */
    const char *family;   /* "segment", "attention", "gated-delta" */
    ct_check_fn fn;
} ct_check;

/* Each family exports its checks as a NULL-terminated table. */
extern const ct_check ct_segment_checks[];
extern const ct_check ct_attention_checks[];
extern const ct_check ct_gated_delta_checks[];

/* Benchmarks: print human-readable lines (or JSON lines with --json) to stdout;
 * return 0 on success. `copy_gbps` is the device copy bandwidth measured in
 * this run (bytes read + written per second / 1e9), for ratios. */
typedef int (*ct_bench_fn)(clvarlen_context *dev, const ct_options *opt, double copy_gbps);
typedef struct ct_bench {
    const char *op;
    const char *family;
    ct_bench_fn fn;
} ct_bench;
extern const ct_bench ct_segment_benches[];
extern const ct_bench ct_attention_benches[];
extern const ct_bench ct_gated_delta_benches[];

/* Utilities from clvarlen-test.c. */
uint64_t ct_rng_next(uint64_t *state);
double ct_rng_uniform(uint64_t *state);          /* [0, 1) */
double ct_rng_normal(uint64_t *state);
void ct_fill(uint64_t *state, void *p, clvarlen_dtype dtype, size_t n, double scale);
double ct_get(const void *p, clvarlen_dtype dtype, size_t i);
/* Relative L2 error of a against b (both dtype, n elements); +inf if NaN/Inf appears in a where b is finite. */
double ct_rel_err(const void *a, const void *b, clvarlen_dtype dtype, size_t n);
/* Random varlen lengths (with empty and length-1 sequences); returns n. */
int64_t ct_random_lengths(uint64_t *state, int64_t max_n, int64_t max_len, int64_t max_total,
                          int32_t *lengths);
/* Median device time in seconds of `iters` runs of fn(arg) on dev (after warm-up),
 * measured with OpenCL profiling when dev is an OpenCL context, else wall clock.
 * fn enqueues one run and returns its last event through *event (may be NULL
 * on the CPU path). Declared here without OpenCL types: event is a cl_event*. */
typedef int (*ct_run_fn)(void *arg, void *event_out);
double ct_time_median(clvarlen_context *dev, ct_run_fn fn, void *arg, int iters);
/* Emits a benchmark result line (text or JSON per opt->json). */
void ct_bench_report(const ct_options *opt, const char *op, const char *shape, double seconds,
                     double bytes, double flops, double ceiling_ratio, const char *ceiling_name);

/* Additions for the tool's drivers and families (tools/clvarlen-test.c). */
/* Stores x into element i, rounded to nearest even in float dtypes. */
void ct_set(void *p, clvarlen_dtype dtype, size_t i, double x);
/* Uniform integer in [lo, hi] inclusive. */
int64_t ct_rng_int(uint64_t *state, int64_t lo, int64_t hi);
/* A seed for one op derived from --seed and the op's name, so that --op
 * filtering does not change the data an op sees. */
uint64_t ct_seed_for(const ct_options *opt, const char *op);
/* Largest |a[i] - b[i]| over n elements; inf where either holds a NaN, or an infinity the
 * other does not match. ct_rel_err (relative L2) treats NaN and infinities the same way. */
double ct_max_abs_err(const void *a, const void *b, clvarlen_dtype dtype, size_t n);
/* SPEC section 4 tolerance of a float dtype (f32 1e-5, f16 2e-3, bf16 1e-2; 0 otherwise). */
double ct_tolerance(clvarlen_dtype dtype);
/* 1 if the context runs on OpenCL (clvarlen_context_get_cl succeeds). */
int ct_context_is_cl(clvarlen_context *ctx);
/* As ct_time_median, but timing only the returned event (START to END): for
 * operations that are one kernel launch. ct_time_median itself enqueues
 * runs shorter than a millisecond in bursts of 8 back to back and times from a marker enqueued before the first
 * to the end of the last one's event, divided by the burst, so it covers every
 * command a run enqueued. Both return a negative value on error. */
double ct_time_median_launch(clvarlen_context *dev, ct_run_fn fn, void *arg, int iters);
/* Timing iterations for a benchmark: fewer with --quick. */
int ct_bench_iters(const ct_options *opt);
/* A remark among the benchmark results (a "# ..." line, or {"note": ...} with --json).
 * With --json, benchmarks print only through ct_bench_report and ct_bench_note,
 * so that the run stays one JSON document. */
void ct_bench_note(const ct_options *opt, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif

/* clvarlen-test: what an op's checks and benchmarks see of the harness.
 *
 * The harness (tools/ct-*.c) parses the command line, picks devices, runs
 * the ops of the table in ct-ops.c and prints tables or JSON; an op (one
 * file, or a few, under tools/ops/) provides a check function, a bench
 * function or both. Generic utilities (the tool's random numbers, the check
 * state) are in ct-util.h, which also brings in the shared test kit
 * (tests/kit/kit.h: dtypes, errors, tolerances, guard bands).
 */
#ifndef CLVARLEN_TEST_TOOL_H
#define CLVARLEN_TEST_TOOL_H

#include <stddef.h>
#include <stdint.h>

#include <clvarlen/clvarlen.h>

#if defined(__GNUC__)
#  define CT_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#  define CT_PRINTF(f, a)
#endif

/* --seed when none is given. */
#define CT_DEFAULT_SEED 1u

typedef struct ct_options {
    const char *device;   /* --device spec, NULL: default */
    const char *op;       /* --op filter, NULL: all */
    int json;             /* --json: 1 one document, 2 JSON lines as results arrive (--jsonl) */
    int quick;            /* --quick: fewer, smaller cases */
    uint64_t seed;        /* --seed */
    double min_mbytes;    /* bench: minimum MB moved per measurement */
    const char *cases;    /* --case: bench cases whose name contains it, NULL: all */
    int check_case;       /* --case N with check: only random case N of each op; -1: all */
    int progress;         /* --progress (or stderr a terminal): progress lines on stderr */
    int heads_q, heads_kv; /* precompile --heads Q:KV; 0: the library's default */
} ct_options;

/* 1 if the context's device is a GPU or an accelerator (benches pick their shapes by it). */
int ct_gpu_like(clvarlen_context *ctx);
/* Whether a bench case named `name` runs (--case). */
int ct_case_wanted(const ct_options *opt, const char *name);
/* The stream of check case i of an op (base: ct_seed_for's), so that case i is the same
 * data whether or not the other cases run; and whether it runs (check --case N). */
uint64_t ct_case_seed(uint64_t base, int i);
int ct_check_case_runs(const ct_options *opt, int i);
/* A progress line on stderr (--progress), "clvarlen-test: ..." */
void ct_progress(const ct_options *opt, const char *fmt, ...) CT_PRINTF(2, 3);

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

/* Benchmarks: print human-readable lines (or JSON lines with --json) to stdout;
 * return 0 on success. `copy_gbps` is the device copy bandwidth measured in
 * this run (bytes read + written per second / 1e9), for ratios. */
typedef int (*ct_bench_fn)(clvarlen_context *dev, const ct_options *opt, double copy_gbps);

/* One op of the table in ct-ops.c. `check` runs a check row named `name`
 * with 'check'; `bench` runs with 'bench' (its result lines name themselves).
 * Either may be NULL. The table's order is the order of both commands. */
typedef struct ct_op {
    const char *name;     /* matched by --op (prefix match, e.g. "gather", "cp") */
    const char *family;   /* "segment", "attention", "gated-delta"; also matched by --op */
    ct_check_fn check;
    ct_bench_fn bench;
} ct_op;

/* Median device time in seconds of `iters` runs of fn(arg) on dev (after warm-up),
 * measured with OpenCL profiling when dev is an OpenCL context, else wall clock.
 * fn enqueues one run and returns its last event through *event (may be NULL
 * on the CPU path). Declared here without OpenCL types: event is a cl_event*. */
typedef int (*ct_run_fn)(void *arg, void *event_out);
double ct_time_median(clvarlen_context *dev, ct_run_fn fn, void *arg, int iters);
/* As ct_time_median, but timing only the returned event (START to END): for
 * operations that are one kernel launch. ct_time_median itself enqueues
 * runs shorter than a millisecond in bursts of 8 back to back and times from a marker enqueued before the first
 * to the end of the last one's event, divided by the burst, so it covers every
 * command a run enqueued. Both return a negative value on error. */
double ct_time_median_launch(clvarlen_context *dev, ct_run_fn fn, void *arg, int iters);
/* Timing iterations for a benchmark: fewer with --quick. */
int ct_bench_iters(const ct_options *opt);
/* 1 if the context runs on OpenCL (clvarlen_context_get_cl succeeds). */
int ct_context_is_cl(clvarlen_context *ctx);
/** FLOP/s of f32 multiply-add on the CPU fallback context's threads, at the
 * instruction set its kernels use (*level_name says which); 0 on failure. */
double ct_measure_cpu_fma(clvarlen_context *ctx, const char **level_name);

/* Emits a benchmark result line (text or JSON per opt->json). */
void ct_bench_report(const ct_options *opt, const char *op, const char *shape, double seconds,
                     double bytes, double flops, double ceiling_ratio, const char *ceiling_name);
/* A remark among the benchmark results (a "# ..." line, or {"note": ...} with --json).
 * With --json, benchmarks print only through ct_bench_report and ct_bench_note,
 * so that the run stays one JSON document. */
void ct_bench_note(const ct_options *opt, const char *fmt, ...) CT_PRINTF(2, 3);

#endif

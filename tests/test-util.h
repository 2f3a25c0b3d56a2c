/* Helpers shared by the test binaries: deterministic random data, guard
 * bands around outputs, comparisons with SPEC section 4's tolerances, and the
 * OpenCL device probe that runs in a child process (the Check runner itself
 * must make no OpenCL call before it forks).
 */
#ifndef CLVARLEN_TEST_UTIL_H
#define CLVARLEN_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <check.h>
#include <clvarlen/clvarlen.h>

/* ---- deterministic random numbers (xorshift-style; no global state) */
typedef struct tu_rng {
    uint64_t s;
} tu_rng;
tu_rng tu_rng_make(uint64_t seed);
uint64_t tu_next(tu_rng *r);
/** Uniform integer in [lo, hi] inclusive. */
int64_t tu_int(tu_rng *r, int64_t lo, int64_t hi);
/** Uniform float in [lo, hi). */
double tu_uniform(tu_rng *r, double lo, double hi);
/** Standard normal. */
double tu_normal(tu_rng *r);

/** Fills n elements of dtype with N(0, scale^2) values (rounded to the dtype). */
void tu_fill_random(tu_rng *r, void *p, clvarlen_dtype dtype, size_t n, double scale);
/** Element i of a f32/f16/bf16/f64 tensor as double. */
double tu_get(const void *p, clvarlen_dtype dtype, size_t i);
/** Stores a double into element i, rounded to nearest even in the dtype. */
void tu_set(void *p, clvarlen_dtype dtype, size_t i, double x);

/**
 * Random varlen batch lengths: mixes empty sequences, length 1, lengths not a
 * multiple of any tile, and a few long ones; total at most max_total.
 * Returns the number of sequences written (<= max_n) and their lengths.
 */
int64_t tu_random_lengths(tu_rng *r, int64_t max_n, int64_t max_len, int64_t max_total,
                          int32_t *lengths);
/** cu_seqlens[n+1] from lengths (test-side, independent of the library). */
void tu_cu_from_lengths(const int32_t *lengths, int64_t n, int32_t *cu);

/* ---- guard bands: a buffer with a known byte pattern on both sides */
#define TU_GUARD_BYTES 64
typedef struct tu_guarded {
    unsigned char *base; /* allocation */
    void *p;             /* the usable region */
    size_t bytes;
} tu_guarded;
/** Allocates `bytes` (may be 0) with guards; the usable region is filled with `fill` bytes. */
tu_guarded tu_guarded_alloc(size_t bytes, unsigned char fill);
/** 1 if both guard bands are intact. */
int tu_guard_ok(const tu_guarded *g);
void tu_guarded_free(tu_guarded *g);

/* ---- comparison against a float64 oracle (SPEC section 4) */
typedef struct tu_err {
    double rel_l2;  /* ||out - ref|| / ||ref|| (abs L2 when ||ref|| == 0) */
    double max_abs;
    int nonfinite;  /* NaN/Inf in out where ref is finite (or NaN anywhere) */
    int mismatched_inf; /* out and ref disagree on +-inf positions */
} tu_err;
tu_err tu_compare(const void *out, clvarlen_dtype dtype, const double *ref, size_t n);
/** Tolerance of SPEC section 4 for dtype (f32 1e-5, f16 2e-3, bf16 1e-2). */
double tu_tolerance(clvarlen_dtype dtype);
/** ck_assert that err is within tol and has no NaN/Inf mismatch; label goes in the message. */
#define tu_assert_close(err, tol, label)                                                       \
    do {                                                                                       \
        tu_err e__ = (err);                                                                    \
        ck_assert_msg(e__.nonfinite == 0 && e__.mismatched_inf == 0 && e__.rel_l2 <= (tol),    \
                      "%s: rel_l2 %.3g (tol %.3g) max_abs %.3g nonfinite %d inf-mismatch %d",  \
                      (label), e__.rel_l2, (double)(tol), e__.max_abs, e__.nonfinite,          \
                      e__.mismatched_inf);                                                     \
    } while (0)

/**
 * ck_assert_msg for loops over many elements: Check records the location of every
 * passing ck_assert (a write to its message channel each time), which makes a million
 * element comparisons take seconds; this only calls into Check on failure.
 */
#define tu_check(cond, ...)                                                                    \
    do {                                                                                       \
        if (!(cond))                                                                           \
            ck_abort_msg(__VA_ARGS__);                                                         \
    } while (0)

/* ---- OpenCL availability, probed in a forked child so the runner stays clean */
/** 1 if clvarlen_device_count() > 0 in a child process (the parent makes no OpenCL call). */
int tu_probe_opencl_device(void);
/** Exit code for "nothing to run" (meson treats 77 as skipped). */
#define TU_EXIT_SKIP 77

/**
 * The device spec the OpenCL tests use: CLVARLEN_TEST_DEVICE if set, else the
 * first OpenCL device (index "0" ... as selected by the default order, never "cpu").
 * Only call inside a test body (after fork).
 */
const char *tu_cl_device_spec(void);
/** A context on the test's OpenCL device (fails the test if none). */
clvarlen_context *tu_cl_context(void);
/** A context on the CPU fallback. */
clvarlen_context *tu_cpu_context(void);

/* ---- files and logs (program cache and kernel path tests) */
/** A fresh directory (mkdtemp) beside CLVARLEN_CACHE_DIR when that is set (the build
 * tree), else in TMPDIR or /tmp; malloc'ed path. */
char *tu_make_temp_dir(const char *tag);
/** rm -rf path (no-op when NULL). */
void tu_remove_tree(const char *path);
/** Writes `size` bytes to path (replacing it); 0 on success. */
int tu_write_file(const char *path, const void *data, size_t size);
/** Reads a whole file (malloc'ed, NUL-terminated); NULL on failure. */
char *tu_read_file(const char *path, size_t *size);

/** Collects log messages, one per line, for a clvarlen_options_set_log handler. */
typedef struct tu_log {
    char *text;
    size_t len, cap;
    int lines;
} tu_log;
void tu_log_fn(clvarlen_log_level level, const char *message, void *user_data);
/** Occurrences of `needle` in the collected text. */
int tu_log_count(const tu_log *log, const char *needle);
void tu_log_clear(tu_log *log);
void tu_log_free(tu_log *log);

/** Runs a suite with CK_ENV-style defaults and returns the process exit code. */
int tu_run_suite(Suite *s);

#endif

/* The Check-dependent half of the test kit (kit.h is the Check-free half):
 * assertions that fail the current test, checked allocations, contexts and
 * the OpenCL device probe that runs in a child process (the Check runner
 * itself must make no OpenCL call before it forks), and the suite runner.
 */
#ifndef CLVARLEN_TEST_KIT_CHECK_H
#define CLVARLEN_TEST_KIT_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include <check.h>

#include "kit.h"

/** ck_assert that err is within tol and has no NaN/Inf mismatch; label goes in the message. */
#define tu_assert_close(err, tol, label)                                                       \
    do {                                                                                       \
        tu_err e__ = (err);                                                                    \
        ck_assert_msg(tu_err_within(e__, (tol)),                                               \
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
/**
 * Whether the OpenCL tests run on a second implementation named by
 * CLVARLEN_TEST_DEVICE (rusticl, tests/meson.build) rather than the default
 * device. The tests of the NVIDIA tensor-core kernels' emulated forms (which
 * no other device runs outside tests) register only on the default device:
 * there they check the fragment bookkeeping, and on a second implementation
 * they would only spend its compiler's time. Callable when a suite is built.
 */
int tu_second_device(void);
/**
 * For the tests of the NVIDIA tensor-core kernels' emulated forms: with on,
 * when the test device is not NVIDIA's (so the forms run emulated), sets
 * CLVARLEN_BUILD_OPTIONS=-cl-opt-disable, which the library appends to every
 * program's options (and so to its cache key); with 0, clears what it set.
 * The emulated forms exist to check the fragment bookkeeping, which the
 * optimiser does not change; their real builds are NVIDIA's. PoCL builds
 * them about 4x faster unoptimised (gated delta: 112 s against 431 s for
 * the check's tensor-core cases on 2 cores, 2026-11-30), which is most of
 * their tests' time. Another CLVARLEN_BUILD_OPTIONS of the caller's is left
 * alone, both ways.
 * Only call inside a test body.
 */
void tu_emulated_forms(int on);
/** A context on the test's OpenCL device (fails the test if none). */
clvarlen_context *tu_cl_context(void);
/** A context on the CPU fallback. */
clvarlen_context *tu_cpu_context(void);


/* ---- checked helpers: each fails the current test instead of returning an error */
/** malloc (at least 1 byte) or fail the test. */
void *tu_xmalloc(size_t n);
/** calloc of n bytes (at least 1) or fail the test. */
void *tu_xcalloc(size_t n);
/** tu_guarded_init or fail the test. */
tu_guarded tu_guarded_alloc(size_t bytes, unsigned char fill);
/** Fails the test when a guard band of g was overwritten. */
void tu_assert_guard(const tu_guarded *g, const char *label);
/** Bitwise and element-wise equality; the label and first difference go in the message. */
void tu_assert_bytes_eq(const void *got, const void *want, size_t n, const char *label);
void tu_assert_i32_eq(const int32_t *got, const int32_t *want, int64_t n, const char *label);
void tu_assert_i64_eq(const int64_t *got, const int64_t *want, int64_t n, const char *label);

/** A fresh directory (mkdtemp) in CLVARLEN_TEST_TMPDIR (the tests' environment sets it
 * in the build tree), else beside CLVARLEN_CACHE_DIR when that is a path, else in
 * TMPDIR or /tmp; malloc'ed path. */
char *tu_make_temp_dir(const char *tag);

/** Runs a suite with CK_ENV-style defaults and returns the process exit code. */
int tu_run_suite(Suite *s);

#endif /* CLVARLEN_TEST_KIT_CHECK_H */

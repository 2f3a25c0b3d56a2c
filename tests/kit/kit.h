/* The test kit: what the test binaries share, and what clvarlen-test links for
 * its element access, f16/bf16 conversion, error measures, tolerances and guard
 * bands (it keeps only its own random stream, see tools/ct-util.h). Deterministic
 * random data, the one f16/bf16 conversion (written from the IEEE formats,
 * independent of lib/), random varlen batch lengths, guard bands around
 * outputs, and comparisons with SPEC section 4's tolerances.
 *
 * This part does not depend on Check, so an installed tool can link it; the
 * Check-dependent helpers (assertions, fixtures, the device probe, the suite
 * runner) are in kit-check.h.
 */
#ifndef CLVARLEN_TEST_KIT_H
#define CLVARLEN_TEST_KIT_H

#include <stddef.h>
#include <stdint.h>

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
 * multiple of any tile, and a few long ones; total at most max_total. Between
 * (max_n + 1) / 2 and max_n sequences, so a large max_n gives many sequences.
 * (Document-length batches that sum to a total: clvarlen_gen_seq_lens.)
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
/** Allocates `bytes` (may be 0) with guards; the usable region is filled with `fill` bytes.
 * Returns 0, or -1 when out of memory (kit-check.h's tu_guarded_alloc fails the test). */
int tu_guarded_init(tu_guarded *g, size_t bytes, unsigned char fill);
/** 1 if both guard bands are intact. */
int tu_guard_ok(const tu_guarded *g);
void tu_guarded_free(tu_guarded *g);
/** The same guard bands on a raw allocation of TU_GUARD_BYTES + bytes + TU_GUARD_BYTES:
 * tu_guard_write sets them, tu_guard_intact returns 1 if both still hold. */
void tu_guard_write(unsigned char *base, size_t bytes);
int tu_guard_intact(const unsigned char *base, size_t bytes);
/** The same with a leading band of `lead` bytes instead of TU_GUARD_BYTES (a region at an
 * offset, such as a device copy at a random byte offset): base holds lead + bytes +
 * TU_GUARD_BYTES bytes. With lead == TU_GUARD_BYTES these are tu_guard_write/intact. */
void tu_guard_write_lead(unsigned char *base, size_t lead, size_t bytes);
int tu_guard_intact_lead(const unsigned char *base, size_t lead, size_t bytes);

/* ---- comparison against a float64 oracle (SPEC section 4) */
typedef struct tu_err {
    double rel_l2;  /* ||out - ref|| / ||ref|| (abs L2 when ||ref|| == 0) */
    double max_abs;
    int nonfinite;  /* NaN/Inf in out where ref is finite (or NaN anywhere) */
    int mismatched_inf; /* out and ref disagree on +-inf positions */
} tu_err;
tu_err tu_compare(const void *out, clvarlen_dtype dtype, const double *ref, size_t n);
/** Tolerance of SPEC section 4 for dtype (f32 1e-5, f16 2e-3, bf16 1e-2, f64 1e-12;
 * 0 for integers, which are exact). */
double tu_tolerance(clvarlen_dtype dtype);
/** Relative L2 error of a against b (both dtype, n elements); abs L2 when ||b|| == 0.
 * +inf when a NaN appears in either (NaN never passes, not even against NaN), or an
 * infinity the other does not match. */
double tu_rel_err(const void *a, const void *b, clvarlen_dtype dtype, size_t n);
/** tu_rel_err with ||b|| taken as at least sqrt(n) * floor_rms: for tensors
 * whose exact value cancels to (nearly) zero, where two correct results differ
 * only by rounding noise. */
double tu_rel_err_floor(const void *a, const void *b, clvarlen_dtype dtype, size_t n,
                        double floor_rms);
/** Largest |a[i] - b[i]|; +inf on NaN or unmatched infinities as tu_rel_err. */
double tu_max_abs_err(const void *a, const void *b, clvarlen_dtype dtype, size_t n);
/** 1 if err is within tol with no NaN (NaN never passes) and no infinity mismatch. */
int tu_err_within(tu_err err, double tol);

/* ---- files and logs (program cache and kernel path tests) */
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

#endif /* CLVARLEN_TEST_KIT_H */

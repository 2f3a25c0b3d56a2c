/* clvarlen-test: the tool's generic test utilities, in one place.
 *
 * Everything declared here (and defined in ct-util.c) is test plumbing that
 * does not belong to any op: the tool's random numbers and random varlen
 * lengths, and the check state with which the segment checks run the
 * host-memory and cl_mem entry points (struct chk). The rest is the shared
 * test kit's (tests/kit/kit.h, included here): element access and the one
 * f16/bf16 conversion (tu_get, tu_set), error measures and tolerances
 * (tu_rel_err, tu_max_abs_err, tu_tolerance) and guard bands (tu_guarded,
 * tu_guard_*). Keep op-specific code out of it.
 */
#ifndef CLVARLEN_TEST_UTIL_H
#define CLVARLEN_TEST_UTIL_H

#include "config.h"

#include <stddef.h>
#include <stdint.h>

#include <clvarlen/clvarlen.h>
#if CLVARLEN_HAVE_OPENCL
#  include <clvarlen/clvarlen-cl.h>
#endif

#include "clvarlen-test.h"
#include "kit.h"

/* ---------------------------------------------------------------- random numbers */

/* The tool keeps its own SplitMix64 stream rather than the kit's xorshift64*
 * (tu_rng), which yields another sequence: every check case (its shapes,
 * lengths, dtypes and data) is drawn from this stream, so a given --seed keeps
 * naming the same cases as in earlier releases and in reports. (The attention
 * bench data that tools/bench-attention-torch.py reproduces bit for bit comes
 * from the counter hash in ops/attention.c, not from this stream.) For the
 * same reason ct_random_lengths keeps its own mix of lengths, drawn from this
 * stream, instead of tu_random_lengths. */

uint64_t ct_rng_next(uint64_t *state);
double ct_rng_uniform(uint64_t *state);          /* [0, 1) */
double ct_rng_normal(uint64_t *state);
/* Uniform integer in [lo, hi] inclusive. */
int64_t ct_rng_int(uint64_t *state, int64_t lo, int64_t hi);
/* A seed for one op derived from --seed and the op's name, so that --op
 * filtering does not change the data an op sees. */
uint64_t ct_seed_for(const ct_options *opt, const char *op);
/* Random varlen lengths (with empty and length-1 sequences); returns n. */
int64_t ct_random_lengths(uint64_t *state, int64_t max_n, int64_t max_len, int64_t max_total,
                          int32_t *lengths);

/* ---------------------------------------------------------------- dtypes */

/* n elements of N(0, scale^2) (integers: uniform in [-scale, scale]; u8: any byte) from the
 * tool's stream, stored with the kit's tu_set (rounded to nearest even). */
void ct_fill(uint64_t *state, void *p, clvarlen_dtype dtype, size_t n, double scale);

/* ---------------------------------------------------------------- check buffers with guard bands */

/* One check of the segment family in progress: its random state, the current
 * case and that case's guarded host buffers and device copies. */
#define CT_CHK_MAX_ALLOCS 40

typedef struct chk {
    clvarlen_context *dev, *cpu;
    const ct_options *opt;
    ct_row *row;
    uint64_t rng, base_rng; /* the case's stream, and the op's (ct_case_seed) */
    int case_i;
    int case_bad;
    int stop; /* an error that stopped the op (reported as ERROR) */
    int oom;
    tu_guarded alloc[CT_CHK_MAX_ALLOCS]; /* the kit's guard bands */
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
    } dm[CT_CHK_MAX_ALLOCS];
    int n_dm;
    int dm_failed;
#endif
} chk;

/* Starts a check of `op` (its seed from ct_seed_for); clears row. */
void chk_begin(chk *c, clvarlen_context *dev, clvarlen_context *cpu, const ct_options *opt,
               ct_row *row, const char *op);
/* Per case: its own stream (ct_case_seed); odd cases on an OpenCL device go through the
 * cl_mem entry points. Returns 0 when --case excludes the case (skip it). */
int chk_case_begin(chk *c);
/* Cases per check: 3 with --quick, else 10. */
int chk_n_cases(const chk *c);
/* Marks the case failed; the first failure becomes the row's note. */
void chk_fail(chk *c, const char *fmt, ...) CT_PRINTF(2, 3);
/* A sentinel-filled buffer with guard bands, freed (and its bands checked) by chk_end_case. */
void *chk_alloc(chk *c, size_t bytes);
void chk_end_case(chk *c);
/* The check function's return value: 1 if an error stopped the op. */
int chk_finish(chk *c);
/* A call on valid input must succeed; returns 1 if it did. */
int chk_call(chk *c, int on_cpu, clvarlen_status st);
/* An error-path call must return `want`. */
void chk_expect(chk *c, int on_cpu, clvarlen_status st, clvarlen_status want);
void chk_note_err(chk *c, double e);
/* Bitwise equality of n elements of dtype. */
void chk_same(chk *c, const char *what, const void *got, const void *want,
              clvarlen_dtype dtype, size_t n);
/* Relative L2 within tol (SPEC section 4). */
void chk_close(chk *c, const char *what, const void *got, const void *want,
               clvarlen_dtype dtype, size_t n, double tol);
/* Nothing may be written on error: the buffer still holds the sentinel. */
void chk_untouched(chk *c, const char *what, const void *p, size_t bytes);
/* Uniform integer in [lo, hi] and uniform double in [0, 1) from the check's stream. */
int64_t chk_rnd(chk *c, int64_t lo, int64_t hi);
double chk_unif(chk *c);
#if CLVARLEN_HAVE_OPENCL
/* Device copies at random 8-byte offsets with guard bytes; outputs are read
 * back into `host` by chk_dev_finish, which also checks the guard bytes. */
cl_mem chk_dev_in(chk *c, const void *host, size_t bytes, size_t *offset);
cl_mem chk_dev_out(chk *c, void *host, size_t bytes, size_t *offset);
clvarlen_status chk_dev_finish(chk *c, clvarlen_status st, cl_event ev);
#endif
#endif

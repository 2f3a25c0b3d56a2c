/* The gated delta rule's test cases, shared by the CPU and OpenCL builds of
 * test-gated-delta.c: random inputs with every feature SPEC 3 lists, a run
 * through the public API, and the comparison with the float64 oracle
 * (tests/ref/gated-delta-ref.h).
 */
#ifndef CLVARLEN_TEST_GATED_DELTA_H
#define CLVARLEN_TEST_GATED_DELTA_H

#include <stddef.h>
#include <stdint.h>

#include <clvarlen/clvarlen.h>

#include "kit-check.h"
#include "gated-delta-ref.h"

/* ---------------------------------------------------------------- test cases */

typedef struct gdn_case_cfg {
    uint64_t seed;
    int32_t H, HV, K, V;
    clvarlen_dtype dtype, state_dtype, bias_dtype;
    clvarlen_state_layout layout;
    int l2norm;
    float scale;                /* 0: default */
    int64_t n;                  /* sequences */
    const int32_t *lengths;     /* n lengths */
    int fixed;                  /* no cu_seqlens: all lengths must be equal */
    int64_t stride_pad;         /* extra elements per token row of q, k, v, a, b, o */
    int use_pool;               /* a pool with random states */
    int64_t slots;              /* pool slots (>= n when indices are NULL) */
    int64_t pitch_pad;          /* extra elements between slots */
    const int32_t *indices;     /* n state indices, or NULL: slot n */
    int disable_update;
    int inter;                  /* target verify buffer */
    int64_t cache_slots;
    int32_t cache_steps;
    const int32_t *cache_idx;   /* NULL: slot n */
    clvarlen_gdn_algorithm algorithm;
} gdn_case_cfg;

/** A config with small defaults: H 2, HV 4, K 16, V 24, f32, no pool, seed 1. */
gdn_case_cfg gdn_cfg_default(void);

typedef struct gdn_case {
    gdn_case_cfg cfg;
    clvarlen_gdn_params p;
    int32_t *lengths, *cu;      /* cu NULL in fixed mode */
    int32_t *indices, *cache_idx;
    float *A_log;
    void *dt_bias, *a, *b, *q, *k, *v;
    unsigned char *o;           /* o_bytes with guard bands of GDN_GUARD each side */
    unsigned char *pool;        /* pool_bytes (+ guards) */
    unsigned char *inter;       /* inter_bytes (+ guards) */
    void *pool_init, *inter_init;
    size_t o_bytes, pool_bytes, inter_bytes;
    int64_t pool_elems, inter_elems;
} gdn_case;

/* Guard bands of the kit (kit.h), TU_GUARD_BYTES each side. */
#define GDN_GUARD TU_GUARD_BYTES

/** Builds the inputs (deterministic in cfg.seed); outputs are filled with a byte pattern. */
void gdn_case_make(gdn_case *c, const gdn_case_cfg *cfg);
void gdn_case_free(gdn_case *c);
/** Runs the case through clvarlen_gated_delta_rule on ctx. */
clvarlen_status gdn_case_run(clvarlen_context *ctx, gdn_case *c);
/** Restores the outputs to their initial contents (pattern, initial pool and cache). */
void gdn_case_reset(gdn_case *c);

/** Errors of a finished run against the oracle. */
typedef struct gdn_case_err {
    double o_rel, o_max;        /* over every output element */
    double pool_rel, pool_max;  /* over the whole pool (0 without one) */
    double inter_rel, inter_max;
    int nonfinite;              /* NaN/Inf where the oracle is finite */
    int guards_broken;          /* a guard band, a row gap or an unnamed slot changed */
    char where[160];            /* first structural problem found */
} gdn_case_err;
void gdn_case_check(const gdn_case *c, gdn_case_err *err);
/** 1 if the outputs (o, pool, intermediate) still hold their initial bytes. */
int gdn_case_untouched(const gdn_case *c);

/** o row t (HV*V elements, the case's dtype) of the case's output. */
const void *gdn_case_o_row(const gdn_case *c, int64_t t);
/** Bytes of one o row. */
size_t gdn_case_o_row_bytes(const gdn_case *c);

/* ---------------------------------------------------------------- shared test bodies */
/* Each runs on the given context (CPU fallback or OpenCL) and fails the
 * current Check test on a mismatch. `alg` selects the algorithm where the
 * body lets it vary. */

/** Tolerance for o or states of dtype over sequences of at most max_len tokens (SPEC 4). */
double gdn_tolerance(clvarlen_dtype dtype, int64_t max_len);
/** Runs a case, checks it against the oracle and returns the errors (asserts success). */
gdn_case_err gdn_run_and_check(clvarlen_context *ctx, gdn_case *c, const char *label);

/** Seed test 1: lengths [5, 7, 6] varlen == each sequence alone, fixed length (bitwise);
 * and a fixed-length batch == the same batch as varlen (bitwise), with states. */
void gdn_t_seed_varlen_vs_fixed(clvarlen_context *ctx, clvarlen_gdn_algorithm alg);
/** Seed test 2: varlen with state indices [0, 2, 1] into a pool of 5, against the oracle. */
void gdn_t_seed_state_indices(clvarlen_context *ctx, clvarlen_gdn_algorithm alg);
/** Sweep case i of the generated table (dims, dtypes, layouts, norms, scales, strides,
 * pitches, random varlen batches with empty / length-1 / long sequences, negative indices). */
void gdn_t_sweep(clvarlen_context *ctx, int i, clvarlen_gdn_algorithm alg);
#define GDN_SWEEP_CASES 24
/** Token-strided inputs and output give bitwise the contiguous results. */
void gdn_t_strided_bitwise(clvarlen_context *ctx, clvarlen_gdn_algorithm alg);
/** Target verify: state update disabled, intermediate states, cache indices with -1. */
void gdn_t_target_verify(clvarlen_context *ctx);
/** K = V = 128-class shapes (HV/H = 2 and 4) with lengths crossing 64, VK and KV pools. */
void gdn_t_large_heads(clvarlen_context *ctx, clvarlen_gdn_algorithm alg);
/** key_dim and value_dim 1..5 and 128 (issue 22), varlen lengths 0, 1, 63, 64, 65. */
void gdn_t_small_heads(clvarlen_context *ctx, clvarlen_gdn_algorithm alg);
/** Every invalid argument gives its status and leaves the outputs untouched. */
void gdn_t_errors(clvarlen_context *ctx);
/** Empty batches and all-empty sequences: success, nothing written. */
void gdn_t_empty(clvarlen_context *ctx);

/* ---------------------------------------------------------------- test-gated-delta.c */

/** The context of the current test (a checked fixture: CPU fallback or OpenCL device). */
extern clvarlen_context *gdn_ctx;
/** The OpenCL-only cases (test-gated-delta-clmem.c), added to the oracle and api cases. */
void gdn_add_cl_cases(TCase *oracle, TCase *api);

#endif

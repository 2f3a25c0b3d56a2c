/* Shared by the attention test sources, which the build compiles once per
 * backend (TEST_BACKEND_CL 0: CPU fallback, 1: the OpenCL device):
 * test-attention.c (forward, merge, context parallelism) and, in the OpenCL
 * build only, test-attention-clmem.c (cl_mem entry points, device checks, the
 * tensor-core kernel).
 */
#ifndef CLVARLEN_TEST_ATTENTION_H
#define CLVARLEN_TEST_ATTENTION_H

#include "kit-check.h"
#include "attention-ref.h"

#ifndef TEST_BACKEND_CL
#  error "TEST_BACKEND_CL must be 0 or 1 (tests/meson.build)"
#endif

/* ---- a random case */
typedef struct acase {
    clvarlen_dtype dtype;
    int hq, hk, d, dv;
    int causal, wl, wr;
    float softcap, scale;
    int use_qpos;     /* random q_pos (context-parallel shape) */
    int lq_ne_lk;     /* independent query and key lengths */
    int q_pad, k_pad, v_pad, o_pad; /* extra elements per token row (strides) */
    int max_n, max_len, max_total;
    int min_len;      /* lengths raised to at least this (long-sequence tiles) */
    int no_lse;
    uint64_t seed;
} acase;

/** Small defaults: f32, hq 2, hk 1, d = dv = 64, no window, up to 6 sequences of 45. */
acase base_case(void);

typedef struct batch {
    int64_t n, tq, tk;
    int32_t *cu_q, *cu_k, *q_pos;
    void *q, *k, *v;
    int64_t qs, ks, vs, os; /* strides in elements */
} batch;

/** Random lengths and inputs of case c (deterministic in r). */
void make_batch(const acase *c, tu_rng *r, batch *b);
void free_batch(batch *b);
void fill_params(const acase *c, const batch *b, clvarlen_attention_params *p);
/** Tolerance of lse (always f32) for inputs of dtype: 1e-5 for f32, else 1e-4. */
double lse_tolerance(clvarlen_dtype dt);
/** `seeds` random batches of case c on ctx against the oracle (seeds c.seed, c.seed + 1 ...). */
void run_seeds(clvarlen_context *ctx, acase c, int seeds, const char *label);

#if TEST_BACKEND_CL
/** The OpenCL-only cases (test-attention-clmem.c). */
void attn_add_cl_cases(Suite *s);
#endif

#endif

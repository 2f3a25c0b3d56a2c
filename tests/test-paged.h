/* Shared by the paged KV cache test sources, which the build compiles once per
 * backend (TEST_BACKEND_CL 0: CPU fallback, 1: the OpenCL device):
 * test-paged.c (oracle self-check, random batches, speculative verify),
 * test-paged-append.c (cache append, append-then-attend, argument errors)
 * and, in the OpenCL build only, test-paged-clmem.c (the cl_mem entry points
 * and device checks).
 */
#ifndef CLVARLEN_TEST_PAGED_H
#define CLVARLEN_TEST_PAGED_H

#include "kit-check.h"
#include "paged-ref.h"

#ifndef TEST_BACKEND_CL
#  error "TEST_BACKEND_CL must be 0 or 1 (tests/meson.build)"
#endif

/* How the per-row query and cache lengths are drawn. */
typedef enum pmode {
    PM_DECODE = 0,  /* len_q = 1, cache 1..max_cache */
    PM_PREFILL = 1, /* len_q 1..max_lq, cache len_q..max_cache (chunked prefill) */
    PM_MIXED = 2    /* prefill rows, decode rows, len_q = 0 rows and empty (0, 0) rows */
} pmode;

/* How max_seqlen_q is passed (it picks the device kernel). */
typedef enum pmsq {
    MSQ_EXACT = 0, /* the true maximum */
    MSQ_ZERO = 1,  /* unknown */
    MSQ_OVER = 2   /* a loose upper bound: the true maximum + 3 */
} pmsq;

/* ---- a random case */
typedef struct pcase {
    clvarlen_dtype dtype;
    int hq, hk, d, dv;
    int causal, wl, wr;
    float softcap, scale;
    int page_size;
    pmode mode;
    int max_rows, max_lq, max_cache;
    int extra_cols;  /* page_table_stride - max_pages */
    int spare_pages; /* pages no row uses (random data, never read) */
    int num_splits;
    pmsq msq;
    int q_pad, o_pad; /* extra elements per token row (strides) */
    int no_lse;
    uint64_t seed;
} pcase;

/** Small defaults: f32, hq 4, hk 1, d = dv = 64, page_size 16, decode over up to 6 rows of
 * caches up to 300 tokens, automatic splits, exact max_seqlen_q. */
pcase paged_base_case(void);

typedef struct pbatch {
    int64_t n, tq, num_pages, pt_stride;
    int32_t max_pages, max_lq;
    int32_t *cu_q, *cache_seqlens, *page_table, *lq;
    void *q, *k_cache, *v_cache;
    int64_t qs, os; /* strides in elements */
} pbatch;

/** Random lengths, page table (a random permutation of the pages, unused entries
 * garbage) and inputs of case c, deterministic in r. */
void make_pbatch(const pcase *c, tu_rng *r, pbatch *b);
void free_pbatch(pbatch *b);
void fill_paged_params(const pcase *c, const pbatch *b, clvarlen_paged_params *p);
/** Elements of one cache: num_pages * page_size * heads_kv * width. */
size_t paged_cache_elems(const pbatch *b, const pcase *c, int width);
/** Tolerance of lse (always f32) for inputs of dtype: 1e-5 for f32, else 1e-4. */
double paged_lse_tolerance(clvarlen_dtype dt);
/** Copies the written elements of a strided o [tq, hq * dv] into a dense array (malloc'ed). */
void *paged_dense_o(const pcase *c, const pbatch *b, const void *o);
/** Compares a dense o and lse (may be NULL) with the oracle of b. */
void paged_check_result(const pcase *c, const pbatch *b, const void *o_dense, const float *lse,
                        const char *label);

/** A context on the backend of this build. */
clvarlen_context *paged_make_ctx(void);
/** `seeds` random batches of case c on ctx against the oracle (host-memory entry point). */
void paged_run_seeds(clvarlen_context *ctx, pcase c, int seeds, const char *label);

/** The append cases, append-then-attend and the argument errors (test-paged-append.c). */
void paged_add_append_cases(Suite *s);

#if TEST_BACKEND_CL
/** The OpenCL-only cases (test-paged-clmem.c). */
void paged_add_cl_cases(Suite *s);
#endif

#endif

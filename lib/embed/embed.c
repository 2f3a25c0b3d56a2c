/* The embedding hooks that span the op families (docs/ARCHITECTURE.md: the
 * one layer above them): building a device's kernels ahead of time, and
 * asking whether an op takes a dtype and head dim on a device.
 *
 * Both run each op once on a tiny zero-filled batch through its public entry
 * point, in the shapes that select its kernel variants (short and long
 * sequences, decode and prefill rows). So the programs built are exactly the
 * ones real calls of those shapes build, they land in the program cache, and
 * the answer of clvarlen_supports is the op's own (validation, local-memory
 * limits, a kernel that does not build), not a second copy of its rules.
 */
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void precompile_defaults(clvarlen_precompile_params *p)
{
    memset(p, 0, sizeof *p);
    p->struct_size = (uint32_t)sizeof *p;
}

void clvarlen_precompile_params_init_sized(clvarlen_precompile_params *p, size_t size)
{
    clvarlen_precompile_params d;
    precompile_defaults(&d);
    cv_struct_init(p, size, &d, sizeof d);
}

/* One configuration of a tiny run. */
typedef struct tiny {
    clvarlen_context *ctx;
    clvarlen_dtype dtype;
    int32_t head_dim, heads_q, heads_kv, page_size;
} tiny;

/* Zeroed memory for a tiny run (NULL when out of memory). */
static void *zeros(size_t bytes)
{
    return calloc(bytes ? bytes : 1, 1);
}

/* Attention forward over one sequence of `len` queries and keys (the kernel
 * choice depends on the average length), and the backward when asked. */
static clvarlen_status run_attention(const tiny *t, int32_t len, int backward)
{
    const size_t es = clvarlen_dtype_size(t->dtype) ? clvarlen_dtype_size(t->dtype) : 4;
    const size_t qn = (size_t)len * (size_t)t->heads_q * (size_t)t->head_dim;
    const size_t kn = (size_t)len * (size_t)t->heads_kv * (size_t)t->head_dim;
    const int32_t cu[2] = {0, len};
    clvarlen_attention_params p;
    clvarlen_attention_params_init(&p);
    p.dtype = t->dtype;
    p.n_seqs = 1;
    p.total_q = p.total_k = len;
    p.heads_q = t->heads_q;
    p.heads_kv = t->heads_kv;
    p.head_dim = t->head_dim;
    p.causal = 1;
    p.max_seqlen_q = p.max_seqlen_k = len;
    void *q = zeros(qn * es), *k = zeros(kn * es), *v = zeros(kn * es), *o = zeros(qn * es);
    void *g[3] = {zeros(qn * 4), zeros(kn * 4), zeros(kn * 4)};
    float *lse = zeros((size_t)len * (size_t)t->heads_q * 4);
    clvarlen_status st = CLVARLEN_ERROR_OUT_OF_MEMORY;
    if (q && k && v && o && g[0] && g[1] && g[2] && lse) {
        st = clvarlen_attention_forward(t->ctx, &p, q, k, v, cu, cu, NULL, o, lse);
        if (st == CLVARLEN_SUCCESS && backward)
            st = clvarlen_attention_backward(t->ctx, &p, NULL, q, k, v, o, q, lse, cu, cu, NULL,
                                             g[0], g[1], g[2]);
    } else {
        cv_error(t->ctx, st, "out of memory for a tiny attention batch");
    }
    void *all[] = {q, k, v, o, g[0], g[1], g[2], lse};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    return st;
}

/* Paged attention: rows of `lq` queries over caches of `ctx_len` tokens, and
 * the cache append. */
static clvarlen_status run_paged(const tiny *t, int32_t lq, int32_t ctx_len, int32_t rows)
{
    const size_t es = clvarlen_dtype_size(t->dtype) ? clvarlen_dtype_size(t->dtype) : 4;
    const int32_t ps = t->page_size, pages_per_row = (ctx_len + ps - 1) / ps;
    const int64_t num_pages = (int64_t)rows * pages_per_row;
    const size_t row_elems = (size_t)t->heads_kv * (size_t)t->head_dim;
    const size_t cache = (size_t)num_pages * (size_t)ps * row_elems;
    const size_t qn = (size_t)rows * (size_t)lq * (size_t)t->heads_q * (size_t)t->head_dim;
    int32_t *cu = zeros(sizeof(int32_t) * (size_t)(rows + 1));
    int32_t *cs = zeros(sizeof(int32_t) * (size_t)rows);
    int32_t *pt = zeros(sizeof(int32_t) * (size_t)num_pages);
    int64_t *slots = zeros(sizeof(int64_t) * (size_t)rows);
    void *kc = zeros(cache * es), *vc = zeros(cache * es), *q = zeros(qn * es);
    void *o = zeros(qn * es), *kv_new = zeros((size_t)rows * row_elems * es);
    clvarlen_status st = CLVARLEN_ERROR_OUT_OF_MEMORY;
    if (cu && cs && pt && slots && kc && vc && q && o && kv_new) {
        for (int32_t r = 0; r < rows; r++) {
            cu[r + 1] = cu[r] + lq;
            cs[r] = ctx_len;
            slots[r] = (int64_t)r * pages_per_row * ps;
            for (int32_t i = 0; i < pages_per_row; i++)
                pt[r * pages_per_row + i] = r * pages_per_row + i;
        }
        clvarlen_kv_append_params a;
        clvarlen_kv_append_params_init(&a);
        a.dtype = a.cache_dtype = t->dtype;
        a.n_tokens = rows;
        a.num_pages = num_pages;
        a.page_size = ps;
        a.heads_kv = t->heads_kv;
        a.head_dim = t->head_dim;
        st = clvarlen_kv_cache_append(t->ctx, &a, kv_new, kv_new, slots, kc, vc);
        clvarlen_paged_params p;
        clvarlen_paged_params_init(&p);
        p.dtype = t->dtype;
        p.n_rows = rows;
        p.total_q = (int64_t)rows * lq;
        p.num_pages = num_pages;
        p.page_size = ps;
        p.max_pages = pages_per_row;
        p.heads_q = t->heads_q;
        p.heads_kv = t->heads_kv;
        p.head_dim = t->head_dim;
        p.max_seqlen_q = lq;
        p.causal = 1;
        if (st == CLVARLEN_SUCCESS)
            st = clvarlen_paged_attention_forward(t->ctx, &p, q, kc, vc, cu, pt, cs, o, NULL);
    } else {
        cv_error(t->ctx, st, "out of memory for a tiny paged batch");
    }
    void *all[] = {cu, cs, pt, slots, kc, vc, q, o, kv_new};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    return st;
}

/* The gated delta rule on n sequences of len tokens, K = V = head_dim, with
 * a state pool (decode and prefill pick different kernels). */
static clvarlen_status run_gdn(const tiny *t, int32_t n, int32_t len)
{
    const size_t es = clvarlen_dtype_size(t->dtype) ? clvarlen_dtype_size(t->dtype) : 4;
    const int32_t H = 1, HV = 2, D = t->head_dim;
    const size_t T = (size_t)n * (size_t)len;
    int32_t *cu = zeros(sizeof(int32_t) * (size_t)(n + 1)), *idx = zeros(sizeof(int32_t) * n);
    float *A_log = zeros(4 * HV), *dt_bias = zeros(4 * HV);
    void *a = zeros(T * HV * es), *b = zeros(T * HV * es), *qk = zeros(T * H * D * es);
    void *v = zeros(T * HV * D * es), *o = zeros(T * HV * D * es);
    float *pool = zeros((size_t)n * HV * D * D * 4);
    clvarlen_status st = CLVARLEN_ERROR_OUT_OF_MEMORY;
    if (cu && idx && A_log && dt_bias && a && b && qk && v && o && pool) {
        for (int32_t i = 0; i < n; i++) {
            cu[i + 1] = cu[i] + len;
            idx[i] = i;
        }
        clvarlen_gdn_params p;
        clvarlen_gdn_params_init(&p);
        p.dtype = t->dtype;
        p.n_seqs = n;
        p.total_tokens = (int64_t)T;
        p.heads_qk = H;
        p.heads_v = HV;
        p.key_dim = p.value_dim = D;
        p.state_slots = n;
        p.use_qk_l2norm = 1;
        st = clvarlen_gated_delta_rule(t->ctx, &p, A_log, dt_bias, a, b, qk, qk, v, cu, pool, idx,
                                       NULL, NULL, o);
    } else {
        cv_error(t->ctx, st, "out of memory for a tiny gated delta batch");
    }
    void *all[] = {cu, idx, A_log, dt_bias, a, b, qk, v, o, pool};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    return st;
}

/* The segment programs (scan, maps, rows, the generator): shape-independent. */
static clvarlen_status run_segment(const tiny *t)
{
    const int32_t lengths[3] = {3, 0, 5};
    int32_t cu[4], seq[8], pos[8], out[3], idx[8] = {7, 6, 5, 4, 3, 2, 1, 0};
    float src[8 * 4] = {0}, dst[8 * 4];
    clvarlen_status st = clvarlen_cu_seqlens_from_lengths(t->ctx, lengths, 3, cu);
    if (st == CLVARLEN_SUCCESS)
        st = clvarlen_token_maps(t->ctx, cu, 3, 8, NULL, seq, pos);
    if (st == CLVARLEN_SUCCESS)
        st = clvarlen_gather_rows(t->ctx, CLVARLEN_DTYPE_F32, 4, src, 8, 0, idx, 8, dst, 0);
    if (st == CLVARLEN_SUCCESS)
        st = clvarlen_cp_gather(t->ctx, CLVARLEN_DTYPE_F32, 4, src, 0, cu, 3, 2, 0, dst, 0, 8);
    if (st == CLVARLEN_SUCCESS)
        st = clvarlen_gen_seq_lens(t->ctx, 1, 1, 3, 8, out);
    return st;
}

/* Runs op (one CLVARLEN_PRECOMPILE_* bit) in the shapes that select its variants. */
static clvarlen_status run_op(const tiny *t, unsigned op)
{
    clvarlen_status st = CLVARLEN_SUCCESS;
    switch (op) {
    case CLVARLEN_PRECOMPILE_SEGMENT:
        return run_segment(t);
    case CLVARLEN_PRECOMPILE_ATTENTION:
    case CLVARLEN_PRECOMPILE_ATTENTION_BACKWARD:
        for (int i = 0; i < 2 && st == CLVARLEN_SUCCESS; i++) /* short and long sequences */
            st = run_attention(t, i ? 160 : 16, op == CLVARLEN_PRECOMPILE_ATTENTION_BACKWARD);
        return st;
    case CLVARLEN_PRECOMPILE_PAGED:
        st = run_paged(t, 1, 3 * t->page_size + 1, 2);     /* decode */
        if (st == CLVARLEN_SUCCESS)
            st = run_paged(t, 1, 64 * t->page_size, 1);   /* decode split over keys */
        if (st == CLVARLEN_SUCCESS)
            st = run_paged(t, 96, 128, 1);                /* chunked prefill */
        return st;
    case CLVARLEN_PRECOMPILE_GATED_DELTA:
        st = run_gdn(t, 2, 1); /* decode */
        return st == CLVARLEN_SUCCESS ? run_gdn(t, 1, 200) : st; /* prefill */
    default:
        return cv_error(t->ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "unknown op %u", op);
    }
}

static const struct {
    unsigned op;
    const char *name;
    bool shaped; /* depends on dtype and head dim */
} ops[] = {
    {CLVARLEN_PRECOMPILE_SEGMENT, "segment", false},
    {CLVARLEN_PRECOMPILE_ATTENTION, "attention forward", true},
    {CLVARLEN_PRECOMPILE_ATTENTION_BACKWARD, "attention backward", true},
    {CLVARLEN_PRECOMPILE_PAGED, "paged attention", true},
    {CLVARLEN_PRECOMPILE_GATED_DELTA, "gated delta rule", true},
};
#define N_OPS (sizeof ops / sizeof ops[0])
#define ALL_OPS 0x1Fu

/* The params resolved: defaults for what is 0. */
static clvarlen_status resolve(clvarlen_context *ctx, const char *fn,
                               const clvarlen_precompile_params *caller,
                               clvarlen_precompile_params *p)
{
    precompile_defaults(p);
    clvarlen_status st;
    if ((st = cv_struct_in(ctx, fn, "params", caller, p, sizeof *p,
                           CLVARLEN_PRECOMPILE_PARAMS_MIN_SIZE)) != CLVARLEN_SUCCESS)
        return st;
    if (p->ops & ~ALL_OPS)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: unknown op bits 0x%x", fn,
                        p->ops & ~ALL_OPS);
    if (p->n_dtypes < 0 || p->n_dtypes > 4 || p->n_head_dims < 0 || p->n_head_dims > 8)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: n_dtypes (%d) must be 0 to 4 and n_head_dims (%d) 0 to 8", fn,
                        (int)p->n_dtypes, (int)p->n_head_dims);
    if (p->heads_q < 0 || p->heads_kv < 0 || p->page_size < 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: heads_q, heads_kv and page_size must not be negative", fn);
    if (!p->ops)
        p->ops = ALL_OPS;
    if (!p->n_dtypes) {
        p->dtypes[0] = CLVARLEN_DTYPE_BF16;
        p->n_dtypes = 1;
    }
    if (!p->n_head_dims) {
        p->head_dims[0] = 128;
        p->n_head_dims = 1;
    }
    if (!p->heads_q && !p->heads_kv) {
        p->heads_q = 32;
        p->heads_kv = 8;
    } else if (!p->heads_q || !p->heads_kv) {
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: give both heads_q and heads_kv, or neither", fn);
    }
    if (!p->page_size)
        p->page_size = 16;
    return CLVARLEN_SUCCESS;
}

clvarlen_status clvarlen_context_precompile(clvarlen_context *ctx,
                                            const clvarlen_precompile_params *params)
{
    static const char fn[] = "clvarlen_context_precompile";
    if (!ctx)
        return cv_error(NULL, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: context is NULL", fn);
    clvarlen_precompile_params p;
    clvarlen_precompile_params defaults;
    clvarlen_precompile_params_init(&defaults);
    clvarlen_status st = resolve(ctx, fn, params ? params : &defaults, &p);
    if (st != CLVARLEN_SUCCESS)
        return st;
    int total = 0, done = 0;
    for (size_t i = 0; i < N_OPS; i++)
        if (p.ops & ops[i].op)
            total += ops[i].shaped ? p.n_dtypes * p.n_head_dims : 1;
    for (size_t i = 0; i < N_OPS; i++) {
        if (!(p.ops & ops[i].op))
            continue;
        const int nd = ops[i].shaped ? p.n_dtypes : 1, nh = ops[i].shaped ? p.n_head_dims : 1;
        for (int a = 0; a < nd; a++) {
            for (int b = 0; b < nh; b++) {
                const tiny t = {ctx, p.dtypes[a], p.head_dims[b], p.heads_q, p.heads_kv,
                                p.page_size};
                char what[96];
                snprintf(what, sizeof what, ops[i].shaped ? "%s %s D %d" : "%s", ops[i].name,
                         clvarlen_dtype_name(t.dtype), (int)t.head_dim);
                if ((st = run_op(&t, ops[i].op)) != CLVARLEN_SUCCESS) {
                    char why[512];
                    snprintf(why, sizeof why, "%s", clvarlen_last_error(ctx));
                    return cv_error(ctx, st, "%s: %s: %s", fn, what, why);
                }
                if (p.progress)
                    p.progress(p.progress_user, ++done, total, what);
            }
        }
    }
    return CLVARLEN_SUCCESS;
}

clvarlen_status clvarlen_supports(clvarlen_context *ctx, unsigned op, clvarlen_dtype dtype,
                                  int32_t head_dim, int32_t heads_q, int32_t heads_kv)
{
    static const char fn[] = "clvarlen_supports";
    if (!ctx)
        return cv_error(NULL, CLVARLEN_ERROR_INVALID_ARGUMENT, "%s: context is NULL", fn);
    size_t i = 0;
    while (i < N_OPS && ops[i].op != op)
        i++;
    if (i == N_OPS)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: op 0x%x is not one CLVARLEN_PRECOMPILE_* bit", fn, op);
    if (heads_q <= 0 || heads_kv <= 0)
        return cv_error(ctx, CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "%s: heads_q (%d) and heads_kv (%d) must be positive", fn, (int)heads_q,
                        (int)heads_kv);
    const tiny t = {ctx, dtype, head_dim, heads_q, heads_kv, 16};
    clvarlen_status st = run_op(&t, op);
    if (st != CLVARLEN_SUCCESS) {
        char why[512];
        snprintf(why, sizeof why, "%s", clvarlen_last_error(ctx));
        return cv_error(ctx, st, "%s: %s: %s", fn, ops[i].name, why);
    }
    return CLVARLEN_SUCCESS;
}

/* Paged KV cache attention and cache append (SPEC 1.1) against the float64
 * oracle (tests/ref/paged-ref.c), built once per backend (tests/meson.build):
 * test-paged-cpu runs the cases on the CPU fallback, test-paged-cl on the
 * OpenCL device through the host-memory entry points, plus the cl_mem entry
 * points and device checks of test-paged-clmem.c. The append cases and the
 * argument errors are in test-paged-append.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test-paged.h"
#include "attention-ref.h"

clvarlen_context *paged_make_ctx(void)
{
#if TEST_BACKEND_CL
    return tu_cl_context();
#else
    return tu_cpu_context();
#endif
}

/* ------------------------------------------------------------ a random case */

pcase paged_base_case(void)
{
    pcase c;
    memset(&c, 0, sizeof c);
    c.dtype = CLVARLEN_DTYPE_F32;
    c.hq = 4;
    c.hk = 1;
    c.d = c.dv = 64;
    c.wl = c.wr = -1;
    c.page_size = 16;
    c.mode = PM_DECODE;
    c.max_rows = 6;
    c.max_lq = 1;
    c.max_cache = 300;
    c.seed = 1;
    return c;
}

/* Query and cache lengths of row b under the case's mode. */
static void draw_row(const pcase *c, tu_rng *r, int64_t b, int64_t n, int32_t *lq, int32_t *cs)
{
    int64_t kind = c->mode == PM_MIXED ? tu_int(r, 0, 3) : (int64_t)c->mode;
    if (c->mode == PM_MIXED && n >= 3 && b == n - 1)
        kind = 3; /* always one empty row (no queries, no cache) */
    if (c->mode == PM_MIXED && n >= 3 && b == 1)
        kind = 2; /* and one row with a cache but no queries */
    switch (kind) {
    case 0: /* decode */
        *lq = 1;
        *cs = (int32_t)tu_int(r, 1, c->max_cache);
        break;
    case 1: /* a prefill chunk over a cache holding the earlier chunks */
        *lq = (int32_t)tu_int(r, 1, c->max_lq);
        *cs = (int32_t)tu_int(r, *lq, c->max_cache);
        break;
    case 2:
        *lq = 0;
        *cs = (int32_t)tu_int(r, 0, c->max_cache);
        break;
    default:
        *lq = 0;
        *cs = 0;
        break;
    }
}

/* Values a page-table entry past a row's used pages may hold: none may be read. */
static int32_t garbage_entry(int64_t i, int64_t num_pages)
{
    const int32_t g[] = {-7, INT32_MAX, (int32_t)num_pages, -1, INT32_MIN,
                         (int32_t)num_pages + 999};
    return g[i % (int64_t)(sizeof g / sizeof g[0])];
}

void make_pbatch(const pcase *c, tu_rng *r, pbatch *b)
{
    memset(b, 0, sizeof *b);
    const int64_t n = tu_int(r, (c->max_rows + 1) / 2, c->max_rows);
    b->n = n;
    b->lq = tu_xmalloc(sizeof(int32_t) * (size_t)(n + 1));
    b->cache_seqlens = tu_xmalloc(sizeof(int32_t) * (size_t)(n + 1));
    b->cu_q = tu_xmalloc(sizeof(int32_t) * (size_t)(n + 1));
    int64_t used_total = 0;
    int32_t max_used = 0;
    for (int64_t i = 0; i < n; i++) {
        draw_row(c, r, i, n, &b->lq[i], &b->cache_seqlens[i]);
        if (i == 0 && c->mode != PM_MIXED)
            b->cache_seqlens[0] = c->max_cache; /* the longest cache the case allows */
        if (i == 2 && c->mode != PM_MIXED && b->lq[2] <= c->page_size)
            b->cache_seqlens[2] = c->page_size; /* ends exactly on a page boundary */
        int32_t used = (b->cache_seqlens[i] + c->page_size - 1) / c->page_size;
        used_total += used;
        if (used > max_used)
            max_used = used;
        if (b->lq[i] > b->max_lq)
            b->max_lq = b->lq[i];
    }
    tu_cu_from_lengths(b->lq, n, b->cu_q);
    b->tq = b->cu_q[n];
    /* Sometimes a column no row uses at all; max_pages must be > 0. */
    b->max_pages = max_used + (int32_t)tu_int(r, 0, 1);
    if (b->max_pages < 1)
        b->max_pages = 1;
    b->pt_stride = b->max_pages + c->extra_cols;
    b->num_pages = used_total + c->spare_pages;
    if (b->num_pages < 1)
        b->num_pages = 1;
    /* The pages in a random order: a row's pages are neither contiguous nor ascending. */
    int32_t *perm = tu_xmalloc(sizeof(int32_t) * (size_t)b->num_pages);
    for (int64_t i = 0; i < b->num_pages; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = b->num_pages - 1; i > 0; i--) {
        int64_t j = tu_int(r, 0, i);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    b->page_table = tu_xmalloc(sizeof(int32_t) * (size_t)(n * b->pt_stride + 1));
    for (int64_t i = 0; i < n * b->pt_stride; i++)
        b->page_table[i] = garbage_entry(i, b->num_pages);
    int64_t next = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t used = (b->cache_seqlens[i] + c->page_size - 1) / c->page_size;
        for (int32_t j = 0; j < used; j++)
            b->page_table[i * b->pt_stride + j] = perm[next++];
    }
    free(perm);
    size_t es = clvarlen_dtype_size(c->dtype);
    b->qs = (int64_t)c->hq * c->d + c->q_pad;
    b->os = (int64_t)c->hq * c->dv + c->o_pad;
    b->q = tu_xmalloc(es * (size_t)(b->tq * b->qs) + 16);
    b->k_cache = tu_xmalloc(es * paged_cache_elems(b, c, c->d) + 16);
    b->v_cache = tu_xmalloc(es * paged_cache_elems(b, c, c->dv) + 16);
    tu_fill_random(r, b->q, c->dtype, (size_t)(b->tq * b->qs), 1.0);
    tu_fill_random(r, b->k_cache, c->dtype, paged_cache_elems(b, c, c->d), 1.0);
    tu_fill_random(r, b->v_cache, c->dtype, paged_cache_elems(b, c, c->dv), 1.0);
}

void free_pbatch(pbatch *b)
{
    free(b->lq);
    free(b->cache_seqlens);
    free(b->cu_q);
    free(b->page_table);
    free(b->q);
    free(b->k_cache);
    free(b->v_cache);
    memset(b, 0, sizeof *b);
}

size_t paged_cache_elems(const pbatch *b, const pcase *c, int width)
{
    return (size_t)b->num_pages * (size_t)c->page_size * (size_t)c->hk * (size_t)width;
}

void fill_paged_params(const pcase *c, const pbatch *b, clvarlen_paged_params *p)
{
    clvarlen_paged_params_init(p);
    p->dtype = c->dtype;
    p->n_rows = b->n;
    p->total_q = b->tq;
    p->num_pages = b->num_pages;
    p->page_size = c->page_size;
    p->max_pages = b->max_pages;
    p->page_table_stride = c->extra_cols ? b->pt_stride : 0;
    p->heads_q = c->hq;
    p->heads_kv = c->hk;
    p->head_dim = c->d;
    p->head_dim_v = c->dv == c->d ? 0 : c->dv;
    p->q_stride = c->q_pad ? b->qs : 0;
    p->o_stride = c->o_pad ? b->os : 0;
    p->max_seqlen_q = c->msq == MSQ_EXACT ? b->max_lq : c->msq == MSQ_OVER ? b->max_lq + 3 : 0;
    p->scale = c->scale;
    p->causal = c->causal;
    p->window_left = c->wl;
    p->window_right = c->wr;
    p->softcap = c->softcap;
    p->num_splits = c->num_splits;
}

double paged_lse_tolerance(clvarlen_dtype dt)
{
    return dt == CLVARLEN_DTYPE_F32 ? 1e-5 : 1e-4;
}

void *paged_dense_o(const pcase *c, const pbatch *b, const void *o)
{
    size_t es = clvarlen_dtype_size(c->dtype), row = (size_t)c->hq * (size_t)c->dv * es;
    char *dense = tu_xmalloc(row * (size_t)b->tq + 16);
    for (int64_t t = 0; t < b->tq; t++)
        memcpy(dense + (size_t)t * row, (const char *)o + (size_t)t * (size_t)b->os * es, row);
    return dense;
}

/* The (row, query, head) whose o is furthest from the oracle: names the place of a failure. */
static void worst_place(const pcase *c, const pbatch *b, const void *o, const double *ref,
                        char *buf, size_t len)
{
    double worst = -1.0;
    int64_t wt = 0, wh = 0;
    for (int64_t t = 0; t < b->tq; t++)
        for (int64_t h = 0; h < c->hq; h++) {
            double e = 0.0;
            for (int64_t x = 0; x < c->dv; x++) {
                size_t i = (size_t)((t * c->hq + h) * c->dv + x);
                double d = fabs(tu_get(o, c->dtype, i) - ref[i]);
                e = isnan(d) ? INFINITY : (d > e ? d : e);
            }
            if (e > worst) {
                worst = e;
                wt = t;
                wh = h;
            }
        }
    int64_t row = 0;
    while (row + 1 < b->n && b->cu_q[row + 1] <= wt)
        row++;
    snprintf(buf, len, "worst: row %lld (len_q %d, cache %d) query %lld head %lld, |err| %.3g",
             (long long)row, b->lq[row], b->cache_seqlens[row], (long long)(wt - b->cu_q[row]),
             (long long)wh, worst);
}

void paged_check_result(const pcase *c, const pbatch *b, const void *o_dense, const float *lse,
                        const char *label)
{
    clvarlen_paged_params p;
    fill_paged_params(c, b, &p);
    size_t dense = (size_t)b->tq * (size_t)c->hq * (size_t)c->dv;
    size_t lse_n = (size_t)b->tq * (size_t)c->hq;
    double *o_ref = tu_xmalloc(sizeof(double) * (dense + 1));
    double *lse_ref = tu_xmalloc(sizeof(double) * (lse_n + 1));
    paged_ref_forward(&p, b->q, b->k_cache, b->v_cache, b->cu_q, b->page_table, b->cache_seqlens,
                      o_ref, lse_ref);
    char what[320], where[160];
    tu_err e = tu_compare(o_dense, c->dtype, o_ref, dense);
    if (!tu_err_within(e, tu_tolerance(c->dtype)))
        worst_place(c, b, o_dense, o_ref, where, sizeof where);
    else
        where[0] = '\0';
    snprintf(what, sizeof what, "%s o (%lld rows, %lld q, %lld pages) %s", label,
             (long long)b->n, (long long)b->tq, (long long)b->num_pages, where);
    tu_assert_close(e, tu_tolerance(c->dtype), what);
    if (lse) {
        snprintf(what, sizeof what, "%s lse", label);
        tu_assert_close(tu_compare(lse, CLVARLEN_DTYPE_F32, lse_ref, lse_n),
                        paged_lse_tolerance(c->dtype), what);
    }
    free(o_ref);
    free(lse_ref);
}

/* Runs the case through the host-memory entry point and compares with the
 * oracle; the guard bands, the bytes between strided o rows and, without lse,
 * the lse buffer must keep their fill. */
static void run_pcase(clvarlen_context *ctx, const pcase *c, const char *label)
{
    tu_rng r = tu_rng_make(c->seed);
    pbatch b;
    make_pbatch(c, &r, &b);
    clvarlen_paged_params p;
    fill_paged_params(c, &b, &p);
    size_t es = clvarlen_dtype_size(c->dtype);
    size_t lse_n = (size_t)c->hq * (size_t)b.tq;
    tu_guarded o = tu_guarded_alloc((size_t)(b.tq * b.os) * es, 0xCD);
    tu_guarded lse = tu_guarded_alloc(lse_n * sizeof(float), 0xCD);
    clvarlen_status st =
        clvarlen_paged_attention_forward(ctx, &p, b.q, b.k_cache, b.v_cache, b.cu_q, b.page_table,
                                         b.cache_seqlens, o.p, c->no_lse ? NULL : lse.p);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "%s: %s (%s)", label, clvarlen_status_name(st),
                  clvarlen_last_error(ctx));
    tu_assert_guard(&o, label);
    tu_assert_guard(&lse, label);
    const unsigned char *ob = o.p;
    size_t row = (size_t)c->hq * (size_t)c->dv * es;
    for (int64_t t = 0; t < b.tq; t++)
        for (size_t x = row; x < (size_t)b.os * es; x++)
            tu_check(ob[(size_t)t * (size_t)b.os * es + x] == 0xCD,
                     "%s: byte between o rows changed (token %lld)", label, (long long)t);
    if (c->no_lse) {
        const unsigned char *lb = lse.p;
        for (size_t x = 0; x < lse_n * sizeof(float); x++)
            tu_check(lb[x] == 0xCD, "%s: lse written although NULL was passed", label);
    }
    void *dense = paged_dense_o(c, &b, o.p);
    paged_check_result(c, &b, dense, c->no_lse ? NULL : lse.p, label);
    free(dense);
    tu_guarded_free(&o);
    tu_guarded_free(&lse);
    free_pbatch(&b);
}

void paged_run_seeds(clvarlen_context *ctx, pcase c, int seeds, const char *label)
{
    char what[128];
    for (int i = 0; i < seeds; i++) {
        c.seed = c.seed * 1000 + (uint64_t)i + 1;
        snprintf(what, sizeof what, "%s seed %d", label, i);
        run_pcase(ctx, &c, what);
    }
}

/* ------------------------------------------------------------ the oracle itself */

/* Each row's cache gathered into contiguous K/V (test-side, page by page), so
 * that the attention oracle of SPEC 1 can run on it: the paged oracle must
 * agree with it to the last bits (the same arithmetic in the same order). */
static void oracle_self_check(const pcase *c, const char *label)
{
    tu_rng r = tu_rng_make(c->seed);
    pbatch b;
    make_pbatch(c, &r, &b);
    clvarlen_paged_params pp;
    fill_paged_params(c, &b, &pp);
    size_t es = clvarlen_dtype_size(c->dtype);
    int32_t *cu_k = tu_xmalloc(sizeof(int32_t) * (size_t)(b.n + 1));
    tu_cu_from_lengths(b.cache_seqlens, b.n, cu_k);
    const int64_t tk = cu_k[b.n];
    const size_t krow = (size_t)c->hk * (size_t)c->d * es;
    const size_t vrow = (size_t)c->hk * (size_t)c->dv * es;
    char *k = tu_xmalloc(krow * (size_t)tk + 16), *v = tu_xmalloc(vrow * (size_t)tk + 16);
    for (int64_t s = 0; s < b.n; s++)
        for (int32_t j = 0; j < b.cache_seqlens[s]; j++) {
            int64_t page = b.page_table[s * b.pt_stride + j / c->page_size];
            int64_t slot = page * c->page_size + j % c->page_size;
            memcpy(k + (size_t)(cu_k[s] + j) * krow, (char *)b.k_cache + (size_t)slot * krow, krow);
            memcpy(v + (size_t)(cu_k[s] + j) * vrow, (char *)b.v_cache + (size_t)slot * vrow, vrow);
        }
    clvarlen_attention_params ap;
    clvarlen_attention_params_init(&ap);
    ap.dtype = c->dtype;
    ap.n_seqs = b.n;
    ap.total_q = b.tq;
    ap.total_k = tk;
    ap.heads_q = c->hq;
    ap.heads_kv = c->hk;
    ap.head_dim = c->d;
    ap.head_dim_v = pp.head_dim_v;
    ap.q_stride = pp.q_stride;
    ap.scale = c->scale;
    ap.causal = c->causal;
    ap.window_left = c->wl;
    ap.window_right = c->wr;
    ap.softcap = c->softcap;
    size_t on = (size_t)b.tq * (size_t)c->hq * (size_t)c->dv, ln = (size_t)b.tq * (size_t)c->hq;
    double *o1 = tu_xmalloc(sizeof(double) * (on + 1)), *o2 = tu_xmalloc(sizeof(double) * (on + 1));
    double *l1 = tu_xmalloc(sizeof(double) * (ln + 1)), *l2 = tu_xmalloc(sizeof(double) * (ln + 1));
    paged_ref_forward(&pp, b.q, b.k_cache, b.v_cache, b.cu_q, b.page_table, b.cache_seqlens, o1,
                      l1);
    attention_ref_forward(&ap, b.q, k, v, b.cu_q, cu_k, NULL, o2, l2);
    for (size_t i = 0; i < on; i++)
        tu_check(fabs(o1[i] - o2[i]) <= 1e-12 * (1.0 + fabs(o2[i])), "%s: o[%zu] %.17g vs %.17g",
                 label, i, o1[i], o2[i]);
    for (size_t i = 0; i < ln; i++)
        tu_check(l1[i] == l2[i] || fabs(l1[i] - l2[i]) <= 1e-12 * (1.0 + fabs(l2[i])),
                 "%s: lse[%zu] %.17g vs %.17g", label, i, l1[i], l2[i]);
    /* No NaN anywhere: every query here sees at least its own position. */
    for (size_t i = 0; i < on; i++)
        tu_check(!isnan(o1[i]), "%s: oracle o NaN at %zu", label, i);
    for (size_t i = 0; i < ln; i++)
        tu_check(isfinite(l1[i]), "%s: oracle lse not finite at %zu", label, i);
    ck_assert_msg(on > 0, "%s: the case has no query", label);
    free(o1);
    free(o2);
    free(l1);
    free(l2);
    free(k);
    free(v);
    free(cu_k);
    free_pbatch(&b);
}

START_TEST(test_oracle)
{
    pcase c = paged_base_case();
    c.page_size = 1;
    c.max_cache = 40;
    oracle_self_check(&c, "oracle ps 1 decode");
    c = paged_base_case();
    c.page_size = 7;
    c.mode = PM_MIXED;
    c.max_rows = 7;
    c.max_lq = 20;
    c.max_cache = 60;
    c.causal = 1;
    c.hk = 2;
    c.extra_cols = 3;
    c.seed = 2;
    oracle_self_check(&c, "oracle ps 7 mixed causal");
    c.page_size = 16;
    c.causal = 0;
    c.wl = 5;
    c.wr = 3;
    c.softcap = 2.0f;
    c.q_pad = 9;
    c.dv = 32;
    c.seed = 3;
    oracle_self_check(&c, "oracle ps 16 window softcap dv 32");
    c.mode = PM_PREFILL;
    c.causal = 1;
    c.wl = 11;
    c.wr = -1;
    c.softcap = 0.0f;
    c.dtype = CLVARLEN_DTYPE_BF16;
    c.seed = 4;
    oracle_self_check(&c, "oracle ps 16 prefill causal window bf16");
}
END_TEST

/* ------------------------------------------------------------ random batches */

START_TEST(test_decode)
{
    clvarlen_context *ctx = paged_make_ctx();
    pcase c = paged_base_case(); /* f32 d64 hq 4 hk 1, ps 16, automatic splits */
    c.causal = 1;
    paged_run_seeds(ctx, c, 2, "decode ps 16 auto splits");
    c.page_size = 1;
    c.hk = 2;
    c.causal = 0;
    c.num_splits = 3;
    c.msq = MSQ_ZERO;
    c.spare_pages = 9;
    c.extra_cols = 5;
    c.seed = 2;
    paged_run_seeds(ctx, c, 1, "decode ps 1 splits 3 msq 0 stride");
    c = paged_base_case();
    c.page_size = 7;
    c.causal = 1;
    c.wl = 37;
    c.num_splits = 2;
    c.msq = MSQ_OVER;
    c.seed = 3;
    paged_run_seeds(ctx, c, 1, "decode ps 7 window splits 2 msq over");
    /* the most splits allowed over short caches: most key ranges are empty */
    c = paged_base_case();
    c.max_cache = 40;
    c.num_splits = 256;
    c.seed = 4;
    paged_run_seeds(ctx, c, 1, "decode splits 256");
    clvarlen_context_destroy(ctx);
}
END_TEST

START_TEST(test_prefill)
{
    clvarlen_context *ctx = paged_make_ctx();
    pcase c = paged_base_case();
    c.hk = 2;
    c.mode = PM_PREFILL;
    c.max_rows = 4;
    c.max_lq = 90;
    c.max_cache = 400;
    c.causal = 1;
    c.num_splits = 1;
    c.seed = 11;
    paged_run_seeds(ctx, c, 1, "prefill ps 16 causal splits 1");
    c.page_size = 7;
    c.mode = PM_MIXED;
    c.max_rows = 7;
    c.max_lq = 40;
    c.max_cache = 200;
    c.causal = 0;
    c.softcap = 2.5f;
    c.num_splits = 2;
    c.msq = MSQ_ZERO;
    c.seed = 12;
    paged_run_seeds(ctx, c, 2, "mixed ps 7 softcap splits 2 msq 0");
    c = paged_base_case();
    c.page_size = 1;
    c.mode = PM_PREFILL;
    c.max_rows = 3;
    c.max_lq = 50;
    c.max_cache = 260;
    c.causal = 1;
    c.wl = 13;
    c.wr = 4;
    c.seed = 13;
    paged_run_seeds(ctx, c, 1, "prefill ps 1 causal window (13, 4) auto splits");
    clvarlen_context_destroy(ctx);
}
END_TEST

START_TEST(test_dtypes)
{
    clvarlen_context *ctx = paged_make_ctx();
    pcase c = paged_base_case();
    c.dtype = CLVARLEN_DTYPE_F16;
    c.d = c.dv = 128;
    c.hk = 2;
    c.causal = 1;
    c.seed = 21;
    paged_run_seeds(ctx, c, 1, "f16 d128 decode ps 16");
    c.dtype = CLVARLEN_DTYPE_BF16;
    c.page_size = 7;
    c.mode = PM_PREFILL;
    c.max_rows = 4;
    c.max_lq = 60;
    c.max_cache = 250;
    c.wl = 20;
    c.num_splits = 3;
    c.msq = MSQ_ZERO;
    c.seed = 22;
    paged_run_seeds(ctx, c, 1, "bf16 d128 prefill ps 7 window splits 3 msq 0");
    c = paged_base_case();
    c.dtype = CLVARLEN_DTYPE_BF16;
    c.page_size = 1;
    c.mode = PM_MIXED;
    c.max_lq = 12;
    c.max_cache = 150;
    c.causal = 1;
    c.scale = 0.37f;
    c.num_splits = 1;
    c.seed = 23;
    paged_run_seeds(ctx, c, 1, "bf16 d64 mixed ps 1 scale");
    /* a few queries per row (speculative verify shape): the small-query kernel with len_q > 1 */
    c = paged_base_case();
    c.dtype = CLVARLEN_DTYPE_F16;
    c.mode = PM_PREFILL;
    c.max_lq = 4;
    c.max_cache = 220;
    c.causal = 1;
    c.seed = 24;
    paged_run_seeds(ctx, c, 1, "f16 d64 verify-like ps 16");
    clvarlen_context_destroy(ctx);
}
END_TEST

START_TEST(test_layout)
{
    clvarlen_context *ctx = paged_make_ctx();
    pcase c = paged_base_case();
    c.d = c.dv = 32;
    c.hk = 2;
    c.causal = 1;
    c.q_pad = 5;
    c.o_pad = 7;
    c.extra_cols = 3;
    c.num_splits = 2;
    c.no_lse = 1;
    c.seed = 31;
    paged_run_seeds(ctx, c, 1, "d32 strides no lse splits 2");
    c = paged_base_case();
    c.dv = 32; /* head_dim_v != head_dim */
    c.mode = PM_MIXED;
    c.max_lq = 30;
    c.max_cache = 120;
    c.causal = 1;
    c.page_size = 7;
    c.q_pad = 64; /* q a view into a fused projection */
    c.seed = 32;
    paged_run_seeds(ctx, c, 1, "d64 dv32 mixed ps 7 q stride");
    clvarlen_context_destroy(ctx);
}
END_TEST

/* ------------------------------------------------------------ speculative verify */

/* Target verify in the seqlens_expanded form (SPEC 2.4 then 1.1): per-sequence
 * draft lengths q_s over KV lengths kv_s (the drafts included), expanded by
 * clvarlen_seqlens_expand into one row per draft token with page_size 1
 * (sglang's page_table_1), must equal plain causal attention of each
 * sequence's q_s queries over its kv_s keys. */
static void verify_case(clvarlen_context *ctx, clvarlen_dtype dt, int uniform, uint64_t seed)
{
    enum { N = 6 };
    const int32_t hq = 4, hk = 2, d = 64;
    tu_rng r = tu_rng_make(seed);
    int32_t q_len[N], kv_len[N], cu_q[N + 1], cu_k[N + 1];
    int32_t page_cols = 0;
    for (int s = 0; s < N; s++) {
        q_len[s] = uniform ? 3 : (int32_t)tu_int(&r, 0, 5); /* 0: a sequence with no draft */
        kv_len[s] = (int32_t)tu_int(&r, q_len[s] > 1 ? q_len[s] : 1, 180);
        if (kv_len[s] + 2 > page_cols)
            page_cols = kv_len[s] + 2; /* two columns past the longest: garbage */
    }
    tu_cu_from_lengths(q_len, N, cu_q);
    tu_cu_from_lengths(kv_len, N, cu_k);
    const int64_t tq = cu_q[N], tk = cu_k[N], num_pages = tk + 11;
    /* The token slots in a random order. */
    int32_t *perm = tu_xmalloc(sizeof(int32_t) * (size_t)num_pages);
    for (int64_t i = 0; i < num_pages; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = num_pages - 1; i > 0; i--) {
        int64_t j = tu_int(&r, 0, i);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int32_t *pt = tu_xmalloc(sizeof(int32_t) * (size_t)(N * page_cols));
    for (int s = 0; s < N; s++)
        for (int32_t j = 0; j < page_cols; j++)
            pt[s * page_cols + j] = j < kv_len[s] ? perm[cu_k[s] + j] : garbage_entry(j, num_pages);
    size_t es = clvarlen_dtype_size(dt), krow = (size_t)(hk * d) * es, qrow = (size_t)(hq * d);
    char *kc = tu_xmalloc(krow * (size_t)num_pages), *vc = tu_xmalloc(krow * (size_t)num_pages);
    void *q = tu_xmalloc(qrow * es * (size_t)tq + 16);
    tu_fill_random(&r, kc, dt, (size_t)(num_pages * hk * d), 1.0);
    tu_fill_random(&r, vc, dt, (size_t)(num_pages * hk * d), 1.0);
    tu_fill_random(&r, q, dt, qrow * (size_t)tq, 1.0);

    const int64_t capacity = tq + 2, out_stride = page_cols + 1;
    int32_t *se = tu_xmalloc(sizeof(int32_t) * (size_t)capacity);
    int32_t *pt1 = tu_xmalloc(sizeof(int32_t) * (size_t)(capacity * out_stride));
    int64_t total = -1;
    clvarlen_status st = clvarlen_seqlens_expand(ctx, kv_len, uniform ? NULL : q_len,
                                                 uniform ? 3 : 0, N, pt, page_cols, page_cols, 0,
                                                 capacity, se, pt1, out_stride, &total);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "seqlens_expand: %s", clvarlen_last_error(ctx));
    ck_assert_int_eq(total, tq);
    for (int s = 0; s < N; s++)
        for (int32_t i = 0; i < q_len[s]; i++)
            ck_assert_int_eq(se[cu_q[s] + i], kv_len[s] - q_len[s] + 1 + i);

    clvarlen_paged_params p;
    clvarlen_paged_params_init(&p);
    p.dtype = dt;
    p.n_rows = tq;
    p.total_q = tq;
    p.num_pages = num_pages;
    p.page_size = 1;
    p.max_pages = page_cols;
    p.page_table_stride = out_stride;
    p.heads_q = hq;
    p.heads_kv = hk;
    p.head_dim = d;
    p.max_seqlen_q = 1;
    p.causal = 1;
    int32_t *cu_rows = tu_xmalloc(sizeof(int32_t) * (size_t)(tq + 1));
    for (int64_t t = 0; t <= tq; t++)
        cu_rows[t] = (int32_t)t;
    size_t on = (size_t)tq * qrow, ln = (size_t)(tq * hq);
    void *o = tu_xmalloc(on * es + 16);
    float *lse = tu_xmalloc(ln * sizeof(float) + 16);
    st = clvarlen_paged_attention_forward(ctx, &p, q, kc, vc, cu_rows, pt1, se, o, lse);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "verify forward: %s", clvarlen_last_error(ctx));

    /* The oracle of the original sequences: causal attention over contiguous K/V. */
    char *k = tu_xmalloc(krow * (size_t)tk + 16), *v = tu_xmalloc(krow * (size_t)tk + 16);
    for (int64_t i = 0; i < tk; i++) {
        memcpy(k + (size_t)i * krow, kc + (size_t)perm[i] * krow, krow);
        memcpy(v + (size_t)i * krow, vc + (size_t)perm[i] * krow, krow);
    }
    clvarlen_attention_params ap;
    clvarlen_attention_params_init(&ap);
    ap.dtype = dt;
    ap.n_seqs = N;
    ap.total_q = tq;
    ap.total_k = tk;
    ap.heads_q = hq;
    ap.heads_kv = hk;
    ap.head_dim = d;
    ap.causal = 1;
    double *o_ref = tu_xmalloc(sizeof(double) * (on + 1));
    double *l_ref = tu_xmalloc(sizeof(double) * (ln + 1));
    attention_ref_forward(&ap, q, k, v, cu_q, cu_k, NULL, o_ref, l_ref);
    char what[96];
    snprintf(what, sizeof what, "verify %s%s o (%lld drafts)", clvarlen_dtype_name(dt),
             uniform ? " uniform" : "", (long long)tq);
    tu_assert_close(tu_compare(o, dt, o_ref, on), tu_tolerance(dt), what);
    tu_assert_close(tu_compare(lse, CLVARLEN_DTYPE_F32, l_ref, ln), paged_lse_tolerance(dt), what);
    void *bufs[] = {perm, pt, kc, vc, q, se, pt1, cu_rows, o, lse, k, v, o_ref, l_ref};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
}

START_TEST(test_verify)
{
    clvarlen_context *ctx = paged_make_ctx();
    verify_case(ctx, CLVARLEN_DTYPE_F32, 0, 41);
    verify_case(ctx, CLVARLEN_DTYPE_F32, 1, 42);
    verify_case(ctx, CLVARLEN_DTYPE_BF16, 0, 43);
    clvarlen_context_destroy(ctx);
}
END_TEST

static Suite *paged_suite(void)
{
    Suite *s = suite_create(TEST_BACKEND_CL ? "paged-cl" : "paged-cpu");
    TCase *tc = tcase_create("oracle");
    tcase_add_test(tc, test_oracle);
    suite_add_tcase(s, tc);
    tc = tcase_create("forward");
    tcase_set_timeout(tc, TEST_BACKEND_CL ? 600 : 120);
    tcase_add_test(tc, test_decode);
    tcase_add_test(tc, test_prefill);
    tcase_add_test(tc, test_dtypes);
    tcase_add_test(tc, test_layout);
    suite_add_tcase(s, tc);
    tc = tcase_create("verify");
    tcase_set_timeout(tc, TEST_BACKEND_CL ? 600 : 120);
    tcase_add_test(tc, test_verify);
    suite_add_tcase(s, tc);
    paged_add_append_cases(s);
#if TEST_BACKEND_CL
    paged_add_cl_cases(s);
#endif
    return s;
}

int main(void)
{
#if TEST_BACKEND_CL
    if (!tu_probe_opencl_device())
        return TU_EXIT_SKIP;
#endif
    return tu_run_suite(paged_suite());
}

/* The paged KV cache append (clvarlen_kv_cache_append) against the oracle
 * (kv_append_ref: every cache byte compared, untouched slots keep their
 * previous bytes), append followed by paged attention over the new tokens,
 * and the argument errors of both entry points (each checks the status and
 * that nothing was written). Linked into test-paged-cpu and test-paged-cl.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test-paged.h"

/* Random bytes: the previous contents of a cache, which an append must keep
 * outside the slots it writes (any bit pattern, NaNs included). */
static void fill_bytes(tu_rng *r, void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ((unsigned char *)p)[i] = (unsigned char)(tu_next(r) >> 56);
}

/* A random slot mapping: distinct slots of [0, slots) in random order, every
 * fifth token or so skipped (-1). */
static void random_slots(tu_rng *r, int64_t slots, int64_t n_tokens, int64_t *map)
{
    int64_t *perm = tu_xmalloc(sizeof(int64_t) * (size_t)slots);
    for (int64_t i = 0; i < slots; i++)
        perm[i] = i;
    for (int64_t i = slots - 1; i > 0; i--) {
        int64_t j = tu_int(r, 0, i), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int64_t t = 0; t < n_tokens; t++)
        map[t] = tu_int(r, 0, 4) == 0 ? -1 : perm[t];
    free(perm);
}

typedef struct acfg {
    clvarlen_dtype dt, cache_dt;
    int hk, d, dv, page_size, num_pages, n_tokens, k_pad, v_pad;
    uint64_t seed;
} acfg;

static void append_case(clvarlen_context *ctx, const acfg *a, const char *label)
{
    tu_rng r = tu_rng_make(a->seed);
    clvarlen_kv_append_params p;
    clvarlen_kv_append_params_init(&p);
    p.dtype = a->dt;
    p.cache_dtype = a->cache_dt;
    p.n_tokens = a->n_tokens;
    p.num_pages = a->num_pages;
    p.page_size = a->page_size;
    p.heads_kv = a->hk;
    p.head_dim = a->d;
    p.head_dim_v = a->dv == a->d ? 0 : a->dv;
    const int64_t ks = (int64_t)a->hk * a->d + a->k_pad, vs = (int64_t)a->hk * a->dv + a->v_pad;
    p.k_stride = a->k_pad ? ks : 0;
    p.v_stride = a->v_pad ? vs : 0;
    size_t es = clvarlen_dtype_size(a->dt), ces = clvarlen_dtype_size(a->cache_dt);
    const int64_t slots = (int64_t)a->num_pages * a->page_size;
    void *k = tu_xmalloc(es * (size_t)(a->n_tokens * ks) + 16);
    void *v = tu_xmalloc(es * (size_t)(a->n_tokens * vs) + 16);
    tu_fill_random(&r, k, a->dt, (size_t)(a->n_tokens * ks), 1.0);
    tu_fill_random(&r, v, a->dt, (size_t)(a->n_tokens * vs), 1.0);
    int64_t *map = tu_xmalloc(sizeof(int64_t) * (size_t)(a->n_tokens + 1));
    random_slots(&r, slots, a->n_tokens, map);
    map[0] = -1; /* at least one skipped token */
    size_t kb = (size_t)(slots * a->hk * a->d) * ces, vb = (size_t)(slots * a->hk * a->dv) * ces;
    tu_guarded kc = tu_guarded_alloc(kb, 0), vc = tu_guarded_alloc(vb, 0);
    fill_bytes(&r, kc.p, kb);
    fill_bytes(&r, vc.p, vb);
    unsigned char *k_ref = tu_xmalloc(kb), *v_ref = tu_xmalloc(vb);
    memcpy(k_ref, kc.p, kb);
    memcpy(v_ref, vc.p, vb);
    clvarlen_status st = clvarlen_kv_cache_append(ctx, &p, k, v, map, kc.p, vc.p);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "%s: %s (%s)", label, clvarlen_status_name(st),
                  clvarlen_last_error(ctx));
    kv_append_ref(&p, k, v, map, k_ref, v_ref);
    tu_assert_guard(&kc, label);
    tu_assert_guard(&vc, label);
    char what[128];
    snprintf(what, sizeof what, "%s k_cache", label);
    tu_assert_bytes_eq(kc.p, k_ref, kb, what);
    snprintf(what, sizeof what, "%s v_cache", label);
    tu_assert_bytes_eq(vc.p, v_ref, vb, what);
    tu_guarded_free(&kc);
    tu_guarded_free(&vc);
    free(k_ref);
    free(v_ref);
    free(k);
    free(v);
    free(map);
}

START_TEST(test_append)
{
    clvarlen_context *ctx = paged_make_ctx();
    const acfg cases[] = {
        /* dt, cache_dt, hk, d, dv, page_size, num_pages, n_tokens, k_pad, v_pad, seed */
        {CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_BF16, 2, 64, 64, 16, 9, 70, 3, 64, 51},
        {CLVARLEN_DTYPE_BF16, CLVARLEN_DTYPE_F16, 1, 128, 64, 7, 13, 60, 0, 5, 52},
        {CLVARLEN_DTYPE_F16, CLVARLEN_DTYPE_F32, 2, 40, 40, 1, 90, 80, 8, 0, 53},
        {CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_F32, 4, 32, 32, 16, 5, 80, 0, 0, 54},
        {CLVARLEN_DTYPE_BF16, CLVARLEN_DTYPE_BF16, 1, 64, 64, 5, 3, 15, 16, 16, 55},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char label[96];
        snprintf(label, sizeof label, "append %s -> %s ps %d", clvarlen_dtype_name(cases[i].dt),
                 clvarlen_dtype_name(cases[i].cache_dt), cases[i].page_size);
        append_case(ctx, &cases[i], label);
    }
    clvarlen_context_destroy(ctx);
}
END_TEST

/* Append the last len_q tokens of every row (overwriting what the batch put
 * there) from `in_dt` inputs, then attend: the oracle reads the caches the
 * oracle append built, so the attention must see exactly the appended keys. */
static void append_attend_case(clvarlen_context *ctx, const pcase *c, clvarlen_dtype in_dt,
                               const char *label)
{
    tu_rng r = tu_rng_make(c->seed);
    pbatch b;
    make_pbatch(c, &r, &b);
    const int64_t kw = (int64_t)c->hk * c->d, vw = (int64_t)c->hk * c->dv;
    size_t es = clvarlen_dtype_size(in_dt), ces = clvarlen_dtype_size(c->dtype);
    void *k_new = tu_xmalloc(es * (size_t)(b.tq * kw) + 16);
    void *v_new = tu_xmalloc(es * (size_t)(b.tq * vw) + 16);
    tu_fill_random(&r, k_new, in_dt, (size_t)(b.tq * kw), 1.0);
    tu_fill_random(&r, v_new, in_dt, (size_t)(b.tq * vw), 1.0);
    int64_t *map = tu_xmalloc(sizeof(int64_t) * (size_t)(b.tq + 1));
    for (int64_t row = 0; row < b.n; row++)
        for (int32_t i = 0; i < b.lq[row]; i++) {
            int64_t pos = b.cache_seqlens[row] - b.lq[row] + i;
            int64_t page = b.page_table[row * b.pt_stride + pos / c->page_size];
            map[b.cu_q[row] + i] = page * c->page_size + pos % c->page_size;
        }
    /* What the new slots held before: large values, which would dominate the softmax. */
    for (int64_t t = 0; t < b.tq; t++)
        for (int64_t e = 0; e < kw; e++)
            tu_set(b.k_cache, c->dtype, (size_t)(map[t] * kw + e), 6.0);
    size_t kb = paged_cache_elems(&b, c, c->d) * ces, vb = paged_cache_elems(&b, c, c->dv) * ces;
    void *k_lib = tu_xmalloc(kb), *v_lib = tu_xmalloc(vb);
    memcpy(k_lib, b.k_cache, kb);
    memcpy(v_lib, b.v_cache, vb);
    clvarlen_kv_append_params ap;
    clvarlen_kv_append_params_init(&ap);
    ap.dtype = in_dt;
    ap.cache_dtype = c->dtype;
    ap.n_tokens = b.tq;
    ap.num_pages = b.num_pages;
    ap.page_size = c->page_size;
    ap.heads_kv = c->hk;
    ap.head_dim = c->d;
    ap.head_dim_v = c->dv == c->d ? 0 : c->dv;
    clvarlen_status st = clvarlen_kv_cache_append(ctx, &ap, k_new, v_new, map, k_lib, v_lib);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "%s append: %s", label, clvarlen_last_error(ctx));
    kv_append_ref(&ap, k_new, v_new, map, b.k_cache, b.v_cache); /* b now holds the oracle's */
    tu_assert_bytes_eq(k_lib, b.k_cache, kb, label);
    tu_assert_bytes_eq(v_lib, b.v_cache, vb, label);
    clvarlen_paged_params p;
    fill_paged_params(c, &b, &p);
    size_t on = (size_t)(b.tq * b.os), ln = (size_t)(b.tq * c->hq);
    void *o = tu_xmalloc(on * ces + 16);
    float *lse = tu_xmalloc(ln * sizeof(float) + 16);
    st = clvarlen_paged_attention_forward(ctx, &p, b.q, k_lib, v_lib, b.cu_q, b.page_table,
                                          b.cache_seqlens, o, lse);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "%s forward: %s", label, clvarlen_last_error(ctx));
    paged_check_result(c, &b, o, lse, label);
    free(o);
    free(lse);
    free(k_lib);
    free(v_lib);
    free(k_new);
    free(v_new);
    free(map);
    free_pbatch(&b);
}

START_TEST(test_append_attend)
{
    clvarlen_context *ctx = paged_make_ctx();
    pcase c = paged_base_case();
    c.dtype = CLVARLEN_DTYPE_BF16;
    c.hk = 2;
    c.page_size = 7;
    c.mode = PM_PREFILL;
    c.max_lq = 5;
    c.max_cache = 120;
    c.causal = 1;
    c.seed = 61;
    append_attend_case(ctx, &c, CLVARLEN_DTYPE_F32, "append f32 -> bf16 then attend, ps 7");
    c = paged_base_case();
    c.dtype = CLVARLEN_DTYPE_F32;
    c.num_splits = 2;
    c.causal = 1;
    c.seed = 62;
    append_attend_case(ctx, &c, CLVARLEN_DTYPE_F32, "append f32 decode then attend, splits 2");
    clvarlen_context_destroy(ctx);
}
END_TEST

/* ------------------------------------------------------------ errors */

/* A small valid forward call: f32, hq 2, hk 1, d 64, page_size 4, two rows
 * (len_q 2 and 1, caches 5 and 3 tokens) over 4 pages; row 1's second
 * page-table entry is unused garbage. Outputs are filled with a sentinel. */
enum { EQ = 3, EH = 2, ED = 64, EPS = 4, ENP = 4 };
typedef struct eset {
    clvarlen_paged_params p;
    float q[EQ * EH * ED], kc[ENP * EPS * ED], vc[ENP * EPS * ED];
    int32_t cu[3], pt[4], cs[2];
    tu_guarded o, lse;
} eset;

static void eset_init(eset *e)
{
    clvarlen_paged_params_init(&e->p);
    e->p.n_rows = 2;
    e->p.total_q = EQ;
    e->p.num_pages = ENP;
    e->p.page_size = EPS;
    e->p.max_pages = 2;
    e->p.heads_q = EH;
    e->p.heads_kv = 1;
    e->p.head_dim = ED;
    e->p.causal = 1;
    tu_rng r = tu_rng_make(71);
    tu_fill_random(&r, e->q, CLVARLEN_DTYPE_F32, sizeof e->q / sizeof(float), 1.0);
    tu_fill_random(&r, e->kc, CLVARLEN_DTYPE_F32, sizeof e->kc / sizeof(float), 1.0);
    tu_fill_random(&r, e->vc, CLVARLEN_DTYPE_F32, sizeof e->vc / sizeof(float), 1.0);
    const int32_t cu[3] = {0, 2, 3}, pt[4] = {2, 0, 3, -7}, cs[2] = {5, 3};
    memcpy(e->cu, cu, sizeof cu);
    memcpy(e->pt, pt, sizeof pt);
    memcpy(e->cs, cs, sizeof cs);
    e->o = tu_guarded_alloc(sizeof(float) * EQ * EH * ED, 0xAB);
    e->lse = tu_guarded_alloc(sizeof(float) * EQ * EH, 0xAB);
}

/* Nothing written: every byte of o and lse still holds the sentinel. */
static void eset_untouched(const eset *e, int line)
{
    const unsigned char *o = e->o.p, *l = e->lse.p;
    for (size_t i = 0; i < e->o.bytes; i++)
        tu_check(o[i] == 0xAB, "line %d: o byte %zu written on error", line, i);
    for (size_t i = 0; i < e->lse.bytes; i++)
        tu_check(l[i] == 0xAB, "line %d: lse byte %zu written on error", line, i);
    tu_check(tu_guard_ok(&e->o) && tu_guard_ok(&e->lse), "line %d: guard band", line);
}

static void expect_fwd(clvarlen_context *ctx, const eset *e, const clvarlen_paged_params *p,
                       const int32_t *cu, const int32_t *pt, const int32_t *cs, void *o,
                       clvarlen_status want, int line)
{
    clvarlen_status st = clvarlen_paged_attention_forward(ctx, p, e->q, e->kc, e->vc, cu, pt, cs,
                                                          o, e->lse.p);
    ck_assert_msg(st == want, "line %d: got %s, want %s (%s)", line, clvarlen_status_name(st),
                  clvarlen_status_name(want), ctx ? clvarlen_last_error(ctx) : "");
    eset_untouched(e, line);
}

#define FWD(want, params) expect_fwd(ctx, &e, (params), e.cu, e.pt, e.cs, e.o.p, want, __LINE__)
#define BAD(field, value, want)                                                                \
    do {                                                                                       \
        clvarlen_paged_params b_ = e.p;                                                        \
        b_.field = (value);                                                                    \
        FWD(want, &b_);                                                                        \
    } while (0)

START_TEST(test_forward_errors)
{
    clvarlen_context *ctx = paged_make_ctx();
    eset e;
    eset_init(&e);
    const clvarlen_status IA = CLVARLEN_ERROR_INVALID_ARGUMENT;
    /* The valid call succeeds (the garbage entry is never read); then reset the sentinel. */
    ck_assert_msg(clvarlen_paged_attention_forward(ctx, &e.p, e.q, e.kc, e.vc, e.cu, e.pt, e.cs,
                                                   e.o.p, e.lse.p) == CLVARLEN_SUCCESS,
                  "valid call: %s", clvarlen_last_error(ctx));
    memset(e.o.p, 0xAB, e.o.bytes);
    memset(e.lse.p, 0xAB, e.lse.bytes);

    expect_fwd(NULL, &e, &e.p, e.cu, e.pt, e.cs, e.o.p, IA, __LINE__);
    FWD(IA, NULL);
    ck_assert_int_eq(clvarlen_paged_attention_forward(ctx, &e.p, NULL, e.kc, e.vc, e.cu, e.pt,
                                                      e.cs, e.o.p, e.lse.p), IA);
    ck_assert_int_eq(clvarlen_paged_attention_forward(ctx, &e.p, e.q, NULL, e.vc, e.cu, e.pt,
                                                      e.cs, e.o.p, e.lse.p), IA);
    ck_assert_int_eq(clvarlen_paged_attention_forward(ctx, &e.p, e.q, e.kc, NULL, e.cu, e.pt,
                                                      e.cs, e.o.p, e.lse.p), IA);
    eset_untouched(&e, __LINE__);
    expect_fwd(ctx, &e, &e.p, NULL, e.pt, e.cs, e.o.p, IA, __LINE__);
    expect_fwd(ctx, &e, &e.p, e.cu, NULL, e.cs, e.o.p, IA, __LINE__);
    expect_fwd(ctx, &e, &e.p, e.cu, e.pt, NULL, e.o.p, IA, __LINE__);
    expect_fwd(ctx, &e, &e.p, e.cu, e.pt, e.cs, NULL, IA, __LINE__);
    BAD(struct_size, 0, IA);
    BAD(dtype, CLVARLEN_DTYPE_I32, CLVARLEN_ERROR_UNSUPPORTED);
    BAD(n_rows, -1, IA);
    {
        clvarlen_paged_params b = e.p;
        b.heads_q = 3;
        b.heads_kv = 2;
        FWD(IA, &b);
    }
    BAD(heads_kv, 0, IA);
    BAD(head_dim, 40, CLVARLEN_ERROR_UNSUPPORTED);
    BAD(head_dim_v, 40, CLVARLEN_ERROR_UNSUPPORTED);
    BAD(page_size, 0, IA);
    BAD(num_pages, 0, IA);
    BAD(max_pages, 0, IA);
    BAD(page_table_stride, 1, IA);
    BAD(num_splits, -1, IA);
    BAD(num_splits, 257, IA);
    BAD(q_stride, EH * ED - 1, IA);
    BAD(o_stride, EH * ED - 16, IA);
    BAD(scale, NAN, IA);
    BAD(softcap, -1.0f, IA);
    BAD(window_left, -2, IA);
    BAD(max_seqlen_q, 1, IA); /* row 0 has 2 queries */
    BAD(total_q, EQ + 1, CLVARLEN_ERROR_INVALID_CU_SEQLENS);
    int32_t cu_bad[3] = {0, 4, 3}, cu_start[3] = {1, 2, 3};
    expect_fwd(ctx, &e, &e.p, cu_bad, e.pt, e.cs, e.o.p, CLVARLEN_ERROR_INVALID_CU_SEQLENS,
               __LINE__);
    expect_fwd(ctx, &e, &e.p, cu_start, e.pt, e.cs, e.o.p, CLVARLEN_ERROR_INVALID_CU_SEQLENS,
               __LINE__);
    /* cache_seqlens below a row's query count, and beyond max_pages * page_size */
    int32_t cs_short[2] = {5, 0}, cs_long[2] = {9, 3}, cs_neg[2] = {-1, 3};
    expect_fwd(ctx, &e, &e.p, e.cu, e.pt, cs_short, e.o.p, IA, __LINE__);
    expect_fwd(ctx, &e, &e.p, e.cu, e.pt, cs_long, e.o.p, IA, __LINE__);
    expect_fwd(ctx, &e, &e.p, e.cu, e.pt, cs_neg, e.o.p, IA, __LINE__);
    /* a used page-table entry outside [0, num_pages) */
    int32_t pt_neg[4] = {2, -1, 3, 0}, pt_big[4] = {2, 0, ENP, 0};
    expect_fwd(ctx, &e, &e.p, e.cu, pt_neg, e.cs, e.o.p, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE,
               __LINE__);
    expect_fwd(ctx, &e, &e.p, e.cu, pt_big, e.cs, e.o.p, CLVARLEN_ERROR_INDEX_OUT_OF_RANGE,
               __LINE__);
    /* outputs overlapping the inputs: o over q, o over the k cache */
    {
        float big[ENP * EPS * ED];
        memcpy(big, e.kc, sizeof big);
        ck_assert_int_eq(clvarlen_paged_attention_forward(ctx, &e.p, big, e.kc, e.vc, e.cu, e.pt,
                                                          e.cs, big, e.lse.p), IA);
        ck_assert_int_eq(clvarlen_paged_attention_forward(ctx, &e.p, e.q, big, e.vc, e.cu, e.pt,
                                                          e.cs, big + 8, e.lse.p), IA);
        ck_assert_int_eq(memcmp(big, e.kc, sizeof big), 0);
    }
    eset_untouched(&e, __LINE__);
    /* empty batches: valid no-ops that write nothing */
    {
        clvarlen_paged_params b = e.p;
        int32_t cu0[3] = {0, 0, 0};
        b.n_rows = 0;
        b.total_q = 0;
        FWD(CLVARLEN_SUCCESS, &b);
        b.n_rows = 2;
        expect_fwd(ctx, &e, &b, cu0, e.pt, e.cs, e.o.p, CLVARLEN_SUCCESS, __LINE__);
    }
    tu_guarded_free(&e.o);
    tu_guarded_free(&e.lse);
    clvarlen_context_destroy(ctx);
}
END_TEST
#undef BAD
#undef FWD

/* Append errors: f32 -> f16, 3 tokens of hk 1, d 16 into 2 pages of 4 slots;
 * the caches keep their sentinel after every failed call. */
enum { AT = 3, AD = 16, AP = 2, APS = 4 };
typedef struct aset {
    clvarlen_kv_append_params p;
    float k[AT * AD], v[AT * AD];
    int64_t map[AT];
    tu_guarded kc, vc;
} aset;

static void expect_app(clvarlen_context *ctx, aset *a, const clvarlen_kv_append_params *p,
                       const void *k, const int64_t *map, void *kc, clvarlen_status want, int line)
{
    clvarlen_status st = clvarlen_kv_cache_append(ctx, p, k, a->v, map, kc, a->vc.p);
    ck_assert_msg(st == want, "line %d: got %s, want %s (%s)", line, clvarlen_status_name(st),
                  clvarlen_status_name(want), ctx ? clvarlen_last_error(ctx) : "");
    const unsigned char *kb = a->kc.p, *vb = a->vc.p;
    for (size_t i = 0; i < a->kc.bytes; i++)
        tu_check(kb[i] == 0xAB, "line %d: k_cache byte %zu written on error", line, i);
    for (size_t i = 0; i < a->vc.bytes; i++)
        tu_check(vb[i] == 0xAB, "line %d: v_cache byte %zu written on error", line, i);
    tu_check(tu_guard_ok(&a->kc) && tu_guard_ok(&a->vc), "line %d: guard band", line);
}

#define APP(want, params) expect_app(ctx, &a, (params), a.k, a.map, a.kc.p, want, __LINE__)
#define ABAD(field, value, want)                                                               \
    do {                                                                                       \
        clvarlen_kv_append_params b_ = a.p;                                                    \
        b_.field = (value);                                                                    \
        APP(want, &b_);                                                                        \
    } while (0)

START_TEST(test_append_errors)
{
    clvarlen_context *ctx = paged_make_ctx();
    const clvarlen_status IA = CLVARLEN_ERROR_INVALID_ARGUMENT;
    const clvarlen_status OOR = CLVARLEN_ERROR_INDEX_OUT_OF_RANGE;
    aset a;
    clvarlen_kv_append_params_init(&a.p);
    a.p.cache_dtype = CLVARLEN_DTYPE_F16;
    a.p.n_tokens = AT;
    a.p.num_pages = AP;
    a.p.page_size = APS;
    a.p.heads_kv = 1;
    a.p.head_dim = AD;
    tu_rng r = tu_rng_make(81);
    tu_fill_random(&r, a.k, CLVARLEN_DTYPE_F32, AT * AD, 1.0);
    tu_fill_random(&r, a.v, CLVARLEN_DTYPE_F32, AT * AD, 1.0);
    const int64_t map[AT] = {5, -1, 0};
    memcpy(a.map, map, sizeof map);
    a.kc = tu_guarded_alloc((size_t)(AP * APS * AD) * 2, 0xAB);
    a.vc = tu_guarded_alloc((size_t)(AP * APS * AD) * 2, 0xAB);

    expect_app(NULL, &a, &a.p, a.k, a.map, a.kc.p, IA, __LINE__);
    APP(IA, NULL);
    expect_app(ctx, &a, &a.p, NULL, a.map, a.kc.p, IA, __LINE__);
    expect_app(ctx, &a, &a.p, a.k, NULL, a.kc.p, IA, __LINE__);
    expect_app(ctx, &a, &a.p, a.k, a.map, NULL, IA, __LINE__);
    ck_assert_int_eq(clvarlen_kv_cache_append(ctx, &a.p, a.k, NULL, a.map, a.kc.p, a.vc.p), IA);
    ck_assert_int_eq(clvarlen_kv_cache_append(ctx, &a.p, a.k, a.v, a.map, a.kc.p, NULL), IA);
    ABAD(struct_size, 0, IA);
    ABAD(dtype, CLVARLEN_DTYPE_I32, CLVARLEN_ERROR_UNSUPPORTED);
    ABAD(cache_dtype, CLVARLEN_DTYPE_U8, CLVARLEN_ERROR_UNSUPPORTED);
    ABAD(n_tokens, -1, IA);
    ABAD(num_pages, 0, IA);
    ABAD(page_size, 0, IA);
    ABAD(heads_kv, 0, IA);
    ABAD(head_dim, 0, IA);
    ABAD(k_stride, AD - 1, IA);
    ABAD(v_stride, AD - 1, IA);
    /* slots: one past the caches, below -1, and two tokens on one slot */
    int64_t past[AT] = {5, AP * APS, 0}, below[AT] = {5, -2, 0}, twice[AT] = {3, -1, 3};
    expect_app(ctx, &a, &a.p, a.k, past, a.kc.p, OOR, __LINE__);
    expect_app(ctx, &a, &a.p, a.k, below, a.kc.p, OOR, __LINE__);
    expect_app(ctx, &a, &a.p, a.k, twice, a.kc.p, IA, __LINE__);
    /* caches overlapping the inputs or each other */
    {
        float kbig[AP * APS * AD];
        memcpy(kbig, a.k, sizeof a.k);
        ck_assert_int_eq(clvarlen_kv_cache_append(ctx, &a.p, kbig, a.v, a.map, kbig, a.vc.p), IA);
        ck_assert_int_eq(memcmp(kbig, a.k, sizeof a.k), 0);
        ck_assert_int_eq(clvarlen_kv_cache_append(ctx, &a.p, a.k, a.v, a.map, a.kc.p, a.kc.p),
                         IA);
    }
    /* no tokens, and only skipped tokens: valid, nothing written */
    ABAD(n_tokens, 0, CLVARLEN_SUCCESS);
    int64_t skip[AT] = {-1, -1, -1};
    expect_app(ctx, &a, &a.p, a.k, skip, a.kc.p, CLVARLEN_SUCCESS, __LINE__);
    tu_guarded_free(&a.kc);
    tu_guarded_free(&a.vc);
    clvarlen_context_destroy(ctx);
}
END_TEST
#undef ABAD
#undef APP

void paged_add_append_cases(Suite *s)
{
    TCase *tc = tcase_create("append");
    tcase_set_timeout(tc, TEST_BACKEND_CL ? 600 : 120);
    tcase_add_test(tc, test_append);
    tcase_add_test(tc, test_append_attend);
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_set_timeout(tc, TEST_BACKEND_CL ? 300 : 60);
    tcase_add_test(tc, test_forward_errors);
    tcase_add_test(tc, test_append_errors);
    suite_add_tcase(s, tc);
}

/* Varlen attention forward and merge against the float64 oracle
 * (tests/ref/attention-ref.c), built once per backend (tests/meson.build):
 * test-attention-cpu runs the cases on the CPU fallback, test-attention-cl on
 * the OpenCL device, plus the cl_mem entry points, device checks and the
 * tensor-core kernel's emulated form of test-attention-clmem.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test-attention.h"

static clvarlen_context *make_ctx(void)
{
#if TEST_BACKEND_CL
    return tu_cl_context();
#else
    return tu_cpu_context();
#endif
}

/* Runs the case on ctx and compares o and lse with the oracle; also checks the
 * guard bands and that the bytes between strided o rows are untouched. */
static void run_case(clvarlen_context *ctx, const acase *c, const char *label)
{
    tu_rng r = tu_rng_make(c->seed);
    batch b;
    make_batch(c, &r, &b);
    clvarlen_attention_params p;
    fill_params(c, &b, &p);
    size_t es = clvarlen_dtype_size(c->dtype);
    size_t o_elems = (size_t)(b.tq * b.os);
    size_t lse_n = (size_t)c->hq * (size_t)b.tq;
    tu_guarded o = tu_guarded_alloc(o_elems * es, 0xCD);
    tu_guarded lse = tu_guarded_alloc(lse_n * sizeof(float), 0xCD);
    clvarlen_status st =
        clvarlen_attention_forward(ctx, &p, b.q, b.k, b.v, b.cu_q, b.cu_k, b.q_pos, o.p,
                                   c->no_lse ? NULL : (float *)lse.p);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "%s: %s (%s)", label, clvarlen_status_name(st),
                  clvarlen_last_error(ctx));
    ck_assert_msg(tu_guard_ok(&o) && tu_guard_ok(&lse), "%s: guard band overwritten", label);

    size_t dense = (size_t)b.tq * (size_t)c->hq * (size_t)c->dv;
    double *o_ref = malloc(sizeof(double) * (dense + 1));
    double *lse_ref = malloc(sizeof(double) * (lse_n + 1));
    attention_ref_forward(&p, b.q, b.k, b.v, b.cu_q, b.cu_k, b.q_pos, o_ref, lse_ref);
    /* Gather the written elements of o; the gap bytes must keep the fill. */
    void *o_dense = malloc(es * (dense + 1));
    const unsigned char *ob = o.p;
    size_t row = (size_t)c->hq * (size_t)c->dv;
    for (int64_t t = 0; t < b.tq; t++) {
        memcpy((char *)o_dense + (size_t)t * row * es, ob + (size_t)t * (size_t)b.os * es,
               row * es);
        for (size_t x = row * es; x < (size_t)b.os * es; x++)
            ck_assert_msg(ob[(size_t)t * (size_t)b.os * es + x] == 0xCD,
                          "%s: byte between o rows changed", label);
    }
    char what[160];
    snprintf(what, sizeof what, "%s o (%lld seqs, %lld q, %lld k)", label, (long long)b.n,
             (long long)b.tq, (long long)b.tk);
    tu_assert_close(tu_compare(o_dense, c->dtype, o_ref, dense), tu_tolerance(c->dtype), what);
    if (!c->no_lse) {
        snprintf(what, sizeof what, "%s lse", label);
        tu_assert_close(tu_compare(lse.p, CLVARLEN_DTYPE_F32, lse_ref, lse_n),
                        lse_tolerance(c->dtype), what);
    } else {
        const unsigned char *lb = lse.p;
        for (size_t x = 0; x < lse_n * sizeof(float); x++)
            ck_assert_msg(lb[x] == 0xCD, "%s: lse written although NULL was passed", label);
    }
    free(o_dense);
    free(o_ref);
    free(lse_ref);
    tu_guarded_free(&o);
    tu_guarded_free(&lse);
    free_batch(&b);
}

/* Several seeds of one case. */
void run_seeds(clvarlen_context *ctx, acase c, int seeds, const char *label)
{
    char what[96];
    for (int i = 0; i < seeds; i++) {
        c.seed = c.seed * 1000 + (uint64_t)i + 1;
        snprintf(what, sizeof what, "%s seed %d", label, i);
        run_case(ctx, &c, what);
    }
}

/* ------------------------------------------------------------ forward cases */

START_TEST(test_basic)
{
    clvarlen_context *ctx = make_ctx();
    acase c = base_case();
    run_seeds(ctx, c, 3, "basic");
    c.causal = 1;
    run_seeds(ctx, c, 3, "causal");
    clvarlen_context_destroy(ctx);
}
END_TEST

START_TEST(test_lq_ne_lk)
{
    clvarlen_context *ctx = make_ctx();
    acase c = base_case();
    c.lq_ne_lk = 1;
    c.causal = 1;
    run_seeds(ctx, c, 3, "causal lq!=lk");
    c.causal = 0;
    run_seeds(ctx, c, 2, "full lq!=lk");
    c.causal = 1;
    c.wl = 5;
    c.wr = 0;
    run_seeds(ctx, c, 2, "causal window lq!=lk");
    clvarlen_context_destroy(ctx);
}
END_TEST

START_TEST(test_gqa_mqa)
{
    clvarlen_context *ctx = make_ctx();
    acase c = base_case();
    c.causal = 1;
    c.hq = 8;
    c.hk = 2;
    c.max_total = 100;
    run_seeds(ctx, c, 2, "gqa4");
    c.hq = 8;
    c.hk = 1;
    run_seeds(ctx, c, 1, "gqa8/mqa");
    c.hq = 3;
    c.hk = 3;
    c.causal = 0;
    run_seeds(ctx, c, 1, "mha3");
    clvarlen_context_destroy(ctx);
}
END_TEST

START_TEST(test_head_dims)
{
    clvarlen_context *ctx = make_ctx();
    acase c = base_case();
    c.causal = 1;
    c.max_total = 100;
    c.d = c.dv = 128;
    run_seeds(ctx, c, 2, "d128");
    c.d = c.dv = 80;
    run_seeds(ctx, c, 1, "d80");
    c.d = 64;
    c.dv = 32;
    c.causal = 0;
    run_seeds(ctx, c, 1, "d64 dv32");
#if !TEST_BACKEND_CL
    c.d = c.dv = 256;
    run_seeds(ctx, c, 1, "d256");
    c.d = c.dv = 32;
    run_seeds(ctx, c, 1, "d32");
    c.d = c.dv = 96;
    run_seeds(ctx, c, 1, "d96");
#endif
    clvarlen_context_destroy(ctx);
}
END_TEST

START_TEST(test_windows_softcap)
{
    clvarlen_context *ctx = make_ctx();
    acase c = base_case();
    c.max_len = 70;
    c.max_total = 200;
    const int win[][3] = {{0, 7, -1}, {0, -1, 4}, {0, 6, 3}, {1, 9, -1}, {1, 0, 0}, {0, 0, 0}};
    for (size_t i = 0; i < sizeof win / sizeof win[0]; i++) {
        char what[64];
        c.causal = win[i][0];
        c.wl = win[i][1];
        c.wr = win[i][2];
        snprintf(what, sizeof what, "window causal=%d (%d,%d)", c.causal, c.wl, c.wr);
        run_seeds(ctx, c, 1, what);
    }
    c.causal = 1;
    c.wl = c.wr = -1;
    c.softcap = 2.5f;
    run_seeds(ctx, c, 2, "softcap");
    c.softcap = 0.0f;
    c.scale = 0.37f;
    run_seeds(ctx, c, 1, "explicit scale");
    clvarlen_context_destroy(ctx);
}
END_TEST

START_TEST(test_dtypes)
{
    clvarlen_context *ctx = make_ctx();
    acase c = base_case();
    c.causal = 1;
    c.hq = 4;
    c.hk = 2;
    c.dtype = CLVARLEN_DTYPE_F16;
    run_seeds(ctx, c, 2, "f16");
    c.dtype = CLVARLEN_DTYPE_BF16;
    run_seeds(ctx, c, 2, "bf16");
    c.d = c.dv = 128;
    c.causal = 0;
    c.wl = 4;
    c.wr = 9;
    run_seeds(ctx, c, 1, "bf16 d128 window");
    clvarlen_context_destroy(ctx);
}
END_TEST

START_TEST(test_strides_qpos)
{
    clvarlen_context *ctx = make_ctx();
    acase c = base_case();
    c.causal = 1;
    c.q_pad = 64 * 2 + 3; /* a fused qkv row: q, then k and v of the same token */
    c.k_pad = 5;
    c.v_pad = 64;
    c.o_pad = 7;
    run_seeds(ctx, c, 2, "strides");
    c.dtype = CLVARLEN_DTYPE_BF16;
    run_seeds(ctx, c, 1, "bf16 strides");
    c = base_case();
    c.use_qpos = 1;
    c.causal = 1;
    run_seeds(ctx, c, 2, "q_pos causal");
    c.wl = 3;
    c.wr = 2;
    c.causal = 0;
    run_seeds(ctx, c, 1, "q_pos window");
    c = base_case();
    c.no_lse = 1;
    run_seeds(ctx, c, 1, "no lse");
    clvarlen_context_destroy(ctx);
}
END_TEST

/* Empty batches, empty and length-1 sequences, rows that see nothing. */
START_TEST(test_edges)
{
    clvarlen_context *ctx = make_ctx();
    clvarlen_attention_params p;
    clvarlen_attention_params_init(&p);
    p.heads_q = 2;
    p.heads_kv = 1;
    p.head_dim = 64;
    int32_t cu0[1] = {0};
    /* N = 0, and N > 0 with every sequence empty: valid no-ops */
    ck_assert_int_eq(clvarlen_attention_forward(ctx, &p, NULL, NULL, NULL, cu0, cu0, NULL, NULL,
                                                NULL),
                     CLVARLEN_SUCCESS);
    int32_t cu_empty[4] = {0, 0, 0, 0};
    p.n_seqs = 3;
    ck_assert_int_eq(clvarlen_attention_forward(ctx, &p, NULL, NULL, NULL, cu_empty, cu_empty,
                                                NULL, NULL, NULL),
                     CLVARLEN_SUCCESS);

    /* queries with no keys at all: o = 0, lse = -inf */
    int32_t cu_q[3] = {0, 2, 3}, cu_k[3] = {0, 0, 0};
    float q[3 * 2 * 64], o[3 * 2 * 64], lse[2 * 3];
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        q[i] = 1.0f;
        o[i] = 7.0f;
    }
    p.n_seqs = 2;
    p.total_q = 3;
    p.total_k = 0;
    ck_assert_int_eq(clvarlen_attention_forward(ctx, &p, q, NULL, NULL, cu_q, cu_k, NULL, o, lse),
                     CLVARLEN_SUCCESS);
    for (size_t i = 0; i < sizeof o / sizeof o[0]; i++)
        ck_assert(o[i] == 0.0f);
    for (int i = 0; i < 6; i++)
        ck_assert(isinf(lse[i]) && lse[i] < 0);

    /* length-1 sequences, Lq = Lk = 1: o is v, lse is the score */
    acase c = base_case();
    c.max_len = 1;
    c.max_n = 9;
    c.causal = 1;
    run_seeds(ctx, c, 2, "length 1");
    /* long and short sequences together, lengths not multiples of any tile */
    c = base_case();
    c.max_n = 3;
    c.max_len = 211;
    c.max_total = 300;
    c.causal = 1;
    run_seeds(ctx, c, 2, "long");
    clvarlen_context_destroy(ctx);
}
END_TEST

/* ------------------------------------------------------------ errors */

START_TEST(test_errors)
{
    clvarlen_context *ctx = make_ctx();
    clvarlen_attention_params p;
    clvarlen_attention_params_init(&p);
    int32_t cu[3] = {0, 3, 5}, cu_bad[3] = {0, 4, 3}, cu_short[3] = {0, 3, 4};
    float q[5 * 2 * 64] = {0}, k[5 * 64] = {0}, v[5 * 64] = {0}, lse[10];
    float o[5 * 2 * 64];
    for (size_t i = 0; i < sizeof o / sizeof o[0]; i++)
        o[i] = 3.0f;
    for (int i = 0; i < 10; i++)
        lse[i] = 3.0f;
    p.n_seqs = 2;
    p.total_q = 5;
    p.total_k = 5;
    p.heads_q = 2;
    p.heads_kv = 1;
    p.head_dim = 64;
#define EXPECT(st_expected, ...)                                                               \
    do {                                                                                       \
        clvarlen_status st_ = clvarlen_attention_forward(__VA_ARGS__);                         \
        ck_assert_msg(st_ == (st_expected), "line %d: got %s (%s)", __LINE__,                  \
                      clvarlen_status_name(st_), clvarlen_last_error(ctx));                    \
        if (st_ != CLVARLEN_SUCCESS)                                                           \
            ck_assert_msg(strstr(clvarlen_last_error(ctx), "clvarlen_attention_forward") != NULL, \
                          "message names the function: %s", clvarlen_last_error(ctx));         \
    } while (0)
    EXPECT(CLVARLEN_SUCCESS, ctx, &p, q, k, v, cu, cu, NULL, o, lse);
    for (size_t i = 0; i < sizeof o / sizeof o[0]; i++)
        o[i] = 3.0f;
    for (int i = 0; i < 10; i++)
        lse[i] = 3.0f;
    ck_assert_int_eq(clvarlen_attention_forward(NULL, &p, q, k, v, cu, cu, NULL, o, lse),
                     CLVARLEN_ERROR_INVALID_ARGUMENT);
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, NULL, q, k, v, cu, cu, NULL, o, lse);
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &p, NULL, k, v, cu, cu, NULL, o, lse);
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &p, q, k, NULL, cu, cu, NULL, o, lse);
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &p, q, k, v, cu, cu, NULL, NULL, lse);
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &p, q, k, v, NULL, cu, NULL, o, lse);
    EXPECT(CLVARLEN_ERROR_INVALID_CU_SEQLENS, ctx, &p, q, k, v, cu_bad, cu, NULL, o, lse);
    EXPECT(CLVARLEN_ERROR_INVALID_CU_SEQLENS, ctx, &p, q, k, v, cu, cu_short, NULL, o, lse);
    clvarlen_attention_params bad = p;
    bad.struct_size = 8;
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &bad, q, k, v, cu, cu, NULL, o, lse);
    bad = p;
    bad.heads_q = 3;
    bad.heads_kv = 2;
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &bad, q, k, v, cu, cu, NULL, o, lse);
    bad = p;
    bad.head_dim = 100;
    EXPECT(CLVARLEN_ERROR_UNSUPPORTED, ctx, &bad, q, k, v, cu, cu, NULL, o, lse);
    bad = p;
    bad.head_dim_v = 272;
    EXPECT(CLVARLEN_ERROR_UNSUPPORTED, ctx, &bad, q, k, v, cu, cu, NULL, o, lse);
    bad = p;
    bad.head_dim = -64;
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &bad, q, k, v, cu, cu, NULL, o, lse);
    bad = p;
    bad.dtype = CLVARLEN_DTYPE_F64;
    EXPECT(CLVARLEN_ERROR_UNSUPPORTED, ctx, &bad, q, k, v, cu, cu, NULL, o, lse);
    bad = p;
    bad.dtype = (clvarlen_dtype)77;
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &bad, q, k, v, cu, cu, NULL, o, lse);
    bad = p;
    bad.q_stride = 64;
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &bad, q, k, v, cu, cu, NULL, o, lse);
    bad = p;
    bad.window_left = -2;
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &bad, q, k, v, cu, cu, NULL, o, lse);
    bad = p;
    bad.softcap = -1.0f;
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &bad, q, k, v, cu, cu, NULL, o, lse);
    bad = p;
    bad.scale = NAN;
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &bad, q, k, v, cu, cu, NULL, o, lse);
    bad = p;
    bad.max_seqlen_q = 2;
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &bad, q, k, v, cu, cu, NULL, o, lse);
    bad = p;
    bad.max_seqlen_k = 3;
    EXPECT(CLVARLEN_SUCCESS, ctx, &bad, q, k, v, cu, cu, NULL, o, lse); /* a true bound */
    for (size_t i = 0; i < sizeof o / sizeof o[0]; i++)
        o[i] = 3.0f;
    for (int i = 0; i < 10; i++)
        lse[i] = 3.0f;
    bad = p;
    bad.total_q = 6;
    EXPECT(CLVARLEN_ERROR_INVALID_CU_SEQLENS, ctx, &bad, q, k, v, cu, cu, NULL, o, lse);
    bad = p;
    bad.n_seqs = -1;
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &bad, q, k, v, cu, cu, NULL, o, lse);
#undef EXPECT
    /* nothing was written by any failed call */
    for (size_t i = 0; i < sizeof o / sizeof o[0]; i++)
        ck_assert(o[i] == 3.0f);
    for (int i = 0; i < 10; i++)
        ck_assert(lse[i] == 3.0f);

    /* merge argument errors */
    ck_assert_int_eq(clvarlen_attention_merge(ctx, CLVARLEN_DTYPE_F32, 2, 5, 0, 64, o, lse, o, lse),
                     CLVARLEN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clvarlen_attention_merge(ctx, CLVARLEN_DTYPE_I32, 2, 5, 2, 64, o, lse, o, lse),
                     CLVARLEN_ERROR_UNSUPPORTED);
    ck_assert_int_eq(clvarlen_attention_merge(ctx, CLVARLEN_DTYPE_F32, -1, 5, 2, 64, o, lse, o, lse),
                     CLVARLEN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clvarlen_attention_merge(ctx, CLVARLEN_DTYPE_F32, 2, 5, 2, 64, NULL, lse, o,
                                              lse),
                     CLVARLEN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clvarlen_attention_merge2(ctx, CLVARLEN_DTYPE_F32, 5, 2, 64, o, lse, NULL,
                                               lse, o, lse),
                     CLVARLEN_ERROR_INVALID_ARGUMENT);
    clvarlen_context_destroy(ctx);
}
END_TEST

/* ------------------------------------------------------------ merge */

/* Splitting each sequence's keys in two (with q_pos keeping the masks'
 * positions) and merging the halves equals the unsplit run. */
static void split_merge_case(clvarlen_context *ctx, clvarlen_dtype dtype, int causal, int wl,
                             uint64_t seed)
{
    acase c = base_case();
    c.dtype = dtype;
    c.causal = causal;
    c.wl = wl;
    c.hq = 4;
    c.hk = 2;
    c.seed = seed;
    c.max_len = 60;
    tu_rng r = tu_rng_make(seed);
    batch b;
    make_batch(&c, &r, &b);
    const int64_t n = b.n;
    int32_t *cu_a = malloc(sizeof(int32_t) * (size_t)(n + 1));
    int32_t *cu_b = malloc(sizeof(int32_t) * (size_t)(n + 1));
    int32_t *split = malloc(sizeof(int32_t) * (size_t)(n + 1));
    int32_t *pos_a = malloc(sizeof(int32_t) * (size_t)(b.tq + 1));
    int32_t *pos_b = malloc(sizeof(int32_t) * (size_t)(b.tq + 1));
    cu_a[0] = cu_b[0] = 0;
    for (int64_t s = 0; s < n; s++) {
        int32_t lk = b.cu_k[s + 1] - b.cu_k[s], lq = b.cu_q[s + 1] - b.cu_q[s];
        split[s] = (int32_t)tu_int(&r, 0, lk);
        cu_a[s + 1] = cu_a[s] + split[s];
        cu_b[s + 1] = cu_b[s] + (lk - split[s]);
        for (int32_t i = 0; i < lq; i++) {
            pos_a[b.cu_q[s] + i] = i + lk - lq;
            pos_b[b.cu_q[s] + i] = i + lk - lq - split[s];
        }
    }
    /* K/V halves, packed: keys [0, split) then [split, Lk) of every sequence. */
    size_t es = clvarlen_dtype_size(dtype);
    size_t krow = (size_t)b.ks * es, vrow = (size_t)b.vs * es;
    char *ka = malloc(krow * (size_t)(b.tk + 1)), *kb = malloc(krow * (size_t)(b.tk + 1));
    char *va = malloc(vrow * (size_t)(b.tk + 1)), *vb = malloc(vrow * (size_t)(b.tk + 1));
    for (int64_t s = 0; s < n; s++) {
        int32_t lk = b.cu_k[s + 1] - b.cu_k[s];
        for (int32_t j = 0; j < lk; j++) {
            const char *ks = (const char *)b.k + (size_t)(b.cu_k[s] + j) * krow;
            const char *vs = (const char *)b.v + (size_t)(b.cu_k[s] + j) * vrow;
            if (j < split[s]) {
                memcpy(ka + (size_t)(cu_a[s] + j) * krow, ks, krow);
                memcpy(va + (size_t)(cu_a[s] + j) * vrow, vs, vrow);
            } else {
                memcpy(kb + (size_t)(cu_b[s] + j - split[s]) * krow, ks, krow);
                memcpy(vb + (size_t)(cu_b[s] + j - split[s]) * vrow, vs, vrow);
            }
        }
    }
    clvarlen_attention_params p;
    fill_params(&c, &b, &p);
    size_t o_n = (size_t)b.tq * (size_t)c.hq * (size_t)c.dv, l_n = (size_t)b.tq * (size_t)c.hq;
    /* parts stored back to back for the N-way call: [2, tq, hq, dv] and [2, hq, tq] */
    char *parts = malloc(2 * o_n * es + 16);
    float *lparts = malloc(2 * l_n * sizeof(float) + 16);
    char *o_full = malloc(o_n * es + 16), *o_m = malloc(o_n * es + 16);
    float *l_full = malloc(l_n * sizeof(float) + 16), *l_m = malloc(l_n * sizeof(float) + 16);
    ck_assert_int_eq(clvarlen_attention_forward(ctx, &p, b.q, b.k, b.v, b.cu_q, b.cu_k, NULL,
                                                o_full, l_full),
                     CLVARLEN_SUCCESS);
    clvarlen_attention_params pa = p, pb = p;
    pa.total_k = cu_a[n];
    pb.total_k = cu_b[n];
    ck_assert_int_eq(clvarlen_attention_forward(ctx, &pa, b.q, ka, va, b.cu_q, cu_a, pos_a, parts,
                                                lparts),
                     CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_attention_forward(ctx, &pb, b.q, kb, vb, b.cu_q, cu_b, pos_b,
                                                parts + o_n * es, lparts + l_n),
                     CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_attention_merge(ctx, dtype, 2, b.tq, c.hq, c.dv, parts, lparts, o_m,
                                              l_m),
                     CLVARLEN_SUCCESS);
    double *o_ref = malloc(sizeof(double) * (o_n + 1)), *l_ref = malloc(sizeof(double) * (l_n + 1));
    attention_ref_forward(&p, b.q, b.k, b.v, b.cu_q, b.cu_k, NULL, o_ref, l_ref);
    /* the merge of rounded halves: one more rounding than the direct run */
    double tol = 2.0 * tu_tolerance(dtype);
    tu_assert_close(tu_compare(o_m, dtype, o_ref, o_n), tol, "split+merge o vs oracle");
    tu_assert_close(tu_compare(l_m, CLVARLEN_DTYPE_F32, l_ref, l_n), lse_tolerance(dtype),
                    "split+merge lse vs oracle");
    tu_assert_close(tu_compare(o_full, dtype, o_ref, o_n), tu_tolerance(dtype), "unsplit o");
    /* two-way, in place into part a */
    ck_assert_int_eq(clvarlen_attention_merge2(ctx, dtype, b.tq, c.hq, c.dv, parts, lparts,
                                               parts + o_n * es, lparts + l_n, parts, lparts),
                     CLVARLEN_SUCCESS);
    tu_assert_close(tu_compare(parts, dtype, o_ref, o_n), tol, "merge2 in place o");
    tu_assert_close(tu_compare(lparts, CLVARLEN_DTYPE_F32, l_ref, l_n), lse_tolerance(dtype),
                    "merge2 in place lse");
    free(o_ref);
    free(l_ref);
    free(parts);
    free(lparts);
    free(o_full);
    free(o_m);
    free(l_full);
    free(l_m);
    free(ka);
    free(kb);
    free(va);
    free(vb);
    free(cu_a);
    free(cu_b);
    free(split);
    free(pos_a);
    free(pos_b);
    free_batch(&b);
}

START_TEST(test_split_merge)
{
    clvarlen_context *ctx = make_ctx();
    split_merge_case(ctx, CLVARLEN_DTYPE_F32, 0, -1, 11);
    split_merge_case(ctx, CLVARLEN_DTYPE_F32, 1, -1, 12);
    split_merge_case(ctx, CLVARLEN_DTYPE_F32, 1, 6, 13);
    split_merge_case(ctx, CLVARLEN_DTYPE_BF16, 1, -1, 14);
    clvarlen_context_destroy(ctx);
}
END_TEST

/* N-way merge of random partials, with -inf, +inf and NaN lse and empty rows. */
START_TEST(test_merge_special)
{
    clvarlen_context *ctx = make_ctx();
    const clvarlen_dtype dts[] = {CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_F16, CLVARLEN_DTYPE_BF16};
    for (int di = 0; di < 3; di++) {
        clvarlen_dtype dt = dts[di];
        size_t es = clvarlen_dtype_size(dt);
        const int64_t parts = 11, tokens = 7;
        const int32_t heads = 3, dv = 40;
        size_t on = (size_t)(tokens * heads * dv), ln = (size_t)(tokens * heads);
        tu_rng r = tu_rng_make(77 + (uint64_t)di);
        char *op = malloc(on * es * (size_t)parts);
        float *lp = malloc(ln * sizeof(float) * (size_t)parts);
        tu_fill_random(&r, op, dt, on * (size_t)parts, 1.0);
        for (size_t i = 0; i < ln * (size_t)parts; i++) {
            int64_t kind = tu_int(&r, 0, 9);
            lp[i] = kind == 0 ? -INFINITY : kind == 1 ? INFINITY : kind == 2 ? NAN
                                                                           : (float)tu_uniform(&r, -30, 30);
        }
        /* token 0: every part empty; token 1: only +inf/NaN (read as empty) */
        for (int64_t p = 0; p < parts; p++)
            for (int32_t h = 0; h < heads; h++) {
                lp[(size_t)p * ln + (size_t)h * (size_t)tokens + 0] = -INFINITY;
                lp[(size_t)p * ln + (size_t)h * (size_t)tokens + 1] = p % 2 ? INFINITY : NAN;
            }
        /* a part with lse -inf may hold garbage: it must be ignored */
        for (size_t i = 0; i < (size_t)(heads * dv); i++)
            tu_set(op, dt, i, NAN);
        const void *opp[16];
        const float *lpp[16];
        for (int64_t p = 0; p < parts; p++) {
            opp[p] = op + (size_t)p * on * es;
            lpp[p] = lp + (size_t)p * ln;
        }
        double *o_ref = malloc(sizeof(double) * on), *l_ref = malloc(sizeof(double) * ln);
        tu_guarded o = tu_guarded_alloc(on * es, 0xEE);
        tu_guarded l = tu_guarded_alloc(ln * sizeof(float), 0xEE);
        for (int64_t np = 0; np <= parts; np += (np < 3 ? 1 : 8)) {
            attention_ref_merge(dt, np, tokens, heads, dv, opp, lpp, o_ref, l_ref);
            ck_assert_int_eq(clvarlen_attention_merge(ctx, dt, np, tokens, heads, dv, op, lp, o.p,
                                                      l.p),
                             CLVARLEN_SUCCESS);
            ck_assert(tu_guard_ok(&o) && tu_guard_ok(&l));
            char what[64];
            snprintf(what, sizeof what, "merge %s n_parts %lld", clvarlen_dtype_name(dt),
                     (long long)np);
            tu_assert_close(tu_compare(o.p, dt, o_ref, on), tu_tolerance(dt), what);
            tu_assert_close(tu_compare(l.p, CLVARLEN_DTYPE_F32, l_ref, ln), 1e-6, what);
            const float *lo = l.p;
            for (int32_t h = 0; h < heads; h++) {
                ck_assert(isinf(lo[h * tokens]) && lo[h * tokens] < 0);
                ck_assert(isinf(lo[h * tokens + 1]) && lo[h * tokens + 1] < 0);
                for (int32_t c = 0; c < dv; c++)
                    ck_assert(tu_get(o.p, dt, (size_t)(h * dv + c)) == 0.0);
            }
        }
        /* merge2 of parts 3 and 4 */
        attention_ref_merge(dt, 2, tokens, heads, dv, opp + 3, lpp + 3, o_ref, l_ref);
        ck_assert_int_eq(clvarlen_attention_merge2(ctx, dt, tokens, heads, dv, opp[3], lpp[3],
                                                   opp[4], lpp[4], o.p, NULL),
                         CLVARLEN_SUCCESS);
        tu_assert_close(tu_compare(o.p, dt, o_ref, on), tu_tolerance(dt), "merge2");
        tu_guarded_free(&o);
        tu_guarded_free(&l);
        free(o_ref);
        free(l_ref);
        free(op);
        free(lp);
    }
    clvarlen_context_destroy(ctx);
}
END_TEST

/* ------------------------------------------------------------ context parallel */

/* Shards a batch with the CP plan (SPEC 2.5), runs every rank's queries
 * against the full K/V with q_pos, scatters the outputs back: equal to the
 * unsharded run. */
static void cp_case(clvarlen_context *ctx, int32_t world, clvarlen_dtype dtype, uint64_t seed)
{
    acase c = base_case();
    c.dtype = dtype;
    c.causal = 1;
    c.hq = 4;
    c.hk = 2;
    c.max_n = 5;
    c.max_len = 37; /* odd lengths; some shorter than 2W chunks */
    c.seed = seed;
    tu_rng r = tu_rng_make(seed);
    batch b;
    make_batch(&c, &r, &b);
    clvarlen_attention_params p;
    fill_params(&c, &b, &p);
    size_t es = clvarlen_dtype_size(dtype);
    const int64_t row_q = (int64_t)c.hq * c.d, row_o = (int64_t)c.hq * c.dv;
    size_t o_n = (size_t)(b.tq * row_o), l_n = (size_t)(b.tq * c.hq);
    char *o_full = malloc(o_n * es + 16), *o_cp = calloc(o_n * es + 16, 1);
    float *l_full = malloc(l_n * sizeof(float) + 16), *l_cp = calloc(l_n + 4, sizeof(float));
    ck_assert_int_eq(clvarlen_attention_forward(ctx, &p, b.q, b.k, b.v, b.cu_q, b.cu_k, NULL,
                                                o_full, l_full),
                     CLVARLEN_SUCCESS);
    for (int32_t rank = 0; rank < world; rank++) {
        clvarlen_cp_plan_out plan;
        memset(&plan, 0, sizeof plan);
        plan.local_cu_seqlens = malloc(sizeof(int32_t) * (size_t)(b.n + 1));
        plan.position = malloc(sizeof(int32_t) * (size_t)(b.tq + 1));
        plan.capacity = b.tq;
        clvarlen_status st = clvarlen_cp_plan(ctx, b.cu_q, b.n, world, rank, &plan);
        ck_assert_msg(st == CLVARLEN_SUCCESS, "cp_plan: %s", clvarlen_last_error(ctx));
        int64_t lt = plan.local_tokens;
        char *q_loc = malloc((size_t)(lt * row_q) * es + 16);
        char *o_loc = malloc((size_t)(lt * row_o) * es + 16);
        float *l_loc = malloc(sizeof(float) * (size_t)(lt * c.hq) + 16);
        ck_assert_int_eq(clvarlen_cp_gather(ctx, dtype, row_q, b.q, 0, b.cu_q, b.n, world, rank,
                                            q_loc, 0, lt),
                         CLVARLEN_SUCCESS);
        clvarlen_attention_params pl = p;
        pl.total_q = lt;
        st = clvarlen_attention_forward(ctx, &pl, q_loc, b.k, b.v, plan.local_cu_seqlens, b.cu_k,
                                        plan.position, o_loc, l_loc);
        ck_assert_msg(st == CLVARLEN_SUCCESS, "rank %d: %s", rank, clvarlen_last_error(ctx));
        ck_assert_int_eq(clvarlen_cp_scatter(ctx, dtype, row_o, o_loc, 0, b.cu_q, b.n, world,
                                             rank, o_cp, 0, CLVARLEN_SCATTER_OVERWRITE, 0),
                         CLVARLEN_SUCCESS);
        for (int32_t h = 0; h < c.hq; h++)
            ck_assert_int_eq(clvarlen_cp_scatter(ctx, CLVARLEN_DTYPE_F32, 1, l_loc + h * lt, 0,
                                                 b.cu_q, b.n, world, rank, l_cp + h * b.tq, 0,
                                                 CLVARLEN_SCATTER_OVERWRITE, 0),
                             CLVARLEN_SUCCESS);
        free(q_loc);
        free(o_loc);
        free(l_loc);
        free(plan.local_cu_seqlens);
        free(plan.position);
    }
    double *o_ref = malloc(sizeof(double) * (o_n + 1)), *l_ref = malloc(sizeof(double) * (l_n + 1));
    attention_ref_forward(&p, b.q, b.k, b.v, b.cu_q, b.cu_k, NULL, o_ref, l_ref);
    char what[64];
    snprintf(what, sizeof what, "cp W=%d %s o", world, clvarlen_dtype_name(dtype));
    tu_assert_close(tu_compare(o_cp, dtype, o_ref, o_n), tu_tolerance(dtype), what);
    tu_assert_close(tu_compare(l_cp, CLVARLEN_DTYPE_F32, l_ref, l_n), lse_tolerance(dtype), what);
    /* and equal to the unsharded run of the same backend */
    for (size_t i = 0; i < o_n; i++)
        o_ref[i] = tu_get(o_full, dtype, i);
    tu_assert_close(tu_compare(o_cp, dtype, o_ref, o_n), tu_tolerance(dtype), "cp vs unsharded");
    free(o_ref);
    free(l_ref);
    free(o_full);
    free(o_cp);
    free(l_full);
    free(l_cp);
    free_batch(&b);
}

START_TEST(test_context_parallel)
{
    clvarlen_context *ctx = make_ctx();
    cp_case(ctx, 2, CLVARLEN_DTYPE_F32, 21);
    cp_case(ctx, 4, CLVARLEN_DTYPE_F32, 22);
    cp_case(ctx, 4, CLVARLEN_DTYPE_BF16, 23);
    clvarlen_context_destroy(ctx);
}
END_TEST

static Suite *attention_suite(void)
{
    Suite *s = suite_create(TEST_BACKEND_CL ? "attention-cl" : "attention-cpu");
    TCase *tc = tcase_create("forward");
    tcase_set_timeout(tc, TEST_BACKEND_CL ? 600 : 120);
    tcase_add_test(tc, test_basic);
    tcase_add_test(tc, test_lq_ne_lk);
    tcase_add_test(tc, test_gqa_mqa);
    tcase_add_test(tc, test_head_dims);
    tcase_add_test(tc, test_windows_softcap);
    tcase_add_test(tc, test_dtypes);
    tcase_add_test(tc, test_strides_qpos);
    tcase_add_test(tc, test_edges);
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("merge");
    tcase_set_timeout(tc, TEST_BACKEND_CL ? 600 : 120);
    tcase_add_test(tc, test_split_merge);
    tcase_add_test(tc, test_merge_special);
    suite_add_tcase(s, tc);
    tc = tcase_create("context-parallel");
    tcase_set_timeout(tc, TEST_BACKEND_CL ? 600 : 120);
    tcase_add_test(tc, test_context_parallel);
    suite_add_tcase(s, tc);
#if TEST_BACKEND_CL
    attn_add_cl_cases(s);
#endif
    return s;
}

int main(void)
{
#if TEST_BACKEND_CL
    if (!tu_probe_opencl_device())
        return TU_EXIT_SKIP;
#endif
    return tu_run_suite(attention_suite());
}

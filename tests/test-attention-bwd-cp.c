/* Attention backward: context parallelism end to end (SPEC 2.5 with 1.2), and
 * bad input. Part of test-attention-bwd-{cpu,cl}.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention-bwd-ref.h"
#include "test-attention.h"

void attn_bwd_cp_case(clvarlen_context *ctx, int32_t world, clvarlen_dtype dtype, uint64_t seed);
void attn_bwd_error_cases(clvarlen_context *ctx);

/* Unsharded gradients (f32) of the batch. */
static void full_backward(clvarlen_context *ctx, const clvarlen_attention_params *p,
                          const batch *b, const void *dout, float *dq, float *dk, float *dv)
{
    const size_t es = clvarlen_dtype_size(p->dtype);
    char *o = malloc((size_t)(b->tq * p->heads_q * p->head_dim) * es + 16);
    float *lse = malloc(sizeof(float) * (size_t)(b->tq * p->heads_q) + 16);
    ck_assert_int_eq(clvarlen_attention_forward(ctx, p, b->q, b->k, b->v, b->cu_q, b->cu_k, NULL,
                                                o, lse),
                     CLVARLEN_SUCCESS);
    clvarlen_attention_bwd_params g;
    clvarlen_attention_bwd_params_init(&g);
    g.grad_f32 = 1;
    clvarlen_status st = clvarlen_attention_backward(ctx, p, &g, b->q, b->k, b->v, o, dout, lse,
                                                     b->cu_q, b->cu_k, NULL, dq, dk, dv);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "unsharded backward: %s", clvarlen_last_error(ctx));
    free(o);
    free(lse);
}

/* One rank: its shard of q and do (cp_gather), forward and backward against
 * the full K/V with q_pos from the plan; dq scattered into dq_cp, dk and dv
 * added to dk_cp and dv_cp. */
static void cp_rank(clvarlen_context *ctx, const clvarlen_attention_params *p, const batch *b,
                    const void *dout, int32_t world, int32_t rank, float *dq_cp, float *dk_cp,
                    float *dv_cp)
{
    const clvarlen_dtype dt = p->dtype;
    const size_t es = clvarlen_dtype_size(dt);
    const int64_t row_q = (int64_t)p->heads_q * p->head_dim, row_k = (int64_t)p->heads_kv * p->head_dim;
    clvarlen_cp_plan_out plan;
    memset(&plan, 0, sizeof plan);
    plan.local_cu_seqlens = malloc(sizeof(int32_t) * (size_t)(b->n + 1));
    plan.position = malloc(sizeof(int32_t) * (size_t)(b->tq + 1));
    plan.capacity = b->tq;
    ck_assert_int_eq(clvarlen_cp_plan(ctx, b->cu_q, b->n, world, rank, &plan), CLVARLEN_SUCCESS);
    const int64_t lt = plan.local_tokens;
    char *q_loc = malloc((size_t)(lt * row_q) * es + 16), *do_loc = malloc((size_t)(lt * row_q) * es + 16);
    char *o_loc = malloc((size_t)(lt * row_q) * es + 16);
    float *l_loc = malloc(sizeof(float) * (size_t)(lt * p->heads_q) + 16);
    float *dq_loc = malloc(sizeof(float) * (size_t)(lt * row_q) + 16);
    float *dk_r = malloc(sizeof(float) * (size_t)(b->tk * row_k) + 16);
    float *dv_r = malloc(sizeof(float) * (size_t)(b->tk * row_k) + 16);
    ck_assert_int_eq(clvarlen_cp_gather(ctx, dt, row_q, b->q, 0, b->cu_q, b->n, world, rank, q_loc,
                                        0, lt),
                     CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_cp_gather(ctx, dt, row_q, dout, 0, b->cu_q, b->n, world, rank,
                                        do_loc, 0, lt),
                     CLVARLEN_SUCCESS);
    clvarlen_attention_params pl = *p;
    pl.total_q = lt;
    ck_assert_int_eq(clvarlen_attention_forward(ctx, &pl, q_loc, b->k, b->v,
                                                plan.local_cu_seqlens, b->cu_k, plan.position,
                                                o_loc, l_loc),
                     CLVARLEN_SUCCESS);
    clvarlen_attention_bwd_params g;
    clvarlen_attention_bwd_params_init(&g);
    g.grad_f32 = 1;
    clvarlen_status st = clvarlen_attention_backward(
        ctx, &pl, &g, q_loc, b->k, b->v, o_loc, do_loc, l_loc, plan.local_cu_seqlens, b->cu_k,
        plan.position, dq_loc, dk_r, dv_r);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "rank %d: %s", rank, clvarlen_last_error(ctx));
    ck_assert_int_eq(clvarlen_cp_scatter(ctx, CLVARLEN_DTYPE_F32, row_q, dq_loc, 0, b->cu_q, b->n,
                                         world, rank, dq_cp, 0, CLVARLEN_SCATTER_OVERWRITE, 0),
                     CLVARLEN_SUCCESS);
    for (int64_t i = 0; i < b->tk * row_k; i++) {
        dk_cp[i] += dk_r[i];
        dv_cp[i] += dv_r[i];
    }
    free(q_loc);
    free(do_loc);
    free(o_loc);
    free(l_loc);
    free(dq_loc);
    free(dk_r);
    free(dv_r);
    free(plan.local_cu_seqlens);
    free(plan.position);
}

void attn_bwd_cp_case(clvarlen_context *ctx, int32_t world, clvarlen_dtype dtype, uint64_t seed)
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
    const size_t es = clvarlen_dtype_size(dtype);
    const int64_t row_q = (int64_t)c.hq * c.d, row_k = (int64_t)c.hk * c.d;
    const size_t nq = (size_t)(b.tq * row_q), nk = (size_t)(b.tk * row_k);
    char *dout = malloc(nq * es + 16);
    tu_fill_random(&r, dout, dtype, nq, 1.0);
    float *dq = malloc(sizeof(float) * nq + 16), *dk = malloc(sizeof(float) * nk + 16);
    float *dv = malloc(sizeof(float) * nk + 16);
    float *dq_cp = calloc(nq + 4, sizeof(float)), *dk_cp = calloc(nk + 4, sizeof(float));
    float *dv_cp = calloc(nk + 4, sizeof(float));
    full_backward(ctx, &p, &b, dout, dq, dk, dv);
    for (int32_t rank = 0; rank < world; rank++)
        cp_rank(ctx, &p, &b, dout, world, rank, dq_cp, dk_cp, dv_cp);
    /* Against the unsharded run (f32 sums in another order: rounding only)... */
    double *ref = malloc(sizeof(double) * (nq + nk + 1));
    const float *cp[3] = {dq_cp, dk_cp, dv_cp}, *full[3] = {dq, dk, dv};
    const size_t n[3] = {nq, nk, nk};
    static const char *const what[3] = {"dq", "dk", "dv"};
    char label[96];
    for (int t = 0; t < 3; t++) {
        for (size_t i = 0; i < n[t]; i++)
            ref[i] = full[t][i];
        snprintf(label, sizeof label, "cp W=%d %s %s vs unsharded", world,
                 clvarlen_dtype_name(dtype), what[t]);
        tu_assert_close(tu_compare(cp[t], CLVARLEN_DTYPE_F32, ref, n[t]), 1e-5, label);
    }
    /* ... and against the oracle. */
    double *q = ref_to_f64(b.q, dtype, b.tq, c.hq, c.d, 0), *k = ref_to_f64(b.k, dtype, b.tk, c.hk, c.d, 0);
    double *v = ref_to_f64(b.v, dtype, b.tk, c.hk, c.d, 0), *d64 = ref_to_f64(dout, dtype, b.tq, c.hq, c.d, 0);
    double *rq = malloc(sizeof(double) * (nq + 1)), *rk = malloc(sizeof(double) * (nk + 1));
    double *rv = malloc(sizeof(double) * (nk + 1));
    ref_attention_backward64(&p, q, k, v, d64, b.cu_q, b.cu_k, NULL, rq, rk, rv);
    const double *oref[3] = {rq, rk, rv};
    for (int t = 0; t < 3; t++) {
        snprintf(label, sizeof label, "cp W=%d %s %s vs oracle", world,
                 clvarlen_dtype_name(dtype), what[t]);
        tu_assert_close(tu_compare(cp[t], CLVARLEN_DTYPE_F32, oref[t], n[t]), tu_tolerance(dtype),
                        label);
    }
    free(q);
    free(k);
    free(v);
    free(d64);
    free(rq);
    free(rk);
    free(rv);
    free(ref);
    free(dout);
    free(dq);
    free(dk);
    free(dv);
    free(dq_cp);
    free(dk_cp);
    free(dv_cp);
    free_batch(&b);
}

/* ------------------------------------------------------------ bad input */

void attn_bwd_error_cases(clvarlen_context *ctx)
{
    clvarlen_attention_params p;
    clvarlen_attention_params_init(&p);
    int32_t cu[3] = {0, 3, 5}, cu_bad[3] = {0, 4, 3}, cu_short[3] = {0, 3, 4};
    float q[5 * 2 * 64] = {0}, k[5 * 64] = {0}, v[5 * 64] = {0}, o[5 * 2 * 64] = {0};
    float dout[5 * 2 * 64] = {0}, lse[10] = {0};
    float dq[5 * 2 * 64], dk[5 * 64], dv[5 * 64];
    p.n_seqs = 2;
    p.total_q = 5;
    p.total_k = 5;
    p.heads_q = 2;
    p.heads_kv = 1;
    p.head_dim = 64;
    clvarlen_attention_bwd_params g;
    clvarlen_attention_bwd_params_init(&g);
#define FILL()                                                                                 \
    do {                                                                                       \
        memset(dq, 0xCD, sizeof dq);                                                           \
        memset(dk, 0xCD, sizeof dk);                                                           \
        memset(dv, 0xCD, sizeof dv);                                                           \
    } while (0)
#define UNTOUCHED(buf)                                                                         \
    do {                                                                                       \
        const unsigned char *u_ = (const unsigned char *)(buf);                                \
        for (size_t i_ = 0; i_ < sizeof(buf); i_++)                                            \
            ck_assert_msg(u_[i_] == 0xCD, "line %d: %s written on error", __LINE__, #buf);     \
    } while (0)
#define EXPECT(st_expected, ...)                                                               \
    do {                                                                                       \
        FILL();                                                                                \
        clvarlen_status st_ = clvarlen_attention_backward(__VA_ARGS__);                        \
        ck_assert_msg(st_ == (st_expected), "line %d: got %s (%s)", __LINE__,                  \
                      clvarlen_status_name(st_), clvarlen_last_error(ctx));                    \
        if (st_ != CLVARLEN_SUCCESS) {                                                         \
            ck_assert_msg(strstr(clvarlen_last_error(ctx), "clvarlen_attention_backward"),     \
                          "message names the function: %s", clvarlen_last_error(ctx));         \
            UNTOUCHED(dq);                                                                     \
            UNTOUCHED(dk);                                                                     \
            UNTOUCHED(dv);                                                                     \
        }                                                                                      \
    } while (0)
    EXPECT(CLVARLEN_SUCCESS, ctx, &p, NULL, q, k, v, o, dout, lse, cu, cu, NULL, dq, dk, dv);
    EXPECT(CLVARLEN_SUCCESS, ctx, &p, &g, q, k, v, o, dout, lse, cu, cu, NULL, dq, dk, dv);
    for (size_t i = 0; i < sizeof dk / sizeof dk[0]; i++) /* lse 0 with o = do = 0: dk = 0 */
        ck_assert(dk[i] == 0.0f && dv[i] == 0.0f);
    FILL();
    ck_assert_int_eq(clvarlen_attention_backward(NULL, &p, &g, q, k, v, o, dout, lse, cu, cu,
                                                 NULL, dq, dk, dv),
                     CLVARLEN_ERROR_INVALID_ARGUMENT);
    UNTOUCHED(dq);
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, NULL, &g, q, k, v, o, dout, lse, cu, cu, NULL,
           dq, dk, dv);
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &p, &g, q, k, v, o, NULL, lse, cu, cu, NULL, dq,
           dk, dv);
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &p, &g, q, k, v, NULL, dout, lse, cu, cu, NULL,
           dq, dk, dv);
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &p, &g, q, k, v, o, dout, NULL, cu, cu, NULL, dq,
           dk, dv);
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &p, &g, q, k, v, o, dout, lse, cu, cu, NULL,
           NULL, dk, dv);
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &p, &g, q, k, v, o, dout, lse, cu, cu, NULL, dq,
           dk, NULL);
    EXPECT(CLVARLEN_ERROR_INVALID_CU_SEQLENS, ctx, &p, &g, q, k, v, o, dout, lse, cu_bad, cu,
           NULL, dq, dk, dv);
    EXPECT(CLVARLEN_ERROR_INVALID_CU_SEQLENS, ctx, &p, &g, q, k, v, o, dout, lse, cu, cu_short,
           NULL, dq, dk, dv);
    /* outputs overlapping inputs or each other */
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &p, &g, q, k, v, o, dout, lse, cu, cu, NULL,
           (void *)q, dk, dv);
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &p, &g, q, k, v, o, dout, lse, cu, cu, NULL, dq,
           dk, dk);
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &p, &g, q, k, v, o, dout, lse, cu, cu, NULL, dq,
           (void *)lse, dv);
    clvarlen_attention_bwd_params gb = g;
    gb.struct_size = 4;
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &p, &gb, q, k, v, o, dout, lse, cu, cu, NULL,
           dq, dk, dv);
    gb = g;
    gb.do_stride = 100; /* shorter than a row of 128 */
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &p, &gb, q, k, v, o, dout, lse, cu, cu, NULL,
           dq, dk, dv);
    gb = g;
    gb.dk_stride = -1;
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &p, &gb, q, k, v, o, dout, lse, cu, cu, NULL,
           dq, dk, dv);
    clvarlen_attention_params bad = p;
    bad.dropout_p = 1.0f;
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &bad, &g, q, k, v, o, dout, lse, cu, cu, NULL,
           dq, dk, dv);
    bad.dropout_p = NAN;
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &bad, &g, q, k, v, o, dout, lse, cu, cu, NULL,
           dq, dk, dv);
    bad.dropout_p = -0.1f;
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &bad, &g, q, k, v, o, dout, lse, cu, cu, NULL,
           dq, dk, dv);
    bad = p;
    bad.dtype = CLVARLEN_DTYPE_I32;
    EXPECT(CLVARLEN_ERROR_UNSUPPORTED, ctx, &bad, &g, q, k, v, o, dout, lse, cu, cu, NULL, dq,
           dk, dv);
    bad = p;
    bad.max_seqlen_q = 2; /* sequence 0 has 3 */
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &bad, &g, q, k, v, o, dout, lse, cu, cu, NULL,
           dq, dk, dv);
    bad = p;
    bad.heads_kv = 3;
    EXPECT(CLVARLEN_ERROR_INVALID_ARGUMENT, ctx, &bad, &g, q, k, v, o, dout, lse, cu, cu, NULL,
           dq, dk, dv);
    /* the forward refuses the same dropout probabilities */
    clvarlen_attention_params fb = p;
    fb.dropout_p = 1.5f;
    ck_assert_int_eq(clvarlen_attention_forward(ctx, &fb, q, k, v, cu, cu, NULL, o, lse),
                     CLVARLEN_ERROR_INVALID_ARGUMENT);
#undef EXPECT
#undef UNTOUCHED
#undef FILL
}

/* Attention backward and dropout (SPEC 1.2) against the float64 oracle
 * (tests/ref/attention-bwd-ref.c), built once per backend (tests/meson.build):
 * test-attention-bwd-cpu on the CPU fallback, test-attention-bwd-cl on the
 * OpenCL device. The oracle itself is checked against Random123's Philox
 * vectors and against central finite differences of its float64 forward.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention-bwd-ref.h"
#include "test-attention.h"
#if TEST_BACKEND_CL
#include "kit-cl.h"
#endif

static clvarlen_context *make_ctx(void)
{
#if TEST_BACKEND_CL
    return tu_cl_context();
#else
    return tu_cpu_context();
#endif
}

/* A backward case: the forward's case plus the backward's own options. */
typedef struct bcase {
    acase a;
    float drop;
    int grad_f32;
    int do_pad, g_pad; /* extra elements per row of do and of dq, dk, dv */
} bcase;

static bcase bwd_base(void)
{
    bcase b;
    memset(&b, 0, sizeof b);
    b.a = base_case();
    return b;
}

/* Rows of a strided tensor gathered dense; the bytes between rows must keep
 * the 0xCD fill. */
static void *dense_rows(const void *buf, size_t es, int64_t rows, int64_t row, int64_t stride,
                        const char *label)
{
    char *out = malloc(es * (size_t)(rows * row) + 1);
    const unsigned char *b = buf;
    for (int64_t t = 0; t < rows; t++) {
        memcpy(out + (size_t)(t * row) * es, b + (size_t)(t * stride) * es, (size_t)row * es);
        for (size_t x = (size_t)row * es; x < (size_t)stride * es; x++)
            ck_assert_msg(b[(size_t)(t * stride) * es + x] == 0xCD,
                          "%s: byte between gradient rows changed", label);
    }
    return out;
}

/* The call's tensors and results. */
typedef struct bwd_run {
    batch b;
    clvarlen_attention_params p;
    clvarlen_attention_bwd_params g;
    void *o, *dout;
    float *lse;
    tu_guarded dq, dk, dv;
    int64_t dos, dqs, dks, dvs;
} bwd_run;

static void bwd_setup(clvarlen_context *ctx, const bcase *c, bwd_run *r)
{
    tu_rng rng = tu_rng_make(c->a.seed);
    make_batch(&c->a, &rng, &r->b);
    fill_params(&c->a, &r->b, &r->p);
    r->p.dropout_p = c->drop;
    r->p.dropout_seed = 0x1234567890abcdefull ^ c->a.seed;
    r->p.dropout_offset = c->a.seed * 7 + ((uint64_t)3 << 32);
    const batch *b = &r->b;
    const size_t es = clvarlen_dtype_size(c->a.dtype);
    const size_t gs = c->grad_f32 ? 4 : es;
    const int64_t hq = c->a.hq, hk = c->a.hk;
    r->dos = hq * c->a.dv + c->do_pad;
    r->dqs = hq * c->a.d + c->g_pad;
    r->dks = hk * c->a.d + c->g_pad;
    r->dvs = hk * c->a.dv + c->g_pad;
    r->o = malloc(es * (size_t)(b->tq * b->os) + 16);
    r->lse = malloc(sizeof(float) * (size_t)(b->tq * hq) + 16);
    r->dout = malloc(es * (size_t)(b->tq * r->dos) + 16);
    tu_fill_random(&rng, r->dout, c->a.dtype, (size_t)(b->tq * r->dos), 1.0);
    clvarlen_status st = clvarlen_attention_forward(ctx, &r->p, b->q, b->k, b->v, b->cu_q,
                                                    b->cu_k, b->q_pos, r->o, r->lse);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "forward: %s", clvarlen_last_error(ctx));
    clvarlen_attention_bwd_params_init(&r->g);
    r->g.grad_f32 = c->grad_f32;
    r->g.do_stride = c->do_pad ? r->dos : 0;
    r->g.dq_stride = c->g_pad ? r->dqs : 0;
    r->g.dk_stride = c->g_pad ? r->dks : 0;
    r->g.dv_stride = c->g_pad ? r->dvs : 0;
    r->dq = tu_guarded_alloc(gs * (size_t)(b->tq * r->dqs), 0xCD);
    r->dk = tu_guarded_alloc(gs * (size_t)(b->tk * r->dks), 0xCD);
    r->dv = tu_guarded_alloc(gs * (size_t)(b->tk * r->dvs), 0xCD);
}

static clvarlen_status bwd_call(clvarlen_context *ctx, bwd_run *r)
{
    const batch *b = &r->b;
    return clvarlen_attention_backward(ctx, &r->p, &r->g, b->q, b->k, b->v, r->o, r->dout,
                                       r->lse, b->cu_q, b->cu_k, b->q_pos, r->dq.p, r->dk.p,
                                       r->dv.p);
}

static void bwd_free(bwd_run *r)
{
    free(r->o);
    free(r->lse);
    free(r->dout);
    tu_guarded_free(&r->dq);
    tu_guarded_free(&r->dk);
    tu_guarded_free(&r->dv);
    free_batch(&r->b);
}

/* The gradients of r against the oracle. */
static void check_grads(const bcase *c, bwd_run *r, const char *label)
{
    const batch *b = &r->b;
    const acase *a = &c->a;
    const clvarlen_dtype gt = c->grad_f32 ? CLVARLEN_DTYPE_F32 : a->dtype;
    const size_t gs = clvarlen_dtype_size(gt);
    ck_assert_msg(tu_guard_ok(&r->dq) && tu_guard_ok(&r->dk) && tu_guard_ok(&r->dv),
                  "%s: guard band overwritten", label);
    double *q = ref_to_f64(b->q, a->dtype, b->tq, a->hq, a->d, b->qs);
    double *k = ref_to_f64(b->k, a->dtype, b->tk, a->hk, a->d, b->ks);
    double *v = ref_to_f64(b->v, a->dtype, b->tk, a->hk, a->dv, b->vs);
    double *dout = ref_to_f64(r->dout, a->dtype, b->tq, a->hq, a->dv, r->dos);
    const size_t nq = (size_t)(b->tq * a->hq * a->d), nk = (size_t)(b->tk * a->hk * a->d);
    const size_t nv = (size_t)(b->tk * a->hk * a->dv);
    double *dq = malloc(sizeof(double) * (nq + 1)), *dk = malloc(sizeof(double) * (nk + 1));
    double *dv = malloc(sizeof(double) * (nv + 1));
    ref_attention_backward64(&r->p, q, k, v, dout, b->cu_q, b->cu_k, b->q_pos, dq, dk, dv);
    void *gq = dense_rows(r->dq.p, gs, b->tq, (int64_t)a->hq * a->d, r->dqs, label);
    void *gk = dense_rows(r->dk.p, gs, b->tk, (int64_t)a->hk * a->d, r->dks, label);
    void *gv = dense_rows(r->dv.p, gs, b->tk, (int64_t)a->hk * a->dv, r->dvs, label);
    const double tol = tu_tolerance(a->dtype);
    char what[192];
    snprintf(what, sizeof what, "%s dq (%lld seqs, %lld q, %lld k)", label, (long long)b->n,
             (long long)b->tq, (long long)b->tk);
    tu_assert_close(tu_compare(gq, gt, dq, nq), tol, what);
    snprintf(what, sizeof what, "%s dk", label);
    tu_assert_close(tu_compare(gk, gt, dk, nk), tol, what);
    snprintf(what, sizeof what, "%s dv", label);
    tu_assert_close(tu_compare(gv, gt, dv, nv), tol, what);
    free(gq);
    free(gk);
    free(gv);
    free(q);
    free(k);
    free(v);
    free(dout);
    free(dq);
    free(dk);
    free(dv);
}

static void run_bwd(clvarlen_context *ctx, const bcase *c, const char *label)
{
    bwd_run r;
    bwd_setup(ctx, c, &r);
    clvarlen_status st = bwd_call(ctx, &r);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "%s: %s (%s)", label, clvarlen_status_name(st),
                  clvarlen_last_error(ctx));
    check_grads(c, &r, label);
    bwd_free(&r);
}

static void run_bwd_seeds(clvarlen_context *ctx, bcase c, int seeds, const char *label)
{
    char what[128];
    for (int i = 0; i < seeds; i++) {
        c.a.seed = c.a.seed * 1000 + (uint64_t)i + 1;
        snprintf(what, sizeof what, "%s seed %d", label, i);
        run_bwd(ctx, &c, what);
    }
}

/* ------------------------------------------------------------ the oracle itself */

#if !TEST_BACKEND_CL
START_TEST(test_philox_kat)
{
    /* Random123's known-answer vectors for Philox4x32-10. */
    static const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                       {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                       {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
    static const uint32_t key[3][2] = {
        {0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
    static const uint32_t want[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                        {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                        {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        ref_philox4x32_10(ctr[i], key[i], out);
        for (int w = 0; w < 4; w++)
            ck_assert_msg(out[w] == want[i][w], "vector %d word %d: %08x, want %08x", i, w,
                          out[w], want[i][w]);
    }
}
END_TEST

/* sum(do * o) of the float64 forward. */
static double loss(const clvarlen_attention_params *p, const double *q, const double *k,
                   const double *v, const double *dout, const int32_t *cu_q, const int32_t *cu_k,
                   const int32_t *q_pos, double *o, size_t no)
{
    ref_attention_forward64(p, q, k, v, cu_q, cu_k, q_pos, o, NULL);
    double s = 0.0;
    for (size_t i = 0; i < no; i++)
        s += dout[i] * o[i];
    return s;
}

/* Central differences of the loss against the oracle's gradient of x. */
static void fd_check(const clvarlen_attention_params *p, double *x, size_t n, const double *grad,
                     double *q, double *k, double *v, const double *dout, const int32_t *cu_q,
                     const int32_t *cu_k, const int32_t *q_pos, double *o, size_t no,
                     const char *what)
{
    const double eps = 1e-6;
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(grad[i]));
    ck_assert_msg(scale > 0.0, "%s: zero gradient", what);
    for (size_t i = 0; i < n; i++) {
        const double keep = x[i];
        x[i] = keep + eps;
        double lp = loss(p, q, k, v, dout, cu_q, cu_k, q_pos, o, no);
        x[i] = keep - eps;
        double lm = loss(p, q, k, v, dout, cu_q, cu_k, q_pos, o, no);
        x[i] = keep;
        worst = fmax(worst, fabs((lp - lm) / (2 * eps) - grad[i]));
    }
    ck_assert_msg(worst <= 1e-6 * scale, "%s: finite differences differ by %g (scale %g)", what,
                  worst, scale);
}

static void fd_case(int causal, int wl, int wr, float softcap, float drop, int use_qpos)
{
    const int32_t lq[3] = {3, 0, 5}, lk[3] = {4, 2, 5};
    int32_t cu_q[4], cu_k[4], q_pos[8];
    tu_cu_from_lengths(lq, 3, cu_q);
    tu_cu_from_lengths(lk, 3, cu_k);
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < lq[s]; i++)
            q_pos[cu_q[s] + i] = (i * 3 + s) % (lk[s] + 1) - (s == 2);
    clvarlen_attention_params p;
    clvarlen_attention_params_init(&p);
    p.n_seqs = 3;
    p.total_q = cu_q[3];
    p.total_k = cu_k[3];
    p.heads_q = 4;
    p.heads_kv = 2;
    p.head_dim = 16;
    p.head_dim_v = 32;
    p.causal = causal;
    p.window_left = wl;
    p.window_right = wr;
    p.softcap = softcap;
    p.dropout_p = drop;
    p.dropout_seed = 99;
    p.scale = 0.4f;
    const size_t nq = 8 * 4 * 16, nk = 11 * 2 * 16, nv = 11 * 2 * 32, no = 8 * 4 * 32;
    tu_rng r = tu_rng_make(5);
    double *q = malloc(sizeof(double) * nq), *k = malloc(sizeof(double) * nk);
    double *v = malloc(sizeof(double) * nv), *dout = malloc(sizeof(double) * no);
    double *o = malloc(sizeof(double) * no);
    for (size_t i = 0; i < nq; i++)
        q[i] = tu_uniform(&r, -1.0, 1.0);
    for (size_t i = 0; i < nk; i++)
        k[i] = tu_uniform(&r, -1.0, 1.0);
    for (size_t i = 0; i < nv; i++)
        v[i] = tu_uniform(&r, -1.0, 1.0);
    for (size_t i = 0; i < no; i++)
        dout[i] = tu_uniform(&r, -1.0, 1.0);
    double *dq = malloc(sizeof(double) * nq), *dk = malloc(sizeof(double) * nk);
    double *dv = malloc(sizeof(double) * nv);
    const int32_t *qp = use_qpos ? q_pos : NULL;
    ref_attention_backward64(&p, q, k, v, dout, cu_q, cu_k, qp, dq, dk, dv);
    fd_check(&p, q, nq, dq, q, k, v, dout, cu_q, cu_k, qp, o, no, "dq");
    fd_check(&p, k, nk, dk, q, k, v, dout, cu_q, cu_k, qp, o, no, "dk");
    fd_check(&p, v, nv, dv, q, k, v, dout, cu_q, cu_k, qp, o, no, "dv");
    free(q);
    free(k);
    free(v);
    free(dout);
    free(o);
    free(dq);
    free(dk);
    free(dv);
}

START_TEST(test_oracle_finite_differences)
{
    fd_case(0, -1, -1, 0.0f, 0.0f, 0);
    fd_case(1, -1, -1, 2.0f, 0.3f, 0); /* causal, softcap, dropout */
    fd_case(0, 2, 1, 0.0f, 0.0f, 1);   /* window with q_pos */
}
END_TEST
#endif

/* ------------------------------------------------------------ gradients */

START_TEST(test_bwd_basic)
{
    clvarlen_context *ctx = make_ctx();
    bcase c = bwd_base();
    run_bwd_seeds(ctx, c, 2, "basic");
    c.a.causal = 1;
    run_bwd_seeds(ctx, c, 2, "causal");
    c.a.lq_ne_lk = 1;
    run_bwd_seeds(ctx, c, 2, "causal lq != lk");
    c.a.causal = 0;
    run_bwd_seeds(ctx, c, 1, "lq != lk");
    clvarlen_context_destroy(ctx);
}
END_TEST

START_TEST(test_bwd_gqa_dims)
{
    clvarlen_context *ctx = make_ctx();
    bcase c = bwd_base();
    c.a.hq = 6;
    c.a.hk = 2;
    c.a.causal = 1;
    run_bwd_seeds(ctx, c, 1, "gqa 6/2");
    c.a.hq = 4;
    c.a.hk = 1;
    c.a.d = 32;
    c.a.dv = 80;
    run_bwd_seeds(ctx, c, 1, "mqa d 32 dv 80");
    c.a.hq = 2;
    c.a.d = 128;
    c.a.dv = 128;
    c.a.max_len = 70;
    run_bwd_seeds(ctx, c, 1, "d 128");
    c.a.d = 256;
    c.a.dv = 48;
    c.a.max_len = 40;
    run_bwd_seeds(ctx, c, 1, "d 256 dv 48");
    clvarlen_context_destroy(ctx);
}
END_TEST

START_TEST(test_bwd_options)
{
    clvarlen_context *ctx = make_ctx();
    bcase c = bwd_base();
    c.a.wl = 7;
    c.a.wr = 3;
    run_bwd_seeds(ctx, c, 1, "window");
    c.a.causal = 1;
    c.a.wr = -1;
    c.a.softcap = 1.5f;
    c.a.scale = 0.3f;
    run_bwd_seeds(ctx, c, 1, "causal window softcap");
    c = bwd_base();
    c.a.use_qpos = 1;
    c.a.causal = 1;
    c.a.lq_ne_lk = 1;
    run_bwd_seeds(ctx, c, 1, "q_pos");
    c = bwd_base();
    c.a.q_pad = 5;
    c.a.k_pad = 3;
    c.a.v_pad = 8;
    c.a.o_pad = 2;
    c.do_pad = 4;
    c.g_pad = 6;
    c.a.causal = 1;
    run_bwd_seeds(ctx, c, 1, "strides");
    c.grad_f32 = 1;
    run_bwd_seeds(ctx, c, 1, "strides grad f32");
    clvarlen_context_destroy(ctx);
}
END_TEST

START_TEST(test_bwd_dtypes)
{
    clvarlen_context *ctx = make_ctx();
    bcase c = bwd_base();
    c.a.hq = 4;
    c.a.hk = 2;
    c.a.causal = 1;
    c.a.d = 128;
    c.a.dv = 128;
    for (int i = 0; i < 2; i++) {
        c.a.dtype = i ? CLVARLEN_DTYPE_BF16 : CLVARLEN_DTYPE_F16;
        c.grad_f32 = 0;
        run_bwd_seeds(ctx, c, 1, clvarlen_dtype_name(c.a.dtype));
        c.grad_f32 = 1;
        c.a.causal = 0;
        run_bwd_seeds(ctx, c, 1, "grad f32");
        c.a.causal = 1;
    }
    clvarlen_context_destroy(ctx);
}
END_TEST

/* Lengths 0 and 1, tile-straddling and long sequences, many sequences. */
START_TEST(test_bwd_lengths)
{
    clvarlen_context *ctx = make_ctx();
    bcase c = bwd_base();
    c.a.max_n = 40;
    c.a.max_len = 3;
    c.a.max_total = 60;
    c.a.causal = 1;
    run_bwd_seeds(ctx, c, 1, "many short");
    c.a.max_n = 600; /* more than the work lists order by length (CV_ATTN_WORKLIST_SORT_MAX) */
    c.a.max_total = 900;
    run_bwd_seeds(ctx, c, 1, "many short, index order");
    c = bwd_base();
    c.a.max_n = 3;
    c.a.min_len = 65;
    c.a.max_len = 161;
    c.a.max_total = 400;
    c.a.hq = 2;
    c.a.hk = 2;
    c.a.d = 32;
    c.a.dv = 32;
    run_bwd_seeds(ctx, c, 1, "long");
    c.a.causal = 1;
    c.a.lq_ne_lk = 1;
    run_bwd_seeds(ctx, c, 1, "long causal lq != lk");
    clvarlen_context_destroy(ctx);
}
END_TEST

/* ------------------------------------------------------------ dropout */

START_TEST(test_dropout_forward)
{
    clvarlen_context *ctx = make_ctx();
    for (int i = 0; i < 3; i++) {
        acase c = base_case();
        c.hq = 4;
        c.hk = 2;
        c.causal = i == 1;
        c.dtype = i == 2 ? CLVARLEN_DTYPE_BF16 : CLVARLEN_DTYPE_F32;
        c.seed = 300 + (uint64_t)i;
        tu_rng r = tu_rng_make(c.seed);
        batch b;
        make_batch(&c, &r, &b);
        clvarlen_attention_params p;
        fill_params(&c, &b, &p);
        p.dropout_p = i == 2 ? 0.1f : 0.35f;
        p.dropout_seed = 0xfeedfacecafebeefull + (uint64_t)i;
        p.dropout_offset = (uint64_t)i << 33 | 17;
        const size_t es = clvarlen_dtype_size(c.dtype), no = (size_t)(b.tq * c.hq * c.dv);
        char *o = malloc(no * es + 16);
        float *lse = malloc(sizeof(float) * (size_t)(b.tq * c.hq) + 16);
        ck_assert_int_eq(
            clvarlen_attention_forward(ctx, &p, b.q, b.k, b.v, b.cu_q, b.cu_k, NULL, o, lse),
            CLVARLEN_SUCCESS);
        double *q = ref_to_f64(b.q, c.dtype, b.tq, c.hq, c.d, b.qs);
        double *k = ref_to_f64(b.k, c.dtype, b.tk, c.hk, c.d, b.ks);
        double *v = ref_to_f64(b.v, c.dtype, b.tk, c.hk, c.dv, b.vs);
        double *o_ref = malloc(sizeof(double) * (no + 1));
        double *l_ref = malloc(sizeof(double) * (size_t)(b.tq * c.hq + 1));
        ref_attention_forward64(&p, q, k, v, b.cu_q, b.cu_k, NULL, o_ref, l_ref);
        tu_assert_close(tu_compare(o, c.dtype, o_ref, no), tu_tolerance(c.dtype),
                        "dropout forward o");
        tu_assert_close(tu_compare(lse, CLVARLEN_DTYPE_F32, l_ref, (size_t)(b.tq * c.hq)),
                        lse_tolerance(c.dtype), "dropout forward lse (undropped)");
        free(q);
        free(k);
        free(v);
        free(o_ref);
        free(l_ref);
        free(o);
        free(lse);
        free_batch(&b);
    }
    clvarlen_context_destroy(ctx);
}
END_TEST

START_TEST(test_dropout_backward)
{
    clvarlen_context *ctx = make_ctx();
    bcase c = bwd_base();
    c.a.hq = 4;
    c.a.hk = 2;
    c.drop = 0.2f;
    run_bwd_seeds(ctx, c, 1, "dropout");
    c.a.causal = 1;
    c.a.softcap = 3.0f;
    c.drop = 0.5f;
    run_bwd_seeds(ctx, c, 1, "dropout causal softcap");
    c.a.dtype = CLVARLEN_DTYPE_BF16;
    c.drop = 0.1f;
    run_bwd_seeds(ctx, c, 1, "dropout bf16");
    clvarlen_context_destroy(ctx);
}
END_TEST

#if !TEST_BACKEND_CL
/* The kept fraction of the generator is 1 - p within sampling error. */
START_TEST(test_dropout_fraction)
{
    clvarlen_attention_params p;
    clvarlen_attention_params_init(&p);
    const float ps[3] = {0.1f, 0.5f, 0.9f};
    for (int i = 0; i < 3; i++) {
        p.dropout_p = ps[i];
        p.dropout_seed = 42 + (uint64_t)i;
        p.dropout_offset = 1000;
        const int64_t n = 200000;
        int64_t kept = 0;
        for (int64_t e = 0; e < n; e++)
            kept += ref_dropout_factor(&p, e % 5, e / 5 % 400, e / 2000) != 0.0;
        const double want = 1.0 - ps[i], sd = sqrt(want * (1 - want) / (double)n);
        const double got = (double)kept / (double)n;
        ck_assert_msg(fabs(got - want) < 5 * sd, "p %g: kept %g, want %g +- %g", ps[i], got,
                      want, 5 * sd);
    }
}
END_TEST
#endif

/* ------------------------------------------------------------ determinism */

START_TEST(test_bwd_deterministic)
{
    clvarlen_context *ctx = make_ctx();
    bcase c = bwd_base();
    c.a.hq = 8;
    c.a.hk = 2;
    c.a.causal = 1;
    c.a.dtype = CLVARLEN_DTYPE_BF16;
    c.grad_f32 = 1;
    c.a.max_n = 8;
    c.a.max_len = 90;
    c.a.max_total = 400;
    c.drop = 0.1f;
    bwd_run r;
    bwd_setup(ctx, &c, &r);
    ck_assert_int_eq(bwd_call(ctx, &r), CLVARLEN_SUCCESS);
    const size_t bq = r.dq.bytes, bk = r.dk.bytes, bv = r.dv.bytes;
    char *first = malloc(bq + bk + bv);
    memcpy(first, r.dq.p, bq);
    memcpy(first + bq, r.dk.p, bk);
    memcpy(first + bq + bk, r.dv.p, bv);
    for (int rep = 0; rep < 2; rep++) {
#if TEST_BACKEND_CL
        clvarlen_context *other = ctx;
#else
        /* one and three threads on the CPU fallback */
        clvarlen_options *opt = NULL;
        ck_assert_int_eq(clvarlen_options_create(&opt), CLVARLEN_SUCCESS);
        ck_assert_int_eq(clvarlen_options_set_device(opt, "cpu"), CLVARLEN_SUCCESS);
        ck_assert_int_eq(clvarlen_options_set_threads(opt, rep ? 3 : 1), CLVARLEN_SUCCESS);
        clvarlen_context *other = NULL;
        ck_assert_int_eq(clvarlen_context_create(opt, &other), CLVARLEN_SUCCESS);
        clvarlen_options_destroy(opt);
#endif
        memset(r.dq.p, 0, bq);
        memset(r.dk.p, 0, bk);
        memset(r.dv.p, 0, bv);
        ck_assert_int_eq(bwd_call(other, &r), CLVARLEN_SUCCESS);
        ck_assert_msg(memcmp(first, r.dq.p, bq) == 0 && memcmp(first + bq, r.dk.p, bk) == 0 &&
                          memcmp(first + bq + bk, r.dv.p, bv) == 0,
                      "run %d: gradients differ bitwise", rep);
#if !TEST_BACKEND_CL
        clvarlen_context_destroy(other);
#endif
    }
    free(first);
    bwd_free(&r);
    clvarlen_context_destroy(ctx);
}
END_TEST

#if TEST_BACKEND_CL
/* The cl_mem entry point at byte offsets: bitwise the host path's result on
 * the same device, bytes around the outputs untouched; with device checks on,
 * an invalid device cu_seqlens_k is reported and nothing is written. */
static void bwd_clmem_case(clvarlen_context *ctx, const bcase *c, int device_checks)
{
    bwd_run r;
    bwd_setup(ctx, c, &r);
    ck_assert_int_eq(bwd_call(ctx, &r), CLVARLEN_SUCCESS);
    const batch *b = &r.b;
    const size_t es = clvarlen_dtype_size(c->a.dtype), pad = 48;
    const size_t cub = (size_t)(b->n + 1) * 4;
    tu_clbuf in[9] = {
        tu_clbuf_make(ctx, (size_t)(b->tq * b->qs) * es, pad, b->q),
        tu_clbuf_make(ctx, (size_t)(b->tk * b->ks) * es, pad, b->k),
        tu_clbuf_make(ctx, (size_t)(b->tk * b->vs) * es, pad, b->v),
        tu_clbuf_make(ctx, (size_t)(b->tq * b->os) * es, pad, r.o),
        tu_clbuf_make(ctx, (size_t)(b->tq * r.dos) * es, pad, r.dout),
        tu_clbuf_make(ctx, (size_t)(b->tq * c->a.hq) * 4, pad, r.lse),
        tu_clbuf_make(ctx, cub, pad, b->cu_q),
        tu_clbuf_make(ctx, cub, pad, b->cu_k),
        {NULL, 0, 0, 0, NULL},
    };
    if (b->q_pos)
        in[8] = tu_clbuf_make(ctx, (size_t)b->tq * 4, pad, b->q_pos);
    tu_clbuf out[3] = {tu_clbuf_make(ctx, r.dq.bytes, pad, NULL),
                       tu_clbuf_make(ctx, r.dk.bytes, pad, NULL),
                       tu_clbuf_make(ctx, r.dv.bytes, pad, NULL)};
    cl_event ev = NULL;
    clvarlen_status st = clvarlen_cl_attention_backward(
        ctx, &r.p, &r.g, in[0].mem, pad, in[1].mem, pad, in[2].mem, pad, in[3].mem, pad,
        in[4].mem, pad, in[5].mem, pad, in[6].mem, pad, in[7].mem, pad, in[8].mem, pad,
        out[0].mem, pad, out[1].mem, pad, out[2].mem, pad, 0, NULL, &ev);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "cl backward: %s", clvarlen_last_error(ctx));
    tu_cl_wait_release(&ev, "cl backward event");
    const tu_guarded *host[3] = {&r.dq, &r.dk, &r.dv};
    for (int i = 0; i < 3; i++) {
        const unsigned char *got = tu_clbuf_fetch(ctx, &out[i], "cl_mem gradient");
        /* the rows: the host path left 0xCD between them, the device the pattern */
        const int64_t rows = i == 0 ? b->tq : b->tk;
        const size_t stride = host[i]->bytes / (size_t)(rows > 0 ? rows : 1);
        const size_t row = (size_t)(i == 0 ? c->a.hq * c->a.d : c->a.hk * (i == 1 ? c->a.d
                                                                                 : c->a.dv)) *
                           (c->grad_f32 ? 4 : es);
        for (int64_t t = 0; t < rows; t++)
            ck_assert_msg(memcmp(got + (size_t)t * stride,
                                 (const char *)host[i]->p + (size_t)t * stride, row) == 0,
                          "cl_mem gradient %d row %lld differs from the host path", i,
                          (long long)t);
    }
    if (device_checks && b->n >= 2 && b->tk > 0) {
        int32_t *bad = malloc(cub);
        memcpy(bad, b->cu_k, cub);
        bad[1] = b->cu_k[b->n] + 1;
        tu_clbuf mbad = tu_clbuf_make(ctx, cub, pad, bad);
        tu_clbuf o2[3] = {tu_clbuf_make(ctx, r.dq.bytes, pad, NULL),
                          tu_clbuf_make(ctx, r.dk.bytes, pad, NULL),
                          tu_clbuf_make(ctx, r.dv.bytes, pad, NULL)};
        st = clvarlen_cl_attention_backward(
            ctx, &r.p, &r.g, in[0].mem, pad, in[1].mem, pad, in[2].mem, pad, in[3].mem, pad,
            in[4].mem, pad, in[5].mem, pad, in[6].mem, pad, mbad.mem, pad, in[8].mem, pad,
            o2[0].mem, pad, o2[1].mem, pad, o2[2].mem, pad, 0, NULL, NULL);
        ck_assert_msg(st == CLVARLEN_ERROR_INVALID_CU_SEQLENS, "bad cu_k: %s",
                      clvarlen_status_name(st));
        for (int i = 0; i < 3; i++) {
            tu_clbuf_untouched(ctx, &o2[i], "gradient written despite invalid cu_seqlens");
            tu_clbuf_free(&o2[i]);
        }
        tu_clbuf_free(&mbad);
        free(bad);
    }
    /* an offset that is not a multiple of the element size */
    st = clvarlen_cl_attention_backward(
        ctx, &r.p, &r.g, in[0].mem, pad, in[1].mem, pad, in[2].mem, pad, in[3].mem, pad,
        in[4].mem, pad + 1, in[5].mem, pad, in[6].mem, pad, in[7].mem, pad, in[8].mem, pad,
        out[0].mem, pad, out[1].mem, pad, out[2].mem, pad, 0, NULL, NULL);
    ck_assert_int_eq(st, CLVARLEN_ERROR_INVALID_ARGUMENT);
    for (int i = 0; i < 9; i++)
        tu_clbuf_free(&in[i]);
    for (int i = 0; i < 3; i++)
        tu_clbuf_free(&out[i]);
    bwd_free(&r);
}

/* The tensor-core kernels' emulated form (cl/attention-bwd-nv.cl through
 * cl/nv-mma.clh): their fragment bookkeeping against the oracle. */
START_TEST(test_bwd_mma_emulated)
{
    setenv("CLVARLEN_ATTENTION_KERNEL", "mma", 1);
    tu_emulated_forms(1);
    clvarlen_context *ctx = tu_cl_context();
    bcase c = bwd_base();
    c.a.dtype = CLVARLEN_DTYPE_BF16;
    c.a.hq = 4;
    c.a.hk = 2;
    c.a.max_n = 4;
    c.a.max_len = 150; /* several 64-key and 64-row tiles */
    c.a.max_total = 300;
    run_bwd_seeds(ctx, c, 1, "mma bf16");
    c.a.causal = 1;
    c.a.lq_ne_lk = 1;
    run_bwd_seeds(ctx, c, 1, "mma causal lq != lk");
    c.a.dtype = CLVARLEN_DTYPE_F16;
    c.a.d = c.a.dv = 128;
    c.a.wl = 40;
    c.a.softcap = 4.0f;
    c.grad_f32 = 1;
    run_bwd_seeds(ctx, c, 1, "mma f16 d 128 window softcap grad f32");
    c.a.wl = -1;
    c.a.softcap = 0.0f;
    c.a.use_qpos = 1;
    c.a.hq = 8;
    c.a.hk = 1;
    c.a.d = c.a.dv = 32;
    c.a.q_pad = 8;
    c.g_pad = 8;
    c.grad_f32 = 0;
    run_bwd_seeds(ctx, c, 1, "mma mqa q_pos strides d 32");
    clvarlen_context_destroy(ctx);
    unsetenv("CLVARLEN_ATTENTION_KERNEL");
    tu_emulated_forms(0);
}
END_TEST

/* The tensor-core kernels' wgmma form (native on an NVIDIA Hopper device,
 * emulated here through cl/nv-wgmma.clh, which reads the swizzled tiles by the
 * descriptors' rules): head dims 64, 96 and 128, the options the mma.sync form
 * is tested with, and the dk/dv kernel's staging variants. The forward's check (attn_wgmma_check) must pass first. */
START_TEST(test_bwd_wgmma_emulated)
{
    setenv("CLVARLEN_ATTENTION_KERNEL", "wgmma", 1);
    tu_emulated_forms(1);
    clvarlen_context *ctx = tu_cl_context();
    bcase c = bwd_base();
    c.a.dtype = CLVARLEN_DTYPE_BF16;
    c.a.d = c.a.dv = 64;
    c.a.hq = 4;
    c.a.hk = 2;
    c.a.max_n = 4;
    c.a.max_len = 150; /* several 64-key and 64-row tiles, 32-row and 32-key steps */
    c.a.max_total = 300;
    run_bwd_seeds(ctx, c, 1, "wgmma bf16 d 64 gqa");
    c.a.causal = 1;
    c.a.lq_ne_lk = 1;
    run_bwd_seeds(ctx, c, 1, "wgmma causal lq != lk");
    c.a.dtype = CLVARLEN_DTYPE_F16;
    c.a.d = c.a.dv = 128;
    c.a.wl = 40;
    c.a.softcap = 4.0f;
    c.grad_f32 = 1;
    run_bwd_seeds(ctx, c, 1, "wgmma f16 d 128 window softcap grad f32");
    c.a.wl = -1;
    c.a.softcap = 0.0f;
    c.a.use_qpos = 1;
    c.a.hq = 4;
    c.a.hk = 1;
    c.a.q_pad = 8;
    c.g_pad = 8;
    c.grad_f32 = 0;
    run_bwd_seeds(ctx, c, 1, "wgmma f16 mqa q_pos strides d 128");
    /* O's rows not whole 16-byte chunks: delta by its own pass, not the dq
     * kernel (BWD_DQ_DELTA), and dq after dk/dv */
    c.a.o_pad = 4;
    c.do_pad = 8;
    run_bwd_seeds(ctx, c, 1, "wgmma o stride: delta pass");
    c.a.o_pad = 0;
    c.do_pad = 0;
    c = bwd_base(); /* head dim 96: the second 64-column block half used */
    c.a.dtype = CLVARLEN_DTYPE_BF16;
    c.a.d = c.a.dv = 96;
    c.a.hq = 4;
    c.a.hk = 2;
    c.a.max_n = 3;
    c.a.max_len = 120;
    c.a.max_total = 240;
    c.a.causal = 1;
    run_bwd_seeds(ctx, c, 1, "wgmma bf16 d 96 gqa causal");
    clvarlen_context_destroy(ctx);
    /* the other staging orders: dq's products paired, and dk/dv's paired at
     * D 96 (one at a time by default there), one at a time at D 64; delta by
     * its own pass (fdelta=0) and dk/dv's general staging loop (fstage=0)
     * with the latter */
    setenv("CLVARLEN_ATTN_BWD_TUNING", "pair=2,fdelta=0,fstage=0", 1);
    ctx = tu_cl_context();
    c = bwd_base();
    c.a.dtype = CLVARLEN_DTYPE_BF16;
    c.a.d = c.a.dv = 64;
    c.a.hq = 4;
    c.a.hk = 2;
    c.a.max_n = 4;
    c.a.max_len = 150;
    c.a.max_total = 300;
    c.a.causal = 1;
    run_bwd_seeds(ctx, c, 1, "wgmma pair=2 fdelta=0 fstage=0 causal");
    c.a.d = c.a.dv = 96;
    c.a.causal = 0;
    c.a.max_n = 2;
    c.a.max_total = 200;
    clvarlen_context_destroy(ctx);
    setenv("CLVARLEN_ATTN_BWD_TUNING", "pair=3", 1);
    ctx = tu_cl_context();
    run_bwd_seeds(ctx, c, 1, "wgmma pair=3 d 96");
    clvarlen_context_destroy(ctx);
    /* dk/dv's Q and dO in two buffers (V's fragments in registers: D 96, 128)
     * or three (V in local memory: D 64) */
    const char *bufs[] = {"vreg=1,qbuf=3", "vreg=0,qbuf=3"};
    for (int i = 0; i < 2; i++) {
        setenv("CLVARLEN_ATTN_BWD_TUNING", bufs[i], 1);
        ctx = tu_cl_context();
        c = bwd_base();
        c.a.dtype = CLVARLEN_DTYPE_BF16;
        c.a.d = c.a.dv = i ? 64 : 128;
        c.a.hq = 4;
        c.a.hk = 2;
        c.a.max_n = 3;
        c.a.max_len = 140;
        c.a.max_total = 280;
        c.a.causal = 1;
        run_bwd_seeds(ctx, c, 1, bufs[i]);
        if (i == 0) {
            c.a.d = c.a.dv = 96;
            c.a.causal = 0;
            c.a.lq_ne_lk = 1;
            run_bwd_seeds(ctx, c, 1, "vreg=1,qbuf=3 d 96");
        }
        clvarlen_context_destroy(ctx);
    }
    unsetenv("CLVARLEN_ATTN_BWD_TUNING");
    unsetenv("CLVARLEN_ATTENTION_KERNEL");
    tu_emulated_forms(0);
}
END_TEST

/* A caller-supplied scratch buffer (clvarlen_cl_context_set_scratch): as large as
 * the library's own after the same call, results bitwise equal; too small,
 * CLVARLEN_ERROR_BUFFER_TOO_SMALL and nothing written; NULL returns to the
 * library's buffer. */
START_TEST(test_bwd_scratch)
{
    clvarlen_context *ctx = tu_cl_context();
    bcase c = bwd_base();
    c.a.hq = 4;
    c.a.hk = 2;
    c.a.causal = 1;
    c.a.seed = 91;
    bwd_run r;
    bwd_setup(ctx, &c, &r);
    ck_assert_int_eq(bwd_call(ctx, &r), CLVARLEN_SUCCESS);
    size_t need = 0;
    ck_assert_int_eq(clvarlen_cl_context_scratch_bytes(ctx, &need), CLVARLEN_SUCCESS);
    ck_assert(need > 0);
    const size_t bq = r.dq.bytes;
    unsigned char *first = malloc(bq);
    memcpy(first, r.dq.p, bq);
    cl_context clc = NULL;
    ck_assert_int_eq(clvarlen_context_get_cl(ctx, &clc, NULL, NULL), CLVARLEN_SUCCESS);
    cl_int err = CL_SUCCESS;
    cl_mem big = clCreateBuffer(clc, CL_MEM_READ_WRITE, need, NULL, &err);
    cl_mem tiny = clCreateBuffer(clc, CL_MEM_READ_WRITE, 64, NULL, &err);
    ck_assert(big && tiny);
    ck_assert_int_eq(clvarlen_cl_context_set_scratch(ctx, big, need), CLVARLEN_SUCCESS);
    memset(r.dq.p, 0, bq);
    ck_assert_int_eq(bwd_call(ctx, &r), CLVARLEN_SUCCESS);
    ck_assert(memcmp(first, r.dq.p, bq) == 0);
    ck_assert_int_eq(clvarlen_cl_context_set_scratch(ctx, tiny, 64), CLVARLEN_SUCCESS);
    memset(r.dq.p, 0xCD, bq);
    ck_assert_int_eq(bwd_call(ctx, &r), CLVARLEN_ERROR_BUFFER_TOO_SMALL);
    for (size_t i = 0; i < bq; i++)
        ck_assert(((unsigned char *)r.dq.p)[i] == 0xCD);
    ck_assert_int_eq(clvarlen_cl_context_set_scratch(ctx, tiny, 65),
                     CLVARLEN_ERROR_INVALID_ARGUMENT); /* beyond the buffer */
    ck_assert_int_eq(clvarlen_cl_context_set_scratch(ctx, NULL, 0), CLVARLEN_SUCCESS);
    ck_assert_int_eq(bwd_call(ctx, &r), CLVARLEN_SUCCESS);
    ck_assert(memcmp(first, r.dq.p, bq) == 0);
    clReleaseMemObject(big);
    clReleaseMemObject(tiny);
    free(first);
    bwd_free(&r);
    clvarlen_context_destroy(ctx);
}
END_TEST

START_TEST(test_bwd_clmem)
{
    clvarlen_context *ctx = tu_cl_context();
    bcase c = bwd_base();
    c.a.hq = 4;
    c.a.hk = 2;
    c.a.causal = 1;
    c.a.q_pad = 3;
    c.do_pad = 5;
    c.g_pad = 2;
    c.a.seed = 77;
    bwd_clmem_case(ctx, &c, 0);
    clvarlen_context_destroy(ctx);
    clvarlen_options *opt = NULL;
    ck_assert_int_eq(clvarlen_options_create(&opt), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device(opt, tu_cl_device_spec()), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device_checks(opt, 1), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_context_create(opt, &ctx), CLVARLEN_SUCCESS);
    clvarlen_options_destroy(opt);
    c.a.dtype = CLVARLEN_DTYPE_BF16;
    c.a.use_qpos = 1;
    c.drop = 0.2f;
    c.grad_f32 = 1;
    bwd_clmem_case(ctx, &c, 1);
    clvarlen_context_destroy(ctx);
}
END_TEST
#endif

void attn_bwd_cp_case(clvarlen_context *ctx, int32_t world, clvarlen_dtype dtype, uint64_t seed);
void attn_bwd_error_cases(clvarlen_context *ctx);

START_TEST(test_bwd_context_parallel)
{
    clvarlen_context *ctx = make_ctx();
    attn_bwd_cp_case(ctx, 2, CLVARLEN_DTYPE_F32, 41);
    attn_bwd_cp_case(ctx, 3, CLVARLEN_DTYPE_F32, 42);
    attn_bwd_cp_case(ctx, 4, CLVARLEN_DTYPE_BF16, 43);
    clvarlen_context_destroy(ctx);
}
END_TEST

START_TEST(test_bwd_errors)
{
    clvarlen_context *ctx = make_ctx();
    attn_bwd_error_cases(ctx);
    clvarlen_context_destroy(ctx);
}
END_TEST

static Suite *bwd_suite(void)
{
    Suite *s = suite_create(TEST_BACKEND_CL ? "attention-bwd-cl" : "attention-bwd-cpu");
    TCase *tc = tcase_create("backward");
    tcase_set_timeout(tc, TEST_BACKEND_CL ? 900 : 300);
#if !TEST_BACKEND_CL
    tcase_add_test(tc, test_philox_kat);
    tcase_add_test(tc, test_oracle_finite_differences);
    tcase_add_test(tc, test_dropout_fraction);
#endif
    tcase_add_test(tc, test_bwd_basic);
    tcase_add_test(tc, test_bwd_gqa_dims);
    tcase_add_test(tc, test_bwd_options);
    tcase_add_test(tc, test_bwd_dtypes);
    tcase_add_test(tc, test_bwd_lengths);
    tcase_add_test(tc, test_dropout_forward);
    tcase_add_test(tc, test_dropout_backward);
    tcase_add_test(tc, test_bwd_deterministic);
    tcase_add_test(tc, test_bwd_context_parallel);
    tcase_add_test(tc, test_bwd_errors);
#if TEST_BACKEND_CL
    tcase_add_test(tc, test_bwd_clmem);
    tcase_add_test(tc, test_bwd_scratch);
    if (!tu_second_device()) { /* the emulated forms: the default device's (kit-check.h) */
        tcase_add_test(tc, test_bwd_mma_emulated);
        tcase_add_test(tc, test_bwd_wgmma_emulated);
    }
#endif
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
#if TEST_BACKEND_CL
    if (!tu_probe_opencl_device())
        return TU_EXIT_SKIP;
#endif
    return tu_run_suite(bwd_suite());
}

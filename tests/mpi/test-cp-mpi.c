/* libclvarlen-mpi under mpirun (suite mpi, tests/mpi/meson.build): every
 * rank's CP forward and backward equal the single-process attention of the
 * whole batch (computed on every rank, same device) within SPEC section 4's
 * tolerances, on the host and (OpenCL devices) cl_mem entry points; and bad
 * input on one rank is an error on every rank, with nothing written.
 *
 * Usage: mpirun -np N test-cp-mpi DEVICE   (DEVICE: a clvarlen device spec,
 * "cpu" or "opencl"). Not a Check test: Check forks, MPI processes must not.
 * Failures are counted per rank and summed at the end; rank 0 reports.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#if CLVARLEN_HAVE_OPENCL
#  include <clvarlen/clvarlen-cl.h>
#endif
#include <clvarlen/clvarlen-mpi.h>

#include "kit.h"

static int g_rank, g_world, g_fail, g_checks;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        g_checks++;                                                                                \
        if (!(cond)) {                                                                             \
            g_fail++;                                                                              \
            fprintf(stderr, "rank %d: %s:%d: ", g_rank, __FILE__, __LINE__);                     \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "rank %d: out of memory\n", g_rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

/* ---- a case: the whole batch, identical on every rank (same seed) */
typedef struct tcase {
    const char *label;
    clvarlen_dtype dtype;
    int hq, hk, d, dv;
    int causal, wl, wr;
    float softcap;
    int grad_f32;
    int q_pad, o_pad; /* extra elements per local token row (strides) */
    int n_lengths;
    const int32_t *lengths; /* NULL: random */
    uint64_t seed;
} tcase;

typedef struct whole {
    int64_t n, t;
    int32_t *cu;
    void *q, *k, *v, *dout;  /* [t, h, d] contiguous */
    void *o;                 /* single-process forward */
    float *lse;              /* [hq, t] */
    float *dq, *dk, *dv;     /* single-process backward, f32 */
} whole;

static void make_whole(clvarlen_context *ctx, const tcase *c, const clvarlen_attention_params *p,
                       whole *w)
{
    tu_rng r = tu_rng_make(c->seed);
    int32_t len[64];
    if (c->lengths) {
        w->n = c->n_lengths;
        memcpy(len, c->lengths, sizeof(int32_t) * (size_t)w->n);
    } else {
        w->n = tu_int(&r, 1, 12);
        for (int64_t s = 0; s < w->n; s++) {
            int64_t kind = tu_int(&r, 0, 5);
            len[s] = (int32_t)(kind == 0 ? 0 : kind == 1 ? 1 : kind == 2 ? tu_int(&r, 2, 9)
                                                                     : tu_int(&r, 10, 150));
        }
    }
    w->cu = xmalloc(sizeof(int32_t) * (size_t)(w->n + 1));
    tu_cu_from_lengths(len, w->n, w->cu);
    w->t = w->cu[w->n];
    const size_t es = clvarlen_dtype_size(c->dtype), T = (size_t)w->t;
    const size_t rq = (size_t)(c->hq * c->d), rk = (size_t)(c->hk * c->d);
    const size_t rv = (size_t)(c->hk * c->dv), ro = (size_t)(c->hq * c->dv);
    w->q = xmalloc(T * rq * es);
    w->k = xmalloc(T * rk * es);
    w->v = xmalloc(T * rv * es);
    w->dout = xmalloc(T * ro * es);
    w->o = xmalloc(T * ro * es);
    w->lse = xmalloc(sizeof(float) * T * (size_t)c->hq);
    w->dq = xmalloc(sizeof(float) * T * rq);
    w->dk = xmalloc(sizeof(float) * T * rk);
    w->dv = xmalloc(sizeof(float) * T * rv);
    tu_fill_random(&r, w->q, c->dtype, T * rq, 1.0);
    tu_fill_random(&r, w->k, c->dtype, T * rk, 1.0);
    tu_fill_random(&r, w->v, c->dtype, T * rv, 1.0);
    tu_fill_random(&r, w->dout, c->dtype, T * ro, 1.0);
    clvarlen_attention_params pw = *p;
    pw.n_seqs = w->n;
    pw.total_q = pw.total_k = w->t;
    pw.q_stride = pw.o_stride = 0;
    clvarlen_status st = clvarlen_attention_forward(ctx, &pw, w->q, w->k, w->v, w->cu, w->cu, NULL,
                                                    w->o, w->lse);
    CHECK(st == CLVARLEN_SUCCESS, "%s: single-process forward: %s", c->label,
          clvarlen_last_error(ctx));
    clvarlen_attention_bwd_params g;
    clvarlen_attention_bwd_params_init(&g);
    g.grad_f32 = 1;
    st = clvarlen_attention_backward(ctx, &pw, &g, w->q, w->k, w->v, w->o, w->dout, w->lse, w->cu,
                                     w->cu, NULL, w->dq, w->dk, w->dv);
    CHECK(st == CLVARLEN_SUCCESS, "%s: single-process backward: %s", c->label,
          clvarlen_last_error(ctx));
}

static void free_whole(whole *w)
{
    void *all[] = {w->cu, w->q, w->k, w->v, w->dout, w->o, w->lse, w->dq, w->dk, w->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

/* Rows of src [t, row] (elements of dtype) picked by gidx into dst with a stride. */
static void pick_rows(const void *src, clvarlen_dtype dt, size_t row, const int32_t *gidx,
                      int64_t n, void *dst, size_t dst_stride)
{
    const size_t es = clvarlen_dtype_size(dt);
    for (int64_t i = 0; i < n; i++)
        memcpy((char *)dst + (size_t)i * dst_stride * es, (const char *)src + (size_t)gidx[i] * row * es,
               row * es);
}

/* The strided local rows of a tensor as a dense f64 reference/compare pair. */
static double *dense_ref(const void *src, clvarlen_dtype dt, size_t row, const int32_t *gidx,
                         int64_t n)
{
    double *ref = xmalloc(sizeof(double) * (size_t)n * row);
    for (int64_t i = 0; i < n; i++)
        for (size_t e = 0; e < row; e++)
            ref[(size_t)i * row + e] = tu_get(src, dt, (size_t)gidx[i] * row + e);
    return ref;
}

/* out (strided, dtype) against ref (dense): SPEC 4's tolerance of dtype. */
static void compare(const char *what, const tcase *c, const void *out, clvarlen_dtype dt,
                    size_t stride, const double *ref, int64_t n, size_t row, double tol)
{
    void *dense = xmalloc(clvarlen_dtype_size(dt) * (size_t)n * row);
    const size_t es = clvarlen_dtype_size(dt);
    for (int64_t i = 0; i < n; i++)
        memcpy((char *)dense + (size_t)i * row * es, (const char *)out + (size_t)i * stride * es,
               row * es);
    tu_err e = tu_compare(dense, dt, ref, (size_t)n * row);
    CHECK(tu_err_within(e, tol), "%s: %s differs from the single-process result (rel %.3g, max "
                                 "abs %.3g, tolerance %.3g, world %d)",
          c->label, what, e.rel_l2, e.max_abs, tol, g_world);
    free(dense);
}

/* Gradient tolerance: the CP sums dk/dv over ranks in another order than the
 * single-process kernel; f32 gradients get the f32 bound, rounded ones their
 * dtype's. */
static double grad_tol(const tcase *c)
{
    return c->grad_f32 ? 1e-4 : tu_tolerance(c->dtype);
}

/* One rank's side of a case: its shard of the whole batch and its outputs. */
typedef struct side {
    const tcase *c;
    clvarlen_context *ctx;
    clvarlen_attention_params p;
    clvarlen_mpi_cp *cp;
    whole w;
    int64_t lt;
    int32_t *gidx;
    clvarlen_dtype gdt; /* the gradients' dtype */
    size_t es, ges, rq, rk, rv, ro, qs, os, L;
    void *q, *k, *v, *dout, *o, *dq, *dk, *dv;
    float *lse;
} side;

static void side_params(side *sd, const tcase *c)
{
    clvarlen_attention_params *p = &sd->p;
    clvarlen_attention_params_init(p);
    p->dtype = c->dtype;
    p->heads_q = c->hq;
    p->heads_kv = c->hk;
    p->head_dim = c->d;
    p->head_dim_v = c->dv;
    p->causal = c->causal;
    p->window_left = c->wl;
    p->window_right = c->wr;
    p->softcap = c->softcap;
    sd->rq = (size_t)(c->hq * c->d);
    sd->rk = (size_t)(c->hk * c->d);
    sd->rv = (size_t)(c->hk * c->dv);
    sd->ro = (size_t)(c->hq * c->dv);
    p->q_stride = c->q_pad ? (int64_t)sd->rq + c->q_pad : 0;
    p->o_stride = c->o_pad ? (int64_t)sd->ro + c->o_pad : 0;
    sd->qs = p->q_stride ? (size_t)p->q_stride : sd->rq;
    sd->os = p->o_stride ? (size_t)p->o_stride : sd->ro;
    sd->es = clvarlen_dtype_size(c->dtype);
    sd->gdt = c->grad_f32 ? CLVARLEN_DTYPE_F32 : c->dtype;
    sd->ges = clvarlen_dtype_size(sd->gdt);
}

/* This rank's rows of q, k, v and do (the plan's global indices), and room
 * for its outputs. */
static void side_shard(side *sd)
{
    const tcase *c = sd->c;
    clvarlen_mpi_cp_local_tokens(sd->cp, &sd->lt);
    sd->L = (size_t)sd->lt;
    const size_t L = sd->L, es = sd->es, ges = sd->ges;
    int32_t *lcu = xmalloc(sizeof(int32_t) * (size_t)(sd->w.n + 1));
    sd->gidx = xmalloc(sizeof(int32_t) * (L + 1));
    clvarlen_cp_plan_out plan;
    memset(&plan, 0, sizeof plan);
    plan.local_cu_seqlens = lcu;
    plan.global_index = sd->gidx;
    plan.capacity = sd->lt;
    CHECK(clvarlen_cp_plan(sd->ctx, sd->w.cu, sd->w.n, g_world, g_rank, &plan) ==
                  CLVARLEN_SUCCESS &&
              plan.local_tokens == sd->lt,
          "%s: plan", c->label);
    int32_t *pos = xmalloc(sizeof(int32_t) * (L + 1));
    CHECK(clvarlen_mpi_cp_plan(sd->cp, NULL, pos) == CLVARLEN_SUCCESS, "cp_plan");
    free(pos);
    free(lcu);
    sd->q = xmalloc(L * sd->qs * es);
    sd->k = xmalloc(L * sd->rk * es);
    sd->v = xmalloc(L * sd->rv * es);
    sd->dout = xmalloc(L * sd->ro * es);
    sd->o = xmalloc(L * sd->os * es);
    sd->lse = xmalloc(sizeof(float) * L * (size_t)c->hq);
    sd->dq = xmalloc(L * sd->rq * ges);
    sd->dk = xmalloc(L * sd->rk * ges);
    sd->dv = xmalloc(L * sd->rv * ges);
    memset(sd->q, 0, L * sd->qs * es);
    memset(sd->o, 0x5a, L * sd->os * es);
    pick_rows(sd->w.q, c->dtype, sd->rq, sd->gidx, sd->lt, sd->q, sd->qs);
    pick_rows(sd->w.k, c->dtype, sd->rk, sd->gidx, sd->lt, sd->k, sd->rk);
    pick_rows(sd->w.v, c->dtype, sd->rv, sd->gidx, sd->lt, sd->v, sd->rv);
    pick_rows(sd->w.dout, c->dtype, sd->ro, sd->gidx, sd->lt, sd->dout, sd->ro);
}

static void check_o(const side *sd, const char *what, const void *o, const float *lse)
{
    const tcase *c = sd->c;
    double *ref = dense_ref(sd->w.o, c->dtype, sd->ro, sd->gidx, sd->lt);
    compare(what, c, o, c->dtype, sd->os, ref, sd->lt, sd->ro, tu_tolerance(c->dtype));
    free(ref);
    double max_lse = 0;
    for (int h = 0; h < c->hq; h++)
        for (int64_t t = 0; t < sd->lt; t++) {
            double a = lse[(size_t)h * sd->L + (size_t)t];
            double b = sd->w.lse[(size_t)h * (size_t)sd->w.t + (size_t)sd->gidx[t]];
            if (isinf(a) || isinf(b)) {
                CHECK(a == b, "%s: %s: lse inf mismatch", c->label, what);
                continue;
            }
            double e = fabs(a - b) / (1 + fabs(b));
            max_lse = e > max_lse || isnan(e) ? e : max_lse;
        }
    CHECK(max_lse <= (c->dtype == CLVARLEN_DTYPE_F32 ? 1e-5 : 1e-4), "%s: %s: lse differs by %.3g",
          c->label, what, max_lse);
}

static void check_grads(const side *sd, const char *suffix, void *const out[3])
{
    const float *full[3] = {sd->w.dq, sd->w.dk, sd->w.dv};
    const size_t row[3] = {sd->rq, sd->rk, sd->rv};
    const char *name[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++) {
        double *ref = dense_ref(full[i], CLVARLEN_DTYPE_F32, row[i], sd->gidx, sd->lt);
        char what[32];
        snprintf(what, sizeof what, "%s%s", name[i], suffix);
        compare(what, sd->c, out[i], sd->gdt, row[i], ref, sd->lt, row[i], grad_tol(sd->c));
        free(ref);
    }
}

/* Forward and backward on host memory. */
static void side_host(side *sd)
{
    const tcase *c = sd->c;
    clvarlen_status st = clvarlen_mpi_cp_forward(sd->cp, sd->q, sd->k, sd->v, sd->o, sd->lse);
    CHECK(st == CLVARLEN_SUCCESS, "%s: forward: %s", c->label, clvarlen_mpi_last_error());
    check_o(sd, "o", sd->o, sd->lse);
    if (c->o_pad) /* bytes between strided rows are left as they were */
        for (size_t t = 0; t < sd->L; t++)
            CHECK(((unsigned char *)sd->o)[(t * sd->os + sd->ro) * sd->es] == 0x5a,
                  "%s: o padding written", c->label);
    clvarlen_mpi_cp_stats stats = {.struct_size = sizeof stats};
    CHECK(clvarlen_mpi_cp_get_stats(sd->cp, &stats) == CLVARLEN_SUCCESS, "stats");
    const int64_t rb = (int64_t)((sd->rk + sd->rv) * sd->es);
    CHECK(stats.bytes_received == (sd->w.t - sd->lt) * rb &&
              stats.bytes_sent == sd->lt * rb * (g_world - 1),
          "%s: stats: sent %lld received %lld", c->label, (long long)stats.bytes_sent,
          (long long)stats.bytes_received);
    clvarlen_attention_bwd_params g;
    clvarlen_attention_bwd_params_init(&g);
    g.grad_f32 = c->grad_f32;
    st = clvarlen_mpi_cp_backward(sd->cp, &g, sd->q, sd->k, sd->v, sd->o, sd->dout, sd->lse,
                                  sd->dq, sd->dk, sd->dv);
    CHECK(st == CLVARLEN_SUCCESS, "%s: backward: %s", c->label, clvarlen_mpi_last_error());
    void *const out[3] = {sd->dq, sd->dk, sd->dv};
    check_grads(sd, "", out);
}

#if CLVARLEN_HAVE_OPENCL
/* The same on device buffers (OpenCL contexts). */
static void side_cl(side *sd)
{
    cl_context clc;
    cl_device_id dev;
    cl_command_queue queue;
    if (clvarlen_context_get_cl(sd->ctx, &clc, &dev, &queue) != CLVARLEN_SUCCESS)
        return;
    const tcase *c = sd->c;
    const size_t L = sd->L, es = sd->es, ges = sd->ges;
    size_t sizes[] = {L * sd->qs * es,  L * sd->rk * es,  L * sd->rv * es,
                      L * sd->os * es,  4 * L * (size_t)c->hq, L * sd->ro * es,
                      L * sd->rq * ges, L * sd->rk * ges, L * sd->rv * ges};
    const void *init[] = {sd->q, sd->k, sd->v, NULL, NULL, sd->dout, NULL, NULL, NULL};
    cl_mem m[9];
    void *host[9];
    for (int i = 0; i < 9; i++) {
        cl_int e;
        m[i] = clCreateBuffer(clc, CL_MEM_READ_WRITE, sizes[i] + 64, NULL, &e);
        CHECK(m[i] != NULL, "clCreateBuffer %d", e);
        if (init[i] && sizes[i])
            clEnqueueWriteBuffer(queue, m[i], CL_TRUE, 0, sizes[i], init[i], 0, NULL, NULL);
        host[i] = xmalloc(sizes[i]);
    }
    clvarlen_status st =
        clvarlen_mpi_cp_forward_cl(sd->cp, m[0], 0, m[1], 0, m[2], 0, m[3], 0, m[4], 0);
    CHECK(st == CLVARLEN_SUCCESS, "%s: forward_cl: %s", c->label, clvarlen_mpi_last_error());
    clvarlen_attention_bwd_params g;
    clvarlen_attention_bwd_params_init(&g);
    g.grad_f32 = c->grad_f32;
    st = clvarlen_mpi_cp_backward_cl(sd->cp, &g, m[0], 0, m[1], 0, m[2], 0, m[3], 0, m[5], 0,
                                     m[4], 0, m[6], 0, m[7], 0, m[8], 0);
    CHECK(st == CLVARLEN_SUCCESS, "%s: backward_cl: %s", c->label, clvarlen_mpi_last_error());
    for (int i = 3; i < 9 && L; i++)
        clEnqueueReadBuffer(queue, m[i], CL_TRUE, 0, sizes[i], host[i], 0, NULL, NULL);
    if (L)
        check_o(sd, "o (cl_mem)", host[3], host[4]);
    void *const out[3] = {host[6], host[7], host[8]};
    check_grads(sd, " (cl_mem)", out);
    for (int i = 0; i < 9; i++) {
        if (m[i])
            clReleaseMemObject(m[i]);
        free(host[i]);
    }
}
#endif

static void run_case(clvarlen_context *ctx, const tcase *c)
{
    side sd;
    memset(&sd, 0, sizeof sd);
    sd.c = c;
    sd.ctx = ctx;
    side_params(&sd, c);
    make_whole(ctx, c, &sd.p, &sd.w);
    clvarlen_status st = clvarlen_mpi_cp_create(ctx, MPI_COMM_WORLD, &sd.p, sd.w.cu, sd.w.n, &sd.cp);
    CHECK(st == CLVARLEN_SUCCESS, "%s: create: %s", c->label, clvarlen_mpi_last_error());
    if (st) {
        free_whole(&sd.w);
        return;
    }
    side_shard(&sd);
    side_host(&sd);
#if CLVARLEN_HAVE_OPENCL
    side_cl(&sd);
#endif
    clvarlen_mpi_cp_destroy(sd.cp);
    void *all[] = {sd.gidx, sd.q, sd.k, sd.v, sd.dout, sd.o, sd.lse, sd.dq, sd.dk, sd.dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    free_whole(&sd.w);
}

/* ---- bad input on one rank: an error on every rank, nothing written */

/* The error cases' attention: f32, 2 query heads on 1 KV head, D 32, causal. */
static void small_params(clvarlen_attention_params *p)
{
    clvarlen_attention_params_init(p);
    p->dtype = CLVARLEN_DTYPE_F32;
    p->heads_q = 2;
    p->heads_kv = 1;
    p->head_dim = 32;
    p->causal = 1;
}

/* Bad input to create on one rank: an error on every rank, no handle. */
static void create_errors(clvarlen_context *ctx)
{
    clvarlen_attention_params p;
    small_params(&p);
    int32_t cu[] = {0, 5, 12, 12, 19};
    clvarlen_mpi_cp *cp = (clvarlen_mpi_cp *)&p; /* must stay untouched on error */
    const int last = g_world - 1;

    /* cu_seqlens differing on the last rank */
    int32_t cu_bad[] = {0, 5, 12, 12, 20};
    clvarlen_status st = clvarlen_mpi_cp_create(ctx, MPI_COMM_WORLD, &p,
                                                g_rank == last && g_world > 1 ? cu_bad : cu, 4, &cp);
    if (g_world > 1) {
        CHECK(st == CLVARLEN_ERROR_INVALID_ARGUMENT, "mismatched cu_seqlens: %s",
              clvarlen_status_name(st));
        CHECK(cp == (clvarlen_mpi_cp *)&p, "mismatched cu_seqlens: handle written");
        CHECK(strstr(clvarlen_mpi_last_error(), "same") != NULL, "message: %s",
              clvarlen_mpi_last_error());
    } else {
        CHECK(st == CLVARLEN_SUCCESS, "one rank: %s", clvarlen_mpi_last_error());
        clvarlen_mpi_cp_destroy(st == CLVARLEN_SUCCESS ? cp : NULL);
        cp = (clvarlen_mpi_cp *)&p;
    }
    /* dtype differing on the last rank */
    clvarlen_attention_params pb = p;
    if (g_rank == last && g_world > 1)
        pb.dtype = CLVARLEN_DTYPE_BF16;
    st = clvarlen_mpi_cp_create(ctx, MPI_COMM_WORLD, &pb, cu, 4, &cp);
    if (g_world > 1)
        CHECK(st == CLVARLEN_ERROR_INVALID_ARGUMENT && cp == (clvarlen_mpi_cp *)&p,
              "mismatched dtype: %s", clvarlen_status_name(st));
    else
        clvarlen_mpi_cp_destroy(st == CLVARLEN_SUCCESS ? cp : NULL);
    cp = (clvarlen_mpi_cp *)&p;
    /* a bad argument on rank 0 only: every rank gets the status, and the others name rank 0 */
    pb = p;
    if (g_rank == 0)
        pb.heads_kv = 3; /* 2 % 3 != 0 */
    st = clvarlen_mpi_cp_create(ctx, MPI_COMM_WORLD, &pb, cu, 4, &cp);
    CHECK(st == CLVARLEN_ERROR_INVALID_ARGUMENT && cp == (clvarlen_mpi_cp *)&p,
          "bad heads on rank 0: %s", clvarlen_status_name(st));
    if (g_rank > 0)
        CHECK(strstr(clvarlen_mpi_last_error(), "rank 0") != NULL, "message: %s",
              clvarlen_mpi_last_error());
    /* invalid cu_seqlens on every rank */
    int32_t cu_dec[] = {0, 5, 4, 12, 19};
    st = clvarlen_mpi_cp_create(ctx, MPI_COMM_WORLD, &p, cu_dec, 4, &cp);
    CHECK(st == CLVARLEN_ERROR_INVALID_CU_SEQLENS, "decreasing cu_seqlens: %s",
          clvarlen_status_name(st));
    st = clvarlen_mpi_cp_create(ctx, MPI_COMM_WORLD, NULL, cu, 4, &cp);
    CHECK(st == CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL params");
    /* params of the first released size (before dropout) are read as that, the
     * rest defaults; a struct_size below it is refused */
    pb = p;
    pb.struct_size = (uint32_t)CLVARLEN_ATTENTION_PARAMS_MIN_SIZE;
    pb.dropout_p = 2.0f; /* past the caller's struct: never read */
    st = clvarlen_mpi_cp_create(ctx, MPI_COMM_WORLD, &pb, cu, 4, &cp);
    CHECK(st == CLVARLEN_SUCCESS, "first-release params: %s", clvarlen_mpi_last_error());
    if (st == CLVARLEN_SUCCESS)
        clvarlen_mpi_cp_destroy(cp);
    cp = (clvarlen_mpi_cp *)&p;
    pb.struct_size = 3;
    st = clvarlen_mpi_cp_create(ctx, MPI_COMM_WORLD, &pb, cu, 4, &cp);
    CHECK(st == CLVARLEN_ERROR_INVALID_ARGUMENT && cp == (clvarlen_mpi_cp *)&p,
          "params struct_size 3: %s", clvarlen_status_name(st));
    st = clvarlen_mpi_cp_create(ctx, MPI_COMM_NULL, &p, cu, 4, &cp);
    CHECK(st == CLVARLEN_ERROR_INVALID_ARGUMENT, "MPI_COMM_NULL");
}

/* Bad input to the calls of a good handle: an error on every rank, nothing written. */
static void call_errors(clvarlen_context *ctx)
{
    clvarlen_attention_params p;
    small_params(&p);
    int32_t cu[] = {0, 5, 12, 12, 19};
    const int last = g_world - 1;
    clvarlen_mpi_cp *cp = NULL;
    clvarlen_status st;
    /* forward with a NULL q on the last rank: every rank fails, no o written */
    st = clvarlen_mpi_cp_create(ctx, MPI_COMM_WORLD, &p, cu, 4, &cp);
    CHECK(st == CLVARLEN_SUCCESS, "create: %s", clvarlen_mpi_last_error());
    if (st)
        return;
    int64_t lt = 0;
    clvarlen_mpi_cp_local_tokens(cp, &lt);
    const size_t L = (size_t)lt;
    float *q = xmalloc(sizeof(float) * L * 64), *k = xmalloc(sizeof(float) * L * 32);
    float *v = xmalloc(sizeof(float) * L * 32), *o = xmalloc(sizeof(float) * L * 64);
    float *lse = xmalloc(sizeof(float) * L * 2);
    tu_rng r = tu_rng_make(7);
    tu_fill_random(&r, q, CLVARLEN_DTYPE_F32, L * 64, 1);
    tu_fill_random(&r, k, CLVARLEN_DTYPE_F32, L * 32, 1);
    tu_fill_random(&r, v, CLVARLEN_DTYPE_F32, L * 32, 1);
    memset(o, 0x77, sizeof(float) * L * 64);
    memset(lse, 0x77, sizeof(float) * L * 2);
    const bool null_here = g_rank == last && lt > 0;
    int any_null = 0, mine = null_here;
    MPI_Allreduce(&mine, &any_null, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    st = clvarlen_mpi_cp_forward(cp, null_here ? NULL : q, k, v, o, lse);
    if (any_null) {
        CHECK(st == CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL q on the last rank: %s",
              clvarlen_status_name(st));
        int intact = 1;
        for (size_t i = 0; i < L * 64 * sizeof(float); i++)
            intact &= ((unsigned char *)o)[i] == 0x77;
        for (size_t i = 0; i < L * 2 * sizeof(float); i++)
            intact &= ((unsigned char *)lse)[i] == 0x77;
        CHECK(intact, "o or lse written on error");
    }
    /* o overlapping q on rank 0 */
    st = clvarlen_mpi_cp_forward(cp, q, k, v, g_rank == 0 && lt ? q : o, lse);
    {
        int bad = g_rank == 0 && lt > 0, anyb = 0;
        MPI_Allreduce(&bad, &anyb, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (anyb)
            CHECK(st == CLVARLEN_ERROR_INVALID_ARGUMENT, "o overlapping q: %s",
                  clvarlen_status_name(st));
    }
    /* a good call, then a backward with a bad bwd struct size on rank 0 */
    st = clvarlen_mpi_cp_forward(cp, q, k, v, o, lse);
    CHECK(st == CLVARLEN_SUCCESS, "forward: %s", clvarlen_mpi_last_error());
    clvarlen_attention_bwd_params g;
    clvarlen_attention_bwd_params_init(&g);
    if (g_rank == 0)
        g.struct_size = 3;
    float *dq = xmalloc(sizeof(float) * L * 64), *dk = xmalloc(sizeof(float) * L * 32);
    float *dv = xmalloc(sizeof(float) * L * 32);
    memset(dk, 0x77, sizeof(float) * L * 32);
    st = clvarlen_mpi_cp_backward(cp, &g, q, k, v, o, o, lse, dq, dk, dv);
    CHECK(st == CLVARLEN_ERROR_INVALID_ARGUMENT, "bad bwd on rank 0: %s", clvarlen_status_name(st));
    int intact = 1;
    for (size_t i = 0; i < L * 32 * sizeof(float); i++)
        intact &= ((unsigned char *)dk)[i] == 0x77;
    CHECK(intact, "dk written on error");
#if CLVARLEN_HAVE_OPENCL
    /* the cl_mem entry points on the CPU fallback: NO_OPENCL on every rank */
    cl_context clc;
    cl_device_id dev;
    cl_command_queue queue;
    if (clvarlen_context_get_cl(ctx, &clc, &dev, &queue) != CLVARLEN_SUCCESS) {
        st = clvarlen_mpi_cp_forward_cl(cp, NULL, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0);
        CHECK(st == CLVARLEN_ERROR_NO_OPENCL, "forward_cl on the CPU fallback: %s",
              clvarlen_status_name(st));
    } else {
        /* a buffer too small on the last rank */
        cl_int e;
        const size_t qb = sizeof(float) * (L * 64 + 16), kb = sizeof(float) * (L * 32 + 16);
        cl_mem tiny = clCreateBuffer(clc, CL_MEM_READ_WRITE, 16, NULL, &e);
        cl_mem bq = clCreateBuffer(clc, CL_MEM_READ_WRITE, qb, NULL, &e);
        cl_mem bk = clCreateBuffer(clc, CL_MEM_READ_WRITE, kb, NULL, &e);
        cl_mem bv = clCreateBuffer(clc, CL_MEM_READ_WRITE, kb, NULL, &e);
        cl_mem bo = clCreateBuffer(clc, CL_MEM_READ_WRITE, qb, NULL, &e);
        st = clvarlen_mpi_cp_forward_cl(cp, g_rank == last ? tiny : bq, 0, bk, 0, bv, 0, bo, 0,
                                        NULL, 0);
        int lt_last = g_rank == last ? (int)lt : 0, any_lt = 0;
        MPI_Allreduce(&lt_last, &any_lt, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (any_lt)
            CHECK(st == CLVARLEN_ERROR_BUFFER_TOO_SMALL, "tiny q on the last rank: %s",
                  clvarlen_status_name(st));
        /* o in q's bytes on rank 0: an error on every rank */
        int lt0 = g_rank == 0 ? (int)lt : 0, any0 = 0;
        MPI_Allreduce(&lt0, &any0, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        st = clvarlen_mpi_cp_forward_cl(cp, bq, 0, bk, 0, bv, 0, g_rank == 0 ? bq : bo, 0, NULL, 0);
        if (any0)
            CHECK(st == CLVARLEN_ERROR_INVALID_ARGUMENT && (g_rank > 0 ||
                      strstr(clvarlen_mpi_last_error(), "overlaps") != NULL),
                  "o overlapping q (cl_mem) on rank 0: %s", clvarlen_status_name(st));
        clReleaseMemObject(bq);
        clReleaseMemObject(bk);
        clReleaseMemObject(bv);
        clReleaseMemObject(bo);
        clReleaseMemObject(tiny);
    }
#endif
    void *all[] = {q, k, v, o, lse, dq, dk, dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    clvarlen_mpi_cp_destroy(cp);
}

int main(int argc, char **argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world);
    const char *spec = argc > 1 ? argv[1] : "cpu";
    clvarlen_options *opt = NULL;
    clvarlen_context *ctx = NULL;
    clvarlen_options_create(&opt);
    clvarlen_options_set_device(opt, spec);
    clvarlen_options_set_threads(opt, 1); /* ranks share this machine's cores */
    clvarlen_status st = clvarlen_context_create(opt, &ctx);
    clvarlen_options_destroy(opt);
    if (st) {
        fprintf(stderr, "rank %d: no context on '%s': %s\n", g_rank, spec,
                clvarlen_status_name(st));
        MPI_Finalize();
        return st == CLVARLEN_ERROR_DEVICE_NOT_FOUND ? 77 : 1; /* 77: skipped */
    }
    if (g_rank == 0)
        printf("test-cp-mpi: %d ranks on '%s'\n", g_world, spec);

    static const int32_t shorter[] = {1, 0, 3, 2 * 4 - 1, 5};
    static const int32_t long_odd[] = {131, 67};
    static const int32_t tiny[] = {1};
    const tcase cases[] = {
        {"f32 causal GQA", CLVARLEN_DTYPE_F32, 4, 2, 32, 32, 1, -1, -1, 0, 1, 0, 0, 0, NULL, 11},
        {"f32 full", CLVARLEN_DTYPE_F32, 2, 2, 64, 64, 0, -1, -1, 0, 1, 0, 0, 0, NULL, 12},
        {"bf16 causal window softcap", CLVARLEN_DTYPE_BF16, 4, 1, 32, 32, 1, 17, 0, 5.0f, 0, 0, 0,
         0, NULL, 13},
        {"f16 causal, strided q/o", CLVARLEN_DTYPE_F16, 2, 1, 32, 64, 1, -1, -1, 0, 1, 8, 16, 0,
         NULL, 14},
        {"f32 documents shorter than 2W", CLVARLEN_DTYPE_F32, 2, 1, 32, 32, 1, -1, -1, 0, 1, 0, 0,
         5, shorter, 15},
        {"bf16 long odd documents", CLVARLEN_DTYPE_BF16, 4, 2, 64, 64, 1, -1, -1, 0, 0, 0, 0, 2,
         long_odd, 16},
        {"f32 one token (empty ranks)", CLVARLEN_DTYPE_F32, 2, 1, 32, 32, 1, -1, -1, 0, 1, 0, 0, 1,
         tiny, 17},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(ctx, &cases[i]);
    create_errors(ctx);
    call_errors(ctx);

    int fails = 0, checks = 0;
    MPI_Allreduce(&g_fail, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&g_checks, &checks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("test-cp-mpi: %d ranks, %d checks, %d failed\n", g_world, checks, fails);
    clvarlen_context_destroy(ctx);
    MPI_Finalize();
    return fails ? 1 : 0;
}

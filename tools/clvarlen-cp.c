/* clvarlen-cp: the per-document context-parallel attention layer of the seed
 * notebook over MPI (libclvarlen-mpi), timed. Run it under mpirun:
 *
 *   mpirun -np N clvarlen-cp [--device SPEC] [--docs 16] [--tokens 16384]
 *       [--heads-q 32] [--heads-kv 8] [--dim 128] [--dtype bf16|f16|f32]
 *       [--no-causal] [--backward] [--iters 10] [--seed 1]
 *
 * Lengths come from gen_seq_lens (SPEC 2.6). Every rank shards the batch
 * head-tail (SPEC 2.5), runs the CP forward (and with --backward the CP
 * backward) `iters` times after one warm-up, and reports its median time,
 * the time in MPI, and the bytes it sent and received. Rank 0 first runs the
 * unsharded layer on the whole batch alone (the 1-rank time; the other ranks
 * wait) and prints the speedup and efficiency of N ranks against it. Each
 * rank's outputs are checked against that unsharded run on its own device
 * (SPEC 4 tolerances; a mismatch makes the exit status 1).
 *
 * On an OpenCL device the tensors live in device memory (the cl_mem entry
 * points); on the CPU fallback, in host memory. SPEC is a clvarlen device spec;
 * "%r" in it stands for the rank's index among the ranks on its host (one GPU
 * per rank: --device %r with one device per rank listed by clvarlen-test list).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#if CLVARLEN_HAVE_OPENCL
#  include <clvarlen/clvarlen-cl.h>
#endif
#include <clvarlen/clvarlen-mpi.h>

#include "kit.h"

typedef struct opts {
    const char *device;
    int docs, hq, hk, d, iters, causal, backward;
    int64_t tokens;
    uint64_t seed;
    clvarlen_dtype dtype;
} opts;

static int g_rank, g_world;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "clvarlen-cp (rank %d): ", g_rank);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die("out of host memory");
    return p;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void parse(int argc, char **argv, opts *o)
{
    *o = (opts){.device = NULL, .docs = 16, .hq = 32, .hk = 8, .d = 128, .iters = 10,
                .causal = 1, .tokens = 16384, .seed = 1, .dtype = CLVARLEN_DTYPE_BF16};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-causal")) {
            o->causal = 0;
            continue;
        }
        if (!strcmp(a, "--backward")) {
            o->backward = 1;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            if (g_rank == 0)
                printf("usage: mpirun -np N clvarlen-cp [--device SPEC] [--docs N] [--tokens T] "
                       "[--heads-q H] [--heads-kv H] [--dim D] [--dtype bf16|f16|f32] "
                       "[--no-causal] [--backward] [--iters K] [--seed S]\n");
            MPI_Finalize();
            exit(0);
        }
        if (!v)
            die("%s needs a value", a);
        i++;
        if (!strcmp(a, "--device"))
            o->device = v;
        else if (!strcmp(a, "--docs"))
            o->docs = atoi(v);
        else if (!strcmp(a, "--tokens"))
            o->tokens = atoll(v);
        else if (!strcmp(a, "--heads-q"))
            o->hq = atoi(v);
        else if (!strcmp(a, "--heads-kv"))
            o->hk = atoi(v);
        else if (!strcmp(a, "--dim"))
            o->d = atoi(v);
        else if (!strcmp(a, "--iters"))
            o->iters = atoi(v);
        else if (!strcmp(a, "--seed"))
            o->seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--dtype"))
            o->dtype = !strcmp(v, "f32")   ? CLVARLEN_DTYPE_F32
                       : !strcmp(v, "f16") ? CLVARLEN_DTYPE_F16
                       : !strcmp(v, "bf16") ? CLVARLEN_DTYPE_BF16
                                            : CLVARLEN_DTYPE_F64; /* refused below */
        else
            die("unknown option %s (--help)", a);
    }
    if (o->dtype == CLVARLEN_DTYPE_F64)
        die("--dtype takes bf16, f16 or f32");
    if (o->docs < 1 || o->tokens < 0 || o->iters < 1)
        die("bad sizes");
}

/* The device spec with "%r" replaced by the rank's index on its host. */
static void device_spec(const char *in, char *out, size_t n)
{
    MPI_Comm node;
    int local = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    size_t j = 0;
    for (size_t i = 0; in[i] && j + 12 < n; i++) {
        if (in[i] == '%' && in[i + 1] == 'r') {
            j += (size_t)snprintf(out + j, n - j, "%d", local);
            i++;
        } else {
            out[j++] = in[i];
        }
    }
    out[j] = 0;
}

/* ---- tensors that live where the context computes */
typedef struct tensor {
    void *host;
#if CLVARLEN_HAVE_OPENCL
    cl_mem mem;
#endif
    size_t bytes;
} tensor;

static int g_on_cl;
#if CLVARLEN_HAVE_OPENCL
static cl_context g_clc;
static cl_command_queue g_queue;
#endif

static tensor t_new(size_t bytes, const void *init)
{
    tensor t = {.bytes = bytes};
#if CLVARLEN_HAVE_OPENCL
    if (g_on_cl) {
        cl_int e;
        t.mem = clCreateBuffer(g_clc, CL_MEM_READ_WRITE, bytes ? bytes : 64, NULL, &e);
        if (!t.mem)
            die("device buffer: out of memory");
        if (init && bytes)
            clEnqueueWriteBuffer(g_queue, t.mem, CL_TRUE, 0, bytes, init, 0, NULL, NULL);
        return t;
    }
#endif
    t.host = xmalloc(bytes);
    if (init)
        memcpy(t.host, init, bytes);
    return t;
}

/* A host copy of the tensor (the caller frees it). */
static void *t_read(const tensor *t)
{
    void *h = xmalloc(t->bytes);
#if CLVARLEN_HAVE_OPENCL
    if (g_on_cl) {
        if (t->bytes)
            clEnqueueReadBuffer(g_queue, t->mem, CL_TRUE, 0, t->bytes, h, 0, NULL, NULL);
        return h;
    }
#endif
    memcpy(h, t->host, t->bytes);
    return h;
}

static void t_free(tensor *t)
{
#if CLVARLEN_HAVE_OPENCL
    if (t->mem)
        clReleaseMemObject(t->mem);
#endif
    free(t->host);
}

/* ---- the unsharded layer on rank 0's device (the 1-rank time and the check) */
typedef struct layer {
    clvarlen_attention_params p;
    tensor q, k, v, o, lse, dout, dq, dk, dv, cu, lcu, pos;
} layer;

static clvarlen_status run_whole(clvarlen_context *ctx, layer *w, int backward)
{
    clvarlen_attention_bwd_params g;
    clvarlen_attention_bwd_params_init(&g);
    g.grad_f32 = 1;
    clvarlen_status st;
#if CLVARLEN_HAVE_OPENCL
    if (g_on_cl) {
        st = clvarlen_cl_attention_forward(ctx, &w->p, w->q.mem, 0, w->k.mem, 0, w->v.mem, 0,
                                           w->cu.mem, 0, w->cu.mem, 0, NULL, 0, w->o.mem, 0,
                                           w->lse.mem, 0, 0, NULL, NULL);
        if (!st && backward)
            st = clvarlen_cl_attention_backward(
                ctx, &w->p, &g, w->q.mem, 0, w->k.mem, 0, w->v.mem, 0, w->o.mem, 0, w->dout.mem,
                0, w->lse.mem, 0, w->cu.mem, 0, w->cu.mem, 0, NULL, 0, w->dq.mem, 0, w->dk.mem, 0,
                w->dv.mem, 0, 0, NULL, NULL);
        clFinish(g_queue);
        return st;
    }
#endif
    st = clvarlen_attention_forward(ctx, &w->p, w->q.host, w->k.host, w->v.host, w->cu.host,
                                    w->cu.host, NULL, w->o.host, w->lse.host);
    if (!st && backward)
        st = clvarlen_attention_backward(ctx, &w->p, &g, w->q.host, w->k.host, w->v.host,
                                         w->o.host, w->dout.host, w->lse.host, w->cu.host,
                                         w->cu.host, NULL, w->dq.host, w->dk.host, w->dv.host);
    return st;
}

static clvarlen_status run_fwd(clvarlen_mpi_cp *cp, layer *l)
{
#if CLVARLEN_HAVE_OPENCL
    if (g_on_cl)
        return clvarlen_mpi_cp_forward_cl(cp, l->q.mem, 0, l->k.mem, 0, l->v.mem, 0, l->o.mem, 0,
                                          l->lse.mem, 0);
#endif
    return clvarlen_mpi_cp_forward(cp, l->q.host, l->k.host, l->v.host, l->o.host, l->lse.host);
}

static clvarlen_status run_bwd(clvarlen_mpi_cp *cp, layer *l)
{
    clvarlen_attention_bwd_params g;
    clvarlen_attention_bwd_params_init(&g);
    g.grad_f32 = 1;
#if CLVARLEN_HAVE_OPENCL
    if (g_on_cl)
        return clvarlen_mpi_cp_backward_cl(cp, &g, l->q.mem, 0, l->k.mem, 0, l->v.mem, 0,
                                           l->o.mem, 0, l->dout.mem, 0, l->lse.mem, 0, l->dq.mem,
                                           0, l->dk.mem, 0, l->dv.mem, 0);
#endif
    return clvarlen_mpi_cp_backward(cp, &g, l->q.host, l->k.host, l->v.host, l->o.host,
                                    l->dout.host, l->lse.host, l->dq.host, l->dk.host, l->dv.host);
}

/* Relative L2 error of this rank's rows of a [rows, row] tensor against the
 * unsharded one's rows picked by gidx. */
static double rows_err(const void *mine, const void *whole, clvarlen_dtype dt, size_t row,
                       const int32_t *gidx, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++)
        for (size_t e = 0; e < row; e++) {
            double a = tu_get(mine, dt, (size_t)i * row + e);
            double b = tu_get(whole, dt, (size_t)gidx[i] * row + e);
            num += (a - b) * (a - b);
            den += b * b;
        }
    double r = den > 0 ? sqrt(num / den) : sqrt(num);
    return isnan(r) ? INFINITY : r;
}

int main(int argc, char **argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world);
    opts o;
    parse(argc, argv, &o);

    char spec[256] = "";
    if (o.device)
        device_spec(o.device, spec, sizeof spec);
    clvarlen_options *opt = NULL;
    clvarlen_context *ctx = NULL;
    clvarlen_options_create(&opt);
    if (o.device)
        clvarlen_options_set_device(opt, spec);
    if (clvarlen_context_create(opt, &ctx) != CLVARLEN_SUCCESS)
        die("no context on device '%s'", spec);
    clvarlen_options_destroy(opt);
    clvarlen_device_info info = {0};
    clvarlen_context_device(ctx, &info);
#if CLVARLEN_HAVE_OPENCL
    cl_device_id dev;
    g_on_cl = clvarlen_context_get_cl(ctx, &g_clc, &dev, &g_queue) == CLVARLEN_SUCCESS;
#endif

    /* The batch: gen_seq_lens lengths, random inputs, the same on every rank. */
    int32_t *len = xmalloc(sizeof(int32_t) * (size_t)o.docs);
    int32_t *cu = xmalloc(sizeof(int32_t) * (size_t)(o.docs + 1));
    if (clvarlen_gen_seq_lens(ctx, o.seed, 1, o.docs, o.tokens, len))
        die("gen_seq_lens: %s", clvarlen_last_error(ctx));
    tu_cu_from_lengths(len, o.docs, cu);
    const int64_t T = cu[o.docs];
    const clvarlen_dtype dt = o.dtype;
    const size_t es = clvarlen_dtype_size(dt);
    const size_t rq = (size_t)o.hq * (size_t)o.d, rk = (size_t)o.hk * (size_t)o.d;

    layer w;
    memset(&w, 0, sizeof w);
    clvarlen_attention_params_init(&w.p);
    w.p.dtype = dt;
    w.p.heads_q = o.hq;
    w.p.heads_kv = o.hk;
    w.p.head_dim = o.d;
    w.p.causal = o.causal;
    w.p.n_seqs = o.docs;
    w.p.total_q = w.p.total_k = T;

    clvarlen_mpi_cp *cp = NULL;
    if (clvarlen_mpi_cp_create(ctx, MPI_COMM_WORLD, &w.p, cu, o.docs, &cp))
        die("clvarlen_mpi_cp_create: %s", clvarlen_mpi_last_error());
    int64_t lt = 0;
    clvarlen_mpi_cp_local_tokens(cp, &lt);
    int32_t *gidx = xmalloc(sizeof(int32_t) * (size_t)(lt + 1));
    int32_t *lcu = xmalloc(sizeof(int32_t) * (size_t)(o.docs + 1));
    clvarlen_cp_plan_out plan;
    memset(&plan, 0, sizeof plan);
    plan.local_cu_seqlens = lcu;
    plan.global_index = gidx;
    plan.capacity = lt;
    if (clvarlen_cp_plan(ctx, cu, o.docs, g_world, g_rank, &plan))
        die("cp_plan: %s", clvarlen_last_error(ctx));

    /* Whole-batch inputs (host), this rank's shard of them. */
    tu_rng r = tu_rng_make(o.seed * 7919u + 1);
    void *hq = xmalloc((size_t)T * rq * es), *hk = xmalloc((size_t)T * rk * es);
    void *hv = xmalloc((size_t)T * rk * es), *hdo = xmalloc((size_t)T * rq * es);
    tu_fill_random(&r, hq, dt, (size_t)T * rq, 1.0);
    tu_fill_random(&r, hk, dt, (size_t)T * rk, 1.0);
    tu_fill_random(&r, hv, dt, (size_t)T * rk, 1.0);
    tu_fill_random(&r, hdo, dt, (size_t)T * rq, 1.0);
    w.q = t_new((size_t)T * rq * es, hq);
    w.k = t_new((size_t)T * rk * es, hk);
    w.v = t_new((size_t)T * rk * es, hv);
    w.dout = t_new((size_t)T * rq * es, hdo);
    w.o = t_new((size_t)T * rq * es, NULL);
    w.lse = t_new(4 * (size_t)T * (size_t)o.hq, NULL);
    w.dq = t_new(4 * (size_t)T * rq, NULL);
    w.dk = t_new(4 * (size_t)T * rk, NULL);
    w.dv = t_new(4 * (size_t)T * rk, NULL);
    w.cu = t_new(sizeof(int32_t) * (size_t)(o.docs + 1), cu);

    layer l;
    memset(&l, 0, sizeof l);
    {
        void *sq = xmalloc((size_t)lt * rq * es), *sk = xmalloc((size_t)lt * rk * es);
        void *sv = xmalloc((size_t)lt * rk * es), *sdo = xmalloc((size_t)lt * rq * es);
        clvarlen_cp_gather(ctx, dt, (int64_t)rq, hq, 0, cu, o.docs, g_world, g_rank, sq, 0, lt);
        clvarlen_cp_gather(ctx, dt, (int64_t)rk, hk, 0, cu, o.docs, g_world, g_rank, sk, 0, lt);
        clvarlen_cp_gather(ctx, dt, (int64_t)rk, hv, 0, cu, o.docs, g_world, g_rank, sv, 0, lt);
        clvarlen_cp_gather(ctx, dt, (int64_t)rq, hdo, 0, cu, o.docs, g_world, g_rank, sdo, 0, lt);
        l.q = t_new((size_t)lt * rq * es, sq);
        l.k = t_new((size_t)lt * rk * es, sk);
        l.v = t_new((size_t)lt * rk * es, sv);
        l.dout = t_new((size_t)lt * rq * es, sdo);
        free(sq);
        free(sk);
        free(sv);
        free(sdo);
    }
    free(hq);
    free(hk);
    free(hv);
    free(hdo);
    l.o = t_new((size_t)lt * rq * es, NULL);
    l.lse = t_new(4 * (size_t)lt * (size_t)o.hq, NULL);
    l.dq = t_new(4 * (size_t)lt * rq, NULL);
    l.dk = t_new(4 * (size_t)lt * rk, NULL);
    l.dv = t_new(4 * (size_t)lt * rk, NULL);

    /* Flops of the layer (causal: the visible half, as the attention bench counts). */
    double flops = 0;
    for (int s = 0; s < o.docs; s++) {
        double L = len[s];
        flops += 4.0 * o.hq * o.d * (o.causal ? L * (L + 1) / 2 : L * L);
    }
    if (o.backward)
        flops *= 3.5; /* forward + backward (2.5x the forward's products) */

    /* 1-rank time: rank 0 alone on the whole batch (others wait), then every
     * rank computes the unsharded result it checks against. */
    double t1 = 0;
    int bad = 0;
    if (g_rank == 0) {
        if (run_whole(ctx, &w, o.backward))
            die("unsharded layer: %s", clvarlen_last_error(ctx));
        double *ts = xmalloc(sizeof(double) * (size_t)o.iters);
        for (int i = 0; i < o.iters; i++) {
            double t = MPI_Wtime();
            run_whole(ctx, &w, o.backward);
            ts[i] = MPI_Wtime() - t;
        }
        t1 = median(ts, o.iters);
        free(ts);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank != 0 && run_whole(ctx, &w, o.backward))
        die("unsharded layer: %s", clvarlen_last_error(ctx));

    /* The CP layer: one warm-up, then iters timed calls (a barrier before each). */
    if (run_fwd(cp, &l) || (o.backward && run_bwd(cp, &l)))
        die("CP layer: %s", clvarlen_mpi_last_error());
    double *ts = xmalloc(sizeof(double) * (size_t)o.iters);
    double *tx = xmalloc(sizeof(double) * (size_t)o.iters);
    clvarlen_mpi_cp_stats st = {.struct_size = sizeof st};
    int64_t sent = 0, recv = 0;
    for (int i = 0; i < o.iters; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        if (run_fwd(cp, &l))
            die("CP forward: %s", clvarlen_mpi_last_error());
        clvarlen_mpi_cp_get_stats(cp, &st);
        double ex = st.exchange_seconds;
        sent = st.bytes_sent;
        recv = st.bytes_received;
        if (o.backward) {
            if (run_bwd(cp, &l))
                die("CP backward: %s", clvarlen_mpi_last_error());
            clvarlen_mpi_cp_get_stats(cp, &st);
            ex += st.exchange_seconds;
            sent += st.bytes_sent;
            recv += st.bytes_received;
        }
        ts[i] = MPI_Wtime() - t;
        tx[i] = ex;
    }
    double tn = median(ts, o.iters), txm = median(tx, o.iters);

    /* Check this rank's rows against the unsharded run. */
    void *mo = t_read(&l.o), *wo = t_read(&w.o);
    double e_o = rows_err(mo, wo, dt, rq, gidx, lt);
    double tol = tu_tolerance(dt), e_g = 0;
    free(mo);
    free(wo);
    if (e_o > tol)
        bad = 1;
    if (o.backward) {
        tensor *mine[] = {&l.dq, &l.dk, &l.dv}, *whole[] = {&w.dq, &w.dk, &w.dv};
        size_t rows[] = {rq, rk, rk};
        for (int i = 0; i < 3; i++) {
            void *a = t_read(mine[i]), *b = t_read(whole[i]);
            double e = rows_err(a, b, CLVARLEN_DTYPE_F32, rows[i], gidx, lt);
            e_g = e > e_g ? e : e_g;
            free(a);
            free(b);
        }
        if (e_g > 1e-3)
            bad = 1;
    }

    /* Report: rank 0 prints every rank's line in order, then the summary. */
    double mine_line[8] = {(double)lt, tn, txm, (double)sent, (double)recv, e_o, e_g, bad};
    double *all = g_rank == 0 ? xmalloc(sizeof(double) * 8 * (size_t)g_world) : NULL;
    MPI_Gather(mine_line, 8, MPI_DOUBLE, all, 8, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    int any_bad = 0;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (g_rank == 0) {
        printf("clvarlen-cp: %d ranks, device %s, %s, %d documents / %lld tokens, Hq %d, Hk %d, "
               "D %d, %s, %s\n",
               g_world, info.device_name, clvarlen_dtype_name(dt), o.docs, (long long)T, o.hq, o.hk,
               o.d, o.causal ? "causal" : "full", o.backward ? "forward+backward" : "forward");
        printf("1 rank (unsharded, rank 0 alone): %.3f ms, %.1f TFLOP/s\n", t1 * 1e3,
               flops / t1 * 1e-12);
        double worst = 0;
        for (int r2 = 0; r2 < g_world; r2++) {
            const double *x = all + 8 * r2;
            worst = x[1] > worst ? x[1] : worst;
            printf("rank %d: %lld tokens, %.3f ms per layer, %.3f ms in MPI, sent %.1f MB, "
                   "received %.1f MB (%.2f GB/s in MPI), rel err o %.2e, %s\n",
                   r2, (long long)x[0], x[1] * 1e3, x[2] * 1e3, x[3] * 1e-6, x[4] * 1e-6,
                   x[2] > 0 ? x[4] / x[2] * 1e-9 : 0.0, x[5], x[7] ? "MISMATCH" : "ok");
            if (o.backward)
                printf("        gradients rel err %.2e\n", x[6]);
        }
        printf("%d ranks: %.3f ms per layer (slowest rank), speedup %.2fx over 1 rank, "
               "efficiency %.2f\n",
               g_world, worst * 1e3, t1 / worst, t1 / worst / g_world);
        free(all);
    }
    free(ts);
    free(tx);
    tensor *ts_all[] = {&w.q, &w.k, &w.v, &w.o, &w.lse, &w.dout, &w.dq, &w.dk, &w.dv, &w.cu,
                        &l.q, &l.k, &l.v, &l.o, &l.lse, &l.dout, &l.dq, &l.dk, &l.dv};
    for (size_t i = 0; i < sizeof ts_all / sizeof ts_all[0]; i++)
        t_free(ts_all[i]);
    free(gidx);
    free(lcu);
    free(len);
    free(cu);
    clvarlen_mpi_cp_destroy(cp);
    clvarlen_context_destroy(ctx);
    MPI_Finalize();
    return any_bad ? 1 : 0;
}

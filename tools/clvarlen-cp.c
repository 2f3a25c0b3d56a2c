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
    int docs, hq, hk, d, iters, causal, backward, probe;
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
        if (!strcmp(a, "--probe")) {
            o->probe = 1;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            if (g_rank == 0)
                printf("usage: mpirun -np N clvarlen-cp [--device SPEC] [--docs N] [--tokens T] "
                       "[--heads-q H] [--heads-kv H] [--dim D] [--dtype bf16|f16|f32] "
                       "[--no-causal] [--backward] [--probe] [--iters K] [--seed S]\n");
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

/* ---- one run: the batch, its unsharded layer and this rank's shard */
typedef struct run {
    opts o;
    clvarlen_context *ctx;
    clvarlen_mpi_cp *cp;
    int32_t *len, *cu, *gidx;
    int64_t total, local;
    size_t es, rq, rk;
    layer w, l; /* the whole batch, this rank's shard */
    double flops;
} run;

static clvarlen_context *open_context(const opts *o, clvarlen_device_info *info)
{
    char spec[256] = "";
    if (o->device)
        device_spec(o->device, spec, sizeof spec);
    clvarlen_options *opt = NULL;
    clvarlen_context *ctx = NULL;
    clvarlen_options_create(&opt);
    if (o->device)
        clvarlen_options_set_device(opt, spec);
    if (clvarlen_context_create(opt, &ctx) != CLVARLEN_SUCCESS)
        die("no context on device '%s'", spec);
    clvarlen_options_destroy(opt);
    clvarlen_context_device(ctx, info);
#if CLVARLEN_HAVE_OPENCL
    cl_device_id dev;
    g_on_cl = clvarlen_context_get_cl(ctx, &g_clc, &dev, &g_queue) == CLVARLEN_SUCCESS;
#endif
    return ctx;
}

/* gen_seq_lens lengths, the attention's params, the CP handle and this
 * rank's plan; the layer's flops (causal: the visible half, as the attention
 * bench counts; forward + backward: 3.5x the forward). */
static void plan_run(run *r)
{
    const opts *o = &r->o;
    r->len = xmalloc(sizeof(int32_t) * (size_t)o->docs);
    r->cu = xmalloc(sizeof(int32_t) * (size_t)(o->docs + 1));
    if (clvarlen_gen_seq_lens(r->ctx, o->seed, 1, o->docs, o->tokens, r->len))
        die("gen_seq_lens: %s", clvarlen_last_error(r->ctx));
    tu_cu_from_lengths(r->len, o->docs, r->cu);
    r->total = r->cu[o->docs];
    r->es = clvarlen_dtype_size(o->dtype);
    r->rq = (size_t)o->hq * (size_t)o->d;
    r->rk = (size_t)o->hk * (size_t)o->d;
    clvarlen_attention_params *p = &r->w.p;
    clvarlen_attention_params_init(p);
    p->dtype = o->dtype;
    p->heads_q = o->hq;
    p->heads_kv = o->hk;
    p->head_dim = o->d;
    p->causal = o->causal;
    p->n_seqs = o->docs;
    p->total_q = p->total_k = r->total;
    if (clvarlen_mpi_cp_create(r->ctx, MPI_COMM_WORLD, p, r->cu, o->docs, &r->cp))
        die("clvarlen_mpi_cp_create: %s", clvarlen_mpi_last_error());
    clvarlen_mpi_cp_local_tokens(r->cp, &r->local);
    r->gidx = xmalloc(sizeof(int32_t) * (size_t)(r->local + 1));
    int32_t *lcu = xmalloc(sizeof(int32_t) * (size_t)(o->docs + 1));
    clvarlen_cp_plan_out plan;
    memset(&plan, 0, sizeof plan);
    plan.local_cu_seqlens = lcu;
    plan.global_index = r->gidx;
    plan.capacity = r->local;
    if (clvarlen_cp_plan(r->ctx, r->cu, o->docs, g_world, g_rank, &plan))
        die("cp_plan: %s", clvarlen_last_error(r->ctx));
    free(lcu);
    for (int s = 0; s < o->docs; s++) {
        double L = r->len[s];
        r->flops += 4.0 * o->hq * o->d * (o->causal ? L * (L + 1) / 2 : L * L);
    }
    if (o->backward)
        r->flops *= 3.5;
}

/* This rank's shard of a whole-batch host tensor, as a tensor. */
static tensor shard(run *r, const void *whole, size_t row)
{
    void *h = xmalloc((size_t)r->local * row * r->es);
    if (clvarlen_cp_gather(r->ctx, r->o.dtype, (int64_t)row, whole, 0, r->cu, r->o.docs, g_world,
                           g_rank, h, 0, r->local))
        die("cp_gather: %s", clvarlen_last_error(r->ctx));
    tensor t = t_new((size_t)r->local * row * r->es, h);
    free(h);
    return t;
}

/* n random elements: a pool of random values (the same on every rank) laid
 * out at shifting offsets, which fills gigabytes in a moment. */
static void fill(void *p, clvarlen_dtype dt, size_t n, const void *pool, size_t pool_n)
{
    const size_t es = clvarlen_dtype_size(dt), chunk = 4096;
    for (size_t at = 0, i = 0; at < n; at += chunk, i++) {
        size_t m = n - at < chunk ? n - at : chunk, from = (i * 7919u) % (pool_n - chunk);
        memcpy((char *)p + at * es, (const char *)pool + from * es, m * es);
    }
}

/* Random inputs (the same on every rank), the whole batch's tensors and this rank's. */
static void make_tensors(run *r)
{
    const size_t T = (size_t)r->total, L = (size_t)r->local, es = r->es, rq = r->rq, rk = r->rk;
    const clvarlen_dtype dt = r->o.dtype;
    tu_rng g = tu_rng_make(r->o.seed * 7919u + 1);
    const size_t pool_n = (size_t)1 << 20;
    void *pool = xmalloc(pool_n * es);
    tu_fill_random(&g, pool, dt, pool_n, 1.0);
    void *h[4];
    size_t rows[4] = {rq, rk, rk, rq};
    for (int i = 0; i < 4; i++) {
        h[i] = xmalloc(T * rows[i] * es);
        fill(h[i], dt, T * rows[i], (const char *)pool + (size_t)i * 1031 * es, pool_n - 4096);
    }
    free(pool);
    layer *w = &r->w, *l = &r->l;
    w->q = t_new(T * rq * es, h[0]);
    w->k = t_new(T * rk * es, h[1]);
    w->v = t_new(T * rk * es, h[2]);
    w->dout = t_new(T * rq * es, h[3]);
    w->o = t_new(T * rq * es, NULL);
    w->lse = t_new(4 * T * (size_t)r->o.hq, NULL);
    w->dq = t_new(4 * T * rq, NULL);
    w->dk = t_new(4 * T * rk, NULL);
    w->dv = t_new(4 * T * rk, NULL);
    w->cu = t_new(sizeof(int32_t) * (size_t)(r->o.docs + 1), r->cu);
    l->p = w->p;
    l->q = shard(r, h[0], rq);
    l->k = shard(r, h[1], rk);
    l->v = shard(r, h[2], rk);
    l->dout = shard(r, h[3], rq);
    l->o = t_new(L * rq * es, NULL);
    l->lse = t_new(4 * L * (size_t)r->o.hq, NULL);
    l->dq = t_new(4 * L * rq, NULL);
    l->dk = t_new(4 * L * rk, NULL);
    l->dv = t_new(4 * L * rk, NULL);
    for (int i = 0; i < 4; i++)
        free(h[i]);
}

/* The 1-rank time: rank 0 alone on the whole batch (the others wait); then
 * every rank computes the unsharded result it checks against. */
static double time_whole(run *r)
{
    double t1 = 0;
    if (g_rank == 0) {
        if (run_whole(r->ctx, &r->w, r->o.backward))
            die("unsharded layer: %s", clvarlen_last_error(r->ctx));
        double *ts = xmalloc(sizeof(double) * (size_t)r->o.iters);
        for (int i = 0; i < r->o.iters; i++) {
            double t = MPI_Wtime();
            run_whole(r->ctx, &r->w, r->o.backward);
            ts[i] = MPI_Wtime() - t;
        }
        t1 = median(ts, r->o.iters);
        free(ts);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank != 0 && run_whole(r->ctx, &r->w, r->o.backward))
        die("unsharded layer: %s", clvarlen_last_error(r->ctx));
    return t1;
}

/* The CP layer: one warm-up, then iters timed calls (a barrier before
 * each). line: time, time in MPI (medians), bytes sent and received. */
static void time_cp(run *r, double line[4])
{
    if (run_fwd(r->cp, &r->l) || (r->o.backward && run_bwd(r->cp, &r->l)))
        die("CP layer: %s", clvarlen_mpi_last_error());
    double *ts = xmalloc(sizeof(double) * (size_t)r->o.iters);
    double *tx = xmalloc(sizeof(double) * (size_t)r->o.iters);
    clvarlen_mpi_cp_stats st = {.struct_size = sizeof st};
    for (int i = 0; i < r->o.iters; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        if (run_fwd(r->cp, &r->l))
            die("CP forward: %s", clvarlen_mpi_last_error());
        clvarlen_mpi_cp_get_stats(r->cp, &st);
        tx[i] = st.exchange_seconds;
        line[2] = (double)st.bytes_sent;
        line[3] = (double)st.bytes_received;
        if (r->o.backward) {
            if (run_bwd(r->cp, &r->l))
                die("CP backward: %s", clvarlen_mpi_last_error());
            clvarlen_mpi_cp_get_stats(r->cp, &st);
            tx[i] += st.exchange_seconds;
            line[2] += (double)st.bytes_sent;
            line[3] += (double)st.bytes_received;
        }
        ts[i] = MPI_Wtime() - t;
    }
    line[0] = median(ts, r->o.iters);
    line[1] = median(tx, r->o.iters);
    free(ts);
    free(tx);
}

/* This rank's outputs against the unsharded run: errors[0] o, errors[1] the
 * worst gradient (f32); returns 1 on a mismatch (SPEC 4 tolerances). */
static int check_rows(run *r, double errors[2])
{
    void *mo = t_read(&r->l.o), *wo = t_read(&r->w.o);
    errors[0] = rows_err(mo, wo, r->o.dtype, r->rq, r->gidx, r->local);
    errors[1] = 0;
    free(mo);
    free(wo);
    if (r->o.backward) {
        tensor *mine[] = {&r->l.dq, &r->l.dk, &r->l.dv}, *whole[] = {&r->w.dq, &r->w.dk, &r->w.dv};
        size_t rows[] = {r->rq, r->rk, r->rk};
        for (int i = 0; i < 3; i++) {
            void *a = t_read(mine[i]), *b = t_read(whole[i]);
            double e = rows_err(a, b, CLVARLEN_DTYPE_F32, rows[i], r->gidx, r->local);
            errors[1] = e > errors[1] ? e : errors[1];
            free(a);
            free(b);
        }
    }
    return errors[0] > tu_tolerance(r->o.dtype) || errors[1] > 1e-3;
}

/* --probe: the ceilings of the exchange on this machine, for the bytes a
 * forward moves: MPI_Allgatherv of every rank's K|V shard between host
 * buffers (pinned where the device is OpenCL), and the device's copies of the
 * shard to pinned host memory and of the whole K|V back (rank 0 prints). */
static void probe(const run *r)
{
    const size_t rb = 2 * r->rk * r->es; /* K|V row */
    int *counts = xmalloc(sizeof(int) * (size_t)g_world), *displs = xmalloc(sizeof(int) * (size_t)g_world);
    int c = (int)r->local;
    MPI_Allgather(&c, 1, MPI_INT, counts, 1, MPI_INT, MPI_COMM_WORLD);
    for (int k = 0, at = 0; k < g_world; k++) {
        displs[k] = at;
        at += counts[k];
    }
    MPI_Datatype row;
    MPI_Type_contiguous((int)rb, MPI_BYTE, &row);
    MPI_Type_commit(&row);
    const size_t loc = (size_t)r->local * rb, all = (size_t)r->total * rb;
    char *a = xmalloc(loc), *b = xmalloc(all);
    memset(a, 1, loc);
    double best_mpi = 1e30, best_d2h = 1e30, best_h2d = 1e30;
    for (int i = 0; i < 5; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        MPI_Allgatherv(a, c, row, b, counts, displs, row, MPI_COMM_WORLD);
        t = MPI_Wtime() - t;
        best_mpi = t < best_mpi ? t : best_mpi;
    }
#if CLVARLEN_HAVE_OPENCL
    if (g_on_cl) {
        cl_int e;
        cl_mem pin = clCreateBuffer(g_clc, CL_MEM_ALLOC_HOST_PTR, all, NULL, &e);
        cl_mem dev = clCreateBuffer(g_clc, CL_MEM_READ_WRITE, all, NULL, &e);
        void *h = clEnqueueMapBuffer(g_queue, pin, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, all, 0,
                                     NULL, NULL, &e);
        for (int i = 0; i < 5 && h; i++) {
            double t = MPI_Wtime();
            clEnqueueReadBuffer(g_queue, dev, CL_TRUE, 0, loc, h, 0, NULL, NULL);
            double t2 = MPI_Wtime();
            clEnqueueWriteBuffer(g_queue, dev, CL_TRUE, 0, all, h, 0, NULL, NULL);
            double t3 = MPI_Wtime();
            best_d2h = t2 - t < best_d2h ? t2 - t : best_d2h;
            best_h2d = t3 - t2 < best_h2d ? t3 - t2 : best_h2d;
        }
        if (h)
            clEnqueueUnmapMemObject(g_queue, pin, h, 0, NULL, NULL);
        clFinish(g_queue);
        clReleaseMemObject(pin);
        clReleaseMemObject(dev);
    }
#endif
    double mine[3] = {best_mpi, best_d2h, best_h2d}, worst[3];
    MPI_Reduce(mine, worst, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (g_rank == 0) {
        printf("probe: MPI_Allgatherv of the K|V shards (%.1f MB in all): %.3f ms, %.2f GB/s "
               "received per rank\n",
               all * 1e-6, worst[0] * 1e3, (double)(all - loc) / worst[0] * 1e-9);
        if (worst[1] < 1e29)
            printf("probe: device -> pinned host, one shard: %.2f GB/s; pinned host -> device, "
                   "all K|V: %.2f GB/s (host-staged GPU-to-GPU path: read, MPI, write)\n",
                   loc / worst[1] * 1e-9, all / worst[2] * 1e-9);
    }
    MPI_Type_free(&row);
    free(a);
    free(b);
    free(counts);
    free(displs);
}

/* Rank 0 prints every rank's line (gathered) and the summary. */
static void report(const run *r, const clvarlen_device_info *info, double t1, const double *mine)
{
    double *all = g_rank == 0 ? xmalloc(sizeof(double) * 8 * (size_t)g_world) : NULL;
    MPI_Gather(mine, 8, MPI_DOUBLE, all, 8, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (g_rank != 0)
        return;
    const opts *o = &r->o;
    printf("clvarlen-cp: %d ranks, device %s, %s, %d documents / %lld tokens, Hq %d, Hk %d, "
           "D %d, %s, %s\n",
           g_world, info->device_name, clvarlen_dtype_name(o->dtype), o->docs,
           (long long)r->total, o->hq, o->hk, o->d, o->causal ? "causal" : "full",
           o->backward ? "forward+backward" : "forward");
    printf("1 rank (unsharded, rank 0 alone): %.3f ms, %.1f TFLOP/s\n", t1 * 1e3,
           r->flops / t1 * 1e-12);
    double worst = 0;
    for (int k = 0; k < g_world; k++) {
        const double *x = all + 8 * k;
        worst = x[1] > worst ? x[1] : worst;
        printf("rank %d: %lld tokens, %.3f ms per layer, %.3f ms in the exchange, sent %.1f MB, "
               "received %.1f MB (%.2f GB/s in the exchange), rel err o %.2e, %s\n",
               k, (long long)x[0], x[1] * 1e3, x[2] * 1e3, x[3] * 1e-6, x[4] * 1e-6,
               x[2] > 0 ? x[4] / x[2] * 1e-9 : 0.0, x[5], x[7] ? "MISMATCH" : "ok");
        if (o->backward)
            printf("        gradients rel err %.2e\n", x[6]);
    }
    printf("%d ranks: %.3f ms per layer (slowest rank), %.1f TFLOP/s, speedup %.2fx over 1 rank, "
           "efficiency %.2f\n",
           g_world, worst * 1e3, r->flops / worst * 1e-12, t1 / worst, t1 / worst / g_world);
    free(all);
}

static void free_run(run *r)
{
    tensor *ts[] = {&r->w.q, &r->w.k, &r->w.v, &r->w.o, &r->w.lse, &r->w.dout, &r->w.dq,
                    &r->w.dk, &r->w.dv, &r->w.cu, &r->l.q, &r->l.k, &r->l.v, &r->l.o,
                    &r->l.lse, &r->l.dout, &r->l.dq, &r->l.dk, &r->l.dv};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        t_free(ts[i]);
    free(r->gidx);
    free(r->len);
    free(r->cu);
    clvarlen_mpi_cp_destroy(r->cp);
}

int main(int argc, char **argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world);
    run r;
    memset(&r, 0, sizeof r);
    parse(argc, argv, &r.o);
    clvarlen_device_info info = {0};
    r.ctx = open_context(&r.o, &info);
    plan_run(&r);
    make_tensors(&r);
    double t1 = time_whole(&r);
    double cp_line[4] = {0}, errors[2] = {0};
    time_cp(&r, cp_line);
    int bad = check_rows(&r, errors), any_bad = 0;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    double line[8] = {(double)r.local, cp_line[0], cp_line[1], cp_line[2],
                      cp_line[3], errors[0], errors[1], bad};
    report(&r, &info, t1, line);
    if (r.o.probe)
        probe(&r);
    free_run(&r);
    clvarlen_context_destroy(r.ctx);
    MPI_Finalize();
    return any_bad ? 1 : 0;
}
